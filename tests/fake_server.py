"""The plumbing the fake model servers share (tests/fake_gemini.py, tests/fake_openai.py).

Each fake is a real HTTP server on 127.0.0.1 that a real SDK talks to. What they have in common
lives here, so a fake's own module holds only its wire format (routes, request checks, JSON and
SSE shapes):

- ``FakeServer``: the threaded server's lifecycle (start/stop/with, port), per-test state that
  ``reset()`` replaces, request recording (``requests``, ``requests_for``), queued faults
  (``fail_next``, ``delay_next``, ``drop_next``), scripted streams (``stream_script`` queues a
  ``StreamScript``; ``release()`` opens a held stream), a fixed answer (``set_answer``), and
  embed holding / in-flight counting (``hold_embeds``, ``max_in_flight``).
- ``FakeHandler``: the request handler base: one state per request, recording and embed
  counting around a fake's ``_serve``, faults applied, JSON replies, chunked SSE writing with the
  script's faults played at their points, and dropping a connection.
- ``server_fixtures``: the session-scoped server fixture and the function-scoped, reset one.
- The deterministic content both fakes serve: ``fake_embedding``, ``default_answer``,
  ``split_words``.

A request works on the state current when it arrived, so a handler from an earlier test that
wakes after ``reset()`` can never consume this test's faults or scripts, and its pauses end at
once (the old state is marked stale) so it hangs up instead of answering late.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from enum import Enum
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar, TypeVar

import pytest

DEFAULT_DIM = 768  # fake_embedding's default width (Gemini's default outputDimensionality)
EMBED_SCALE = 3.0  # every non-empty vector has norm >= 3, so un-normalized use is caught
WORDS_PER_CHUNK = 3
HOLD_TIMEOUT_S = 10.0  # longest hold_embeds()/hold_after wait before the server carries on
HOLD_POLL_S = 0.005
CHUNKED_END = b"0\r\n\r\n"

_TOKEN_RE = re.compile(r"[a-z0-9]+")


# ---------------------------------------------------------------------- served content
def fake_embedding(text: str, dim: int = DEFAULT_DIM) -> list[float]:
    """Signed hashed bag of lowercase word tokens, scaled by EMBED_SCALE (not unit length)."""
    vec = [0.0] * dim
    tokens = _TOKEN_RE.findall(text.lower())
    if not tokens:
        return [0.01] * dim
    for tok in tokens:
        h = int.from_bytes(hashlib.blake2b(tok.encode(), digest_size=8).digest(), "little")
        vec[h % dim] += EMBED_SCALE if (h >> 32) & 1 else -EMBED_SCALE
    if not any(vec):  # a token and its sign-flipped collision cancelled out
        vec[0] = EMBED_SCALE
    return vec


def default_answer(system_instruction: str) -> str:
    """A reply composed from the system instruction: quotes the start of passage [1] and cites it.

    Passage 1 is the line starting with ``[1]`` (prompting.py writes ``[1] (from "doc", page 3)``
    then the passage on the next lines); without one, the first ``[1]`` anywhere is used."""
    match = re.search(r"(?m)^[ \t]*\[1\](.*)$", system_instruction)
    if match:
        head = match.group(1).strip()
        body = re.split(r"(?m)^[ \t]*\[\d+\]", system_instruction[match.end() :])[0]
        passage = body if (not head or head.startswith("(")) else f"{head} {body}"
    else:
        idx = system_instruction.find("[1]")
        if idx < 0:
            return "I could not find anything about that in your documents."
        passage = system_instruction[idx + 3 :].split("[2]", 1)[0]
    words = re.findall(r"[^\s\[\]]+", passage)
    snippet = " ".join(words[:12]).rstrip(".,;:") if words else "the first passage answers it"
    return f"According to the sources, {snippet} [1]."


def split_words(text: str, per_chunk: int = WORDS_PER_CHUNK) -> list[str]:
    """Split ``text`` into pieces of a few words each; ``"".join(pieces) == text``."""
    pieces = re.findall(r"\S+\s*|\s+", text)
    out = ["".join(pieces[i : i + per_chunk]) for i in range(0, len(pieces), per_chunk)]
    return out or [text]


# ---------------------------------------------------------------------- state
@dataclass
class RecordedRequest:
    """One request as it arrived; each fake adds the fields of its own wire format."""

    method: str
    path: str
    endpoint: str  # the fake's route name ("embed", ...) or "unknown"
    model: str | None
    headers: dict[str, str]  # lower-cased names, the credential header removed
    body: Any  # the parsed JSON (None: not JSON)
    time: float  # time.monotonic() when the request arrived


@dataclass
class Fault:
    """A queued answer to the next request for ``endpoint`` (None: any)."""

    endpoint: str | None
    status: int | None = None
    body: dict | None = None
    retry_after: float | None = None
    delay: float = 0.0
    drop: bool = False  # close the socket without answering


@dataclass
class StreamScript:
    """How the next stream(s) go. A point N is "after N text events"; a fault scheduled past the
    last event happens after it (before the end of the stream)."""

    chunks: list[str] | None = None
    text: str | None = None
    chunk_delay: float = 0.0
    drop_after: int | None = None
    malformed_after: int | None = None
    error_after: int | None = None
    stall_after: int | None = None
    stall_seconds: float = 30.0
    hold_after: int | None = None
    finish_reason: str | None = None
    empty: bool = False
    times: int = 1


@dataclass
class State:
    """Everything one test can change; ``reset()`` swaps in a fresh one."""

    requests: list[RecordedRequest] = field(default_factory=list)
    faults: deque = field(default_factory=deque)
    scripts: deque = field(default_factory=deque)
    answer: str | None = None
    in_flight: int = 0
    max_in_flight: int = 0
    hold_embeds: int = 0  # embed requests wait until this many are in flight at once
    events_sent: int = 0  # stream text events written (or being written), over every stream
    gate: threading.Event = field(default_factory=threading.Event)  # opened by release()
    stale: threading.Event = field(default_factory=threading.Event)  # set by reset()/stop()


# ---------------------------------------------------------------------- server
class FakeServer:
    """A fake model server's lifecycle, state and scripting. Thread-safe; one instance can serve
    a whole test session. Subclasses set the class attributes and ``_error_body``."""

    handler_class: ClassVar[type[FakeHandler]]
    state_class: ClassVar[type[State]] = State
    script_class: ClassVar[type[StreamScript]] = StreamScript
    thread_name: ClassVar[str] = "fake-server"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._state = self.state_class()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @staticmethod
    def _error_body(status: int, message: str | None = None) -> dict:
        """The fake's error JSON for ``status`` (``message``: None for its default one)."""
        raise NotImplementedError

    # ----------------------------------------------------------------- lifecycle
    def start(self: _S) -> _S:
        handler = type("Handler", (self.handler_class,), {"fake": self})
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, name=self.thread_name, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._current().stale.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self: _S) -> _S:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._httpd is not None, "server not started"
        return self._httpd.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def reset(self) -> None:
        """Forget requests, faults, scripts and every setting made since the last reset."""
        with self._lock:
            old, self._state = self._state, self.state_class()
        old.stale.set()  # handlers still sleeping for the previous test wake up and hang up

    # ----------------------------------------------------------------- inspection
    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._state.requests)

    def requests_for(self, endpoint: str) -> list[RecordedRequest]:
        return [r for r in self.requests if r.endpoint == endpoint]

    @property
    def max_in_flight(self) -> int:
        """Most embed requests being served at the same moment."""
        with self._lock:
            return self._state.max_in_flight

    # ----------------------------------------------------------------- scripting
    def set_answer(self, text: str | None) -> None:
        """The text every answer uses (None: composed from the system instruction)."""
        with self._lock:
            self._state.answer = text

    def hold_embeds(self, count: int) -> None:
        """Each embed request waits until ``count`` of them are in flight at once (at most
        HOLD_TIMEOUT_S), so a concurrency test sees the overlap however loaded the machine is."""
        with self._lock:
            self._state.hold_embeds = count

    def release(self) -> None:
        """Open the gate a ``stream_script(hold_after=N)`` stream is waiting at."""
        self._current().gate.set()

    def fail_next(
        self,
        status: int = 500,
        times: int = 1,
        *,
        message: str | None = None,
        body: dict | None = None,
        endpoint: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        """The next ``times`` requests for ``endpoint`` (None: any) get ``status`` with the fake's
        error body (or ``body``), and ``Retry-After`` when given."""
        payload = body or self._error_body(status, message)
        self._queue_faults(times, Fault(endpoint, status, payload, retry_after))

    def delay_next(self, seconds: float, times: int = 1, *, endpoint: str | None = None) -> None:
        """The next ``times`` matching requests wait ``seconds`` before answering normally."""
        self._queue_faults(times, Fault(endpoint, delay=seconds))

    def drop_next(self, times: int = 1, *, endpoint: str | None = None) -> None:
        """The next ``times`` matching requests get their connection closed with no answer."""
        self._queue_faults(times, Fault(endpoint, drop=True))

    def _queue_faults(self, times: int, fault: Fault) -> None:
        with self._lock:
            self._state.faults.extend(fault for _ in range(times))

    def _queue_script(self, script: StreamScript) -> None:
        with self._lock:
            self._state.scripts.append(script)

    # ----------------------------------------------------------------- handler side
    def _current(self) -> State:
        with self._lock:
            return self._state

    def _record(self, state: State, req: RecordedRequest) -> None:
        with self._lock:
            state.requests.append(req)

    def _take_fault(self, state: State, endpoint: str) -> Fault | None:
        with self._lock:
            for i, fault in enumerate(state.faults):
                if fault.endpoint in (None, endpoint):
                    del state.faults[i]
                    return fault
        return None

    def _take_script(self, state: State) -> StreamScript:
        with self._lock:
            if not state.scripts:
                return self.script_class()
            script = state.scripts[0]
            script.times -= 1
            if script.times <= 0:
                state.scripts.popleft()
            return script

    def _answer(self, state: State) -> str | None:
        with self._lock:
            return state.answer

    def _events_sent(self) -> int:
        with self._lock:
            return self._state.events_sent

    def _sent_event(self, state: State) -> None:
        with self._lock:
            state.events_sent += 1

    def _enter_embed(self, state: State) -> None:
        with self._lock:
            state.in_flight += 1
            state.max_in_flight = max(state.max_in_flight, state.in_flight)
            hold = state.hold_embeds
        if hold:
            deadline = time.monotonic() + HOLD_TIMEOUT_S
            while time.monotonic() < deadline and not state.stale.is_set():
                with self._lock:
                    if state.max_in_flight >= hold:
                        return
                time.sleep(HOLD_POLL_S)

    def _leave_embed(self, state: State) -> None:
        with self._lock:
            state.in_flight -= 1


_S = TypeVar("_S", bound=FakeServer)


# ---------------------------------------------------------------------- handler
class StreamEnd(Enum):
    """How ``FakeHandler._play`` left a stream."""

    COMPLETE = "complete"  # every event sent: the fake writes its finish (if any) and ends
    CUT = "cut"  # an error event or a malformed line was written: end without a finish
    DROPPED = "dropped"  # the connection is closed: write nothing more


class FakeHandler(BaseHTTPRequestHandler):
    """Request handling every fake shares; a subclass routes and writes its wire format."""

    disable_nagle_algorithm = True  # no 40 ms delayed-ACK stall per streamed request
    protocol_version = "HTTP/1.1"
    fake: FakeServer  # set on the per-server subclass
    st: State  # the server state when the current request arrived
    json_content_type: ClassVar[str] = "application/json"
    sse_separator: ClassVar[bytes] = b"\n\n"  # what ends an SSE event
    malformed_event: ClassVar[bytes] = b"data: {\n\n"  # a data line that is not JSON

    def log_message(self, format: str, *args: Any) -> None:  # keep pytest output quiet
        pass

    def handle(self) -> None:
        # The client gave up (timeout) or we dropped the connection on purpose.
        with contextlib.suppress(OSError):
            super().handle()

    def _pause(self, seconds: float) -> bool:
        """Wait ``seconds``; True if the test that sent this request is over (then hang up)."""
        return seconds > 0 and self.st.stale.wait(seconds)

    # ------------------------------------------------------------------ request flow
    def _read_json(self) -> Any:
        """The request body parsed as JSON ({} when empty, None when not JSON)."""
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            return json.loads(raw) if raw else {}
        except ValueError:
            return None

    def _headers_without(self, secret: str) -> dict[str, str]:
        """The request headers, lower-cased, without the one carrying the credential."""
        return {k.lower(): v for k, v in self.headers.items() if k.lower() != secret}

    def _run(self, request: RecordedRequest, serve: Callable[[], None]) -> None:
        """Record ``request`` (self.st must be set), then ``serve`` it; embed requests count as
        in flight (and may be held) while they are served."""
        fake = self.fake
        fake._record(self.st, request)
        embed = request.endpoint == "embed"
        if embed:
            fake._enter_embed(self.st)
        try:
            serve()
        finally:
            if embed:
                fake._leave_embed(self.st)

    def _apply_fault(self, endpoint: str) -> bool:
        """Play the next queued fault for ``endpoint``; True if it answered (or hung up)."""
        fault = self.fake._take_fault(self.st, endpoint)
        if fault is None:
            return False
        if self._pause(fault.delay) or fault.drop:
            self._drop()
            return True
        if fault.status is None:  # a delay only: answer normally
            return False
        extra = {"Retry-After": f"{fault.retry_after:g}"} if fault.retry_after is not None else None
        self._send_json(fault.status, fault.body or self.fake._error_body(fault.status), extra)
        return True

    # ------------------------------------------------------------------ writing
    def _send_json(self, status: int, payload: dict, extra: dict | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", self.json_content_type)
        self.send_header("Content-Length", str(len(data)))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):X}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _event(self, payload: dict | str) -> None:
        """One SSE ``data:`` event (a dict is sent as JSON, a str as it is)."""
        data = payload if isinstance(payload, str) else json.dumps(payload)
        self._chunk(b"data: " + data.encode() + self.sse_separator)

    def _drop(self) -> None:
        with contextlib.suppress(OSError):
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
        self.close_connection = True

    def _start_stream(self, extra: dict | None = None) -> None:
        """A 200 ``text/event-stream`` response with a chunked body, headers flushed at once."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()

    def _end_stream(self) -> None:
        self.wfile.write(CHUNKED_END)
        self.wfile.flush()

    def _play(self, events: list[dict], script: StreamScript, error_event: dict) -> StreamEnd:
        """Send ``events`` with the script's faults at their points (point n: after n events;
        a point past the last event is the end): drop, stall (then drop), a malformed line,
        ``error_event``, a hold until ``release()``; ``chunk_delay`` between events."""
        last = len(events)

        def due(after: int | None, n: int) -> bool:
            return after is not None and (after == n or (n == last and after > last))

        for n in range(last + 1):
            if due(script.drop_after, n):
                self._drop()
                return StreamEnd.DROPPED
            if due(script.stall_after, n):
                self._pause(script.stall_seconds)
                self._drop()
                return StreamEnd.DROPPED
            if due(script.malformed_after, n):
                self._chunk(self.malformed_event)
                return StreamEnd.CUT
            if due(script.error_after, n):
                self._event(error_event)
                return StreamEnd.CUT
            if due(script.hold_after, n):
                self.st.gate.wait(HOLD_TIMEOUT_S)
            if n == last:
                break
            if n and self._pause(script.chunk_delay):
                self._drop()
                return StreamEnd.DROPPED
            # counted before it is written: a client that has read an event never sees the
            # count behind it (it could, on a busy machine, when counted after the flush)
            self.fake._sent_event(self.st)
            self._event(events[n])
        return StreamEnd.COMPLETE


# ---------------------------------------------------------------------- pytest fixtures
def server_fixtures(
    make: Callable[[], _S], name: str, doc: str
) -> tuple[Callable[..., Iterator[_S]], Callable[..., Iterator[_S]]]:
    """Two fixtures: ``<name>_server`` (session scope, the running server made by ``make``) and
    ``<name>`` (function scope: the same server, reset before and after the test)."""

    @pytest.fixture(scope="session", name=f"{name}_server")
    def server_fixture() -> Iterator[_S]:
        server = make().start()
        try:
            yield server
        finally:
            server.stop()

    @pytest.fixture(name=name)
    def fresh_fixture(request: pytest.FixtureRequest) -> Iterator[_S]:
        server = request.getfixturevalue(f"{name}_server")
        server.reset()
        yield server
        server.reset()

    fresh_fixture.__doc__ = doc
    return server_fixture, fresh_fixture
