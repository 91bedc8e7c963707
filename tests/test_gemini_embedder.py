"""GeminiEmbedder and gemini_client, through the real google-genai SDK over HTTP to the fake
server (tests/fake_gemini.py). No mocks of the SDK."""

from __future__ import annotations

import socket
import threading
import time

import numpy as np
import pytest
from fake_gemini import FakeGeminiServer, fake_embedding  # fixtures come from conftest.py
from google.genai import errors as genai_errors

from marginalia_core.errors import AuthenticationError, EmbeddingError
from marginalia_core.providers import gemini_client
from marginalia_core.providers.embeddings.base import Embedder
from marginalia_core.providers.embeddings.gemini import (
    MAX_BATCH,
    QUERY_DEADLINE_TIMEOUTS,
    GeminiEmbedder,
)
from marginalia_core.providers.gemini_client import (
    KEY_REJECTED,
    RetryPolicy,
    backoff_delay,
    describe_api_error,
    is_retryable,
    make_client,
    retry_call,
    scrub,
)

SECRET_BAD_KEY = "AIzaSyD-THIS-IS-A-SECRET-KEY-0123456789"


class SleepRecorder:
    """Injected ``sleep``: records the delays and sleeps a tiny bit for real."""

    def __init__(self) -> None:
        self.delays: list[float] = []
        self._lock = threading.Lock()

    def __call__(self, seconds: float) -> None:
        with self._lock:
            self.delays.append(seconds)
        time.sleep(min(seconds, 0.01))


def fast_retry(attempts: int = 4, sleep=None) -> RetryPolicy:
    return RetryPolicy(
        attempts=attempts, initial_delay=0.01, max_delay=0.05, sleep=sleep or SleepRecorder()
    )


def make_embedder(fake: FakeGeminiServer, *, attempts: int = 4, sleep=None, **settings):
    return GeminiEmbedder(fake.settings(**settings), retry=fast_retry(attempts, sleep))


def words_doc(i: int) -> str:
    return f"document number {i} talks about topic{i} and item{i * 7}"


def expected(text: str) -> np.ndarray:
    v = np.asarray(fake_embedding(text), dtype=np.float32)
    return v / np.linalg.norm(v)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ------------------------------------------------------------------------- basics
def test_declares_model_dimension_and_limits(fake_gemini):
    emb = make_embedder(fake_gemini)
    assert isinstance(emb, Embedder)
    assert (emb.name, emb.model, emb.dimension) == ("gemini", "gemini-embedding-001", 768)
    assert emb.batch_size == MAX_BATCH == 100
    assert emb.default_threshold == pytest.approx(0.35)
    assert emb.key == "gemini-embedding-001@768"


def test_documents_are_embedded_as_retrieval_document(fake_gemini):
    make_embedder(fake_gemini).embed_documents(["alpha beta", "gamma"])
    (req,) = fake_gemini.requests
    assert req.endpoint == "embed"
    assert req.path.endswith("/models/gemini-embedding-001:batchEmbedContents")
    assert req.key_ok and "x-goog-api-key" not in req.headers
    body = req.body["requests"]
    assert [r["content"]["parts"][0]["text"] for r in body] == ["alpha beta", "gamma"]
    assert {r["taskType"] for r in body} == {"RETRIEVAL_DOCUMENT"}
    assert {r["outputDimensionality"] for r in body} == {768}


def test_query_is_embedded_as_retrieval_query(fake_gemini):
    vec = make_embedder(fake_gemini).embed_query("where are the cats")
    (req,) = fake_gemini.requests
    (r,) = req.body["requests"]
    assert r["taskType"] == "RETRIEVAL_QUERY"
    assert r["outputDimensionality"] == 768
    assert vec.shape == (768,) and vec.dtype == np.float32
    assert np.linalg.norm(vec) == pytest.approx(1.0, abs=1e-5)


def test_250_texts_make_exactly_three_requests_of_at_most_100(fake_gemini):
    texts = [words_doc(i) for i in range(250)]
    progress: list[tuple[int, int]] = []
    out = make_embedder(fake_gemini).embed_documents(
        texts, progress=lambda d, t: progress.append((d, t))
    )
    reqs = fake_gemini.requests_for("embed")
    assert len(reqs) == 3
    assert sorted(len(r.body["requests"]) for r in reqs) == [50, 100, 100]
    assert out.shape == (250, 768)
    # progress: one call per finished batch, increasing, ending at the total
    assert [t for _, t in progress] == [250, 250, 250]
    done = [d for d, _ in progress]
    assert done == sorted(done) and done[-1] == 250


def test_vectors_are_unit_float32_and_in_input_order(fake_gemini):
    fake_gemini.delay_next(0.2, endpoint="embed")  # the first batch finishes last
    texts = [words_doc(i) for i in range(230)]
    progress: list[int] = []
    out = make_embedder(fake_gemini, gemini_concurrency=4).embed_documents(
        texts, progress=lambda d, t: progress.append(d)
    )
    assert progress[0] in (30, 100) and progress[-1] == 230
    assert out.dtype == np.float32
    assert np.allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)
    for i in (0, 1, 99, 100, 150, 229):
        assert np.allclose(out[i], expected(texts[i]), atol=1e-5)
    # the fake's raw vectors are not unit length, so this proves we normalized
    assert np.linalg.norm(fake_embedding(texts[0])) > 2


def test_batches_run_concurrently_within_the_limit(fake_gemini):
    """Measured at the server: each batch is held until three are in flight together, so the
    overlap is seen however loaded the machine is; a fourth never joins them."""
    fake_gemini.hold_embeds(3)
    fake_gemini.set_latency(0.05)
    texts = [words_doc(i) for i in range(600)]  # 6 batches
    out = make_embedder(fake_gemini, gemini_concurrency=3).embed_documents(texts)
    assert len(fake_gemini.requests_for("embed")) == 6
    assert fake_gemini.max_in_flight == 3
    assert np.allclose(out[599], expected(texts[599]), atol=1e-5)


def test_concurrency_one_is_sequential(fake_gemini):
    fake_gemini.set_latency(0.02)
    make_embedder(fake_gemini, gemini_concurrency=1).embed_documents(
        [words_doc(i) for i in range(300)]
    )
    assert fake_gemini.max_in_flight == 1
    assert len(fake_gemini.requests_for("embed")) == 3


def test_same_words_retrieve_the_right_document(fake_gemini):
    emb = make_embedder(fake_gemini)
    docs = [
        "The cat sleeps on the warm windowsill all afternoon.",
        "Quarterly revenue grew by twelve percent in the third quarter.",
        "Volcanic eruptions release ash and sulfur dioxide.",
    ]
    matrix = emb.embed_documents(docs)
    scores = matrix @ emb.embed_query("why does the cat sleep on the windowsill")
    assert int(np.argmax(scores)) == 0
    assert scores[0] > emb.default_threshold > max(scores[1:])


def test_empty_input_makes_no_request(fake_gemini):
    out = make_embedder(fake_gemini).embed_documents([])
    assert out.shape == (0, 768)
    assert fake_gemini.requests == []


# ------------------------------------------------------------------------- retries
def test_429_twice_then_success(fake_gemini):
    sleep = SleepRecorder()
    fake_gemini.fail_next(status=429, times=2, endpoint="embed")
    vec = make_embedder(fake_gemini, sleep=sleep).embed_query("rate limited query")
    assert np.allclose(vec, expected("rate limited query"), atol=1e-5)
    assert len(fake_gemini.requests_for("embed")) == 3
    assert len(sleep.delays) == 2
    assert all(0 < d <= 0.05 for d in sleep.delays)


def test_retry_after_is_honoured_up_to_max_delay(fake_gemini):
    sleep = SleepRecorder()
    fake_gemini.fail_next(status=429, endpoint="embed", retry_after=0.04)
    make_embedder(fake_gemini, sleep=sleep).embed_query("hello")
    assert sleep.delays and sleep.delays[0] >= 0.04


def test_500_then_success(fake_gemini):
    fake_gemini.fail_next(status=500, endpoint="embed")
    out = make_embedder(fake_gemini).embed_documents(["one two", "three four"])
    assert out.shape == (2, 768)
    assert len(fake_gemini.requests_for("embed")) == 2


def test_transient_failure_of_one_batch_among_many(fake_gemini):
    fake_gemini.fail_next(status=503, endpoint="embed")
    texts = [words_doc(i) for i in range(300)]
    out = make_embedder(fake_gemini, gemini_concurrency=3).embed_documents(texts)
    assert len(fake_gemini.requests_for("embed")) == 4
    assert np.allclose(out[250], expected(texts[250]), atol=1e-5)


def test_bad_key_is_authentication_error_not_retried_and_never_leaks_the_key(fake_gemini):
    emb = make_embedder(fake_gemini, gemini_api_key=SECRET_BAD_KEY)
    with pytest.raises(AuthenticationError) as info:
        emb.embed_query("anything")
    err = info.value
    assert str(err) == KEY_REJECTED
    assert SECRET_BAD_KEY not in str(err) and SECRET_BAD_KEY not in repr(err)
    assert err.reason == "auth"
    assert len(fake_gemini.requests) == 1  # not retried
    assert not fake_gemini.requests[0].key_ok


def test_bad_key_during_concurrent_documents(fake_gemini):
    emb = make_embedder(fake_gemini, gemini_api_key=SECRET_BAD_KEY, gemini_concurrency=4)
    with pytest.raises(AuthenticationError) as info:
        emb.embed_documents([words_doc(i) for i in range(400)])
    assert "rejected" in str(info.value) and SECRET_BAD_KEY not in str(info.value)
    assert len(fake_gemini.requests) <= 4


def test_persistent_503_raises_embedding_error_after_bounded_attempts(fake_gemini):
    fake_gemini.fail_next(status=503, times=50, endpoint="embed")
    emb = make_embedder(fake_gemini, attempts=3)
    with pytest.raises(EmbeddingError) as info:
        emb.embed_query("q")
    assert not isinstance(info.value, AuthenticationError)
    assert "503" in str(info.value)
    assert len(fake_gemini.requests) == 3


def test_failure_midway_returns_nothing_and_stops_other_batches(fake_gemini):
    fake_gemini.set_latency(0.05)
    fake_gemini.fail_next(status=500, times=200, endpoint="embed")
    emb = make_embedder(fake_gemini, attempts=2, gemini_concurrency=2)
    progress: list[int] = []
    with pytest.raises(EmbeddingError):
        emb.embed_documents(
            [words_doc(i) for i in range(1000)], progress=lambda d, t: progress.append(d)
        )
    count = len(fake_gemini.requests)
    assert count < 10 * 2  # queued batches were cancelled
    assert progress == []
    time.sleep(0.2)
    assert len(fake_gemini.requests) == count  # nothing still running after we returned


def test_slow_response_past_timeout_is_retried(fake_gemini):
    fake_gemini.delay_next(3.0, endpoint="embed")
    emb = make_embedder(fake_gemini, gemini_timeout_s=0.3)
    vec = emb.embed_query("slow but fine")
    assert np.allclose(vec, expected("slow but fine"), atol=1e-5)
    # the first request was abandoned at the timeout (waiting for it would have succeeded
    # with one request); a loaded machine may time out the retry too, hence >=
    assert len(fake_gemini.requests) >= 2


def test_persistently_slow_service_errors_within_bounded_time(fake_gemini):
    fake_gemini.set_latency(5.0)
    emb = make_embedder(fake_gemini, attempts=5, gemini_timeout_s=0.3)
    with pytest.raises(EmbeddingError) as info:
        emb.embed_query("never answered")
    assert "timed out" in str(info.value)
    # a question's embedding stops retrying once QUERY_DEADLINE_TIMEOUTS request timeouts
    # have passed, with attempts left: two timeouts already fill the deadline (a loaded
    # machine may stop after one)
    assert 1 <= len(fake_gemini.requests) <= QUERY_DEADLINE_TIMEOUTS < 5


def test_documents_use_every_attempt_when_slow(fake_gemini):
    fake_gemini.set_latency(5.0)
    emb = make_embedder(fake_gemini, attempts=3, gemini_timeout_s=0.3)
    with pytest.raises(EmbeddingError):
        emb.embed_documents(["never answered"])
    assert len(fake_gemini.requests) == 3


def test_httpx_backend_errors_are_recognised_too(fake_gemini, monkeypatch):
    # google-genai uses httpx2 when installed; GOOGLE_GENAI_HTTP_CLIENT=httpx switches to httpx.
    monkeypatch.setenv("GOOGLE_GENAI_HTTP_CLIENT", "httpx")
    fake_gemini.delay_next(3.0, endpoint="embed")
    emb = make_embedder(fake_gemini, gemini_timeout_s=0.3)
    assert type(emb._client._api_client._httpx_client).__module__.split(".")[0] != "httpx2"
    vec = emb.embed_query("via httpx")  # ReadTimeout (httpx flavour) retried
    assert vec.shape == (768,)
    assert len(fake_gemini.requests) == 2


def test_connection_refused_is_a_plain_message(fake_gemini):
    emb = make_embedder(
        fake_gemini, attempts=2, gemini_base_url=f"http://127.0.0.1:{closed_port()}"
    )
    with pytest.raises(EmbeddingError) as info:
        emb.embed_query("q")
    assert "Could not connect" in str(info.value)


def test_no_key_is_authentication_error(fake_gemini):
    with pytest.raises(AuthenticationError):
        GeminiEmbedder(fake_gemini.settings(gemini_api_key=None))


# ------------------------------------------------------------------------- gemini_client
def test_make_client_uses_settings(fake_gemini):
    client = make_client(fake_gemini.settings(gemini_timeout_s=2.5))
    opts = client._api_client._http_options
    assert opts.base_url.rstrip("/") == fake_gemini.base_url
    assert opts.timeout == 2500
    assert opts.retry_options is None


def _api_error(code: int, message: str, status: str = "X", cls=None):
    cls = cls or (genai_errors.ClientError if code < 500 else genai_errors.ServerError)
    return cls(code, {"error": {"code": code, "message": message, "status": status}})


def test_describe_api_error_messages():
    bad_key = _api_error(400, "API key not valid. Please pass a valid API key.", "INVALID_ARGUMENT")
    assert describe_api_error(bad_key) == KEY_REJECTED
    assert "rate limit" in describe_api_error(_api_error(429, "quota"))
    assert "service had an error (HTTP 503)" in describe_api_error(_api_error(503, "overloaded"))
    assert "model not found" in describe_api_error(_api_error(404, "model not found"))
    assert describe_api_error(_api_error(403, "denied")) == KEY_REJECTED


def test_describe_transport_and_parse_errors():
    import json

    from google.genai.errors import UnknownApiResponseError

    assert "timed out" in describe_api_error(gemini_client.TIMEOUT_ERRORS[0]("read"))
    assert "Could not connect" in describe_api_error(gemini_client.CONNECT_ERRORS[0]("refused"))
    lost = gemini_client.PROTOCOL_ERRORS[0]("peer closed connection")
    assert "connection to Gemini was lost" in describe_api_error(lost)
    bad_json = json.JSONDecodeError("Expecting value", "<html>", 0)
    assert "could not be read" in describe_api_error(bad_json)
    assert "could not be read" in describe_api_error(UnknownApiResponseError("x"))
    assert "RuntimeError" in describe_api_error(RuntimeError("surprise"))


def test_describe_api_error_never_contains_the_key():
    leaky = _api_error(400, f"Bad request for key {SECRET_BAD_KEY} ?key={SECRET_BAD_KEY}")
    text = describe_api_error(leaky, api_key=SECRET_BAD_KEY)
    assert SECRET_BAD_KEY not in text
    assert scrub(f"x {SECRET_BAD_KEY} y", None).count("[redacted]") == 1
    assert scrub("url?key=abc123&x=1") == "url?key=[redacted]&x=1"
    assert scrub("my-custom-key here", "my-custom-key") == "[redacted] here"


def test_is_retryable():
    assert is_retryable(_api_error(429, "x"))
    assert is_retryable(_api_error(500, "x"))
    assert is_retryable(_api_error(503, "x"))
    assert not is_retryable(_api_error(400, "x"))
    assert not is_retryable(_api_error(404, "x"))
    for exc_type in gemini_client.TIMEOUT_ERRORS + gemini_client.CONNECT_ERRORS:
        assert is_retryable(exc_type("boom"))
    assert not is_retryable(ValueError("bad json"))


def test_backoff_is_exponential_jittered_and_capped():
    for attempt, base in [(1, 0.5), (2, 1.0), (3, 2.0), (6, 8.0), (10, 8.0)]:
        d = backoff_delay(attempt)
        assert base * 0.5 <= d <= base
    assert backoff_delay(1, hint=3.0) == pytest.approx(3.0)
    assert backoff_delay(1, hint=100.0) == pytest.approx(8.0)


def test_retry_call_stops_on_non_retryable_and_at_the_deadline():
    calls = []

    def not_retryable():
        calls.append(1)
        raise _api_error(400, "nope")

    with pytest.raises(genai_errors.ClientError):
        retry_call(not_retryable, sleep=lambda s: None)
    assert len(calls) == 1

    calls.clear()

    def flaky():
        calls.append(1)
        raise _api_error(503, "again")

    with pytest.raises(genai_errors.ServerError):
        retry_call(
            flaky,
            attempts=10,
            initial_delay=1.0,
            sleep=lambda s: None,
            deadline=time.monotonic() + 0.5,
        )
    assert len(calls) == 1  # the first wait would already pass the deadline

    calls.clear()
    results = iter([_api_error(503, "a"), _api_error(429, "b"), "ok"])

    def eventually():
        calls.append(1)
        r = next(results)
        if isinstance(r, Exception):
            raise r
        return r

    delays: list[float] = []
    assert retry_call(eventually, initial_delay=0.1, sleep=delays.append) == "ok"
    assert len(delays) == 2 and delays[1] > 0.1


def test_retry_call_cancel_event_stops_waiting():
    cancel = threading.Event()
    cancel.set()

    calls: list[int] = []

    def flaky():
        calls.append(1)
        raise _api_error(503, "x")

    with pytest.raises(genai_errors.ServerError):
        retry_call(flaky, attempts=5, initial_delay=5.0, cancel=cancel)
    assert calls == [1]  # no wait, no second attempt
