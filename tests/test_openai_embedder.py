"""OpenAIEmbedder through the real ``openai`` SDK over HTTP to the fake OpenAI-compatible server:
batching, the concurrency limit (the server's max in-flight count), retries, the dimension learnt
from the first response, the embedder key (model AND server), its threshold, and ingest faults
that end in an ``error`` event with nothing written."""

from __future__ import annotations

import itertools
import logging

import numpy as np
import pytest
from fake_openai import EMBED_MODEL, FakeOpenAIServer

from marginalia_core.errors import AuthenticationError, EmbeddingError
from marginalia_core.ingest.pipeline import ingest_bytes
from marginalia_core.providers.embeddings import get_embedder
from marginalia_core.providers.embeddings.openai import (
    DEFAULT_THRESHOLD,
    NO_MODEL,
    OpenAIEmbedder,
    model_key,
)
from marginalia_core.providers.retry import RetryPolicy
from marginalia_core.retrieval.retriever import Retriever
from marginalia_core.workspace import Workspace

SECRET_KEY = "sk-marginalia-EMBED-secret-0b5e1c77aa"
TEXTS = [f"passage {i} about {word}" for i, word in
         enumerate(["mills", "rivers", "bees", "honey", "floods", "wheat", "towns"])]
MILL = (
    "The mill was built in 1851 by the Carter family on the banks of the Mill River. "
    "It ground wheat for the whole valley for more than sixty years.\n\n"
    "In 1912 a flood destroyed the mill's great wheel and the building was abandoned."
)
_fresh = itertools.count()


def fresh_model(fake: FakeOpenAIServer, dim: int | None = None) -> str:
    """A model name no other test used, so the per-process dimension memory starts empty."""
    name = f"embed-{next(_fresh)}"
    if dim is not None:
        fake.set_dimension(dim, model=name)
    fake.set_models(None)  # accept any model name
    return name


def make(fake: FakeOpenAIServer, *, attempts: int = 3, **kw) -> OpenAIEmbedder:
    ctor = {k: kw.pop(k) for k in ("concurrency", "batch_size") if k in kw}
    return OpenAIEmbedder(
        fake.settings(**kw),
        retry=RetryPolicy(attempts=attempts, initial_delay=0.01, max_delay=0.02),
        **ctor,
    )


# ------------------------------------------------------------------------- vectors
def test_batches_keep_order_and_vectors_are_normalized(fake_openai):
    embedder = make(fake_openai, batch_size=3, concurrency=1, openai_api_key=SECRET_KEY)
    vectors = embedder.embed_documents(TEXTS)
    assert vectors.shape == (len(TEXTS), 256) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    reqs = fake_openai.requests_for("embed")
    assert [len(r.body["input"]) for r in reqs] == [3, 3, 1]
    assert [t for r in reqs for t in r.body["input"]] == TEXTS
    assert all(r.body["model"] == EMBED_MODEL and r.path == "/v1/embeddings" for r in reqs)
    assert reqs[0].authorization == f"Bearer {SECRET_KEY}"
    # the fake answers in reverse order; the index field puts each vector back on its text
    for i, text in enumerate(TEXTS):
        assert float(vectors[i] @ embedder.embed_query(text)) == pytest.approx(1.0, abs=1e-5)


def test_progress_is_reported_per_batch(fake_openai):
    seen: list[tuple[int, int]] = []
    make(fake_openai, batch_size=2, concurrency=1).embed_documents(
        TEXTS, progress=lambda d, t: seen.append((d, t))
    )
    assert seen == [(2, 7), (4, 7), (6, 7), (7, 7)]


@pytest.mark.parametrize("limit", [1, 2, 3])
def test_concurrency_limit_is_the_servers_max_in_flight(fake_openai, limit):
    fake_openai.hold_embeds(limit)  # each request waits until `limit` overlap: no timing luck
    embedder = make(fake_openai, batch_size=1, concurrency=limit)
    vectors = embedder.embed_documents(TEXTS * 2)
    assert vectors.shape[0] == 14
    assert fake_openai.max_in_flight == limit


def test_empty_texts_are_sent_as_a_space(fake_openai):
    vectors = make(fake_openai).embed_documents(["", "words"])
    assert vectors.shape[0] == 2
    assert fake_openai.requests_for("embed")[0].body["input"][0] == " "


# ------------------------------------------------------------------------- dimension and key
def test_dimension_is_learnt_from_the_first_response(fake_openai):
    model = fresh_model(fake_openai, dim=48)
    embedder = make(fake_openai, embed_model=model)
    assert embedder.embed_documents(TEXTS[:2]).shape == (2, 48)
    assert embedder.dimension == 48
    assert len(fake_openai.requests_for("embed")) == 1  # no probe once a response was seen


def test_dimension_before_any_embedding_is_one_probe(fake_openai):
    model = fresh_model(fake_openai, dim=24)
    embedder = make(fake_openai, embed_model=model)
    assert embedder.dimension == 24 and embedder.dimension == 24
    assert len(fake_openai.requests_for("embed")) == 1


def test_a_changed_dimension_is_an_error(fake_openai):
    model = fresh_model(fake_openai, dim=16)
    embedder = make(fake_openai, embed_model=model)
    embedder.embed_query("first")
    fake_openai.set_dimension(32, model=model)
    with pytest.raises(EmbeddingError, match="16-dimensional"):
        embedder.embed_query("second")


def test_the_key_names_model_and_server(fake_openai):
    a = make(fake_openai)
    b = make(fake_openai, embed_model="other-model")
    c = make(fake_openai, openai_base_url=fake_openai.base_url.replace("127.0.0.1", "localhost"))
    assert a.model == model_key(fake_openai.base_url, EMBED_MODEL)
    assert EMBED_MODEL in a.model and str(fake_openai.port) in a.model
    assert len({a.model, b.model, c.model}) == 3


def test_vectors_of_another_server_or_model_are_not_searched(db_path, fake_openai):
    ws = Workspace(fake_openai.settings(db_path=str(db_path)))
    assert list(ws.ingest("mill.txt", MILL.encode()))[-1]["type"] == "done"
    assert [h.document_name for h in ws.search("When was the mill built?")][:1] == ["mill.txt"]
    ws.close()
    fake_openai.set_models(None)
    other = Workspace(fake_openai.settings(db_path=str(db_path), embed_model="another-embedder"))
    assert other.search("When was the mill built?") == []
    assert [d.name for d in other.stale_documents()] == ["mill.txt"]
    other.close()


def test_its_own_threshold_and_an_override(fake_openai, store):
    embedder = make(fake_openai)
    assert embedder.default_threshold == DEFAULT_THRESHOLD
    assert Retriever(store, embedder, fake_openai.settings()).threshold == DEFAULT_THRESHOLD
    assert Retriever(store, embedder, fake_openai.settings(threshold=0.55)).threshold == 0.55


def test_registry_and_missing_model():
    from marginalia_core.config import Settings

    embedder = get_embedder(
        Settings(embedder="openai", embed_model="nomic-embed-text",
                 openai_base_url="http://localhost:11434")
    )
    assert isinstance(embedder, OpenAIEmbedder)
    assert embedder.model == "openai:nomic-embed-text|http://localhost:11434/v1"
    with pytest.raises(EmbeddingError, match="MARGINALIA_EMBED_MODEL") as info:
        OpenAIEmbedder(Settings(embedder="openai", openai_base_url="http://localhost:11434"))
    assert str(info.value) == NO_MODEL


# ------------------------------------------------------------------------- retries and errors
def test_429_with_retry_after_then_success(fake_openai):
    fake_openai.fail_next(429, endpoint="embed", retry_after=0.01)
    assert make(fake_openai).embed_documents(TEXTS[:2]).shape[0] == 2
    assert len(fake_openai.requests_for("embed")) == 2


def test_persistent_500_gives_up_after_bounded_attempts(fake_openai):
    fake_openai.fail_next(500, times=20, endpoint="embed")
    with pytest.raises(EmbeddingError, match="HTTP 500"):
        make(fake_openai, attempts=3, concurrency=1).embed_documents(TEXTS[:2])
    assert len(fake_openai.requests_for("embed")) == 3


def test_one_failing_batch_fails_the_whole_call(fake_openai):
    fake_openai.fail_next(400, message="bad input", endpoint="embed")
    with pytest.raises(EmbeddingError, match="bad input"):
        make(fake_openai, batch_size=1, concurrency=2).embed_documents(TEXTS)


def test_wrong_key_is_an_authentication_error_without_the_key(fake_openai, caplog):
    caplog.set_level(logging.DEBUG)
    fake_openai.require_key("sk-the-right-one")
    with pytest.raises(AuthenticationError) as info:
        make(fake_openai, openai_api_key=SECRET_KEY).embed_query("x")
    assert "rejected the API key" in str(info.value)
    assert len(fake_openai.requests_for("embed")) == 1
    for text in (str(info.value), repr(info.value.__cause__), caplog.text):
        assert SECRET_KEY not in text


def test_model_not_found_names_the_embed_setting(fake_openai):
    with pytest.raises(EmbeddingError, match="MARGINALIA_EMBED_MODEL"):
        make(fake_openai, embed_model="no-such-embedder").embed_query("x")


def test_server_not_running(fake_openai):
    with FakeOpenAIServer() as gone:
        url = gone.base_url
    with pytest.raises(EmbeddingError, match="Could not connect"):
        make(fake_openai, attempts=2, openai_base_url=url).embed_query("x")


def test_a_slow_server_times_out_then_succeeds(fake_openai):
    fake_openai.delay_next(3.0, endpoint="embed")
    assert make(fake_openai, openai_timeout_s=0.3).embed_query("x").shape == (256,)
    assert len(fake_openai.requests_for("embed")) == 2


# ------------------------------------------------------------------------- ingest faults matrix
FAULTS = {
    "429": lambda f: f.fail_next(429, times=9, endpoint="embed", retry_after=0.01),
    "500": lambda f: f.fail_next(500, times=9, endpoint="embed"),
    "401": lambda f: f.require_key("sk-other"),
    "model not found": lambda f: f.set_models(["fake-chat"]),
    "malformed": lambda f: f.fail_next(200, times=9, endpoint="embed", body={"data": "nope"}),
    "dropped": lambda f: f.drop_next(times=9, endpoint="embed"),
    "slow": lambda f: f.delay_next(5.0, times=9, endpoint="embed"),
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_every_ingest_fault_ends_in_an_error_event_with_nothing_written(
    fake_openai, store, fault
):
    settings = fake_openai.settings(openai_api_key=SECRET_KEY, openai_timeout_s=0.3)
    embedder = OpenAIEmbedder(
        settings, retry=RetryPolicy(attempts=3, initial_delay=0.01, max_delay=0.02)
    )
    FAULTS[fault](fake_openai)
    events = list(ingest_bytes(store, embedder, settings, "mill.txt", MILL.encode()))
    end = events[-1]
    assert end["type"] == "error", end
    assert end["message"] and SECRET_KEY not in end["message"]
    assert store.conn.execute("SELECT COUNT(*) FROM documents").fetchone()[0] == 0
    assert len(fake_openai.requests_for("embed")) <= 3


def test_the_library_tells_a_restarted_process_the_dimension(fake_openai, db_path):
    """After a restart nothing was embedded yet; listing the library and opening the index
    take the size its documents recorded instead of asking the (here: failing) server."""
    from marginalia_core.providers.embeddings import openai as openai_embeddings

    model = fresh_model(fake_openai, dim=40)
    ws = Workspace(fake_openai.settings(db_path=str(db_path), embed_model=model))
    assert list(ws.ingest("mill.txt", MILL.encode()))[-1]["type"] == "done"
    key = ws.embedder.model
    ws.close()
    openai_embeddings._dims.pop(key)  # what a new process starts with
    fake_openai.fail_next(500, times=50, endpoint="embed")
    before = len(fake_openai.requests_for("embed"))
    ws = Workspace(fake_openai.settings(db_path=str(db_path), embed_model=model))
    (doc,) = ws.documents()
    assert ws.is_searchable(doc) and ws.stale_documents() == [] and ws.mismatch() is None
    assert ws.retriever.index is not None and ws.embedder.dimension == 40
    assert len(fake_openai.requests_for("embed")) == before  # no probe went out
    ws.close()
