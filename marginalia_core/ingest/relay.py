"""A function run on a worker thread whose reports the calling thread reads, in order.

Ingestion reads pages and embeds passages on worker threads (PDF reading holds the GIL in
pure Python, embedding releases it in ONNX or waits on HTTP) while the consuming thread yields
progress events. Both stages share the same needs, kept here once: reports in order, the
worker's exception raised on the consuming thread, and a way to tell the worker that nobody
is listening any more, so it stops at its next report instead of spending CPU or API quota on
work nobody will store.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

R = TypeVar("R")

_END = object()  # the worker's last report: it has returned or raised


class Abandoned(Exception):
    """Raised inside a worker by ``report`` once nobody is waiting for its result."""


class Relay(Generic[R]):
    """``work(relay)`` on a daemon thread; iterating yields what it reports, ``result()`` its
    return value (or raises its exception). After ``stop()``, ``report`` and ``check`` raise
    ``Abandoned``, which unwinds the worker there."""

    def __init__(self, work: Callable[[Relay[R]], R], name: str):
        self._updates: queue.Queue[Any] = queue.Queue()
        self._stopped = threading.Event()
        self._outcome: dict[str, Any] = {}
        self._thread = threading.Thread(target=self._run, args=(work,), name=name, daemon=True)
        self._thread.start()

    def check(self) -> None:
        """Called by the worker between steps: raises ``Abandoned`` once nobody listens."""
        if self._stopped.is_set():
            raise Abandoned

    def report(self, item: Any) -> None:
        """Called by the worker: hands ``item`` to the reading thread, unless nobody listens."""
        self.check()
        self._updates.put(item)

    def deliver(self, item: Any) -> None:
        """Called by the worker: hands over a finished result even after ``stop()``, since it
        is paid for (``stop(wait=True)`` returns it)."""
        self._updates.put(item)

    def _run(self, work: Callable[[Relay[R]], R]) -> None:
        try:
            self._outcome["value"] = work(self)
        except BaseException as exc:  # surfaced on the reading thread by result()
            self._outcome["error"] = exc
        finally:
            self._updates.put(_END)

    def __iter__(self) -> Iterator[Any]:
        while (item := self._updates.get()) is not _END:
            yield item

    def stop(self, *, wait: bool) -> list[Any]:
        """Tell the worker to stop at its next report; with ``wait``, wait for it and return
        what it reported meanwhile (nothing computed is lost), else return at once."""
        self._stopped.set()
        if not wait:
            return []
        self._thread.join()  # it has put _END last: everything it reported is queued
        left = []
        while not self._updates.empty():
            if (item := self._updates.get_nowait()) is not _END:
                left.append(item)
        return left

    def result(self) -> R:
        """The worker's return value once it has ended; its exception is raised here."""
        self._stopped.set()
        self._thread.join()
        if "error" in self._outcome:
            raise self._outcome["error"]
        return self._outcome["value"]
