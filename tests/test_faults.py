"""Faults from the model service, through the real google-genai SDK over HTTP to the fake Gemini
server (tests/fake_gemini.py) and to a server that answers garbage.

For every fault (429 storms, 5xx, responses slower than the timeout, the connection dropped
before or during the stream, malformed JSON, an error event mid-stream, a stream that ends
without a finish reason, blocked or empty answers, a trickle slower than the answer deadline):

* every chat ends in exactly one ``done`` or ``error`` event, having sent no more requests than
  the retry policy allows (the timeouts and the answer deadline are enforced by the code and
  checked by the error they produce, never by the wall clock); the worst time seen is printed as
  a figure, not asserted;
* nothing is half-saved: a failed answer leaves no conversation row (new conversation) and no
  message (new or existing conversation), a failed ingestion no document, chunk or FTS row;
* embedding retries back off (the waits the policy asked for, each also seen as at least that
  gap at the server) and then fail with a message that says what happened.

The non-slow tests inject a short retry policy (same attempts, ms delays) to stay fast; the slow
test runs the matrix with the production ``RetryPolicy()`` exactly as the app builds it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from marginalia_core.config import Settings
from marginalia_core.errors import NotFoundError
from marginalia_core.ingest.pipeline import ingest_bytes
from marginalia_core.providers.answerers.gemini import GeminiAnswerer
from marginalia_core.providers.embeddings.gemini import GeminiEmbedder
from marginalia_core.providers.gemini_client import (
    KEY_REJECTED,
    RETRY_ATTEMPTS,
    RETRY_INITIAL_DELAY,
    RETRY_MAX_DELAY,
    RetryPolicy,
)
from marginalia_core.workspace import Workspace

TIMEOUT_S = 0.5  # settings.gemini_timeout_s for the fast tests (the slow one uses 1 s)
SLOW_TIMEOUT_S = 1.0
FAST_RETRY = RetryPolicy(attempts=RETRY_ATTEMPTS, initial_delay=0.02, max_delay=0.1)

DOC = (
    "Cats sleep between twelve and sixteen hours a day. Kittens and old cats sleep even more. "
    "A cat that sleeps in the sun is keeping warm.\n\n"
    "Dogs are social animals and sleep about twelve hours a day, mostly at night.\n\n"
) * 4
QUESTION = "How many hours a day do cats sleep?"
LONG_ANSWER = "According to the sources, cats sleep between twelve and sixteen hours a day [1]."

FIGURES: dict[str, float] = {}


# --------------------------------------------------------------------------------- helpers

def assert_within_retries(fake, policy: RetryPolicy) -> None:
    """The bound on a chat, checked by what reached the server: one query embedding and one
    answer stream, each with at most ``policy.attempts`` tries."""
    for endpoint in ("embed", "stream"):
        sent = len(fake.requests_for(endpoint))
        assert sent <= policy.attempts, (endpoint, sent)


class RecordingSleep:
    """A retry policy's ``sleep``: really sleeps, and records what it was asked to."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)
        time.sleep(seconds)


def make_workspace(settings: Settings, retry: RetryPolicy | None) -> Workspace:
    """A Workspace wired as the app wires it; with ``retry`` its Gemini providers use that
    policy instead of the production one."""
    ws = Workspace(settings)
    if retry is not None:
        ws.__dict__["embedder"] = GeminiEmbedder(settings, retry=retry)
        ws.__dict__["answerer"] = GeminiAnswerer(settings, retry=retry)
    return ws


def gemini_settings_for(fake, db_path: Path, **overrides) -> Settings:
    values = {"db_path": str(db_path), "gemini_timeout_s": TIMEOUT_S, "threshold": 0.0}
    values.update(overrides)
    return fake.settings(**values)


def seed(ws: Workspace) -> dict:
    events = list(ingest_bytes(ws.store, ws.embedder, ws.settings, "cats.txt", DOC.encode()))
    assert events[-1]["type"] == "done", events[-1]
    return events[-1]["document"]


def timed_chat(ws: Workspace, question: str = QUESTION, conversation_id: str | None = None):
    started = time.monotonic()
    events = list(ws.chat.ask(question, conversation_id))
    return events, time.monotonic() - started


def assert_well_formed(events: list[dict]) -> dict:
    """meta? token* (done|error): exactly one terminal event, last."""
    kinds = [e["type"] for e in events]
    assert kinds, "no events at all"
    assert kinds[-1] in ("done", "error"), kinds
    assert sum(k in ("done", "error") for k in kinds) == 1, kinds
    body = kinds[1:-1] if kinds[0] == "meta" else kinds[:-1]
    assert set(body) <= {"token"}, kinds
    if events[-1]["type"] == "error":
        assert events[-1]["message"].strip()
    return events[-1]


def counts(ws: Workspace) -> dict[str, int]:
    conn = ws.store.conn
    return {
        table: conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
        for table in ("documents", "chunks", "chunks_fts_docsize", "conversations", "messages")
    }


def record(name: str, seconds: float) -> None:
    FIGURES[name] = round(seconds, 2)


@pytest.fixture(scope="module")
def shared_ws(fake_gemini_server, tmp_path_factory):
    """One seeded workspace for the chat matrix (tests compare counts before and after)."""
    db = tmp_path_factory.mktemp("faults") / "faults.db"
    workspace = make_workspace(gemini_settings_for(fake_gemini_server, db), FAST_RETRY)
    fake_gemini_server.reset()
    seed(workspace)
    yield workspace
    workspace.close()


@pytest.fixture
def ws(shared_ws, fake_gemini):
    fake_gemini.set_answer(None)
    return shared_ws


# ------------------------------------------------------------------------- chat fault matrix

def _text(fake):
    fake.set_answer(LONG_ANSWER)


CHAT_FAULTS = {
    # name: (setup, expected terminal type, expected words in the message)
    "429 storm": (lambda f: f.fail_next(429, times=50, endpoint="stream"), "error", "rate limit"),
    "429 once, Retry-After 0.2": (
        lambda f: f.fail_next(429, times=1, endpoint="stream", retry_after=0.2), "done", None),
    "500 storm": (lambda f: f.fail_next(500, times=50, endpoint="stream"), "error", "HTTP 500"),
    "503 twice then ok": (lambda f: f.fail_next(503, times=2, endpoint="stream"), "done", None),
    "slower than the timeout, always": (
        lambda f: f.delay_next(TIMEOUT_S * 3, times=50, endpoint="stream"), "error", "in time"),
    "slower than the timeout, once": (
        lambda f: f.delay_next(TIMEOUT_S * 3, times=1, endpoint="stream"), "done", None),
    "stall mid-stream": (
        lambda f: (_text(f), f.stream_script(stall_after=2, stall_seconds=10)),
        "error", "interrupted"),
    "connection dropped before the answer": (
        lambda f: f.drop_next(times=50, endpoint="stream"), "error", "connection"),
    "connection dropped mid-stream": (
        lambda f: (_text(f), f.stream_script(drop_after=2)), "error", "interrupted"),
    "malformed JSON first": (
        lambda f: f.stream_script(malformed=True, malformed_after=0, times=50),
        "error", "malformed"),
    "malformed JSON mid-stream": (
        lambda f: (_text(f), f.stream_script(malformed=True, malformed_after=2)),
        "error", "interrupted"),
    "error event mid-stream": (
        lambda f: (_text(f), f.stream_script(error_after=2, error_code=503)),
        "error", "interrupted"),
    "stream ends without finishReason": (
        lambda f: (_text(f), f.stream_script(finish_reason=None)), "error", "interrupted"),
    "prompt blocked": (lambda f: f.stream_script(block_reason="SAFETY"), "error", "declined"),
    "empty answer": (lambda f: f.stream_script(empty=True), "error", "empty"),
    "finish SAFETY mid-answer": (
        lambda f: (_text(f), f.stream_script(finish_reason="SAFETY")), "error", "safety"),
    "trickle slower than the answer deadline": (
        lambda f: f.stream_script(chunks=["cats sleep "] * 40 + ["[1]."],
                                  chunk_delay=TIMEOUT_S * 0.8),
        "error", "longer than"),
    "query embedding 429 storm": (
        lambda f: f.fail_next(429, times=50, endpoint="embed"), "error", "rate limit"),
    "query embedding slower than the timeout": (
        lambda f: f.delay_next(TIMEOUT_S * 3, times=50, endpoint="embed"), "error", "in time"),
    "query embedding dropped": (
        lambda f: f.drop_next(times=50, endpoint="embed"), "error", "connection"),
    "query embedding slow x3, then a stream slower than the timeout": (
        lambda f: (f.delay_next(TIMEOUT_S * 3, times=3, endpoint="embed"),
                   f.delay_next(TIMEOUT_S * 3, times=50, endpoint="stream")),
        "error", "in time"),
}


SLOW_ONLY = {
    "query embedding slow x3, then a stream slower than the timeout",
    "query embedding slower than the timeout",  # the ingest timeout test covers the fast path
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "fault",
    [pytest.param(f, marks=pytest.mark.slow) if f in SLOW_ONLY else f for f in CHAT_FAULTS],
)
def test_chat_ends_in_done_or_error_within_bound_and_saves_nothing_partial(ws, fake_gemini, fault):
    setup, expected, words = CHAT_FAULTS[fault]
    before = counts(ws)
    setup(fake_gemini)
    events, seconds = timed_chat(ws)
    record(f"chat: {fault}", seconds)
    end = assert_well_formed(events)
    assert end["type"] == expected, end
    assert_within_retries(fake_gemini, FAST_RETRY)
    after = counts(ws)
    if expected == "error":
        assert words.lower() in end["message"].lower(), end["message"]
        assert fake_gemini.api_key not in end["message"]
        # nothing of the failed exchange: no conversation row, no message
        assert after == before
        if end.get("conversation_id"):
            with pytest.raises(NotFoundError):
                ws.store.get_conversation(end["conversation_id"])
    else:
        answer = "".join(e["text"] for e in events if e["type"] == "token")
        assert answer.strip()
        assert after["conversations"] == before["conversations"] + 1
        assert after["messages"] == before["messages"] + 2
        saved = ws.store.messages(end["conversation_id"])
        assert [m.role for m in saved] == ["user", "assistant"]
        assert saved[1].content == answer


FOLLOW_UP_FAULTS = [
    "500 storm", "connection dropped mid-stream", "stall mid-stream", "query embedding dropped",
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("fault", FOLLOW_UP_FAULTS)
def test_failed_follow_up_leaves_the_conversation_as_it_was(ws, fake_gemini, fault):
    events, _ = timed_chat(ws)
    done = assert_well_formed(events)
    assert done["type"] == "done"
    cid = done["conversation_id"]
    before = ws.store.get_conversation(cid)
    messages_before = ws.store.messages(cid)
    setup, expected, _ = CHAT_FAULTS[fault]
    setup(fake_gemini)
    events, seconds = timed_chat(ws, "And how long do kittens sleep?", cid)
    record(f"follow-up: {fault}", seconds)
    end = assert_well_formed(events)
    assert end["type"] == expected == "error"
    assert ws.store.messages(cid) == messages_before
    assert ws.store.get_conversation(cid) == before  # `updated` not touched either


def test_abandoned_stream_saves_nothing(ws, fake_gemini):
    """The consumer stops reading after the first token (a Streamlit rerun, a closed tab)."""
    fake_gemini.set_answer(LONG_ANSWER)
    fake_gemini.stream_script(chunk_delay=0.05)
    before = counts(ws)
    gen = ws.chat.ask(QUESTION)
    assert next(gen)["type"] == "meta"
    assert next(gen)["type"] == "token"
    gen.close()
    assert counts(ws) == before


# ------------------------------------------------------------------------ embedding faults

MANY_CHUNKS = "".join(
    f"Paragraph {i} is about topic number {i}, which is unlike any other topic here.\n\n"
    for i in range(350)
)
ONE_PARAGRAPH_PER_CHUNK = {"chunk_target": 100, "chunk_overlap": 0}  # MANY_CHUNKS -> 350 chunks


SCALED_RETRY = RetryPolicy(attempts=RETRY_ATTEMPTS, initial_delay=0.1, max_delay=RETRY_MAX_DELAY)


@pytest.mark.parametrize(
    "policy",
    [
        pytest.param(SCALED_RETRY, id="scaled"),
        pytest.param(RetryPolicy(), marks=pytest.mark.slow, id="production"),
    ],
)
def test_embedding_retries_back_off_then_fail_with_a_clear_message(fake_gemini, db_path, policy):
    """RETRY_ATTEMPTS attempts with jittered exponential backoff (gaps measured at the
    server), then an error event naming the cause; nothing saved. The fast run scales the
    initial delay down; the slow one is the production ``RetryPolicy()``."""
    settings = gemini_settings_for(fake_gemini, db_path)
    sleep = RecordingSleep()
    policy = dataclasses.replace(policy, sleep=sleep)
    ws = make_workspace(settings, retry=policy)
    fake_gemini.fail_next(503, times=50, endpoint="embed")
    started = time.monotonic()
    events = list(ingest_bytes(ws.store, ws.embedder, settings, "notes.txt", DOC.encode()))
    seconds = time.monotonic() - started
    label = "production" if policy.initial_delay == RETRY_INITIAL_DELAY else "scaled"
    record(f"ingest: 503 storm, {label} backoff", seconds)
    end = events[-1]
    assert end["type"] == "error" and end["reason"] == "embedding"
    assert end["message"].startswith("Embedding failed:")
    assert "HTTP 503" in end["message"] and "Try again" in end["message"]
    stamps = [r.time for r in fake_gemini.requests_for("embed")]
    assert len(stamps) == policy.attempts
    gaps = [b - a for a, b in zip(stamps, stamps[1:])]
    FIGURES[f"ingest: {label} backoff gaps (s)"] = [round(g, 2) for g in gaps]
    assert len(sleep.delays) == policy.attempts - 1
    for attempt, (delay, gap) in enumerate(zip(sleep.delays, gaps), start=1):
        base = min(policy.max_delay, policy.initial_delay * 2 ** (attempt - 1))
        assert base * 0.5 <= delay <= base, (attempt, sleep.delays)  # jittered exponential
        assert gap >= delay - 0.02, (attempt, gaps, sleep.delays)  # and really waited
    assert sleep.delays[-1] > sleep.delays[0]  # it backs off
    assert counts(ws)["documents"] == counts(ws)["chunks"] == 0
    ws.close()


def test_retry_after_hint_is_honoured(fake_gemini, db_path):
    settings = gemini_settings_for(fake_gemini, db_path)
    ws = make_workspace(settings, retry=SCALED_RETRY)
    fake_gemini.fail_next(429, times=1, endpoint="embed", retry_after=0.6)
    events = list(ingest_bytes(ws.store, ws.embedder, settings, "notes.txt", DOC.encode()))
    assert events[-1]["type"] == "done"
    first, second = (r.time for r in fake_gemini.requests_for("embed")[:2])
    assert second - first >= 0.6 - 0.05
    ws.close()


def test_concurrent_batches_storm_saves_nothing_and_stops_sending(fake_gemini, db_path):
    """350 chunks = 4 batches in flight at once; all rate-limited: one error, no document,
    and no request leaves after the error event."""
    settings = gemini_settings_for(fake_gemini, db_path, **ONE_PARAGRAPH_PER_CHUNK)
    ws = make_workspace(settings, FAST_RETRY)
    fake_gemini.set_latency(0.1, endpoint="embed")  # so the 4 batches overlap at the server
    fake_gemini.fail_next(429, times=1000, endpoint="embed")
    started = time.monotonic()
    events = list(ingest_bytes(ws.store, ws.embedder, settings, "many.txt", MANY_CHUNKS.encode()))
    record("ingest: 429 storm, 4 concurrent batches", time.monotonic() - started)
    assert events[-1]["type"] == "error" and "rate limit" in events[-1]["message"]
    sent = len(fake_gemini.requests_for("embed"))
    assert 4 <= sent <= 4 * RETRY_ATTEMPTS  # all four batches went out, none past its retries
    assert fake_gemini.max_in_flight >= 2  # really concurrent
    time.sleep(0.5)
    assert len(fake_gemini.requests_for("embed")) == sent  # every worker stopped
    assert counts(ws) == {k: 0 for k in counts(ws)}
    ws.close()


@pytest.mark.parametrize(
    "fault",
    ["500 twice", "dropped twice", "slower than the timeout once"],
)
def test_flaky_batches_are_retried_and_the_document_completes(fake_gemini, db_path, fault):
    settings = gemini_settings_for(fake_gemini, db_path, **ONE_PARAGRAPH_PER_CHUNK)
    ws = make_workspace(settings, FAST_RETRY)
    if fault == "500 twice":
        fake_gemini.fail_next(500, times=2, endpoint="embed")
    elif fault == "dropped twice":
        fake_gemini.drop_next(times=2, endpoint="embed")
    else:
        fake_gemini.delay_next(TIMEOUT_S * 3, times=1, endpoint="embed")
    events = list(ingest_bytes(ws.store, ws.embedder, settings, "many.txt", MANY_CHUNKS.encode()))
    assert events[-1]["type"] == "done", events[-1]
    doc = events[-1]["document"]
    assert doc["chunk_count"] == 350
    c = counts(ws)
    assert c["documents"] == 1 and c["chunks"] == c["chunks_fts_docsize"] == doc["chunk_count"]
    assert ws.store.integrity_report()["mismatched_documents"] == []
    ws.close()


def test_abandoned_ingestion_stops_calling_the_service(fake_gemini, db_path):
    """The reader stops consuming an ingestion after the first batch (a Streamlit rerun, a
    closed tab): nothing is saved, and no further embedding request is sent for it.
    (Fails until ingestion._embed_with_progress tells its worker thread to stop.)"""
    settings = gemini_settings_for(fake_gemini, db_path, gemini_concurrency=1,
                                   **ONE_PARAGRAPH_PER_CHUNK)
    ws = make_workspace(settings, FAST_RETRY)
    ws.__dict__["embedder"] = GeminiEmbedder(settings, retry=FAST_RETRY, concurrency=1)
    fake_gemini.set_latency(0.3, endpoint="embed")
    gen = ingest_bytes(ws.store, ws.embedder, settings, "many.txt", MANY_CHUNKS.encode())
    for event in gen:
        if event.get("stage") == "embedding" and event.get("done", 0) > 0:
            break
    gen.close()
    sent = len(fake_gemini.requests_for("embed"))
    time.sleep(1.5)  # long enough for the remaining batches, were they still being sent
    assert counts(ws)["documents"] == 0
    assert len(fake_gemini.requests_for("embed")) <= sent + 1, "embedding went on after close"
    ws.close()


@pytest.mark.timeout(60)
def test_embedding_timeout_fails_within_bound_and_saves_nothing(fake_gemini, db_path):
    settings = gemini_settings_for(fake_gemini, db_path)
    ws = make_workspace(settings, FAST_RETRY)
    fake_gemini.delay_next(TIMEOUT_S * 3, times=100, endpoint="embed")
    started = time.monotonic()
    events = list(ingest_bytes(ws.store, ws.embedder, settings, "notes.txt", DOC.encode()))
    seconds = time.monotonic() - started
    record("ingest: every embed slower than the timeout", seconds)
    assert events[-1]["type"] == "error" and "in time" in events[-1]["message"]
    assert len(fake_gemini.requests_for("embed")) <= FAST_RETRY.attempts  # one batch, retried
    assert counts(ws)["documents"] == 0
    ws.close()


@pytest.mark.parametrize(
    "body,words",
    [
        ({"embeddings": []}, "returned 0 embeddings"),
        ({"embeddings": [{"values": [0.5, 0.5, 0.5]}]}, "dimensional"),
        ({"nothing": "here"}, "embeddings"),
    ],
    ids=["no embeddings", "wrong dimension", "no embeddings field"],
)
def test_malformed_embedding_responses_are_refused_clearly(fake_gemini, db_path, body, words):
    settings = gemini_settings_for(fake_gemini, db_path)
    ws = make_workspace(settings, FAST_RETRY)
    fake_gemini.fail_next(200, times=10, endpoint="embed", body=body)
    events = list(ingest_bytes(ws.store, ws.embedder, settings, "short.txt", b"A short note."))
    end = events[-1]
    assert end["type"] == "error" and end["reason"] == "embedding", end
    assert words in end["message"]
    assert counts(ws)["documents"] == 0
    ws.close()


def test_bad_key_is_not_retried_and_says_so(fake_gemini, db_path):
    settings = gemini_settings_for(fake_gemini, db_path, gemini_api_key="not-the-key")
    ws = make_workspace(settings, FAST_RETRY)
    events = list(ingest_bytes(ws.store, ws.embedder, settings, "short.txt", DOC.encode()))
    assert events[-1]["type"] == "error" and events[-1]["reason"] == "auth"
    assert events[-1]["message"] == KEY_REJECTED
    assert len(fake_gemini.requests_for("embed")) == 1
    chat_events, _ = timed_chat(ws)
    end = assert_well_formed(chat_events)
    assert end["type"] == "error" and "key" in end["message"].lower()
    assert "not-the-key" not in end["message"]
    assert counts(ws)["conversations"] == 0
    ws.close()


def test_connection_refused_fails_fast_and_clearly(db_path):
    with contextlib.closing(__import__("socket").socket()) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again below: nothing listens there
    settings = Settings(
        db_path=str(db_path), gemini_api_key="k", gemini_base_url=f"http://127.0.0.1:{port}",
        gemini_timeout_s=TIMEOUT_S,
    )
    ws = make_workspace(settings, FAST_RETRY)
    started = time.monotonic()
    events = list(ingest_bytes(ws.store, ws.embedder, settings, "short.txt", DOC.encode()))
    chat_events, _ = timed_chat(ws)
    record("ingest+chat: connection refused", time.monotonic() - started)
    assert events[-1]["type"] == "error" and "connect" in events[-1]["message"].lower()
    assert assert_well_formed(chat_events)["type"] == "error"
    assert counts(ws)["documents"] == counts(ws)["conversations"] == 0
    ws.close()


# ------------------------------------------------------------------- a server that talks garbage

class _GarbageHandler(BaseHTTPRequestHandler):
    """200 responses whose bodies are not JSON (cut mid-object), on every endpoint."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if "streamGenerateContent" in self.path:
            body = (
                b'data: {"candidates": [{"content": {"role": "model", "parts": '
                b'[{"text": "Cats sleep "}]}}]}\r\n\r\n'
                b'data: {"candidates": [{"content": {"parts": [{"text": "a lot\r\n\r\n'
            )
            ctype = "text/event-stream"
        else:
            body = b'{"embeddings": [{"values": [0.1, 0.2, '
            ctype = "application/json"
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(scope="module")
def garbage_server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _GarbageHandler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


@pytest.mark.timeout(60)
def test_garbage_json_from_the_service_is_an_error_not_a_crash(fake_gemini, db_path,
                                                                garbage_server):
    good = gemini_settings_for(fake_gemini, db_path)
    bad = gemini_settings_for(fake_gemini, db_path, gemini_base_url=garbage_server)
    ws = make_workspace(good, FAST_RETRY)
    seed(ws)
    # the answerer talks to the garbage server, the embedder to the working one
    ws.__dict__["answerer"] = GeminiAnswerer(bad, retry=FAST_RETRY)
    events, seconds = timed_chat(ws)
    record("chat: garbage JSON stream", seconds)
    end = assert_well_formed(events)
    assert end["type"] == "error" and end["reason"] == "answer", end
    assert counts(ws)["conversations"] == 0
    # and an embedder talking to it
    garbage_embedder = GeminiEmbedder(bad, retry=FAST_RETRY)
    ingest = list(ingest_bytes(ws.store, garbage_embedder, bad, "other.txt", b"Other text here."))
    assert ingest[-1]["type"] == "error" and ingest[-1]["reason"] == "embedding", ingest[-1]
    assert counts(ws)["documents"] == 1
    ws.close()


# ------------------------------------------------------------------ production policy (slow)

SLOW_MATRIX = [
    "429 storm", "500 storm", "slower than the timeout, always", "slower than the timeout, once",
    "connection dropped before the answer", "connection dropped mid-stream", "stall mid-stream",
    "malformed JSON first", "trickle slower than the answer deadline",
    "query embedding 429 storm", "query embedding slower than the timeout",
    "query embedding slow x3, then a stream slower than the timeout",
]


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_fault_matrix_with_production_retry_policy(fake_gemini, db_path):
    """The app's own wiring (``Workspace(settings)``, ``RetryPolicy()``): the same faults, one
    after another; each within its retries (the worst time is a printed figure)."""
    settings = gemini_settings_for(fake_gemini, db_path, gemini_timeout_s=SLOW_TIMEOUT_S)
    ws = make_workspace(settings, retry=None)
    seed(ws)
    worst = (0.0, "")
    for fault in SLOW_MATRIX:
        fake_gemini.reset()
        setup, expected, _ = CHAT_FAULTS[fault]
        setup(fake_gemini)
        before = counts(ws)
        events, seconds = timed_chat(ws)
        end = assert_well_formed(events)
        assert end["type"] == expected, (fault, end)
        assert_within_retries(fake_gemini, RetryPolicy())
        if expected == "error":
            assert counts(ws) == before, fault
        record(f"production policy: {fault}", seconds)
        worst = max(worst, (seconds, fault))
    ws.close()


@pytest.fixture(scope="module", autouse=True)
def _print_figures():
    yield
    if FIGURES:
        print("\n[fault figures: seconds to the terminal event]")
        for name, value in FIGURES.items():
            print(f"  {name}: {value}")
        chat = {k: v for k, v in FIGURES.items() if k.startswith(("chat:", "follow-up:",
                                                                  "production policy:"))
                and isinstance(v, float) and "bound" not in k}
        if chat:
            name = max(chat, key=chat.get)
            print(f"  MAX chat seconds to done/error: {chat[name]} ({name})")
