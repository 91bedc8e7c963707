"""Streaming answers from Gemini (Flash) through google-genai.

The conversation goes out as user/model turns (oldest first, then the question) with the
system instruction built by ``prompting.py``. Failures before the first text piece are retried
with backoff (429, 5xx, timeouts, dropped connections); once text has been yielded any failure
raises ``AnswerError`` ("The answer was interrupted: …") so the caller never saves a partial
answer. A blocked or empty response is an ``AnswerError`` too. Time is bounded twice: every
request/read by ``settings.gemini_timeout_s`` (a stalled stream raises a read timeout), and the
whole answer, retries included, by ``STREAM_DEADLINE_FACTOR`` times that.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from marginalia_core.config import DEFAULT_CHAT_MODEL
from marginalia_core.errors import AnswerError, MarginaliaError
from marginalia_core.providers.answerers.base import HistoryTurn, Source
from marginalia_core.providers.answerers.prompting import REWRITE_INSTRUCTION, clean_model_rewrite
from marginalia_core.providers.gemini_client import (
    RetryPolicy,
    backoff_delay,
    describe_api_error,
    is_auth_error,
    is_retryable,
    make_client,
    retry_after_seconds,
)

if TYPE_CHECKING:
    from marginalia_core.config import Settings

CHAT_TEMPERATURE = 0.2
REWRITE_TURNS = 4  # recent messages a follow-up's rewrite sees
STREAM_DEADLINE_FACTOR = 5.0  # whole answer (retries included) <= factor * gemini_timeout_s
ROLES = {"user": "user", "assistant": "model", "model": "model"}
OK_FINISH = frozenset({"STOP", "MAX_TOKENS"})
BLOCKED_MESSAGES = {
    "SAFETY": "Gemini's safety filters blocked this answer.",
    "RECITATION": "Gemini stopped because the answer would repeat copyrighted text too closely.",
    "BLOCKLIST": "Gemini blocked this answer (it contained a blocked term).",
    "PROHIBITED_CONTENT": "Gemini blocked this answer as prohibited content.",
    "SPII": "Gemini blocked this answer because it contained sensitive personal information.",
    "LANGUAGE": "Gemini does not support the language of this question.",
}
EMPTY_MESSAGE = "Gemini returned an empty answer. Try rephrasing the question."


def _reason(value: Any) -> str | None:
    if value is None:
        return None
    return str(getattr(value, "value", value)).upper()


class GeminiAnswerer:
    name = "gemini"

    def __init__(
        self,
        settings: Settings,
        *,
        client: Any = None,
        retry: RetryPolicy | None = None,
        temperature: float = CHAT_TEMPERATURE,
        deadline_s: float | None = None,
    ):
        self.model = settings.chat_model or DEFAULT_CHAT_MODEL
        self._api_key = settings.gemini_api_key
        self.retry = retry or RetryPolicy()
        self.temperature = temperature
        self.deadline_s = (
            deadline_s
            if deadline_s is not None
            else STREAM_DEADLINE_FACTOR * settings.gemini_timeout_s
        )
        try:
            self._client = client if client is not None else make_client(settings)
        except MarginaliaError as exc:
            raise AnswerError(exc.message) from exc

    # ------------------------------------------------------------------ request
    @staticmethod
    def build_contents(question: str, history: list[HistoryTurn]) -> list[Any]:
        """History turns (oldest first) as user/model Contents, then the question."""
        from google.genai import types

        contents = []
        for turn in history:
            role = ROLES.get(str(turn.get("role", "")))
            if role is None:
                raise ValueError(f"history role must be 'user' or 'assistant', not {turn!r}")
            text = turn.get("content") or ""
            if text.strip():
                contents.append(types.Content(role=role, parts=[types.Part(text=text)]))
        contents.append(types.Content(role="user", parts=[types.Part(text=question)]))
        return contents

    def _config(self, system_instruction: str) -> Any:
        from google.genai import types

        return types.GenerateContentConfig(
            system_instruction=system_instruction or None,
            temperature=self.temperature,
            # We retry and bound time ourselves; no SDK-side tool calls or stream reconnects.
            automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
            automatic_continuation=False,
        )

    def rewrite_query(self, question: str, history: list[HistoryTurn]) -> str | None:
        """One short, non-streamed call that turns a follow-up into a standalone search query
        (None when the reply is unusable). No retries: the caller falls back to the offline
        rewrite on any error, which costs less than a retried round trip."""
        from google.genai import types

        contents = self.build_contents(question, history[-REWRITE_TURNS:])
        config = types.GenerateContentConfig(
            system_instruction=REWRITE_INSTRUCTION,
            temperature=0.0,  # no output cap: a thinking model spends it before replying
            automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
        )
        try:
            response = self._client.models.generate_content(
                model=self.model, contents=contents, config=config
            )
            return clean_model_rewrite(response.text)
        except Exception as exc:
            raise AnswerError(self._describe(exc, False)) from exc

    # ------------------------------------------------------------------ streaming
    def stream(
        self,
        question: str,
        sources: list[Source],
        history: list[HistoryTurn],
        *,
        system_instruction: str,
    ) -> Iterator[str]:
        """Yield the answer's text pieces in order. ``sources`` are already numbered inside
        ``system_instruction``; they are accepted for the common interface."""
        contents = self.build_contents(question, history)
        config = self._config(system_instruction)
        deadline = time.monotonic() + self.deadline_s
        attempts = max(1, self.retry.attempts)
        yielded = False
        attempt = 0
        while True:
            attempt += 1
            finish: str | None = None
            blocked: str | None = None
            response = None
            try:
                response = self._client.models.generate_content_stream(
                    model=self.model, contents=contents, config=config
                )
                for chunk in response:
                    feedback = getattr(chunk, "prompt_feedback", None)
                    if feedback is not None and feedback.block_reason is not None:
                        blocked = _reason(feedback.block_reason)
                    if chunk.candidates:
                        finish = _reason(chunk.candidates[0].finish_reason) or finish
                    text = chunk.text
                    if text:
                        yielded = True
                        yield text
                    if time.monotonic() > deadline:
                        raise AnswerError(self._too_slow(yielded))
                break
            except AnswerError:
                raise
            except Exception as exc:
                if not yielded and attempt < attempts and is_retryable(exc):
                    delay = backoff_delay(
                        attempt,
                        initial_delay=self.retry.initial_delay,
                        max_delay=self.retry.max_delay,
                        hint=retry_after_seconds(exc),
                    )
                    if time.monotonic() + delay < deadline:
                        self.retry.sleep(delay)
                        continue
                raise AnswerError(self._describe(exc, yielded)) from exc
            finally:
                close = getattr(response, "close", None)
                if close is not None:
                    close()
        self._check_end(finish, blocked, yielded)

    def _describe(self, exc: BaseException, yielded: bool) -> str:
        message = describe_api_error(exc, api_key=self._api_key)
        if yielded and not is_auth_error(exc):
            return f"The answer was interrupted: {message}"
        return message

    def _too_slow(self, yielded: bool) -> str:
        message = f"Gemini took longer than {self.deadline_s:g} s to answer, so it was stopped."
        return f"The answer was interrupted: {message}" if yielded else message

    @staticmethod
    def _check_end(finish: str | None, blocked: str | None, yielded: bool) -> None:
        if blocked:
            raise AnswerError(
                f"Gemini declined to answer this question (blocked: {blocked}). Try rephrasing it."
            )
        if finish in BLOCKED_MESSAGES:
            raise AnswerError(BLOCKED_MESSAGES[finish])
        if not yielded:
            raise AnswerError(EMPTY_MESSAGE)
        if finish is None:
            raise AnswerError(
                "The answer was interrupted: the connection to Gemini closed before the answer "
                "was complete."
            )
        if finish not in OK_FINISH:
            raise AnswerError(f"Gemini stopped the answer early (reason: {finish}).")
