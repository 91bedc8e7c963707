"""The one place a google-genai ``Client`` is built, plus what every Gemini caller shares: turning
SDK/HTTP exceptions into plain user messages (never containing the API key), deciding what is
worth retrying, and ``retry_call`` bound to those (the loop itself is in ``retry.py``).

SDK-level retries are deliberately off (``HttpOptions.retry_options`` unset): callers retry with
``retry_call`` so they control the backoff and, for streams, know whether text was already shown.

google-genai 3.x talks HTTP through ``httpx2`` when it is installed (its default backend) and
through ``httpx`` otherwise (or with ``GOOGLE_GENAI_HTTP_CLIENT=httpx``); network exceptions come
from whichever is in use, so both are recognised here.
"""

from __future__ import annotations

import importlib
import json
import re
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from marginalia_core.errors import AuthenticationError
from marginalia_core.providers import retry as _retry
from marginalia_core.providers.retry import (  # noqa: F401 - re-exported for Gemini callers
    RETRY_ATTEMPTS,
    RETRY_INITIAL_DELAY,
    RETRY_JITTER,
    RETRY_MAX_DELAY,
    RETRYABLE_STATUS,
    RetryPolicy,
    backoff_delay,
    retry_after_header,
)

if TYPE_CHECKING:
    from google import genai

    from marginalia_core.config import Settings

AUTH_STATUS = frozenset({401, 403})
MAX_DETAIL_CHARS = 300  # of an API error message quoted to the user

KEY_REJECTED = "The Gemini API key was rejected — check GEMINI_API_KEY."
NO_KEY = "No Gemini API key is configured — set GEMINI_API_KEY (or choose the offline mode)."

T = TypeVar("T")


def _load_http_modules() -> tuple[Any, ...]:
    mods = []
    for name in ("httpx2", "httpx"):
        try:
            mods.append(importlib.import_module(name))
        except ImportError:  # pragma: no cover - depends on the environment
            continue
    return tuple(mods)


_HTTP_MODULES = _load_http_modules()
TIMEOUT_ERRORS: tuple[type[BaseException], ...] = tuple(m.TimeoutException for m in _HTTP_MODULES)
CONNECT_ERRORS: tuple[type[BaseException], ...] = tuple(m.ConnectError for m in _HTTP_MODULES)
TRANSPORT_ERRORS: tuple[type[BaseException], ...] = tuple(m.TransportError for m in _HTTP_MODULES)
PROTOCOL_ERRORS: tuple[type[BaseException], ...] = tuple(m.ProtocolError for m in _HTTP_MODULES)

# Shapes of Google API keys and key-bearing URL parameters, scrubbed from any text we show.
_KEY_PATTERNS = (
    re.compile(r"AIza[0-9A-Za-z_\-]{20,}"),
    re.compile(r"(?i)([?&]key=)[^&\s'\"]+"),
    re.compile(r"(?i)(x-goog-api-key['\"]?\s*[:=]\s*['\"]?)[^'\"\s,}]+"),
)


def make_client(settings: Settings) -> genai.Client:
    """A google-genai Client for the Gemini Developer API: key and base URL from ``settings``,
    ``settings.gemini_timeout_s`` as the per-request timeout, and no SDK retries."""
    from google import genai
    from google.genai import types

    if not settings.gemini_api_key:
        raise AuthenticationError(NO_KEY)
    http_options = types.HttpOptions(
        timeout=max(1, round(settings.gemini_timeout_s * 1000)),  # milliseconds
        retry_options=None,  # we retry ourselves (retry_call)
    )
    if settings.gemini_base_url:
        http_options.base_url = settings.gemini_base_url
    # vertexai=False so a stray GOOGLE_GENAI_USE_VERTEXAI in the environment cannot reroute us.
    return genai.Client(api_key=settings.gemini_api_key, vertexai=False, http_options=http_options)


# ---------------------------------------------------------------------------- classification
def _api_error_types() -> tuple[type, type, type]:
    from google.genai import errors

    return errors.APIError, errors.ClientError, errors.ServerError


def _status(exc: BaseException) -> int | None:
    api_error = _api_error_types()[0]
    if isinstance(exc, api_error):
        try:
            return int(getattr(exc, "code", None))  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return None
    return None


def is_auth_error(exc: BaseException) -> bool:
    """True when the API rejected the key (Gemini answers a bad key with 400 INVALID_ARGUMENT
    "API key not valid", a missing permission with 401/403)."""
    if isinstance(exc, AuthenticationError):
        return True
    code = _status(exc)
    if code is None:
        return False
    if code in AUTH_STATUS:
        return True
    message = (getattr(exc, "message", None) or "").lower()
    status = (getattr(exc, "status", None) or "").upper()
    details = str(getattr(exc, "details", "") or "")
    return code == 400 and (
        "api key" in message or "API_KEY_INVALID" in details or status == "UNAUTHENTICATED"
    )


def is_retryable(exc: BaseException) -> bool:
    """429, 408 and 5xx responses, timeouts and transport failures (refused, reset, dropped)."""
    code = _status(exc)
    if code is not None:
        return code in RETRYABLE_STATUS or 500 <= code < 600
    return isinstance(exc, TRANSPORT_ERRORS)


def scrub(text: str, api_key: str | None = None) -> str:
    """Remove an API key (the given one, and anything shaped like one) from ``text``."""
    if api_key:
        text = text.replace(api_key, "[redacted]")
    for pattern in _KEY_PATTERNS:
        text = pattern.sub(lambda m: (m.group(1) if m.groups() else "") + "[redacted]", text)
    return text


def _is_unreadable_response(exc: BaseException) -> bool:
    from google.genai import errors

    return isinstance(exc, errors.UnknownApiResponseError | json.JSONDecodeError)


def describe_api_error(exc: BaseException, *, api_key: str | None = None) -> str:
    """A plain, user-facing sentence for an SDK/HTTP failure. Never contains the API key."""
    code = _status(exc)
    if is_auth_error(exc):
        msg = KEY_REJECTED
    elif code == 429:
        msg = (
            "Gemini is rate limiting requests (HTTP 429: quota or requests per minute exceeded). "
            "Wait a minute and try again."
        )
    elif code is not None and 500 <= code < 600:
        msg = f"The Gemini service had an error (HTTP {code}). Try again in a moment."
    elif code == 408:
        msg = "The Gemini request timed out on the server (HTTP 408). Try again."
    elif code is not None:
        detail = (getattr(exc, "message", None) or "").strip()[:MAX_DETAIL_CHARS]
        msg = f"Gemini refused the request (HTTP {code})" + (f": {detail}" if detail else ".")
    elif isinstance(exc, TIMEOUT_ERRORS):
        msg = "Gemini did not respond in time (the request timed out)."
    elif isinstance(exc, CONNECT_ERRORS):
        msg = (
            "Could not connect to the Gemini API (connection refused or no network). "
            "Check your internet connection or the configured base URL."
        )
    elif isinstance(exc, PROTOCOL_ERRORS + TRANSPORT_ERRORS):
        msg = "The connection to Gemini was lost before the response was complete."
    elif _is_unreadable_response(exc):
        msg = "Gemini sent a response that could not be read (malformed JSON)."
    else:
        msg = f"Unexpected error while talking to Gemini ({type(exc).__name__})."
    return scrub(msg, api_key)


def retry_after_seconds(exc: BaseException) -> float | None:
    """The server's hint (Retry-After header, or a google.rpc.RetryInfo ``retryDelay``)."""
    header = retry_after_header(exc)
    if header is not None:
        return header
    details = getattr(exc, "details", None)
    error = details.get("error", details) if isinstance(details, dict) else None
    for item in (error or {}).get("details", []) if isinstance(error, dict) else []:
        delay = item.get("retryDelay") if isinstance(item, dict) else None
        if isinstance(delay, str) and delay.endswith("s"):
            try:
                return max(0.0, float(delay[:-1]))
            except ValueError:
                pass
    return None


def retry_call(
    fn: Callable[[], T],
    attempts: int = RETRY_ATTEMPTS,
    initial_delay: float = RETRY_INITIAL_DELAY,
    max_delay: float = RETRY_MAX_DELAY,
    sleep: Callable[[float], Any] = time.sleep,
    *,
    retryable: Callable[[BaseException], bool] = is_retryable,
    deadline: float | None = None,
    cancel: threading.Event | None = None,
) -> T:
    """``retry.retry_call`` with Gemini's classification and Retry-After/RetryInfo hints."""
    return _retry.retry_call(
        fn,
        attempts,
        initial_delay,
        max_delay,
        sleep,
        retryable=retryable,
        hint=retry_after_seconds,
        deadline=deadline,
        cancel=cancel,
    )
