"""GeminiAnswerer and the answerer registry, through the real google-genai SDK over HTTP to the fake
server (tests/fake_gemini.py). No mocks of the SDK."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from fake_gemini import FakeGeminiServer, default_answer  # fixtures come from conftest.py

from marginalia_core.errors import AnswerError
from marginalia_core.providers.answerers import ANSWERERS, Answerer, answerer_class, get_answerer
from marginalia_core.providers.answerers.gemini import EMPTY_MESSAGE, GeminiAnswerer
from marginalia_core.providers.gemini_client import KEY_REJECTED, RetryPolicy

SECRET_BAD_KEY = "AIzaSyD-THIS-IS-A-SECRET-KEY-0123456789"
SYSTEM = (
    "Answer only from the numbered sources and cite them as [n].\n\n"
    "[1] Cats sleep between twelve and sixteen hours a day.\n"
    "[2] Dogs are social animals."
)
SOURCES = [
    {
        "n": 1,
        "document_name": "cats.md",
        "content": "Cats sleep between twelve and sixteen hours a day.",
        "page": 1,
    },
    {"n": 2, "document_name": "dogs.md", "content": "Dogs are social animals.", "page": 1},
]
HISTORY = [
    {"role": "user", "content": "Tell me about cats."},
    {"role": "assistant", "content": "Cats are small carnivores [1]."},
    {"role": "user", "content": "And dogs?"},
    {"role": "assistant", "content": "Dogs are social [2]."},
]


class SleepRecorder:
    def __init__(self) -> None:
        self.delays: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)
        time.sleep(min(seconds, 0.01))


def make_answerer(
    fake: FakeGeminiServer, *, attempts: int = 4, sleep=None, deadline_s=None, **settings
) -> GeminiAnswerer:
    retry = RetryPolicy(
        attempts=attempts, initial_delay=0.01, max_delay=0.05, sleep=sleep or SleepRecorder()
    )
    return GeminiAnswerer(fake.settings(**settings), retry=retry, deadline_s=deadline_s)


def ask(answerer: GeminiAnswerer, question: str = "How long do cats sleep?", history=None):
    return answerer.stream(
        question, SOURCES, HISTORY if history is None else history, system_instruction=SYSTEM
    )


def collect_until_error(gen) -> tuple[list[str], AnswerError | None]:
    got: list[str] = []
    try:
        for piece in gen:
            got.append(piece)
    except AnswerError as exc:
        return got, exc
    return got, None


# ------------------------------------------------------------------------- happy path
def test_request_carries_system_instruction_history_and_question(fake_gemini):
    answer = "".join(ask(make_answerer(fake_gemini, chat_model="gemini-2.5-flash")))
    assert answer
    (req,) = fake_gemini.requests
    assert req.endpoint == "stream"
    assert req.path.endswith("/models/gemini-2.5-flash:streamGenerateContent")
    assert req.query.get("alt") == ["sse"]
    assert req.key_ok and "x-goog-api-key" not in req.headers
    body = req.body
    assert body["systemInstruction"]["parts"][0]["text"] == SYSTEM
    turns = [(c["role"], c["parts"][0]["text"]) for c in body["contents"]]
    assert turns == [
        ("user", "Tell me about cats."),
        ("model", "Cats are small carnivores [1]."),
        ("user", "And dogs?"),
        ("model", "Dogs are social [2]."),
        ("user", "How long do cats sleep?"),
    ]
    assert body["generationConfig"]["temperature"] == pytest.approx(0.2)
    assert "tools" not in body


def test_default_answer_is_composed_from_the_sources_and_cites_1(fake_gemini):
    pieces = list(ask(make_answerer(fake_gemini), history=[]))
    assert len(pieces) > 2  # streamed in several events
    answer = "".join(pieces)
    assert answer.startswith("According to the sources, Cats sleep")
    assert answer.endswith("[1].")
    assert len(fake_gemini.requests[0].body["contents"]) == 1


def test_default_answer_with_the_real_system_instruction(fake_gemini):
    from marginalia_core.providers.answerers.prompting import build_system_instruction

    system = build_system_instruction(SOURCES)
    assert default_answer(system) == (
        "According to the sources, Cats sleep between twelve and sixteen hours a day [1]."
    )
    pieces = list(
        make_answerer(fake_gemini).stream("How long?", SOURCES, [], system_instruction=system)
    )
    assert "".join(pieces) == default_answer(system)


def test_chunks_arrive_in_order_and_only_text_is_yielded(fake_gemini):
    fake_gemini.stream_script(chunks=["Alpha ", "beta ", "gamma ", "delta [1]."])
    assert list(ask(make_answerer(fake_gemini))) == ["Alpha ", "beta ", "gamma ", "delta [1]."]


def test_pieces_are_yielded_as_they_arrive(fake_gemini):
    fake_gemini.stream_script(chunks=["first ", "second ", "third"], hold_after=1)
    gen = ask(make_answerer(fake_gemini))
    assert next(gen) == "first "
    # the server is still holding the rest back: the first piece was not buffered
    assert fake_gemini.stream_events_sent == 1
    fake_gemini.release()
    assert list(gen) == ["second ", "third"]


def test_empty_history_turns_are_skipped(fake_gemini):
    history = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": ""}]
    list(ask(make_answerer(fake_gemini), history=history))
    roles = [c["role"] for c in fake_gemini.requests[0].body["contents"]]
    assert roles == ["user", "user"]


def test_bad_history_role_is_rejected(fake_gemini):
    with pytest.raises(ValueError):
        list(ask(make_answerer(fake_gemini), history=[{"role": "system", "content": "x"}]))


def test_closing_the_stream_early_is_clean(fake_gemini):
    fake_gemini.stream_script(chunks=["a ", "b ", "c"])
    answerer = make_answerer(fake_gemini)
    gen = ask(answerer)
    assert next(gen) == "a "
    gen.close()
    assert "".join(ask(answerer))  # the client still works


# ------------------------------------------------------------------------- retries before the first token
def test_429_then_success(fake_gemini):
    sleep = SleepRecorder()
    fake_gemini.fail_next(status=429, endpoint="stream")
    fake_gemini.stream_script(chunks=["ok ", "[1]"])
    assert "".join(ask(make_answerer(fake_gemini, sleep=sleep))) == "ok [1]"
    assert len(fake_gemini.requests) == 2
    assert len(sleep.delays) == 1


def test_500_before_first_token_then_success(fake_gemini):
    fake_gemini.stream_script(chunks=["never shown"], error_after=0)  # error as the first event
    fake_gemini.stream_script(chunks=["fine ", "[1]"])
    assert "".join(ask(make_answerer(fake_gemini))) == "fine [1]"
    assert len(fake_gemini.requests) == 2


def test_503_status_then_success(fake_gemini):
    fake_gemini.fail_next(status=503, times=2, endpoint="stream")
    assert "".join(ask(make_answerer(fake_gemini)))
    assert len(fake_gemini.requests) == 3


def test_persistent_503_gives_up_after_bounded_attempts(fake_gemini):
    fake_gemini.fail_next(status=503, times=20, endpoint="stream")
    got, err = collect_until_error(ask(make_answerer(fake_gemini, attempts=3)))
    assert got == [] and err is not None
    assert "503" in str(err) and not str(err).startswith("The answer was interrupted")
    assert len(fake_gemini.requests) == 3


def test_timeout_once_then_success(fake_gemini):
    fake_gemini.delay_next(3.0, endpoint="stream")
    answer = "".join(ask(make_answerer(fake_gemini, gemini_timeout_s=0.3)))
    assert answer
    assert len(fake_gemini.requests) >= 2  # the 3 s answer was abandoned at the timeout


# ------------------------------------------------------------------------- failures
def test_mid_stream_error_after_tokens_is_answer_error_without_retry(fake_gemini):
    fake_gemini.stream_script(
        chunks=["one ", "two ", "three ", "four"], error_after=2, error_code=503
    )
    got, err = collect_until_error(ask(make_answerer(fake_gemini)))
    assert got == ["one ", "two "]
    assert err is not None
    assert str(err).startswith("The answer was interrupted:") and "503" in str(err)
    assert len(fake_gemini.requests) == 1  # text was shown: never retried


def test_dropped_connection_mid_stream(fake_gemini):
    fake_gemini.stream_script(chunks=["one ", "two ", "three"], drop_after=1)
    got, err = collect_until_error(ask(make_answerer(fake_gemini)))
    assert got == ["one "]
    assert err is not None and "interrupted" in str(err) and "connection" in str(err)
    assert len(fake_gemini.requests) == 1


def test_dropped_connection_before_first_token_is_retried(fake_gemini):
    fake_gemini.stream_script(chunks=["x"], drop_after=0)
    fake_gemini.stream_script(chunks=["after ", "drop"])
    assert "".join(ask(make_answerer(fake_gemini))) == "after drop"
    assert len(fake_gemini.requests) == 2


def test_stream_ending_without_finish_reason_is_interrupted(fake_gemini):
    fake_gemini.stream_script(chunks=["half ", "an answer"], finish_reason=None)
    got, err = collect_until_error(ask(make_answerer(fake_gemini)))
    assert got == ["half ", "an answer"]
    assert err is not None and "interrupted" in str(err)


def test_malformed_json_mid_stream(fake_gemini):
    fake_gemini.stream_script(chunks=["good ", "more"], malformed=True, malformed_after=1)
    got, err = collect_until_error(ask(make_answerer(fake_gemini)))
    assert got == ["good "]
    assert err is not None and "could not be read" in str(err) and "interrupted" in str(err)


def test_malformed_json_first_is_not_retried(fake_gemini):
    fake_gemini.stream_script(chunks=["x"], malformed=True, malformed_after=0)
    got, err = collect_until_error(ask(make_answerer(fake_gemini)))
    assert got == [] and err is not None and "could not be read" in str(err)
    assert len(fake_gemini.requests) == 1


def test_stalled_stream_times_out_within_bounded_time(fake_gemini):
    fake_gemini.stream_script(chunks=["start ", "never"], stall_after=1, stall_seconds=10)
    got, err = collect_until_error(ask(make_answerer(fake_gemini, gemini_timeout_s=0.3)))
    assert got == ["start "]
    assert len(fake_gemini.requests) == 1  # text was shown: not retried
    assert err is not None and "interrupted" in str(err) and "timed out" in str(err)


def test_service_that_never_answers_errors_within_bounded_time(fake_gemini):
    fake_gemini.set_latency(10.0, endpoint="stream")
    got, err = collect_until_error(
        ask(make_answerer(fake_gemini, attempts=3, gemini_timeout_s=0.3))
    )
    assert got == [] and err is not None and "timed out" in str(err)
    assert len(fake_gemini.requests) == 3


def test_overall_deadline_stops_a_trickling_stream(fake_gemini):
    fake_gemini.stream_script(chunks=[f"w{i} " for i in range(20)], chunk_delay=0.1)
    got, err = collect_until_error(ask(make_answerer(fake_gemini, deadline_s=0.35)))
    assert 0 < len(got) < 20  # the 2 s stream was cut off by the answer's own deadline
    assert err is not None and "took longer" in str(err)


def test_bad_key_is_answer_error_saying_the_key_was_rejected(fake_gemini):
    answerer = make_answerer(fake_gemini, gemini_api_key=SECRET_BAD_KEY)
    got, err = collect_until_error(ask(answerer))
    assert got == [] and err is not None
    assert str(err) == KEY_REJECTED
    assert SECRET_BAD_KEY not in str(err) and SECRET_BAD_KEY not in repr(err)
    assert len(fake_gemini.requests) == 1  # not retried


def test_no_key_is_answer_error(fake_gemini):
    with pytest.raises(AnswerError):
        GeminiAnswerer(fake_gemini.settings(gemini_api_key=None))


def test_blocked_prompt(fake_gemini):
    fake_gemini.stream_script(block_reason="SAFETY")
    got, err = collect_until_error(ask(make_answerer(fake_gemini)))
    assert got == [] and err is not None and "declined" in str(err)


def test_safety_stop_without_text(fake_gemini):
    fake_gemini.stream_script(empty=True, finish_reason="SAFETY")
    got, err = collect_until_error(ask(make_answerer(fake_gemini)))
    assert got == [] and err is not None and "safety" in str(err)


def test_safety_stop_after_some_text(fake_gemini):
    fake_gemini.stream_script(chunks=["Partial ", "answer"], finish_reason="SAFETY")
    got, err = collect_until_error(ask(make_answerer(fake_gemini)))
    assert got == ["Partial ", "answer"] and err is not None and "safety" in str(err)


def test_empty_answer(fake_gemini):
    fake_gemini.stream_script(empty=True)
    got, err = collect_until_error(ask(make_answerer(fake_gemini)))
    assert got == [] and err is not None and str(err) == EMPTY_MESSAGE


# ------------------------------------------------------------------------- registry
def test_registry_and_protocol(fake_gemini):
    answerer = get_answerer(fake_gemini.settings())
    assert isinstance(answerer, GeminiAnswerer) and isinstance(answerer, Answerer)
    assert answerer.name == "gemini" and answerer.model == "gemini-2.5-flash"
    assert ANSWERERS["extractive"] == "marginalia_core.providers.answerers.extractive:ExtractiveAnswerer" or (
        isinstance(ANSWERERS["extractive"], type)
    )
    assert answerer_class("gemini") is GeminiAnswerer
    with pytest.raises(ValueError):
        answerer_class("nope")


def test_importing_the_package_does_not_import_the_sdk():
    code = (
        "import sys, marginalia_core.providers.answerers as a; "
        "assert 'google.genai' not in sys.modules, 'sdk imported'; "
        "assert 'marginalia_core.providers.answerers.extractive' not in sys.modules"
    )
    subprocess.run(
        [sys.executable, "-c", code],
        check=True,
        cwd=Path(__file__).resolve().parents[1],
        timeout=60,
    )
