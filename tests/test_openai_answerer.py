"""OpenAIAnswerer through the real ``openai`` SDK over HTTP to the fake OpenAI-compatible server
(tests/fake_openai.py), then through the chat engine: every fault ends in an ``error`` or ``done``
event within bounded retries, nothing is saved on failure, and the key never shows."""

from __future__ import annotations

import logging
import time

import pytest
from fake_gemini import default_answer
from fake_openai import CHAT_MODEL, FakeOpenAIServer

from marginalia_core.config import Settings
from marginalia_core.errors import AnswerError
from marginalia_core.ingest.pipeline import ingest_bytes
from marginalia_core.providers.answerers import answerer_class, get_answerer
from marginalia_core.providers.answerers.openai import EMPTY_MESSAGE, NO_MODEL, OpenAIAnswerer
from marginalia_core.providers.answerers.prompting import build_system_instruction
from marginalia_core.providers.openai_client import NO_SERVER
from marginalia_core.providers.retry import RetryPolicy
from marginalia_core.workspace import Workspace

SECRET_KEY = "sk-marginalia-DISTINCTIVE-secret-7f3a9c21"
WRONG_KEY = "sk-marginalia-WRONG-key-d41d8cd98f00b204"
SOURCES = [
    {"n": 1, "document_name": "cats.md", "content": "Cats sleep sixteen hours a day.", "page": 1},
    {"n": 2, "document_name": "dogs.md", "content": "Dogs are social animals.", "page": 1},
]
SYSTEM = build_system_instruction(SOURCES)
HISTORY = [
    {"role": "user", "content": "Tell me about cats."},
    {"role": "assistant", "content": "Cats are small carnivores [1]."},
    {"role": "user", "content": "And dogs?"},
    {"role": "model", "content": "Dogs are social [2]."},
]
MILL = (
    "The mill was built in 1851 by the Carter family on the banks of the Mill River. "
    "It ground wheat for the whole valley for more than sixty years.\n\n"
    "In 1912 a flood destroyed the mill's great wheel and the building was abandoned."
)


class SleepRecorder:
    def __init__(self) -> None:
        self.delays: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)
        time.sleep(min(seconds, 0.01))


def make_answerer(
    fake: FakeOpenAIServer, *, attempts: int = 3, sleep=None, deadline_s=None, **settings
) -> OpenAIAnswerer:
    retry = RetryPolicy(
        attempts=attempts, initial_delay=0.01, max_delay=0.05, sleep=sleep or SleepRecorder()
    )
    return OpenAIAnswerer(fake.settings(**settings), retry=retry, deadline_s=deadline_s)


def ask(answerer: OpenAIAnswerer, history=None):
    return answerer.stream(
        "How long do cats sleep?", SOURCES, HISTORY if history is None else history,
        system_instruction=SYSTEM,
    )


def collect(gen) -> tuple[list[str], AnswerError | None]:
    got: list[str] = []
    try:
        for piece in gen:
            got.append(piece)
    except AnswerError as exc:
        return got, exc
    return got, None


# ------------------------------------------------------------------------- the request
def test_request_is_the_gemini_prompt_in_openai_shape(fake_openai):
    answer = "".join(ask(make_answerer(fake_openai, openai_api_key=SECRET_KEY)))
    assert answer == default_answer(SYSTEM)  # quotes passage [1] and cites it
    (req,) = fake_openai.requests
    assert req.endpoint == "chat" and req.path == "/v1/chat/completions"
    assert req.authorization == f"Bearer {SECRET_KEY}"
    body = req.body
    assert body["model"] == CHAT_MODEL and body["stream"] is True
    assert body["temperature"] == pytest.approx(0.2)
    assert [(m["role"], m["content"]) for m in body["messages"]] == [
        ("system", SYSTEM),
        ("user", "Tell me about cats."),
        ("assistant", "Cats are small carnivores [1]."),
        ("user", "And dogs?"),
        ("assistant", "Dogs are social [2]."),
        ("user", "How long do cats sleep?"),
    ]
    assert "[1] (from" in SYSTEM and "Cats sleep sixteen hours" in SYSTEM  # numbered passages


def test_without_a_key_a_placeholder_is_sent(fake_openai):
    "".join(ask(make_answerer(fake_openai)))
    auth = fake_openai.requests[0].authorization
    assert auth and auth.startswith("Bearer ") and len(auth) > len("Bearer ")


def test_pieces_are_yielded_as_they_arrive(fake_openai):
    fake_openai.stream_script(["first ", "second ", "third [1]."], hold_after=1)
    gen = ask(make_answerer(fake_openai))
    assert next(gen) == "first "
    assert fake_openai.chunks_sent == 1  # the server still holds the rest: nothing was buffered
    fake_openai.release()
    assert list(gen) == ["second ", "third [1]."]


def test_empty_history_turns_are_skipped_and_bad_roles_refused(fake_openai):
    answerer = make_answerer(fake_openai)
    list(ask(answerer, history=[{"role": "user", "content": "hi"},
                                {"role": "assistant", "content": " "}]))
    assert [m["role"] for m in fake_openai.requests[0].body["messages"]] == [
        "system", "user", "user"
    ]
    with pytest.raises(ValueError):
        list(ask(answerer, history=[{"role": "system", "content": "x"}]))


def test_length_finish_is_a_complete_answer(fake_openai):
    fake_openai.stream_script(["cut by max_tokens [1]"], finish_reason="length")
    assert collect(ask(make_answerer(fake_openai))) == (["cut by max_tokens [1]"], None)


def test_a_server_that_never_sends_done_still_finishes(fake_openai):
    fake_openai.stream_script(["ok [1]"], done=False)
    assert collect(ask(make_answerer(fake_openai))) == (["ok [1]"], None)


# ------------------------------------------------------------------------- retries before the first token
def test_429_with_retry_after_is_retried_after_the_hint(fake_openai):
    sleep = SleepRecorder()
    fake_openai.fail_next(429, endpoint="chat", retry_after=0.04)
    got, err = collect(ask(make_answerer(fake_openai, sleep=sleep)))
    assert err is None and "".join(got)
    assert len(fake_openai.requests) == 2
    assert sleep.delays == [pytest.approx(0.04)]  # the server's hint beat the 0.01 s backoff


def test_500_then_success(fake_openai):
    fake_openai.fail_next(500, times=2, endpoint="chat")
    assert "".join(ask(make_answerer(fake_openai)))
    assert len(fake_openai.requests) == 3


def test_persistent_500_gives_up_after_bounded_attempts(fake_openai):
    fake_openai.fail_next(500, times=20, endpoint="chat")
    got, err = collect(ask(make_answerer(fake_openai, attempts=3)))
    assert got == [] and err is not None and "HTTP 500" in str(err)
    assert not str(err).startswith("The answer was interrupted")
    assert len(fake_openai.requests) == 3


def test_stream_cut_before_the_first_token_is_retried(fake_openai):
    fake_openai.stream_script(drop_after=0)
    fake_openai.stream_script(["after ", "the cut [1]."])
    assert "".join(ask(make_answerer(fake_openai))) == "after the cut [1]."
    assert len(fake_openai.requests) == 2


def test_slow_first_token_within_the_timeout_is_fine(fake_openai):
    fake_openai.stream_script(["late ", "but fine [1]."], first_token_delay=0.3)
    assert "".join(ask(make_answerer(fake_openai, openai_timeout_s=3.0))) == "late but fine [1]."
    assert len(fake_openai.requests) == 1


def test_first_token_slower_than_the_timeout_is_retried(fake_openai):
    fake_openai.stream_script(["never"], first_token_delay=5.0)
    fake_openai.stream_script(["second ", "try [1]."])
    answer = "".join(ask(make_answerer(fake_openai, openai_timeout_s=0.3)))
    assert answer == "second try [1]."
    assert len(fake_openai.requests) == 2


def test_first_token_always_too_slow_ends_in_a_timeout_error(fake_openai):
    fake_openai.stream_script(["never"], first_token_delay=5.0, times=5)
    got, err = collect(ask(make_answerer(fake_openai, attempts=2, openai_timeout_s=0.3)))
    assert got == [] and err is not None
    assert "timed out" in str(err) or "lost" in str(err)
    assert len(fake_openai.requests) == 2


# ------------------------------------------------------------------------- failures after text
def test_stream_cut_mid_answer_is_interrupted_and_not_retried(fake_openai):
    fake_openai.stream_script(["one ", "two ", "three"], drop_after=2)
    got, err = collect(ask(make_answerer(fake_openai)))
    assert got == ["one ", "two "]
    assert err is not None and str(err).startswith("The answer was interrupted:")
    assert "connection" in str(err)
    assert len(fake_openai.requests) == 1


def test_malformed_chunk_mid_answer(fake_openai):
    fake_openai.stream_script(["good ", "more"], malformed_after=1)
    got, err = collect(ask(make_answerer(fake_openai)))
    assert got == ["good "]
    assert err is not None and "could not be read" in str(err) and "interrupted" in str(err)


def test_malformed_first_chunk_is_an_error_not_a_retry_loop(fake_openai):
    fake_openai.stream_script(["x"], malformed_after=0)
    got, err = collect(ask(make_answerer(fake_openai)))
    assert got == [] and err is not None and "could not be read" in str(err)
    assert len(fake_openai.requests) == 1


def test_error_event_inside_the_stream(fake_openai):
    fake_openai.stream_script(["half "], error_after=1, error_message="CUDA out of memory")
    got, err = collect(ask(make_answerer(fake_openai)))
    assert got == ["half "] and err is not None
    assert "interrupted" in str(err) and "CUDA out of memory" in str(err)


def test_stream_without_finish_reason_is_interrupted(fake_openai):
    fake_openai.stream_script(["half ", "an answer"], finish_reason=None, done=False)
    got, err = collect(ask(make_answerer(fake_openai)))
    assert got == ["half ", "an answer"] and err is not None and "interrupted" in str(err)


def test_stalled_stream_times_out_within_bounded_time(fake_openai):
    fake_openai.stream_script(["start ", "never"], stall_after=1, stall_seconds=10)
    got, err = collect(ask(make_answerer(fake_openai, openai_timeout_s=0.3)))
    assert got == ["start "] and err is not None and "interrupted" in str(err)
    assert len(fake_openai.requests) == 1


def test_overall_deadline_stops_a_trickling_stream(fake_openai):
    fake_openai.stream_script([f"w{i} " for i in range(30)], chunk_delay=0.1)
    got, err = collect(ask(make_answerer(fake_openai, deadline_s=0.35)))
    assert 0 < len(got) < 30 and err is not None and "took longer" in str(err)


def test_empty_answer(fake_openai):
    fake_openai.stream_script(empty=True)
    got, err = collect(ask(make_answerer(fake_openai)))
    assert got == [] and str(err) == EMPTY_MESSAGE


def test_content_filter(fake_openai):
    fake_openai.stream_script(["Partial"], finish_reason="content_filter")
    got, err = collect(ask(make_answerer(fake_openai)))
    assert err is not None and "content filter" in str(err)


# ------------------------------------------------------------------------- clear errors
def test_wrong_key_is_401_without_retry_and_the_key_never_shows(fake_openai, caplog):
    caplog.set_level(logging.DEBUG)
    fake_openai.require_key(SECRET_KEY)
    got, err = collect(ask(make_answerer(fake_openai, openai_api_key=WRONG_KEY)))
    assert got == [] and err is not None
    assert "rejected the API key" in str(err) and "OPENAI_API_KEY" in str(err)
    assert len(fake_openai.requests) == 1  # not retried
    # the server echoed the key it was given; it must not reach the message or the logs
    assert WRONG_KEY in "".join(r.authorization or "" for r in fake_openai.requests)
    for text in (str(err), repr(err), repr(err.__cause__), caplog.text):
        assert WRONG_KEY not in text and SECRET_KEY not in text


def test_missing_key_on_a_server_that_needs_one(fake_openai):
    fake_openai.require_key(SECRET_KEY)
    got, err = collect(ask(make_answerer(fake_openai)))
    assert err is not None and "requires an API key" in str(err)


def test_a_server_error_quoting_the_key_is_scrubbed(fake_openai):
    fake_openai.fail_next(500, times=5, message=f"upstream refused {SECRET_KEY}", endpoint="chat")
    got, err = collect(ask(make_answerer(fake_openai, openai_api_key=SECRET_KEY)))
    assert err is not None and "HTTP 500" in str(err)
    assert SECRET_KEY not in str(err) and "[redacted]" in str(err)


def test_model_not_found(fake_openai):
    got, err = collect(ask(make_answerer(fake_openai, chat_model="llama9:404b")))
    assert got == [] and err is not None
    assert "'llama9:404b' is not available" in str(err) and "MARGINALIA_CHAT_MODEL" in str(err)
    assert len(fake_openai.requests) == 1


def test_context_too_long(fake_openai):
    fake_openai.set_context_chars(100)
    got, err = collect(ask(make_answerer(fake_openai)))
    assert got == [] and err is not None
    assert "too long" in str(err) and "maximum context length" in str(err)
    assert len(fake_openai.requests) == 1


def test_server_not_running(fake_openai):
    with FakeOpenAIServer() as gone:
        url = gone.base_url
    answerer = make_answerer(fake_openai, attempts=2, openai_base_url=url)
    got, err = collect(ask(answerer))
    assert got == [] and err is not None
    assert "Could not connect" in str(err) and "is it running" in str(err)


def test_no_model_configured_is_reported_when_asked(fake_openai):
    answerer = make_answerer(fake_openai, chat_model=None)
    got, err = collect(ask(answerer))
    assert got == [] and str(err) == NO_MODEL
    assert fake_openai.requests == []


def test_no_server_configured_is_reported_when_asked():
    answerer = OpenAIAnswerer(Settings(answerer="openai", chat_model="m"))
    got, err = collect(ask(answerer))
    assert got == [] and str(err) == NO_SERVER


def test_registry():
    assert answerer_class("openai") is OpenAIAnswerer
    answerer = get_answerer(Settings(answerer="openai", chat_model="m",
                                     openai_base_url="localhost:11434"))
    assert isinstance(answerer, OpenAIAnswerer)
    assert answerer.server == "http://localhost:11434/v1" and answerer.model == "m"


# ------------------------------------------------------------------------- through the chat engine
def _ingest(ws: Workspace) -> None:
    events = list(ingest_bytes(ws.store, ws.embedder, ws.settings, "mill.txt", MILL.encode()))
    assert events[-1]["type"] == "done", events[-1]


def _saved(ws: Workspace) -> tuple[int, int]:
    conn = ws.store.conn
    return (
        conn.execute("SELECT COUNT(*) FROM conversations").fetchone()[0],
        conn.execute("SELECT COUNT(*) FROM messages").fetchone()[0],
    )


@pytest.fixture
def openai_ws(db_path, fake_openai, local_embedder):
    """OpenAI-compatible answers (real SDK -> fake server) over local retrieval, fast retries."""
    settings = fake_openai.settings(
        db_path=str(db_path), embedder="local", openai_api_key=SECRET_KEY, openai_timeout_s=0.5
    )
    ws = Workspace(settings)
    ws.__dict__["embedder"] = local_embedder
    ws.__dict__["answerer"] = OpenAIAnswerer(
        settings, retry=RetryPolicy(attempts=3, initial_delay=0.01, max_delay=0.02,
                                    sleep=SleepRecorder())
    )
    _ingest(ws)
    yield ws
    ws.close()


def test_engine_streams_meta_tokens_done_with_citations_in_the_retrieved_set(openai_ws):
    events = list(openai_ws.ask("When was the mill built?"))
    assert events[0]["type"] == "meta" and events[-1]["type"] == "done", events[-1]
    tokens = [e for e in events if e["type"] == "token"]
    assert len(tokens) > 1
    retrieved = {s["n"] for s in events[0]["sources"]}
    cited = set(events[-1]["citations"])
    assert cited and cited <= retrieved and events[-1]["invalid_citations"] == []
    assert _saved(openai_ws) == (1, 2)


FAULTS = {
    "429": lambda f: f.fail_next(429, times=9, endpoint="chat", retry_after=0.01),
    "500": lambda f: f.fail_next(500, times=9, endpoint="chat"),
    "401": lambda f: f.require_key("sk-other-key-entirely"),
    "model not found": lambda f: f.set_models(["something-else"]),
    "context too long": lambda f: f.set_context_chars(50),
    "cut mid-answer": lambda f: f.stream_script(["The mill ", "was "], drop_after=1),
    "malformed chunk": lambda f: f.stream_script(["The mill ", "was "], malformed_after=1),
    "error event": lambda f: f.stream_script(["The mill "], error_after=1),
    "slow first token": lambda f: f.stream_script(["x"], first_token_delay=5, times=9),
    "stall": lambda f: f.stream_script(["The mill "], stall_after=1, stall_seconds=5),
    "server down": lambda f: f.drop_next(times=9, endpoint="chat"),
}
RECOVERS = {
    "429 once": lambda f: f.fail_next(429, endpoint="chat", retry_after=0.01),
    "500 once": lambda f: f.fail_next(500, endpoint="chat"),
    "cut before text": lambda f: f.stream_script(drop_after=0),
    "slow first token once": lambda f: f.stream_script(["x"], first_token_delay=5),
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_every_fault_ends_in_an_error_event_and_saves_nothing(openai_ws, fake_openai, fault, caplog):
    caplog.set_level(logging.DEBUG)
    FAULTS[fault](fake_openai)
    events = list(openai_ws.ask("When was the mill built?"))
    assert events[0]["type"] == "meta"
    assert [e["type"] for e in events[1:-1]] == ["token"] * (len(events) - 2)
    end = events[-1]
    assert end["type"] == "error", end
    assert end["reason"] == "answer" and end["message"]
    assert "Traceback" not in end["message"] and "Traceback" not in caplog.text
    assert SECRET_KEY not in end["message"] and SECRET_KEY not in caplog.text
    assert _saved(openai_ws) == (0, 0)  # nothing half-written
    assert len(fake_openai.requests_for("chat")) <= 3  # bounded retries


@pytest.mark.parametrize("fault", sorted(RECOVERS))
def test_transient_faults_before_the_first_token_end_in_done(openai_ws, fake_openai, fault):
    RECOVERS[fault](fake_openai)
    events = list(openai_ws.ask("When was the mill built?"))
    assert events[-1]["type"] == "done", events[-1]
    assert len(fake_openai.requests_for("chat")) == 2
    assert _saved(openai_ws) == (1, 2)
