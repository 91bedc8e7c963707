"""An event iterator (a chat answer, an ingestion) streamed as NDJSON over HTTP.

The iterator is blocking (SQLite, the model's stream), so it runs on a worker thread, and it runs
in step with the client: the next event is only computed once the previous one was sent. A client
that disconnects therefore stops the work at the next event, and the iterator is closed in its
own thread, so a chat answer is never saved (the engine saves only after its last token, which
is never asked for) and the model's stream is closed at once.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from marginalia_core import events

log = logging.getLogger(__name__)

# streams in flight at once (chat answers and uploads); more wait for a free thread
STREAM_THREADS = 32
# how often a producer waiting for the client checks whether the client left (seconds)
STOP_POLL_S = 0.2
NDJSON = "application/x-ndjson"

_END = object()
_executor: ThreadPoolExecutor | None = None
_executor_lock = threading.Lock()


def _pool() -> ThreadPoolExecutor:
    global _executor
    with _executor_lock:
        if _executor is None:
            _executor = ThreadPoolExecutor(STREAM_THREADS, thread_name_prefix="marginalia-stream")
        return _executor


class _Failure:
    def __init__(self, exc: BaseException):
        self.exc = exc


class EventPump:
    """Runs ``make()``'s events on a worker thread; the next one is computed only once the
    client has taken the last (:meth:`sent`), so the work never runs ahead of the client."""

    def __init__(self, make: Callable[[], Iterator[Any]]):
        self._loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._sent = threading.Semaphore(0)
        self._stop = threading.Event()
        self._ended = False
        _pool().submit(self._run, make)

    # ------------------------------------------------------------------ worker thread

    def _put(self, item: Any) -> None:
        try:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, item)
        except RuntimeError:  # the server's loop is gone (shutdown): nobody to tell
            self._stop.set()

    def _run(self, make: Callable[[], Iterator[Any]]) -> None:
        stream: Iterator[Any] | None = None
        try:
            stream = make()
            for event in stream:
                if self._stop.is_set():
                    return
                self._put(event)
                while not self._sent.acquire(timeout=STOP_POLL_S):
                    if self._stop.is_set():
                        return  # the client left: close the stream below, saving nothing
        except BaseException as exc:  # surfaced on the event loop as an error event
            self._put(_Failure(exc))
        finally:
            close = getattr(stream, "close", None)
            if close is not None:
                try:
                    close()
                except Exception:  # a generator that will not close must not hide the end
                    log.exception("closing an event stream failed")
            self._put(_END)

    # ------------------------------------------------------------------ event loop

    async def next(self) -> Any | None:
        """The next event, or None at the end (and after it). The worker waits until
        :meth:`sent`."""
        if self._ended:
            return None
        item = await self._queue.get()
        if item is _END:
            self._ended = True
            return None
        if isinstance(item, _Failure):
            log.error("an event stream failed", exc_info=item.exc)
            return events.error(
                f"Unexpected {type(item.exc).__name__}; nothing was saved.", "internal"
            )
        return item

    def sent(self) -> None:
        """The last event reached the client: compute the next one."""
        self._sent.release()

    def stop(self) -> None:
        self._stop.set()

    async def ndjson(self, already: list[Any]) -> AsyncIterator[bytes]:
        """The response body: ``already`` (events read before the response started, all but the
        last acknowledged with :meth:`sent`), then the rest, one JSON line each. Cancelled when the client disconnects, which stops the work."""
        try:
            for event in already:
                yield (events.to_json(event) + "\n").encode("utf-8")
            if already:
                self.sent()  # the last one read before the response started
            while (event := await self.next()) is not None:
                yield (events.to_json(event) + "\n").encode("utf-8")
                self.sent()
        finally:
            self.stop()
