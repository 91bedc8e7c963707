"""A fake Gemini REST API for tests: a real HTTP server on 127.0.0.1 that the real google-genai SDK
talks to (point it there with ``HttpOptions(base_url=...)`` / ``Settings.gemini_base_url``).

Endpoints (matched on the path suffix, so ``/v1/…`` and ``/v1beta/…`` both work):

- ``POST …/models/{model}:batchEmbedContents`` — deterministic embeddings: a signed hashed bag of
  lowercase word tokens in ``outputDimensionality`` dims, scaled so vectors are NOT unit length
  (the client must normalize). Documents and queries embed identically, so shared words match.
  At most 100 requests per batch; each must carry ``taskType`` RETRIEVAL_DOCUMENT or
  RETRIEVAL_QUERY and ``outputDimensionality``.
- ``POST …/models/{model}:streamGenerateContent?alt=sse`` — an SSE stream of the answer.
- ``POST …/models/{model}:generateContent`` — the same answer in one JSON response.

Every request is checked for the ``x-goog-api-key`` header (wrong or missing -> the Gemini 400
"API key not valid") and recorded in ``server.requests``. Faults are queued with ``fail_next``,
``delay_next`` and ``stream_script``; ``reset()`` clears them (the ``fake_gemini`` fixture does it
before every test).

Fixtures: ``fake_gemini_server`` (session scope, the running server) and ``fake_gemini`` (function
scope: the same server, reset). In ``tests/conftest.py``::

    from fake_gemini import fake_gemini, fake_gemini_server  # noqa: F401
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import socket
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

API_KEY = "test-key"
MAX_BATCH = 100
DEFAULT_DIM = 768
EMBED_SCALE = 3.0  # every non-empty vector has norm >= 3, so un-normalized use is caught
TASK_TYPES = ("RETRIEVAL_DOCUMENT", "RETRIEVAL_QUERY")
WORDS_PER_CHUNK = 3
HOLD_TIMEOUT_S = 10.0  # longest hold_embeds()/hold_after wait before the server carries on

BAD_KEY_ERROR = {
    "error": {
        "code": 400,
        "message": "API key not valid. Please pass a valid API key.",
        "status": "INVALID_ARGUMENT",
    }
}
_STATUS_NAMES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    408: "DEADLINE_EXCEEDED",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    502: "UNAVAILABLE",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}
_DEFAULT_MESSAGES = {
    429: "Resource has been exhausted (e.g. check quota).",
    500: "An internal error has occurred. Please retry or report in https://developers.generativeai.google/guide/troubleshooting",
    503: "The model is overloaded. Please try again later.",
}
_ENDPOINTS = {
    "batchEmbedContents": "embed",
    "streamGenerateContent": "stream",
    "generateContent": "generate",
}
_PATH_RE = re.compile(r"/models/(?P<model>[^/:]+):(?P<method>[A-Za-z]+)$")
_TOKEN_RE = re.compile(r"[a-z0-9]+")


def error_body(code: int, message: str | None = None, status: str | None = None) -> dict:
    return {
        "error": {
            "code": code,
            "message": message or _DEFAULT_MESSAGES.get(code, f"Fake error {code}."),
            "status": status or _STATUS_NAMES.get(code, "UNKNOWN"),
        }
    }


def fake_embedding(text: str, dim: int = DEFAULT_DIM) -> list[float]:
    """Signed hashed bag of lowercase word tokens, scaled by EMBED_SCALE (not unit length)."""
    vec = [0.0] * dim
    tokens = _TOKEN_RE.findall(text.lower())
    if not tokens:
        return [0.01] * dim
    for tok in tokens:
        h = int.from_bytes(hashlib.blake2b(tok.encode(), digest_size=8).digest(), "little")
        vec[h % dim] += EMBED_SCALE if (h >> 32) & 1 else -EMBED_SCALE
    if not any(vec):  # a token and its sign-flipped collision cancelled out
        vec[0] = EMBED_SCALE
    return vec


def default_answer(system_instruction: str) -> str:
    """A reply composed from the system instruction: quotes the start of passage [1] and cites it.

    Passage 1 is the line starting with ``[1]`` (prompting.py writes ``[1] (from "doc", page 3)``
    then the passage on the next lines); without one, the first ``[1]`` anywhere is used."""
    match = re.search(r"(?m)^[ \t]*\[1\](.*)$", system_instruction)
    if match:
        head = match.group(1).strip()
        body = re.split(r"(?m)^[ \t]*\[\d+\]", system_instruction[match.end() :])[0]
        passage = body if (not head or head.startswith("(")) else f"{head} {body}"
    else:
        idx = system_instruction.find("[1]")
        if idx < 0:
            return "I could not find anything about that in your documents."
        passage = system_instruction[idx + 3 :].split("[2]", 1)[0]
    words = re.findall(r"[^\s\[\]]+", passage)
    snippet = " ".join(words[:12]).rstrip(".,;:") if words else "the first passage answers it"
    return f"According to the sources, {snippet} [1]."


def split_words(text: str, per_chunk: int = WORDS_PER_CHUNK) -> list[str]:
    """Split ``text`` into pieces of a few words each; ``"".join(pieces) == text``."""
    pieces = re.findall(r"\S+\s*|\s+", text)
    out = ["".join(pieces[i : i + per_chunk]) for i in range(0, len(pieces), per_chunk)]
    return out or [text]


@dataclass
class RecordedRequest:
    method: str
    path: str
    query: dict[str, list[str]]
    endpoint: str  # "embed" | "stream" | "generate" | "unknown"
    model: str | None
    headers: dict[str, str]  # lower-cased names, x-goog-api-key removed
    body: Any
    time: float  # time.monotonic() when the request arrived
    key_ok: bool


@dataclass
class _Fault:
    endpoint: str | None
    status: int | None = None
    body: dict | None = None
    retry_after: float | None = None
    delay: float = 0.0
    drop: bool = False  # close the socket without answering


@dataclass
class _StreamScript:
    chunks: list[str] | None = None
    text: str | None = None
    error_after: int | None = None
    error_code: int = 500
    error_message: str | None = None
    drop_after: int | None = None
    malformed: bool = False
    malformed_after: int = 0
    stall_after: int | None = None
    stall_seconds: float = 30.0
    chunk_delay: float = 0.0
    finish_reason: str | None = "STOP"
    block_reason: str | None = None
    empty: bool = False
    times: int = 1
    hold_after: int | None = None


@dataclass
class _State:
    requests: list[RecordedRequest] = field(default_factory=list)
    faults: deque = field(default_factory=deque)
    scripts: deque = field(default_factory=deque)
    answer: str | None = None
    latency: dict = field(default_factory=dict)  # endpoint -> seconds, every request
    in_flight: int = 0
    max_in_flight: int = 0
    hold_embeds: int = 0  # embed requests wait until this many are in flight at once
    stream_events_sent: int = 0  # SSE data events written, over every stream
    gate: threading.Event = field(default_factory=threading.Event)  # opened by release()
    stale: threading.Event = field(default_factory=threading.Event)  # set by reset()/stop()


class FakeGeminiServer:
    """The fake Gemini API. Thread-safe; one instance serves the whole test session."""

    def __init__(self, api_key: str = API_KEY):
        self.api_key = api_key
        self._lock = threading.Lock()
        self._state = _State()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ----------------------------------------------------------------- lifecycle
    def start(self) -> FakeGeminiServer:
        handler = type("Handler", (_Handler,), {"fake": self})
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, name="fake-gemini", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._current().stale.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> FakeGeminiServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._httpd is not None, "server not started"
        return self._httpd.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def settings(self, **overrides: Any) -> Any:
        """``Settings`` pointing at this server (key, base URL, a short timeout) plus overrides."""
        from marginalia_core.config import Settings

        values: dict[str, Any] = {
            "gemini_api_key": self.api_key,
            "gemini_base_url": self.base_url,
            "gemini_timeout_s": 5.0,
        }
        values.update(overrides)
        return Settings(**values)

    def reset(self) -> None:
        """Forget requests, faults, scripts, latency and the custom answer."""
        with self._lock:
            old, self._state = self._state, _State()
        old.stale.set()  # handlers still sleeping for the previous test wake up and hang up

    # ----------------------------------------------------------------- inspection
    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._state.requests)

    def requests_for(self, endpoint: str) -> list[RecordedRequest]:
        return [r for r in self.requests if r.endpoint == endpoint]

    @property
    def max_in_flight(self) -> int:
        """Most embed requests being served at the same moment."""
        with self._lock:
            return self._state.max_in_flight

    @property
    def stream_events_sent(self) -> int:
        """SSE ``data:`` events the server has written so far (every stream together)."""
        with self._lock:
            return self._state.stream_events_sent

    # ----------------------------------------------------------------- scripting
    def hold_embeds(self, count: int) -> None:
        """Each embed request waits until ``count`` of them are in flight at once (at most
        HOLD_TIMEOUT_S), so a concurrency test sees the overlap however loaded the machine is."""
        with self._lock:
            self._state.hold_embeds = count

    def release(self) -> None:
        """Open the gate a ``stream_script(hold_after=N)`` stream is waiting at."""
        self._current().gate.set()

    def fail_next(
        self,
        status: int = 500,
        times: int = 1,
        *,
        message: str | None = None,
        body: dict | None = None,
        endpoint: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        """The next ``times`` matching requests get ``status`` with a Gemini-shaped error body.

        ``endpoint`` is "embed", "stream", "generate" or None (any)."""
        with self._lock:
            for _ in range(times):
                self._state.faults.append(
                    _Fault(
                        endpoint,
                        status=status,
                        body=body or error_body(status, message),
                        retry_after=retry_after,
                    )
                )

    def delay_next(self, seconds: float, times: int = 1, *, endpoint: str | None = None) -> None:
        """The next ``times`` matching requests wait ``seconds`` before answering normally."""
        with self._lock:
            for _ in range(times):
                self._state.faults.append(_Fault(endpoint, delay=seconds))

    def drop_next(self, times: int = 1, *, endpoint: str | None = None) -> None:
        """The next ``times`` matching requests get their connection closed with no answer."""
        with self._lock:
            for _ in range(times):
                self._state.faults.append(_Fault(endpoint, drop=True))

    def set_latency(self, seconds: float, *, endpoint: str = "embed") -> None:
        """Every request to ``endpoint`` takes at least ``seconds`` (until reset)."""
        with self._lock:
            self._state.latency[endpoint] = seconds

    def set_answer(self, text: str | None) -> None:
        """The text every stream/generate answer uses (None: composed from the system instruction)."""
        with self._lock:
            self._state.answer = text

    def stream_script(
        self,
        chunks: list[str] | None = None,
        *,
        text: str | None = None,
        error_after: int | None = None,
        error_code: int = 500,
        error_message: str | None = None,
        drop_after: int | None = None,
        malformed: bool = False,
        malformed_after: int = 0,
        stall_after: int | None = None,
        stall_seconds: float = 30.0,
        chunk_delay: float = 0.0,
        finish_reason: str | None = "STOP",
        block_reason: str | None = None,
        empty: bool = False,
        times: int = 1,
        hold_after: int | None = None,
    ) -> None:
        """Script the next ``times`` stream responses.

        chunks / text: the answer pieces (default: the current answer split every few words).
        error_after=N: after N text events, send ``data: {"error": …}`` and end the stream.
        drop_after=N: after N text events, close the socket mid-body (incomplete chunked read).
        malformed: after ``malformed_after`` text events, send a ``data:`` line that is not JSON.
        stall_after=N: after N text events, send nothing for ``stall_seconds`` (then drop).
        chunk_delay: seconds between events.
        finish_reason: on the last event (None: the stream ends without one).
        block_reason: answer with only ``promptFeedback.blockReason`` (a blocked prompt).
        empty: no text at all, just the finish reason.
        hold_after=N: after N text events, wait for ``release()`` (at most HOLD_TIMEOUT_S).
        """
        script = _StreamScript(
            chunks=chunks,
            text=text,
            error_after=error_after,
            error_code=error_code,
            error_message=error_message,
            drop_after=drop_after,
            malformed=malformed,
            malformed_after=malformed_after,
            stall_after=stall_after,
            stall_seconds=stall_seconds,
            chunk_delay=chunk_delay,
            finish_reason=finish_reason,
            block_reason=block_reason,
            empty=empty,
            times=times,
            hold_after=hold_after,
        )
        with self._lock:
            self._state.scripts.append(script)

    # ----------------------------------------------------------------- internals
    # A request works on the state current when it arrived, so a handler from an earlier test
    # that wakes after reset() can never consume this test's faults or scripts.
    def _current(self) -> _State:
        with self._lock:
            return self._state

    def _record(self, state: _State, req: RecordedRequest) -> None:
        with self._lock:
            state.requests.append(req)

    def _take_fault(self, state: _State, endpoint: str) -> _Fault | None:
        with self._lock:
            for i, fault in enumerate(state.faults):
                if fault.endpoint in (None, endpoint):
                    del state.faults[i]
                    return fault
        return None

    def _take_script(self, state: _State) -> _StreamScript:
        with self._lock:
            if not state.scripts:
                return _StreamScript()
            script = state.scripts[0]
            script.times -= 1
            if script.times <= 0:
                state.scripts.popleft()
            return script

    def _latency(self, state: _State, endpoint: str) -> float:
        with self._lock:
            return state.latency.get(endpoint, 0.0)

    def _answer_for(self, state: _State, body: dict) -> str:
        with self._lock:
            answer = state.answer
        if answer is not None:
            return answer
        return default_answer(_system_text(body))

    def _enter_embed(self, state: _State) -> None:
        with self._lock:
            state.in_flight += 1
            state.max_in_flight = max(state.max_in_flight, state.in_flight)
            hold = state.hold_embeds
        if hold:
            deadline = time.monotonic() + HOLD_TIMEOUT_S
            while time.monotonic() < deadline and not state.stale.is_set():
                with self._lock:
                    if state.max_in_flight >= hold:
                        return
                time.sleep(0.005)

    def _sent_stream_event(self, state: _State) -> None:
        with self._lock:
            state.stream_events_sent += 1

    def _leave_embed(self, state: _State) -> None:
        with self._lock:
            state.in_flight -= 1


def _system_text(body: dict) -> str:
    si = body.get("systemInstruction") or {}
    return "".join(p.get("text", "") for p in si.get("parts", []) if isinstance(p, dict))


class _Handler(BaseHTTPRequestHandler):
    disable_nagle_algorithm = True  # no 40 ms delayed-ACK stall per streamed request
    fake: FakeGeminiServer  # set on the per-server subclass
    st: _State  # the server state when the current request arrived
    protocol_version = "HTTP/1.1"
    server_version = "FakeGemini/1.0"

    def log_message(self, format: str, *args: Any) -> None:  # keep pytest output quiet
        pass

    def handle(self) -> None:
        # The client gave up (timeout) or we dropped the connection on purpose.
        with contextlib.suppress(OSError):
            super().handle()

    # ------------------------------------------------------------------ dispatch
    def do_GET(self) -> None:
        self._send_json(404, error_body(404, "Not found.", "NOT_FOUND"))

    def _pause(self, seconds: float) -> bool:
        """Wait ``seconds``; True if the test that sent this request is over (then hang up)."""
        return seconds > 0 and self.st.stale.wait(seconds)

    def do_POST(self) -> None:
        fake = self.fake
        self.st = fake._current()
        url = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            body = None
        match = _PATH_RE.search(url.path)
        endpoint = _ENDPOINTS.get(match["method"], "unknown") if match else "unknown"
        headers = {k.lower(): v for k, v in self.headers.items() if k.lower() != "x-goog-api-key"}
        key_ok = self.headers.get("x-goog-api-key") == fake.api_key
        fake._record(
            self.st,
            RecordedRequest(
                method="POST",
                path=url.path,
                query=parse_qs(url.query),
                endpoint=endpoint,
                model=match["model"] if match else None,
                headers=headers,
                body=body,
                time=time.monotonic(),
                key_ok=key_ok,
            ),
        )
        if endpoint == "embed":
            fake._enter_embed(self.st)
        try:
            self._serve(endpoint, body, key_ok, url)
        finally:
            if endpoint == "embed":
                fake._leave_embed(self.st)

    def _serve(self, endpoint: str, body: Any, key_ok: bool, url: Any) -> None:
        fake = self.fake
        if not key_ok:
            return self._send_json(400, BAD_KEY_ERROR)
        if endpoint == "unknown":
            return self._send_json(404, error_body(404, f"Unknown path {url.path}.", "NOT_FOUND"))
        if not isinstance(body, dict):
            return self._send_json(400, error_body(400, "Invalid JSON payload received."))
        if self._pause(fake._latency(self.st, endpoint)):
            return self._drop()
        fault = fake._take_fault(self.st, endpoint)
        if fault is not None:
            if self._pause(fault.delay):
                return self._drop()
            if fault.drop:
                return self._drop()
            if fault.status is not None:
                extra = {}
                if fault.retry_after is not None:
                    extra["Retry-After"] = f"{fault.retry_after:g}"
                return self._send_json(fault.status, fault.body or error_body(fault.status), extra)
        if endpoint == "embed":
            return self._embed(body)
        if endpoint == "generate":
            return self._generate(body)
        if url.query and "alt=sse" not in url.query:
            return self._send_json(
                400, error_body(400, "streamGenerateContent needs alt=sse here.")
            )
        return self._stream(body)

    # ------------------------------------------------------------------ endpoints
    def _embed(self, body: dict) -> None:
        reqs = body.get("requests")
        if not isinstance(reqs, list) or not reqs:
            return self._send_json(400, error_body(400, "requests must be a non-empty list."))
        if len(reqs) > MAX_BATCH:
            return self._send_json(
                400,
                error_body(
                    400,
                    f"* BatchEmbedContentsRequest.requests: at most {MAX_BATCH} requests can be "
                    "in one batch",
                ),
            )
        out = []
        for i, r in enumerate(reqs):
            task = r.get("taskType")
            if task not in TASK_TYPES:
                return self._send_json(
                    400, error_body(400, f"requests[{i}].taskType must be one of {TASK_TYPES}.")
                )
            dim = r.get("outputDimensionality")
            if not isinstance(dim, int) or dim <= 0:
                return self._send_json(
                    400, error_body(400, f"requests[{i}].outputDimensionality is required.")
                )
            parts = (r.get("content") or {}).get("parts") or []
            text = "".join(p.get("text", "") for p in parts if isinstance(p, dict))
            out.append({"values": fake_embedding(text, dim)})
        self._send_json(200, {"embeddings": out})

    def _generate(self, body: dict) -> None:
        text = self.fake._answer_for(self.st, body)
        self._send_json(200, _candidate_event(text, "STOP"))

    def _stream(self, body: dict) -> None:
        fake = self.fake
        script = fake._take_script(self.st)
        if script.block_reason:
            events: list[dict] = [{"promptFeedback": {"blockReason": script.block_reason}}]
            return self._send_sse(events, script)
        if script.empty:
            return self._send_sse([_candidate_event(None, script.finish_reason)], script)
        if script.chunks is not None:
            pieces = list(script.chunks)
        else:
            pieces = split_words(
                script.text if script.text is not None else fake._answer_for(self.st, body)
            )
        events = []
        for i, piece in enumerate(pieces):
            last = i == len(pieces) - 1
            events.append(_candidate_event(piece, script.finish_reason if last else None))
        return self._send_sse(events, script)

    # ------------------------------------------------------------------ writing
    def _send_json(self, status: int, payload: dict, extra: dict | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=UTF-8")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):X}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _drop(self) -> None:
        self.wfile.flush()
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)
        self.close_connection = True

    def _send_sse(self, events: list[dict], script: _StreamScript) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()
        for n, event in enumerate(events):
            if script.error_after is not None and n == script.error_after:
                err = error_body(script.error_code, script.error_message)
                self._chunk(b"data: " + json.dumps(err).encode() + b"\r\n\r\n")
                break
            if script.drop_after is not None and n == script.drop_after:
                return self._drop()
            if script.malformed and n == script.malformed_after:
                self._chunk(b'data: {"candidates": [{"content": {"parts": [{"text": "oops\r\n\r\n')
                break
            if script.stall_after is not None and n == script.stall_after:
                self._pause(script.stall_seconds)
                return self._drop()
            if n and script.chunk_delay and self._pause(script.chunk_delay):
                return self._drop()
            if script.hold_after is not None and n == script.hold_after:
                self.st.gate.wait(HOLD_TIMEOUT_S)
            self._chunk(b"data: " + json.dumps(event).encode() + b"\r\n\r\n")
            self.fake._sent_stream_event(self.st)
        else:
            # Faults scheduled "after the last event" still apply.
            n = len(events)
            if script.error_after is not None and script.error_after >= n:
                err = error_body(script.error_code, script.error_message)
                self._chunk(b"data: " + json.dumps(err).encode() + b"\r\n\r\n")
            elif script.drop_after is not None and script.drop_after >= n:
                return self._drop()
            elif script.stall_after is not None and script.stall_after >= n:
                self._pause(script.stall_seconds)
                return self._drop()
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


def _candidate_event(text: str | None, finish_reason: str | None) -> dict:
    candidate: dict[str, Any] = {
        "content": {"role": "model", "parts": [{"text": text}] if text is not None else []},
        "index": 0,
    }
    if finish_reason:
        candidate["finishReason"] = finish_reason
    event: dict[str, Any] = {"candidates": [candidate], "modelVersion": "fake-gemini"}
    if finish_reason:
        event["usageMetadata"] = {
            "promptTokenCount": 10,
            "candidatesTokenCount": 5,
            "totalTokenCount": 15,
        }
    return event


# ---------------------------------------------------------------------- pytest fixtures
# Registered under the names in ``name=`` (the function names differ so that a test's
# ``fake_gemini`` argument does not shadow an import, which ruff reports as F811).
@pytest.fixture(scope="session", name="fake_gemini_server")
def fake_gemini_server_fixture() -> Iterator[FakeGeminiServer]:
    server = FakeGeminiServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(name="fake_gemini")
def fake_gemini_fixture(fake_gemini_server: FakeGeminiServer) -> Iterator[FakeGeminiServer]:
    """The session's fake Gemini server with fresh state (requests, faults, scripts)."""
    fake_gemini_server.reset()
    yield fake_gemini_server
    fake_gemini_server.reset()


# Plain names too, for ``from fake_gemini import fake_gemini, fake_gemini_server`` in conftest.py.
fake_gemini = fake_gemini_fixture
fake_gemini_server = fake_gemini_server_fixture
