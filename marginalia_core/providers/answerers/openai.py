"""Streaming answers from any OpenAI-compatible server (Ollama, llama.cpp, vLLM, LM Studio,
api.openai.com) through the ``openai`` SDK's ``chat.completions.create(stream=True)``.

The request is the Gemini one in OpenAI's shape: a ``system`` message with the instruction from
``prompting.py`` (rules and numbered passages), the history as user/assistant messages (oldest
first), then the question. Failures before the first text piece are retried with backoff (429,
5xx, timeouts, refused or dropped connections: a local server may still be loading its model);
once text is out any failure raises ``AnswerError`` ("The answer was interrupted: …") so nothing
partial is saved. A stream that ends without a ``finish_reason`` was cut, and is an error too.
Time is bounded by ``settings.openai_timeout_s`` per request and between chunks, and the whole
answer (retries included) by ``STREAM_DEADLINE_FACTOR`` times that.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from marginalia_core.errors import AnswerError, MarginaliaError
from marginalia_core.providers import openai_client
from marginalia_core.providers.answerers.base import HistoryTurn, Source
from marginalia_core.providers.answerers.prompting import REWRITE_INSTRUCTION, clean_model_rewrite
from marginalia_core.providers.retry import RetryPolicy, stream_with_retries

if TYPE_CHECKING:
    from marginalia_core.config import Settings

CHAT_TEMPERATURE = 0.2
REWRITE_TURNS = 4  # recent messages a follow-up's rewrite sees (as for Gemini)
STREAM_DEADLINE_FACTOR = 5.0  # whole answer (retries included) <= factor * openai_timeout_s
ROLES = {"user": "user", "assistant": "assistant", "model": "assistant"}
OK_FINISH = frozenset({"stop", "length", "eos", "end_turn"})
NO_MODEL = (
    "No chat model is set for the model server — set MARGINALIA_CHAT_MODEL to one it serves "
    "(e.g. llama3.2 for Ollama; the sidebar lists the server's models)."
)
EMPTY_MESSAGE = "The model returned an empty answer. Try rephrasing the question."
FILTERED_MESSAGE = "The model server's content filter stopped this answer."


class OpenAIAnswerer:
    name = "openai"

    def __init__(
        self,
        settings: Settings,
        *,
        client: Any = None,
        retry: RetryPolicy | None = None,
        temperature: float = CHAT_TEMPERATURE,
        deadline_s: float | None = None,
    ):
        self.model = settings.chat_model or ""
        self._api_key = settings.openai_api_key
        self.retry = retry or RetryPolicy()
        self.temperature = temperature
        self.deadline_s = (
            deadline_s
            if deadline_s is not None
            else STREAM_DEADLINE_FACTOR * settings.openai_timeout_s
        )
        # A misconfiguration is reported when a question is asked (as an error event), so the
        # app and the CLI can still start and show it.
        self._problem: str | None = None
        self._client = client
        self.server = ""
        try:
            self.server = openai_client.server_label(openai_client.base_url(settings))
            if self._client is None:
                self._client = openai_client.make_client(settings)
        except MarginaliaError as exc:
            self._problem = exc.message
        if not self.model and self._problem is None:
            self._problem = NO_MODEL

    # ------------------------------------------------------------------ request
    @staticmethod
    def build_messages(
        question: str, history: list[HistoryTurn], system_instruction: str
    ) -> list[dict[str, str]]:
        """The system instruction, history turns (oldest first), then the question."""
        messages = []
        if system_instruction:
            messages.append({"role": "system", "content": system_instruction})
        for turn in history:
            role = ROLES.get(str(turn.get("role", "")))
            if role is None:
                raise ValueError(f"history role must be 'user' or 'assistant', not {turn!r}")
            text = turn.get("content") or ""
            if text.strip():
                messages.append({"role": role, "content": text})
        messages.append({"role": "user", "content": question})
        return messages

    def rewrite_query(self, question: str, history: list[HistoryTurn]) -> str | None:
        """One short, non-streamed call that turns a follow-up into a standalone search query
        (None when the reply is unusable). No retries: the caller falls back to the offline
        rewrite on any error, which costs less than a retried round trip."""
        if self._problem:
            raise AnswerError(self._problem)
        messages = self.build_messages(question, history[-REWRITE_TURNS:], REWRITE_INSTRUCTION)
        try:
            response = self._client.chat.completions.create(
                model=self.model, messages=messages, temperature=0.0, stream=False
            )
            choices = getattr(response, "choices", None) or []
            message = getattr(choices[0], "message", None) if choices else None
            return clean_model_rewrite(getattr(message, "content", None))
        except Exception as exc:
            raise self._error(exc, False) from exc

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
        if self._problem:
            raise AnswerError(self._problem)
        messages = self.build_messages(question, history, system_instruction)
        state: dict[str, Any] = {}

        def attempt() -> Iterator[str]:
            state["finish"] = None
            return self._one_stream(messages, state)

        yield from stream_with_retries(
            attempt,
            self.retry,
            retryable=openai_client.is_retryable,
            deadline=time.monotonic() + self.deadline_s,
            on_error=self._error,
            on_too_slow=self._too_slow,
        )
        self._check_end(state.get("finish"), bool(state.get("yielded")))

    def _one_stream(self, messages: list[dict[str, str]], state: dict[str, Any]) -> Iterator[str]:
        response = None
        try:
            response = self._client.chat.completions.create(
                model=self.model,
                messages=messages,
                temperature=self.temperature,
                stream=True,
            )
            for chunk in response:
                for choice in getattr(chunk, "choices", None) or []:
                    if getattr(choice, "index", 0) not in (0, None):
                        continue
                    delta = getattr(choice, "delta", None)
                    text = getattr(delta, "content", None) if delta is not None else None
                    if choice.finish_reason:
                        state["finish"] = str(choice.finish_reason)
                    if text:
                        state["yielded"] = True
                        yield text
        finally:
            close = getattr(response, "close", None)
            if close is not None:
                close()

    def _error(self, exc: BaseException, yielded: bool) -> AnswerError:
        message = openai_client.describe_error(
            exc, server=self.server, model=self.model, api_key=self._api_key
        )
        if yielded and not openai_client.is_auth_error(exc):
            message = f"The answer was interrupted: {message}"
        return AnswerError(message)

    def _too_slow(self, yielded: bool) -> AnswerError:
        message = (
            f"The model server took longer than {self.deadline_s:g} s to answer, so it was "
            "stopped."
        )
        return AnswerError(f"The answer was interrupted: {message}" if yielded else message)

    def _check_end(self, finish: str | None, yielded: bool) -> None:
        if finish == "content_filter":
            raise AnswerError(FILTERED_MESSAGE)
        if not yielded:
            raise AnswerError(EMPTY_MESSAGE)
        if finish is None:
            raise AnswerError(
                f"The answer was interrupted: the connection to the model server at "
                f"{self.server} closed before the answer was complete."
            )
        if finish.lower() not in OK_FINISH:
            raise AnswerError(f"The model stopped the answer early (reason: {finish}).")
