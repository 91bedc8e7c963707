"""A fake OpenAI-compatible model server for tests: a real HTTP server on 127.0.0.1 that the real
``openai`` SDK talks to (``OPENAI_BASE_URL=<server.base_url>`` / ``Settings.openai_base_url``).
It behaves like Ollama / llama.cpp / vLLM / api.openai.com on the three endpoints Marginalia uses:

- ``POST /v1/chat/completions`` with ``stream: true``: an SSE stream of ``chat.completion.chunk``
  objects (a first chunk with the role, text deltas, a last chunk with ``finish_reason``), then
  ``data: [DONE]``. Without ``stream`` the same answer as one ``chat.completion``. The default
  answer quotes passage [1] of the system message and cites it (``fake_server.default_answer``).
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
by elapsed time; ``hold_embeds(n)`` makes requests wait until n overlap. The server lifecycle,
state, recording and fault plumbing are ``fake_server.FakeServer`` / ``FakeHandler``; this module
is the wire format.

Fixtures: ``fake_openai_server`` (session scope) and ``fake_openai`` (function scope, reset).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

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

CHAT_MODEL = "fake-chat"
EMBED_MODEL = "fake-embed"
DEFAULT_DIM = 256
DEFAULT_CONTEXT_CHARS = 200_000
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
_ROUTES = {"chat": "POST", "embed": "POST", "models": "GET"}  # endpoint -> its method


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
class RecordedRequest(_BaseRequest):
    # endpoint: "chat" | "embed" | "models" | "unknown"; headers: authorization removed
    authorization: str | None = None  # the raw header, for the key tests only


@dataclass
class _StreamScript(StreamScript):
    first_token_delay: float = 0.0
    error_message: str = "The server had an error while processing your request."
    finish_reason: str | None = "stop"
    done: bool = True  # send ``data: [DONE]``


@dataclass
class _State(State):
    models: list[str] | None = field(default_factory=lambda: [CHAT_MODEL, EMBED_MODEL])
    dims: dict = field(default_factory=dict)  # model -> dimension
    context_chars: int = DEFAULT_CONTEXT_CHARS
    require_key: str | None = None


class FakeOpenAIServer(FakeServer):
    """The fake server. Thread-safe; one instance serves the whole test session."""

    state_class = _State
    script_class = _StreamScript
    thread_name = "fake-openai"
    _error_body = staticmethod(error_body)

    @property
    def base_url(self) -> str:
        """What OPENAI_BASE_URL is set to: ``http://127.0.0.1:PORT/v1``."""
        return f"{super().base_url}/v1"

    def settings(self, **overrides: Any) -> Any:
        """``Settings`` using this server for answers and embeddings (short timeout)."""
        from marginalia_core.config import RetrievalConfig, Settings

        values: dict[str, Any] = {
            "answerer": "openai",
            "embedder": "openai",
            "openai_base_url": self.base_url,
            "chat_model": CHAT_MODEL,
            "embed_model": EMBED_MODEL,
            "openai_timeout_s": 5.0,
        }
        values.update(overrides)
        retrieval = {k: values.pop(k) for k in list(values) if RetrievalConfig.field_name(k)}
        return Settings(**values).with_overrides(**retrieval)  # top_k, threshold, ...

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

    @property
    def chunks_sent(self) -> int:
        """Text chunks written over every stream so far."""
        return self._events_sent()

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
        self._queue_script(_StreamScript(chunks=chunks, **options))


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


class _Handler(FakeHandler):
    fake: FakeOpenAIServer
    st: _State
    server_version = "FakeOpenAI/1.0"
    malformed_event = b'data: {"id": "chatcmpl-fake", "choices": [{"delta": {"content": "oo\n\n'

    # ------------------------------------------------------------------ dispatch
    def do_GET(self) -> None:
        self._dispatch("GET", None)

    def do_POST(self) -> None:
        self._dispatch("POST", self._read_json())

    def _dispatch(self, method: str, body: Any) -> None:
        self.st = self.fake._current()
        path = urlsplit(self.path).path
        endpoint = _endpoint(path)
        auth = self.headers.get("Authorization")
        request = RecordedRequest(
            method=method,
            path=path,
            endpoint=endpoint,
            model=body.get("model") if isinstance(body, dict) else None,
            headers=self._headers_without("authorization"),
            authorization=auth,
            body=body,
            time=time.monotonic(),
        )
        self._run(request, lambda: self._serve(method, endpoint, body, auth))

    def _serve(self, method: str, endpoint: str, body: Any, auth: str | None) -> None:
        st = self.st
        if st.require_key is not None and auth != f"Bearer {st.require_key}":
            # like api.openai.com, the message quotes the key it was given (clients must scrub it)
            given = (auth or "").removeprefix("Bearer ")
            return self._send_json(401, error_body(401, f"Incorrect API key provided: {given}."))
        if _ROUTES.get(endpoint) != method:
            return self._send_json(404, error_body(404, f"Unknown route {method} {self.path}."))
        if self._apply_fault(endpoint):
            return None
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
        answer = self.fake._answer(self.st)
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
        assert isinstance(script, _StreamScript)
        if script.empty:
            pieces: list[str] = []
        elif script.chunks is not None:
            pieces = list(script.chunks)
        else:
            pieces = split_words(script.text if script.text is not None else text)
        self._stream(model, pieces, script)

    # ------------------------------------------------------------------ writing
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

        self._start_stream({"Cache-Control": "no-cache"})
        self._event(chunk({"role": "assistant", "content": ""}))
        if self._pause(script.first_token_delay):
            return self._drop()
        error = {
            "error": {
                "message": script.error_message, "type": "server_error", "code": None, "param": None
            }
        }
        end = self._play([chunk({"content": piece}) for piece in pieces], script, error)
        if end is StreamEnd.DROPPED:
            return None
        if end is StreamEnd.COMPLETE and script.finish_reason is not None:
            self._event(chunk({}, script.finish_reason))
        if script.done:
            self._event("[DONE]")
        self._end_stream()


FakeOpenAIServer.handler_class = _Handler

# ---------------------------------------------------------------------- pytest fixtures
fake_openai_server_fixture, fake_openai_fixture = server_fixtures(
    FakeOpenAIServer, "fake_openai", "The session's fake OpenAI-compatible server with fresh state."
)
