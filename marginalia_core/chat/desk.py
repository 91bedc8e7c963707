"""Answers that outlive the page run that asked for them.

Streamlit reruns a page whenever the reader does anything (types a second question, clicks a
pill, picks a conversation), and a rerun stops the running script where it is. An answer
streamed inside the page's own run was cut off by that, and since the engine saves an exchange
only with its answer, the question was lost with it. So the page hands each question to the
process's ``AnswerDesk``: a conversation's questions are answered one after another on a
background thread, whatever the pages do meanwhile, and a question asked while another is being
answered waits its turn (the page shows it as queued). Pages only read a run's progress; a
reloaded tab, or another tab on the same conversation, sees the same runs.

``stop`` ends a running answer where it is (the engine saves what was said, marked
``stopped``); a queued question that is stopped is dropped before it is asked. A failed run
stays listed, with its error, until the next question in its conversation.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from marginalia_core import events

log = logging.getLogger(__name__)

QUEUED, RUNNING, DONE, STOPPED, FAILED, CANCELLED = (
    "queued", "running", "done", "stopped", "error", "cancelled",
)
MAX_WAITING = 20  # questions queued per conversation; more is refused


@dataclass
class AnswerRun:
    """One question and its answer as it streams: the page renders ``text`` (already in the
    final numbering) with ``meta``'s sources, ``cited`` mapping final marks to them."""

    question: str
    conversation_id: str
    documents: list[str] | None = None
    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    state: str = QUEUED
    meta: dict[str, Any] | None = None
    text: str = ""
    cited: list[int] = field(default_factory=list)
    end: dict[str, Any] | None = None
    stop: threading.Event = field(default_factory=threading.Event, repr=False)

    @property
    def finished(self) -> bool:
        return self.state not in (QUEUED, RUNNING)

    @property
    def message_id(self) -> str | None:
        return (self.end or {}).get("message_id")


Asker = Callable[[AnswerRun], Iterator[events.ChatEvent]]


class AnswerDesk:
    """The questions of every conversation in this process, answered in order per
    conversation on background threads."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._runs: dict[str, list[AnswerRun]] = {}
        self._workers: dict[str, threading.Thread] = {}

    def submit(
        self, ask: Asker, question: str, conversation_id: str, *,
        documents: list[str] | None = None,
    ) -> AnswerRun:
        """Queue ``question`` in its conversation; it is asked (``ask(run)``) once the
        questions before it are answered. Raises ``OverflowError`` past ``MAX_WAITING``."""
        run = AnswerRun(question, conversation_id, documents)
        with self._changed:
            runs = [r for r in self._runs.get(conversation_id, []) if not r.finished]
            if sum(r.state == QUEUED for r in runs) >= MAX_WAITING:
                raise OverflowError(f"{MAX_WAITING} questions are already waiting.")
            self._runs[conversation_id] = [*runs, run]  # an earlier failure is dropped now
            worker = self._workers.get(conversation_id)
            if worker is None or not worker.is_alive():
                worker = threading.Thread(
                    target=self._work, args=(conversation_id, ask), daemon=True,
                    name=f"answers-{conversation_id[:8]}",
                )
                self._workers[conversation_id] = worker
                worker.start()
            self._changed.notify_all()
        return run

    def runs(self, conversation_id: str | None) -> list[AnswerRun]:
        """The conversation's running and queued questions, in order, and a failed one."""
        with self._changed:
            return list(self._runs.get(conversation_id or "", []))

    def busy(self) -> list[str]:
        """Conversations with a question being answered or waiting."""
        with self._changed:
            return [c for c, runs in self._runs.items() if any(not r.finished for r in runs)]

    def stop(self, run_id: str) -> bool:
        """Stop a running answer (saved as far as it got) or drop a queued question."""
        with self._changed:
            for runs in self._runs.values():
                for run in runs:
                    if run.id == run_id and not run.finished:
                        run.stop.set()
                        if run.state == QUEUED:
                            run.state = CANCELLED
                            runs.remove(run)
                        self._changed.notify_all()
                        return True
        return False

    def dismiss(self, conversation_id: str) -> None:
        """Forget a conversation's failed run (its error was shown)."""
        with self._changed:
            runs = self._runs.get(conversation_id, [])
            self._runs[conversation_id] = [r for r in runs if not r.finished]

    def wait(self, run: AnswerRun, seen: tuple[str, int], timeout: float) -> None:
        """Block until ``run`` changed from ``seen`` (``snapshot``), or ``timeout`` s."""
        with self._changed:
            self._changed.wait_for(lambda: self.snapshot(run) != seen, timeout=timeout)

    @staticmethod
    def snapshot(run: AnswerRun) -> tuple[str, int]:
        return run.state, len(run.text)

    # ------------------------------------------------------------------ the worker

    def _next(self, conversation_id: str) -> AnswerRun | None:
        with self._changed:
            runs = self._runs.get(conversation_id, [])
            run = next((r for r in runs if r.state == QUEUED), None)
            if run is None:
                self._workers.pop(conversation_id, None)
                return None
            run.state = RUNNING
            self._changed.notify_all()
            return run

    def _work(self, conversation_id: str, ask: Asker) -> None:
        while (run := self._next(conversation_id)) is not None:
            self._answer(run, ask)

    def _answer(self, run: AnswerRun, ask: Asker) -> None:
        end: dict[str, Any] | None = None
        try:
            for event in ask(run):
                with self._changed:
                    if event["type"] == "meta":
                        run.meta = dict(event)
                    elif event["type"] == "token":
                        run.text += event["text"]
                        run.cited = list(event.get("cited") or run.cited)
                    else:
                        end = dict(event)
                    self._changed.notify_all()
        except Exception as exc:  # the engine reports its own failures; this is a last guard
            log.exception("answering failed")
            end = dict(events.error(f"The answer failed: unexpected {type(exc).__name__}.",
                                    "internal"))
        end = end or dict(events.error("The answer stopped early.", "internal"))
        with self._changed:
            run.end = end
            if end["type"] == "done":
                run.state = STOPPED if end.get("status") == STOPPED else DONE
            else:
                run.state = FAILED
            runs = self._runs.get(run.conversation_id, [])
            if run.state != FAILED and run in runs:
                runs.remove(run)  # saved: the conversation's messages show it now
            self._changed.notify_all()
