"""Retrying shared by every remote provider (Gemini, OpenAI-compatible servers): exponential
backoff with jitter, a Retry-After hint, a deadline and a cancel event; a streaming variant that
retries only until the first text piece is out; and scrubbing a secret out of a message.

What counts as retryable and how a failure is worded are provider-specific, so callers pass
``retryable`` (and optionally ``hint``) in; ``gemini_client`` and ``openai_client`` hold those.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from marginalia_core.errors import MarginaliaError

RETRY_ATTEMPTS = 4  # including the first call
RETRY_INITIAL_DELAY = 0.5  # seconds; doubles each attempt
RETRY_MAX_DELAY = 8.0  # seconds; also caps a server's Retry-After hint
RETRY_JITTER = 0.5  # each delay is scaled by a random factor in [1 - RETRY_JITTER, 1]
RETRYABLE_STATUS = frozenset({408, 429, 500, 502, 503, 504})
REDACTED = "[redacted]"

T = TypeVar("T")
Classifier = Callable[[BaseException], bool]
HintFn = Callable[[BaseException], "float | None"]


def retry_after_header(exc: BaseException) -> float | None:
    """Seconds from the ``Retry-After`` header of the response an exception carries, if any."""
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    try:
        value = headers.get("retry-after")
    except Exception:  # noqa: BLE001 - odd response objects
        return None
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except (TypeError, ValueError):
        return None


def backoff_delay(
    attempt: int,
    *,
    initial_delay: float = RETRY_INITIAL_DELAY,
    max_delay: float = RETRY_MAX_DELAY,
    jitter: float = RETRY_JITTER,
    hint: float | None = None,
) -> float:
    """Delay before retry number ``attempt`` (1 = first retry): exponential, jittered, capped;
    at least the server's ``hint`` (itself capped at ``max_delay``)."""
    base = min(max_delay, initial_delay * (2 ** (attempt - 1)))
    delay = base * (1.0 - jitter * random.random())
    if hint is not None:
        delay = max(delay, min(hint, max_delay))
    return delay


def scrub_secret(text: str, secret: str | None) -> str:
    """``text`` with every occurrence of ``secret`` replaced by ``[redacted]``."""
    if secret:
        text = text.replace(secret, REDACTED)
    return text


def retry_call(
    fn: Callable[[], T],
    attempts: int = RETRY_ATTEMPTS,
    initial_delay: float = RETRY_INITIAL_DELAY,
    max_delay: float = RETRY_MAX_DELAY,
    sleep: Callable[[float], Any] = time.sleep,
    *,
    retryable: Classifier,
    hint: HintFn = retry_after_header,
    deadline: float | None = None,
    cancel: threading.Event | None = None,
) -> T:
    """Call ``fn`` until it succeeds, retrying failures ``retryable`` accepts with exponential
    backoff and jitter (honouring ``hint(exc)`` up to ``max_delay``). Re-raises the last
    exception when attempts run out, the error is not retryable, the next wait would pass
    ``deadline`` (a ``time.monotonic()`` value) or ``cancel`` is set."""
    attempts = max(1, attempts)
    for attempt in range(1, attempts + 1):
        try:
            return fn()
        except Exception as exc:
            if attempt >= attempts or not retryable(exc) or (cancel and cancel.is_set()):
                raise
            delay = backoff_delay(
                attempt, initial_delay=initial_delay, max_delay=max_delay, hint=hint(exc)
            )
            if deadline is not None and time.monotonic() + delay >= deadline:
                raise
            if cancel is not None and sleep is time.sleep:
                if cancel.wait(delay):  # woken early: give up now
                    raise
            else:
                sleep(delay)
                if cancel is not None and cancel.is_set():
                    raise
    raise AssertionError("unreachable")  # pragma: no cover


@dataclass(frozen=True)
class RetryPolicy:
    """How a remote caller retries; tests pass a tiny one (``RetryPolicy(initial_delay=0.01)``)."""

    attempts: int = RETRY_ATTEMPTS
    initial_delay: float = RETRY_INITIAL_DELAY
    max_delay: float = RETRY_MAX_DELAY
    sleep: Callable[[float], Any] = time.sleep

    def call(
        self, fn: Callable[[], T], *, retryable: Classifier, hint: HintFn = retry_after_header,
        **kwargs: Any,
    ) -> T:
        return retry_call(
            fn,
            attempts=self.attempts,
            initial_delay=self.initial_delay,
            max_delay=self.max_delay,
            sleep=self.sleep,
            retryable=retryable,
            hint=hint,
            **kwargs,
        )

    def delay(self, attempt: int, hint: float | None = None) -> float:
        return backoff_delay(
            attempt, initial_delay=self.initial_delay, max_delay=self.max_delay, hint=hint
        )


def stream_with_retries(
    open_stream: Callable[[], Iterator[str]],
    policy: RetryPolicy,
    *,
    retryable: Classifier,
    hint: HintFn = retry_after_header,
    deadline: float,
    on_error: Callable[[BaseException, bool], BaseException],
    on_too_slow: Callable[[bool], BaseException],
) -> Iterator[str]:
    """Yield the text pieces of ``open_stream()``, opening it again (after a backoff) when it
    fails retryably before its first piece; once a piece is out, no retry: a failure is final.

    ``on_error(exc, yielded)`` turns a failure into the exception to raise (typically an
    ``AnswerError`` with a plain message); ``on_too_slow(yielded)`` is raised once the monotonic
    ``deadline`` has passed between pieces. ``open_stream`` must close its HTTP response in a
    ``finally`` so that every exit (error, deadline, consumer closing early) releases it."""
    attempts = max(1, policy.attempts)
    yielded = False
    attempt = 0
    while True:
        attempt += 1
        pieces = open_stream()
        try:
            for piece in pieces:
                if piece:
                    yielded = True
                    yield piece
                if time.monotonic() > deadline:
                    raise on_too_slow(yielded)
            return
        except Exception as exc:
            if isinstance(exc, MarginaliaError):
                raise  # already worded for the user (too slow, blocked, empty...)
            if not yielded and attempt < attempts and retryable(exc):
                delay = policy.delay(attempt, hint(exc))
                if time.monotonic() + delay < deadline:
                    policy.sleep(delay)
                    continue
            raise on_error(exc, yielded) from exc
        finally:
            close = getattr(pieces, "close", None)
            if close is not None:
                close()
