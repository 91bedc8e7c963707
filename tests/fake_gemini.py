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
``delay_next``, ``drop_next``, ``set_latency`` and ``stream_script``; ``reset()`` clears them (the
``fake_gemini`` fixture does it before every test). The server lifecycle, state, recording and
fault plumbing are ``fake_server.FakeServer`` / ``FakeHandler``; this module is the wire format.

Fixtures: ``fake_gemini_server`` (session scope, the running server) and ``fake_gemini`` (function
scope: the same server, reset). In ``tests/conftest.py``::

    from fake_gemini import fake_gemini_fixture, fake_gemini_server_fixture  # noqa: F401
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

from fake_server import (
    FakeHandler,
    FakeServer,
    State,
    StreamEnd,
    StreamScript,
    default_answer,
    fake_embedding,
    server_fixtures,
    split_words,
)
from fake_server import RecordedRequest as _BaseRequest

API_KEY = "test-key"
MAX_BATCH = 100
TASK_TYPES = ("RETRIEVAL_DOCUMENT", "RETRIEVAL_QUERY")

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

def error_body(code: int, message: str | None = None, status: str | None = None) -> dict:
    return {
        "error": {
            "code": code,
            "message": message or _DEFAULT_MESSAGES.get(code, f"Fake error {code}."),
            "status": status or _STATUS_NAMES.get(code, "UNKNOWN"),
        }
    }


@dataclass
class RecordedRequest(_BaseRequest):
    # endpoint: "embed" | "stream" | "generate" | "unknown"; headers: x-goog-api-key removed
    query: dict[str, list[str]] = field(default_factory=dict)
    key_ok: bool = False


@dataclass
class _StreamScript(StreamScript):
    error_code: int = 500
    error_message: str | None = None
    finish_reason: str | None = "STOP"
    block_reason: str | None = None


@dataclass
class _State(State):
    latency: dict = field(default_factory=dict)  # endpoint -> seconds, every request


class FakeGeminiServer(FakeServer):
    """The fake Gemini API. Thread-safe; one instance serves the whole test session."""

    state_class = _State
    script_class = _StreamScript
    thread_name = "fake-gemini"
    _error_body = staticmethod(error_body)

    def __init__(self, api_key: str = API_KEY):
        super().__init__()
        self.api_key = api_key

    def settings(self, **overrides: Any) -> Any:
        """``Settings`` pointing at this server (key, base URL, a short timeout) plus overrides."""
        from marginalia_core.config import RetrievalConfig, Settings

        values: dict[str, Any] = {
            "gemini_api_key": self.api_key,
            "gemini_base_url": self.base_url,
            "gemini_timeout_s": 5.0,
        }
        values.update(overrides)
        retrieval = {k: values.pop(k) for k in list(values) if RetrievalConfig.field_name(k)}
        return Settings(**values).with_overrides(**retrieval)  # top_k, threshold, ...

    @property
    def stream_events_sent(self) -> int:
        """SSE ``data:`` events the server has written so far (every stream together)."""
        return self._events_sent()

    def set_latency(self, seconds: float, *, endpoint: str = "embed") -> None:
        """Every request to ``endpoint`` takes at least ``seconds`` (until reset)."""
        with self._lock:
            self._state.latency[endpoint] = seconds

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
        self._queue_script(
            _StreamScript(
                chunks=chunks,
                text=text,
                error_after=error_after,
                error_code=error_code,
                error_message=error_message,
                drop_after=drop_after,
                malformed_after=malformed_after if malformed else None,
                stall_after=stall_after,
                stall_seconds=stall_seconds,
                chunk_delay=chunk_delay,
                finish_reason=finish_reason,
                block_reason=block_reason,
                empty=empty,
                times=times,
                hold_after=hold_after,
            )
        )

    def _latency(self, state: _State, endpoint: str) -> float:
        with self._lock:
            return state.latency.get(endpoint, 0.0)

    def _answer_for(self, state: _State, body: dict) -> str:
        answer = self._answer(state)
        return answer if answer is not None else default_answer(_system_text(body))


def _system_text(body: dict) -> str:
    si = body.get("systemInstruction") or {}
    return "".join(p.get("text", "") for p in si.get("parts", []) if isinstance(p, dict))


class _Handler(FakeHandler):
    fake: FakeGeminiServer
    st: _State
    server_version = "FakeGemini/1.0"
    json_content_type = "application/json; charset=UTF-8"
    sse_separator = b"\r\n\r\n"
    malformed_event = b'data: {"candidates": [{"content": {"parts": [{"text": "oops\r\n\r\n'

    # ------------------------------------------------------------------ dispatch
    def do_GET(self) -> None:
        self._send_json(404, error_body(404, "Not found.", "NOT_FOUND"))

    def do_POST(self) -> None:
        self.st = self.fake._current()
        url = urlsplit(self.path)
        body = self._read_json()
        match = _PATH_RE.search(url.path)
        endpoint = _ENDPOINTS.get(match["method"], "unknown") if match else "unknown"
        key_ok = self.headers.get("x-goog-api-key") == self.fake.api_key
        request = RecordedRequest(
            method="POST",
            path=url.path,
            query=parse_qs(url.query),
            endpoint=endpoint,
            model=match["model"] if match else None,
            headers=self._headers_without("x-goog-api-key"),
            body=body,
            time=time.monotonic(),
            key_ok=key_ok,
        )
        self._run(request, lambda: self._serve(endpoint, body, key_ok, url))

    def _serve(self, endpoint: str, body: Any, key_ok: bool, url: Any) -> None:
        if not key_ok:
            return self._send_json(400, BAD_KEY_ERROR)
        if endpoint == "unknown":
            return self._send_json(404, error_body(404, f"Unknown path {url.path}.", "NOT_FOUND"))
        if not isinstance(body, dict):
            return self._send_json(400, error_body(400, "Invalid JSON payload received."))
        if self._pause(self.fake._latency(self.st, endpoint)):
            return self._drop()
        if self._apply_fault(endpoint):
            return None
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
        script = self.fake._take_script(self.st)
        assert isinstance(script, _StreamScript)
        if script.block_reason:
            events: list[dict] = [{"promptFeedback": {"blockReason": script.block_reason}}]
        elif script.empty:
            events = [_candidate_event(None, script.finish_reason)]
        else:
            if script.chunks is not None:
                pieces = list(script.chunks)
            else:
                text = script.text
                pieces = split_words(text if text is not None else self.fake._answer_for(self.st, body))
            events = [
                _candidate_event(piece, script.finish_reason if i == len(pieces) - 1 else None)
                for i, piece in enumerate(pieces)
            ]
        self._start_stream()
        error = error_body(script.error_code, script.error_message)
        if self._play(events, script, error) is not StreamEnd.DROPPED:
            self._end_stream()


FakeGeminiServer.handler_class = _Handler


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
# Registered under the names ``fake_gemini_server`` / ``fake_gemini`` (the function names differ
# so that a test's ``fake_gemini`` argument does not shadow an import, which ruff reports as F811).
fake_gemini_server_fixture, fake_gemini_fixture = server_fixtures(
    FakeGeminiServer, "fake_gemini", "The session's fake Gemini server with fresh state."
)

# Plain names too, for ``from fake_gemini import fake_gemini, fake_gemini_server`` in conftest.py.
fake_gemini = fake_gemini_fixture
fake_gemini_server = fake_gemini_server_fixture
