"""The answerer interface: turn a question, its numbered sources and the recent conversation into a
stream of text pieces. The system instruction (how to answer, the numbered passages, the citation
rules) is built by ``prompting.py`` and passed in; answerers that need no model may ignore it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Literal, Protocol, TypedDict, runtime_checkable


class HistoryTurn(TypedDict):
    role: Literal["user", "assistant"]
    content: str


# A retrieved passage: at least ``n`` (its citation number), ``documentName``, ``content`` (the
# full passage) and ``page``; usually also ``score``, ``excerpt``, ``chunkId`` ...
Source = dict[str, Any]


@runtime_checkable
class Answerer(Protocol):
    name: str  # registry name, e.g. "gemini", "extractive"
    model: str  # what produced the answer, shown in the UI ("gemini-2.5-flash", "extractive")

    def stream(
        self,
        question: str,
        sources: list[Source],
        history: list[HistoryTurn],
        *,
        system_instruction: str,
    ) -> Iterator[str]:
        """Yield the answer as text pieces, in order. ``history`` is oldest first.

        Raises ``AnswerError`` (possibly after some pieces were yielded) on any failure; a
        caller must then treat the partial text as incomplete and never save it."""
        ...
