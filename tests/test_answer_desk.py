"""Questions that are never lost (issue 25): the AnswerDesk answers each conversation's
questions in order on a background thread, a question asked meanwhile waits its turn, and
Stop saves what was written, marked "stopped". Real parts: the chat engine, a SQLite library
with the sample documents, the `openai` SDK against the fake model server (its ``hold_after``
gate makes "while an answer is being written" exact, with no timing)."""

from __future__ import annotations

import pytest

from marginalia_app.samples import sample_files
from marginalia_core.chat.desk import DONE, FAILED, QUEUED, RUNNING, STOPPED, AnswerDesk
from marginalia_core.citations import StreamRenumberer, renumber
from marginalia_core.workspace import Workspace

FERMAT = "What did Fermat write in the margin?"
BOOKS = "How should old books be stored?"


@pytest.fixture
def ws(fake_openai, db_path, local_embedder):
    workspace = Workspace(fake_openai.settings(db_path=str(db_path), embedder="local",
                                               embed_model=None, openai_timeout_s=20.0))
    workspace.__dict__["embedder"] = local_embedder
    for path in sample_files():
        list(workspace.ingest(path.name, path.read_bytes()))
    yield workspace
    workspace.close()


def asker(ws):
    return lambda run: ws.ask(run.question, run.conversation_id, documents=run.documents,
                              stop=run.stop)


def settle(desk: AnswerDesk, run) -> None:
    """Until the run has ended (its answer saved, stopped or failed)."""
    while not run.finished:
        desk.wait(run, desk.snapshot(run), 0.2)


def test_a_question_asked_while_another_is_answered_waits_then_both_are_saved(ws, fake_openai):
    fake_openai.stream_script(hold_after=2)  # the first answer stops after 2 pieces, held
    desk = AnswerDesk()
    cid = ws.new_conversation_id()
    first = desk.submit(asker(ws), FERMAT, cid)
    while not first.text:
        desk.wait(first, desk.snapshot(first), 0.2)
    second = desk.submit(asker(ws), BOOKS, cid)
    assert [r.state for r in desk.runs(cid)] == [RUNNING, QUEUED]  # the second waits its turn
    assert desk.busy() == [cid]
    fake_openai.release()
    settle(desk, first)
    settle(desk, second)
    assert (first.state, second.state) == (DONE, DONE)
    assert desk.runs(cid) == [] and desk.busy() == []
    messages = ws.messages(cid)
    assert [(m.role, m.content) for m in messages][0::2] == [("user", FERMAT),
                                                                   ("user", BOOKS)]
    assert all(m.status == "complete" for m in messages)
    assert messages[1].id == first.message_id and messages[3].id == second.message_id
    # asked in order: the second question's request carried the first exchange as history
    second_request = fake_openai.requests_for("chat")[-1].body["messages"]
    assert any(FERMAT in str(m.get("content")) for m in second_request)


def test_stop_saves_what_was_written_marked_stopped(ws, fake_openai):
    fake_openai.stream_script(hold_after=2)
    desk = AnswerDesk()
    cid = ws.new_conversation_id()
    run = desk.submit(asker(ws), FERMAT, cid)
    while len(run.text) == 0:
        desk.wait(run, desk.snapshot(run), 0.2)
    written = run.text
    assert desk.stop(run.id)
    fake_openai.release()
    settle(desk, run)
    assert run.state == STOPPED and run.end["status"] == "stopped"
    user, answer = ws.messages(cid)
    assert user.content == FERMAT and answer.status == "stopped"
    assert answer.content.startswith(written.strip()[:10]) and len(answer.content) < 200
    assert "stopped" in ws.export_conversation(cid)[1].lower()


def test_a_queued_question_can_be_removed_before_it_is_asked(ws, fake_openai):
    fake_openai.stream_script(hold_after=1)
    desk = AnswerDesk()
    cid = ws.new_conversation_id()
    first = desk.submit(asker(ws), FERMAT, cid)
    second = desk.submit(asker(ws), BOOKS, cid)
    assert desk.stop(second.id) and [r.id for r in desk.runs(cid)] == [first.id]
    fake_openai.release()
    settle(desk, first)
    assert [m.content for m in ws.messages(cid)][0::2] == [FERMAT]
    assert len(fake_openai.requests_for("chat")) == 1


def test_a_failed_answer_stays_listed_with_its_error_until_the_next_question(ws, fake_openai):
    fake_openai.fail_next(500, times=10, endpoint="chat")
    desk = AnswerDesk()
    cid = ws.new_conversation_id()
    run = desk.submit(asker(ws), FERMAT, cid)
    settle(desk, run)
    assert run.state == FAILED and run.end["type"] == "error"
    assert desk.runs(cid) == [run] and not ws.has_conversation(cid)  # nothing half-saved
    fake_openai.reset()
    retry = desk.submit(asker(ws), FERMAT, cid)  # the same id starts the conversation now
    settle(desk, retry)
    assert retry.state == DONE and desk.runs(cid) == [] and ws.has_conversation(cid)


@pytest.mark.parametrize("pieces", [
    ["See [3", "] and [1", ", 3]. Then [2]."],
    ["[2][2] x [9] y [1-3]"],
    ["a [", "1", "]", " b [2, ", "5] c [7"],
])
def test_streamed_marks_are_renumbered_as_done_renumbers_them(pieces):
    marks = StreamRenumberer(5)
    out = "".join(marks.feed(p) for p in pieces) + marks.finish()
    expected, mapping = renumber("".join(pieces), 5)
    assert out == expected and marks.mapping == mapping
    assert marks.cited == sorted(mapping, key=mapping.get)
