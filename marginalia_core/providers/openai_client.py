"""The one place an ``openai.OpenAI`` client is built for an OpenAI-compatible server (Ollama,
llama.cpp ``llama-server``, vLLM, LM Studio, api.openai.com), plus what its callers share: the
server's display name, plain user messages for SDK failures (never containing the key), what is
worth retrying, and the model list from ``GET /v1/models``.

SDK retries are off (``max_retries=0``): callers retry with ``providers.retry`` so that a stream is
retried only before its first token. Every request is bounded by ``settings.openai_timeout_s``
(connect by at most ``CONNECT_TIMEOUT_S``), which also bounds the gap between streamed chunks.
"""

from __future__ import annotations

import contextlib
import json
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from marginalia_core.errors import ModelServerError
from marginalia_core.providers.retry import RETRYABLE_STATUS, scrub_secret

if TYPE_CHECKING:
    import openai

    from marginalia_core.config import Settings

OPENAI_API_URL = "https://api.openai.com/v1"
# Sent when no key is configured: the SDK insists on one, local servers ignore it (this is the
# placeholder llama.cpp's own docs use).
NO_KEY_PLACEHOLDER = "sk-no-key-required"
CONNECT_TIMEOUT_S = 5.0
LIST_MODELS_TIMEOUT_S = 3.0  # the sidebar waits for this, so a hung server cannot stall a page
MAX_DETAIL_CHARS = 300  # of a server's error message quoted to the user
CONTEXT_CODES = frozenset({"context_length_exceeded", "exceed_context_size_error"})
CONTEXT_WORDS = ("context length", "context size", "context window", "maximum context", "too long")
MODEL_NOT_FOUND_WORDS = ("model", "not found", "does not exist", "not exist")

NO_SERVER = (
    "No model server is configured — set OPENAI_BASE_URL to your OpenAI-compatible server "
    "(e.g. http://localhost:11434/v1 for Ollama), or OPENAI_API_KEY to use api.openai.com."
)


# ---------------------------------------------------------------------------- addresses
def base_url(settings: Settings) -> str:
    """The API root requests go to: ``OPENAI_BASE_URL`` without a trailing slash, with ``/v1``
    added when only a host was given (``http://localhost:11434``); api.openai.com when only a
    key is set. Raises ``ModelServerError`` when neither is configured."""
    raw = (settings.openai_base_url or "").strip()
    if not raw:
        if settings.openai_api_key:
            return OPENAI_API_URL
        raise ModelServerError(NO_SERVER)
    if "://" not in raw:
        raw = "http://" + raw
    parts = urlsplit(raw)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ModelServerError(
            "OPENAI_BASE_URL must be an http(s) address like http://localhost:11434/v1."
        )
    path = parts.path.rstrip("/") or "/v1"
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def server_label(url: str) -> str:
    """``url`` fit to show and to key vectors by: lower-case scheme and host, the port, the path;
    no user name, password, query or fragment."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    if ":" in host:  # IPv6
        host = f"[{host}]"
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme.lower(), netloc, parts.path.rstrip("/"), "", ""))


def make_client(settings: Settings, *, timeout_s: float | None = None) -> openai.OpenAI:
    """An ``openai.OpenAI`` client for the configured server, with no SDK retries."""
    import httpx2
    import openai

    timeout = float(timeout_s if timeout_s is not None else settings.openai_timeout_s)
    return openai.OpenAI(
        api_key=settings.openai_api_key or NO_KEY_PLACEHOLDER,
        base_url=base_url(settings),
        timeout=httpx2.Timeout(timeout, connect=min(CONNECT_TIMEOUT_S, timeout)),
        max_retries=0,  # we retry ourselves (providers.retry)
    )


# ---------------------------------------------------------------------------- classification
def _status(exc: BaseException) -> int | None:
    import openai

    if isinstance(exc, openai.APIStatusError):
        return int(exc.status_code)
    return None


def _body_error(exc: BaseException) -> dict[str, Any]:
    """The ``error`` object of a JSON error body (the SDK stores it already unwrapped)."""
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        inner = body.get("error", body)
        return inner if isinstance(inner, dict) else {"message": str(inner)}
    return {"message": body} if isinstance(body, str) else {}


def _detail(exc: BaseException) -> str:
    err = _body_error(exc)
    message = err.get("message") if isinstance(err.get("message"), str) else None
    return " ".join((message or getattr(exc, "message", "") or "").split())[:MAX_DETAIL_CHARS]


def is_auth_error(exc: BaseException) -> bool:
    return _status(exc) in (401, 403)


def is_context_error(exc: BaseException) -> bool:
    """The prompt did not fit the model's context (OpenAI/vLLM ``context_length_exceeded``,
    llama.cpp ``exceed_context_size_error``, or a 400/413 saying so)."""
    code = _status(exc)
    if code not in (400, 413, 422):
        return False
    err = _body_error(exc)
    if str(err.get("code", "")) in CONTEXT_CODES or str(err.get("type", "")) in CONTEXT_CODES:
        return True
    text = _detail(exc).lower()
    return code == 413 or any(word in text for word in CONTEXT_WORDS)


def is_model_not_found(exc: BaseException) -> bool:
    code = _status(exc)
    if code not in (400, 404):
        return False
    err = _body_error(exc)
    if str(err.get("code", "")) == "model_not_found":
        return True
    text = _detail(exc).lower()
    return "model" in text and any(w in text for w in MODEL_NOT_FOUND_WORDS[1:])


def _is_connect_error(exc: BaseException) -> bool:
    import httpx2

    cause = exc.__cause__ or exc.__context__
    return isinstance(cause, httpx2.ConnectError)


def is_retryable(exc: BaseException) -> bool:
    """429, 408 and 5xx answers, timeouts and dropped or refused connections (a local server
    may still be starting)."""
    import openai

    code = _status(exc)
    if code is not None:
        return code in RETRYABLE_STATUS or 500 <= code < 600
    return isinstance(exc, openai.APIConnectionError)  # includes APITimeoutError


def _scrubbed(value: Any, secret: str) -> Any:
    if isinstance(value, str):
        return scrub_secret(value, secret)
    if isinstance(value, dict):
        return {k: _scrubbed(v, secret) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_scrubbed(v, secret) for v in value)
    return value


def scrub_exception(exc: BaseException, secret: str | None) -> None:
    """Remove ``secret`` from an SDK exception in place (its args, message and error body):
    servers such as api.openai.com quote the key they were sent in a 401, and the exception
    stays chained as the ``__cause__`` of ours, where a log or traceback would print it."""
    if not secret:
        return
    exc.args = _scrubbed(exc.args, secret)
    for attr in ("message", "body"):
        if isinstance(getattr(exc, attr, None), str | dict | list):
            with contextlib.suppress(AttributeError):
                setattr(exc, attr, _scrubbed(getattr(exc, attr), secret))


def describe_error(
    exc: BaseException,
    *,
    server: str,
    model: str | None = None,
    api_key: str | None = None,
    model_setting: str = "MARGINALIA_CHAT_MODEL",
) -> str:
    """A plain, user-facing sentence for an SDK/HTTP failure. Never contains the API key."""
    import openai

    scrub_exception(exc, api_key)
    code = _status(exc)
    what = f"the model server at {server}"
    where = f"The model server at {server}"
    if code in (401, 403):
        msg = (
            f"{where} rejected the API key (HTTP {code}) — check OPENAI_API_KEY."
            if api_key
            else f"{where} requires an API key (HTTP {code}) — set OPENAI_API_KEY."
        )
    elif is_context_error(exc):
        name = f"the model {model!r}" if model else "the model"
        msg = (
            f"The question and its passages are too long for {name} "
            f"(the server said: {_detail(exc) or 'context length exceeded'}). Ask with fewer "
            "passages (MARGINALIA_TOP_K) or smaller chunks, or raise the server's context size."
        )
    elif is_model_not_found(exc) or (code == 404 and model):
        msg = (
            f"The model {model!r} is not available on {what} (HTTP {code}). Set "
            f"{model_setting} to one the server lists (for Ollama: `ollama pull` it first)."
        )
    elif code == 429:
        msg = f"{where} is rate limiting requests (HTTP 429). Try again in a moment."
    elif code is not None and 500 <= code < 600:
        detail = _detail(exc)
        msg = f"{where} had an error (HTTP {code})" + (
            f": {detail}" if detail else ". Try again in a moment."
        )
    elif code is not None:
        detail = _detail(exc)
        msg = f"{where} refused the request (HTTP {code})" + (
            f": {detail}" if detail else "."
        )
    elif isinstance(exc, openai.APITimeoutError):
        msg = f"{where} did not respond in time (the request timed out)."
    elif isinstance(exc, openai.APIConnectionError):
        if _is_connect_error(exc):
            msg = (
                f"Could not connect to {what} — is it running? (Check OPENAI_BASE_URL.)"
            )
        else:
            msg = f"The connection to {what} was lost before the response was complete."
    elif isinstance(exc, json.JSONDecodeError | openai.APIResponseValidationError):
        msg = f"{where} sent a response that could not be read (malformed data)."
    elif isinstance(exc, openai.APIError):  # an error event inside a stream
        detail = _detail(exc)
        msg = f"{where} reported an error" + (f": {detail}" if detail else ".")
    else:
        msg = f"Unexpected error while talking to {what} ({type(exc).__name__})."
    return scrub_secret(msg, api_key)


# ---------------------------------------------------------------------------- models
def list_models(settings: Settings, *, client: Any = None) -> list[str]:
    """Model ids the server offers (``GET /v1/models``), sorted, for a model picker.

    Raises ``ModelServerError`` with a plain message when the server cannot be reached or does
    not offer the list (some servers answer 404 or an empty list)."""
    server = server_label(base_url(settings))
    if client is None:
        client = make_client(
            settings, timeout_s=min(LIST_MODELS_TIMEOUT_S, settings.openai_timeout_s)
        )
    try:
        page = client.models.list()
        ids = sorted({str(m.id) for m in page.data if getattr(m, "id", None)})
    except Exception as exc:
        if _status(exc) in (404, 405, 501):
            raise ModelServerError(
                f"The model server at {server} does not list its models (GET /models answered "
                f"HTTP {_status(exc)}); set MARGINALIA_CHAT_MODEL by hand."
            ) from exc
        raise ModelServerError(
            "Could not list the models: "
            + describe_error(exc, server=server, api_key=settings.openai_api_key)
        ) from exc
    if not ids:
        raise ModelServerError(
            f"The model server at {server} lists no models; load or pull one first, or set "
            "MARGINALIA_CHAT_MODEL by hand."
        )
    return ids
