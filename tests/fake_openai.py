"""A fake OpenAI-compatible model server for tests: a real HTTP server on 127.0.0.1 that the real
``openai`` SDK talks to (``OPENAI_BASE_URL=<server.base_url>`` / ``Settings.openai_base_url``).
It behaves like Ollama / llama.cpp / vLLM / api.openai.com on the three endpoints Marginalia uses:

- ``POST /v1/chat/completions`` with ``stream: true``: an SSE stream of ``chat.completion.chunk``
  objects (a first chunk with the role, text deltas, a last chunk with ``finish_reason``), then
  ``data: [DONE]``. Without ``stream`` the same answer as one ``chat.completion``. The default
  answer quotes passage [1] of the system message and cites it (``fake_gemini.default_answer``).
- ``POST /v1/embeddings``: deterministic vectors (a signed hashed bag of words, NOT unit length)
  of ``dimension`` dims (settable per model), one per input, in ``index`` order.
- ``GET /v1/models``: the served models (``set_models(None)`` makes it a 404, like servers that
  do not list them).

An unknown model is the OpenAI 404 ``model_not_found``; a chat prompt longer than
``context_chars`` is the OpenAI 400 ``context_length_exceeded``. With ``require_key`` set, a
missing or different ``Authorization: Bearer`` key is the OpenAI 401 ``invalid_api_key``.
Faults are queued with ``fail_next`` (any status, ``Retry-After``), ``delay_next``, ``drop_next``
and ``stream_script`` (cut mid-answer, slow first token, malformed chunk, error event, stall,
hold). Concurrency is measured as ``max_in_flight`` (embedding requests served at once), never
by elapsed time; ``hold_embeds(n)`` makes requests wait until n overlap.

Fixtures: ``fake_openai_server`` (session scope) and ``fake_openai`` (function scope, reset).
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

import pytest
from fake_gemini import default_answer, fake_embedding, split_words

CHAT_MODEL = "fake-chat"
EMBED_MODEL = "fake-embed"
DEFAULT_DIM = 256
DEFAULT_CONTEXT_CHARS = 200_000
HOLD_TIMEOUT_S = 10.0
MAX_EMBED_INPUTS = 2048

_TYPES = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    404: "invalid_request_error",
    429: "rate_limit_exceeded",
    500: "server_error",
    503: "server_error",
}
_MESSAGES = {
    401: "Incorrect API key provided. You can find your API key in your account settings.",
    429: "Rate limit reached for requests. Please try again in 1s.",
    500: "The server had an error while processing your request. Sorry about that!",
    503: "The engine is currently overloaded, please try again later.",
}
_CODES = {401: "invalid_api_key", 429: "rate_limit_exceeded"}


def error_body(
    status: int, message: str | None = None, code: str | None = None, param: str | None = None
) -> dict:
    """The OpenAI error shape: ``{"error": {"message", "type", "param", "code"}}``."""
    return {
        "error": {
            "message": message or _MESSAGES.get(status, f"Fake error {status}."),
            "type": _TYPES.get(status, "invalid_request_error"),
            "param": param,
            "code": code if code is not None else _CODES.get(status),
        }
    }


def model_not_found(model: str) -> dict:
    return error_body(
        404,
        f"The model `{model}` does not exist or you do not have access to it.",
        "model_not_found",
    )


def context_too_long(chars: int, limit: int) -> dict:
    return error_body(
        400,
        f"This model's maximum context length is {limit // 4} tokens. However, your messages "
        f"resulted in {chars // 4} tokens. Please reduce the length of the messages.",
        "context_length_exceeded",
        "messages",
    )


@dataclass
class RecordedRequest:
    method: str
    path: str
    endpoint: str  # "chat" | "embed" | "models" | "unknown"
    model: str | None
    headers: dict[str, str]  # lower-cased names, authorization removed
    authorization: str | None  # the raw header, for the key tests only
    body: Any
    time: float


@dataclass
class _Fault:
    endpoint: str | None
    status: int | None = None
    body: dict | None = None
    retry_after: float | None = None
    delay: float = 0.0
    drop: bool = False


@dataclass
class _StreamScript:
    chunks: list[str] | None = None
    text: str | None = None
    first_token_delay: float = 0.0
    chunk_delay: float = 0.0
    drop_after: int | None = None
    malformed_after: int | None = None
    error_after: int | None = None
    error_message: str = "The server had an error while processing your request."
    stall_after: int | None = None
    stall_seconds: float = 30.0
    hold_after: int | None = None
    finish_reason: str | None = "stop"
    done: bool = True  # send ``data: [DONE]``
    empty: bool = False
    times: int = 1


@dataclass
class _State:
    requests: list[RecordedRequest] = field(default_factory=list)
    faults: deque = field(default_factory=deque)
    scripts: deque = field(default_factory=deque)
    answer: str | None = None
    models: list[str] | None = field(default_factory=lambda: [CHAT_MODEL, EMBED_MODEL])
    dims: dict = field(default_factory=dict)  # model -> dimension
    context_chars: int = DEFAULT_CONTEXT_CHARS
    require_key: str | None = None
    in_flight: int = 0
    max_in_flight: int = 0
    hold_embeds: int = 0
    chunks_sent: int = 0
    gate: threading.Event = field(default_factory=threading.Event)
    stale: threading.Event = field(default_factory=threading.Event)


class FakeOpenAIServer:
    """The fake server. Thread-safe; one instance serves the whole test session."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._state = _State()
        self._httpd: ThreadingHTTPServer | None = None

    # ----------------------------------------------------------------- lifecycle
    def start(self) -> FakeOpenAIServer:
        handler = type("Handler", (_Handler,), {"fake": self})
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        threading.Thread(target=self._httpd.serve_forever, name="fake-openai", daemon=True).start()
        return self

    def stop(self) -> None:
        self._current().stale.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._httpd is not None, "server not started"
        return self._httpd.server_address[1]

    @property
    def base_url(self) -> str:
        """What OPENAI_BASE_URL is set to: ``http://127.0.0.1:PORT/v1``."""
        return f"http://127.0.0.1:{self.port}/v1"

    def settings(self, **overrides: Any) -> Any:
        """``Settings`` using this server for answers and embeddings (short timeout)."""
        from marginalia_core.config import Settings

        values: dict[str, Any] = {
            "answerer": "openai",
            "embedder": "openai",
            "openai_base_url": self.base_url,
            "chat_model": CHAT_MODEL,
            "embed_model": EMBED_MODEL,
            "openai_timeout_s": 5.0,
        }
        values.update(overrides)
        return Settings(**values)

    def env(self, **overrides: str) -> dict[str, str]:
        """Environment variables selecting this server (for a subprocess)."""
        values = {
            "MARGINALIA_ANSWERER": "openai",
            "MARGINALIA_EMBEDDER": "openai",
            "OPENAI_BASE_URL": self.base_url,
            "MARGINALIA_CHAT_MODEL": CHAT_MODEL,
            "MARGINALIA_EMBED_MODEL": EMBED_MODEL,
            "MARGINALIA_OPENAI_TIMEOUT": "5",
        }
        values.update(overrides)
        return values

    def reset(self) -> None:
        with self._lock:
            old, self._state = self._state, _State()
        old.stale.set()

    # ----------------------------------------------------------------- inspection
    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._state.requests)

    def requests_for(self, endpoint: str) -> list[RecordedRequest]:
        return [r for r in self.requests if r.endpoint == endpoint]

    @property
    def max_in_flight(self) -> int:
        """Most embedding requests being served at the same moment."""
        with self._lock:
            return self._state.max_in_flight

    @property
    def chunks_sent(self) -> int:
        """Text chunks written over every stream so far."""
        with self._lock:
            return self._state.chunks_sent

    # ----------------------------------------------------------------- configuration
    def set_models(self, models: list[str] | None) -> None:
        """The served models (None: GET /v1/models is a 404; every model is accepted)."""
        with self._lock:
            self._state.models = None if models is None else list(models)

    def set_dimension(self, dim: int, model: str = EMBED_MODEL) -> None:
        with self._lock:
            self._state.dims[model] = dim

    def set_context_chars(self, chars: int) -> None:
        with self._lock:
            self._state.context_chars = chars

    def require_key(self, key: str | None) -> None:
        """Requests must carry ``Authorization: Bearer <key>`` (None: any or none, like Ollama)."""
        with self._lock:
            self._state.require_key = key

    def set_answer(self, text: str | None) -> None:
        with self._lock:
            self._state.answer = text

    def hold_embeds(self, count: int) -> None:
        """Each embedding request waits until ``count`` are in flight at once (at most
        HOLD_TIMEOUT_S), so a concurrency test sees the overlap however loaded the machine is."""
        with self._lock:
            self._state.hold_embeds = count

    def release(self) -> None:
        self._current().gate.set()

    # ----------------------------------------------------------------- faults
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
        """The next ``times`` matching requests ("chat", "embed", "models", None: any) get
        ``status`` with an OpenAI-shaped error body (and ``Retry-After`` when given)."""
        with self._lock:
            for _ in range(times):
                self._state.faults.append(
                    _Fault(endpoint, status, body or error_body(status, message), retry_after)
                )

    def delay_next(self, seconds: float, times: int = 1, *, endpoint: str | None = None) -> None:
        with self._lock:
            for _ in range(times):
                self._state.faults.append(_Fault(endpoint, delay=seconds))

    def drop_next(self, times: int = 1, *, endpoint: str | None = None) -> None:
        """The next matching requests get their connection closed with no answer."""
        with self._lock:
            for _ in range(times):
                self._state.faults.append(_Fault(endpoint, drop=True))

    def stream_script(self, chunks: list[str] | None = None, **options: Any) -> None:
        """Script the next ``times`` chat streams.

        chunks / text: the answer pieces (default: the answer split every few words).
        first_token_delay: seconds before the first text chunk (the role chunk goes at once).
        chunk_delay: seconds between text chunks.
        drop_after=N: after N text chunks, close the socket mid-body (a cut stream).
        malformed_after=N: after N text chunks, a ``data:`` line that is not JSON.
        error_after=N: after N text chunks, ``data: {"error": …}`` (vLLM/llama.cpp style).
        stall_after=N: after N text chunks, nothing for ``stall_seconds``, then drop.
        hold_after=N: after N text chunks, wait for ``release()``.
        finish_reason: on the last chunk (None: never sent). done: send ``data: [DONE]``.
        empty: no text, just the finish chunk.
        """
        with self._lock:
            self._state.scripts.append(_StreamScript(chunks=chunks, **options))

    # ----------------------------------------------------------------- internals
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

    def _leave_embed(self, state: _State) -> None:
        with self._lock:
            state.in_flight -= 1

    def _sent_chunk(self, state: _State) -> None:
        with self._lock:
            state.chunks_sent += 1


def _endpoint(path: str) -> str:
    for suffix, name in (
        ("/chat/completions", "chat"),
        ("/embeddings", "embed"),
        ("/models", "models"),
    ):
        if path.rstrip("/").endswith(suffix):
            return name
    return "unknown"


def _prompt_chars(messages: list) -> int:
    return sum(len(str(m.get("content") or "")) for m in messages if isinstance(m, dict))


def _system_text(messages: list) -> str:
    return "\n".join(
        str(m.get("content") or "")
        for m in messages
        if isinstance(m, dict) and m.get("role") == "system"
    )


class _Handler(BaseHTTPRequestHandler):
    disable_nagle_algorithm = True
    fake: FakeOpenAIServer
    st: _State
    protocol_version = "HTTP/1.1"
    server_version = "FakeOpenAI/1.0"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def handle(self) -> None:
        with contextlib.suppress(OSError):
            super().handle()

    def _pause(self, seconds: float) -> bool:
        """Wait ``seconds``; True if the test that sent this request is over (then hang up)."""
        return seconds > 0 and self.st.stale.wait(seconds)

    # ------------------------------------------------------------------ dispatch
    def do_GET(self) -> None:
        self._dispatch("GET", None)

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            body = None
        self._dispatch("POST", body)

    def _dispatch(self, method: str, body: Any) -> None:
        fake = self.fake
        self.st = fake._current()
        path = urlsplit(self.path).path
        endpoint = _endpoint(path)
        auth = self.headers.get("Authorization")
        fake._record(
            self.st,
            RecordedRequest(
                method=method,
                path=path,
                endpoint=endpoint,
                model=body.get("model") if isinstance(body, dict) else None,
                headers={k.lower(): v for k, v in self.headers.items()
                         if k.lower() != "authorization"},
                authorization=auth,
                body=body,
                time=time.monotonic(),
            ),
        )
        if endpoint == "embed":
            fake._enter_embed(self.st)
        try:
            self._serve(method, endpoint, body, auth)
        finally:
            if endpoint == "embed":
                fake._leave_embed(self.st)

    def _serve(self, method: str, endpoint: str, body: Any, auth: str | None) -> None:
        fake, st = self.fake, self.st
        if st.require_key is not None and auth != f"Bearer {st.require_key}":
            # like api.openai.com, the message quotes the key it was given (clients must scrub it)
            given = (auth or "").removeprefix("Bearer ")
            return self._send_json(401, error_body(401, f"Incorrect API key provided: {given}."))
        expected = {"chat": "POST", "embed": "POST", "models": "GET"}.get(endpoint)
        if expected != method:
            return self._send_json(404, error_body(404, f"Unknown route {method} {self.path}."))
        fault = fake._take_fault(st, endpoint)
        if fault is not None:
            if self._pause(fault.delay) or fault.drop:
                return self._drop()
            if fault.status is not None:
                extra = {}
                if fault.retry_after is not None:
                    extra["Retry-After"] = f"{fault.retry_after:g}"
                return self._send_json(fault.status, fault.body or error_body(fault.status), extra)
        if endpoint == "models":
            return self._models()
        if not isinstance(body, dict):
            return self._send_json(400, error_body(400, "We could not parse the JSON body."))
        model = body.get("model")
        if not isinstance(model, str) or not model:
            return self._send_json(400, error_body(400, "you must provide a model parameter"))
        if st.models is not None and model not in st.models:
            return self._send_json(404, model_not_found(model))
        if endpoint == "embed":
            return self._embed(body, model)
        return self._chat(body, model)

    # ------------------------------------------------------------------ endpoints
    def _models(self) -> None:
        models = self.st.models
        if models is None:
            return self._send_json(404, error_body(404, "Unknown route GET /v1/models."))
        data = [{"id": m, "object": "model", "created": 0, "owned_by": "fake"} for m in models]
        self._send_json(200, {"object": "list", "data": data})

    def _embed(self, body: dict, model: str) -> None:
        inputs = body.get("input")
        if isinstance(inputs, str):
            inputs = [inputs]
        if not isinstance(inputs, list) or not inputs or len(inputs) > MAX_EMBED_INPUTS:
            return self._send_json(
                400, error_body(400, "'input' must be a string or a non-empty list.", param="input")
            )
        if any(not isinstance(t, str) or not t for t in inputs):
            return self._send_json(
                400, error_body(400, "'input' items must be non-empty strings.", param="input")
            )
        with self.fake._lock:
            dim = self.st.dims.get(model, DEFAULT_DIM)
        data = [
            {"object": "embedding", "index": i, "embedding": fake_embedding(t, dim)}
            for i, t in enumerate(inputs)
        ]
        data.reverse()  # the index field, not the order, says which input a vector is for
        tokens = sum(len(t.split()) for t in inputs)
        self._send_json(
            200,
            {
                "object": "list",
                "data": data,
                "model": model,
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            },
        )

    def _chat(self, body: dict, model: str) -> None:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return self._send_json(400, error_body(400, "'messages' must be a non-empty list."))
        chars = _prompt_chars(messages)
        if chars > self.st.context_chars:
            return self._send_json(400, context_too_long(chars, self.st.context_chars))
        with self.fake._lock:
            answer = self.st.answer
        text = answer if answer is not None else default_answer(_system_text(messages))
        if not body.get("stream"):
            return self._send_json(
                200,
                {
                    "id": "chatcmpl-fake",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": model,
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": text},
                            "finish_reason": "stop",
                        }
                    ],
                },
            )
        script = self.fake._take_script(self.st)
        if script.empty:
            pieces: list[str] = []
        elif script.chunks is not None:
            pieces = list(script.chunks)
        else:
            pieces = split_words(script.text if script.text is not None else text)
        self._stream(model, pieces, script)

    # ------------------------------------------------------------------ writing
    def _send_json(self, status: int, payload: dict, extra: dict | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):X}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _event(self, payload: dict | str) -> None:
        data = payload if isinstance(payload, str) else json.dumps(payload)
        self._chunk(f"data: {data}\n\n".encode())

    def _drop(self) -> None:
        with contextlib.suppress(OSError):
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
        self.close_connection = True

    def _stream(self, model: str, pieces: list[str], script: _StreamScript) -> None:
        created = int(time.time())

        def chunk(delta: dict, finish: str | None = None) -> dict:
            return {
                "id": "chatcmpl-fake",
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }

        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self._event(chunk({"role": "assistant", "content": ""}))
        if self._pause(script.first_token_delay):
            return self._drop()
        for n, piece in enumerate([*pieces, None]):  # None: the point after the last piece
            if script.drop_after == n:
                return self._drop()
            if script.malformed_after == n:
                self._chunk(b'data: {"id": "chatcmpl-fake", "choices": [{"delta": {"content": "oo\n\n')
                break
            if script.error_after == n:
                self._event({"error": {"message": script.error_message, "type": "server_error",
                                       "code": None, "param": None}})
                break
            if script.stall_after == n:
                self._pause(script.stall_seconds)
                return self._drop()
            if script.hold_after == n:
                self.st.gate.wait(HOLD_TIMEOUT_S)
            if piece is None:
                if script.finish_reason is not None:
                    self._event(chunk({}, script.finish_reason))
                break
            if n and self._pause(script.chunk_delay):
                return self._drop()
            self._event(chunk({"content": piece}))
            self.fake._sent_chunk(self.st)
        if script.done:
            self._event("[DONE]")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


# ---------------------------------------------------------------------- pytest fixtures
@pytest.fixture(scope="session", name="fake_openai_server")
def fake_openai_server_fixture() -> Iterator[FakeOpenAIServer]:
    server = FakeOpenAIServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(name="fake_openai")
def fake_openai_fixture(fake_openai_server: FakeOpenAIServer) -> Iterator[FakeOpenAIServer]:
    """The session's fake OpenAI-compatible server with fresh state."""
    fake_openai_server.reset()
    yield fake_openai_server
    fake_openai_server.reset()
