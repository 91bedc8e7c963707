"""Conversations people can find again: dates, rename, search by title and text, Markdown
export with the cited passages; in the core, the CLI and the Chat page."""

from __future__ import annotations

import io
import re
from dataclasses import replace
from datetime import date

import pytest
import streamlit as st
from conftest import ROOT, SAMPLES, message
from streamlit.testing.v1 import AppTest

from marginalia_app import presentation as fmt
from marginalia_core import cli
from marginalia_core.chat.export import conversation_markdown, export_filename
from marginalia_core.errors import InvalidInputError, NotFoundError
from marginalia_core.store.records import Conversation

FERMAT = "What did Fermat write in the margin?"
BOOKS = "What temperature and humidity are best for old books?"


def _samples(ws) -> None:
    for path in sorted(SAMPLES.iterdir()):
        if path.suffix in (".md", ".pdf"):
            assert list(ws.ingest(path.name, path.read_bytes()))[-1]["type"] == "done"


def _ask(ws, question: str, cid: str | None = None) -> str:
    end = list(ws.ask(question, cid))[-1]
    assert end["type"] == "done", end
    return end["conversation_id"]


@pytest.fixture
def library(workspace):
    _samples(workspace)
    return workspace


def test_rename_keeps_the_conversation_and_refuses_a_blank_title(library):
    cid = _ask(library, FERMAT)
    before = library.conversation(cid)
    renamed = library.rename_conversation(cid, "  Fermat's   note  ")
    assert renamed.title == "Fermat's note" and renamed.updated == before.updated
    with pytest.raises(InvalidInputError):
        library.rename_conversation(cid, "   ")
    assert library.conversation(cid).title == "Fermat's note"
    with pytest.raises(NotFoundError):
        library.rename_conversation("nope", "x")


def test_search_finds_titles_and_message_text(library):
    fermat = _ask(library, FERMAT)
    books = _ask(library, BOOKS)
    library.rename_conversation(books, "Storing the family bible")
    assert [c.id for c in library.search_conversations("family BIBLE")] == [books]
    # words of an answer, not of any title
    hits = library.search_conversations("Diophantus")
    assert [c.id for c in hits] == [fermat] and "Diophantus" in hits[0].matched
    assert library.search_conversations("no such words anywhere") == []
    assert {c.id for c in library.search_conversations("")} == {fermat, books}
    # LIKE wildcards are text
    assert library.search_conversations("%") == [] and library.search_conversations("_") == []


def test_export_is_markdown_with_the_cited_passages(library):
    cid = _ask(library, FERMAT)
    cid = _ask(library, BOOKS, cid)
    name, markdown = library.export_conversation(cid)
    assert name == "what-did-fermat-write-in-the-margin.md"
    messages = library.messages(cid)
    assert markdown.startswith("# What did Fermat write in the margin?\n")
    assert "## 1. What did Fermat write in the margin?" in markdown
    assert "## 2. What temperature and humidity are best for old books?" in markdown
    for answer in (m for m in messages if m.role == "assistant"):
        assert answer.content.strip() in markdown  # the answer with its [n] marks
        for source in answer.sources:
            assert f"\\[{source['n']}\\] " in markdown
    assert "caring\\-for\\-old\\-books\\.pdf · p. 1" in markdown  # PDFs say their page
    # a Markdown file is cited by its sections (by heading), never a page
    assert re.search(r"a\\-short\\-history\\-of\\-marginalia\\.md · sections? \u2018", markdown)
    assert "marginalia\\.md · p." not in markdown
    assert "> " in markdown and "Pierre de Fermat" in markdown


def test_export_quotes_document_markup_as_text():
    conv = Conversation(id="c", title="Hostile <b>", created="2026-01-02T10:00:00+00:00",
                        updated="2026-01-02T10:05:00+00:00")
    messages = [
        message(role="user", content="What?"),
        message(content="It says so [1]. <img src=x>",
                sources=[{"n": 1, "document_name": "x.md", "content": "# Head\n\n<script>x</script>"}]),
    ]
    out = conversation_markdown(conv, messages, now="2026-01-03T00:00:00+00:00")
    assert "# Hostile \\<b\\>" in out and "\\<img src=x>" in out
    assert "> \\# Head" in out and "> \\<script\\>x\\</script\\>" in out
    assert "exported from Marginalia 2026-01-03 00:00 UTC" in out
    assert export_filename(replace(conv, title="  ???  ")) == "conversation.md"


def test_cli_conversations_search_rename_export(library, db_path):
    cid = _ask(library, FERMAT)

    def run(*argv: str) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        code = cli.main([*argv, "--db", str(db_path), "--embedder", "local", "--answerer",
                         "extractive"], out=out, err=err)
        return code, out.getvalue(), err.getvalue()

    code, out, _ = run("conversations", "rename", cid, "Fermat", "notes")
    assert code == 0 and '"title":"Fermat notes"' in out
    code, out, _ = run("conversations", "search", "Diophantus")
    assert code == 0 and cid in out and '"matched"' in out
    code, out, _ = run("conversations", "export", cid)
    assert code == 0 and out.startswith("# Fermat notes\n") and "Cited passages" in out
    code, _, err = run("conversations", "export", "nope")
    assert code != 0 and "No conversation" in err
    code, _, err = run("conversations", "rename", cid)
    assert code != 0 and "takes 2 argument" in err


def test_day_labels_group_the_sidebar():
    today = date(2026, 12, 3)
    assert fmt.day_label("2026-12-03T09:00:00", today) == "Today"
    assert fmt.day_label("2026-12-02T09:00:00", today) == "Yesterday"
    assert fmt.day_label("2026-11-30T09:00:00", today) == "Monday"
    assert fmt.day_label("2026-10-01T09:00:00", today) == "1 Oct 2026"
    assert fmt.snippet("a " * 50 + "needle in the hay " + "b " * 50, "NEEDLE", 40).startswith("…")
    assert "needle" in fmt.snippet("a " * 50 + "needle in the hay " + "b " * 50, "NEEDLE", 40)


# --------------------------------------------------------------------------- the page

@pytest.fixture
def app(db_path, monkeypatch):
    monkeypatch.setenv("MARGINALIA_DB", str(db_path))
    monkeypatch.setenv("MARGINALIA_EMBEDDER", "local")
    monkeypatch.setenv("MARGINALIA_ANSWERER", "extractive")
    st.cache_resource.clear()
    yield
    st.cache_resource.clear()


def test_the_page_shows_dates_renames_searches_and_exports(app, library):
    fermat = _ask(library, FERMAT)
    books = _ask(library, BOOKS)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60).run()
    assert not at.exception
    assert "Today" in [c.value for c in at.sidebar.caption]  # grouped by day
    assert at.sidebar.button(key=f"conv-{books}").proto.help.startswith("Last message ")

    # search by the text of an answer: only that conversation is listed, with the match
    at.sidebar.text_input(key="conversation_search").set_value("Diophantus").run()
    assert not at.exception
    listed = [b.key for b in at.sidebar.button if (b.key or "").startswith("conv-")]
    assert listed == [f"conv-{fermat}"]
    assert any("Diophantus" in c.value for c in at.sidebar.caption)
    at.sidebar.text_input(key="conversation_search").set_value("zebra crossings").run()
    assert any("No conversation mentions" in c.value for c in at.sidebar.caption)
    at.sidebar.text_input(key="conversation_search").set_value("").run()

    # open it: its title, dates and message count; the sidebar is told to close (phones)
    at.sidebar.button(key=f"conv-{fermat}").click().run()
    assert not at.exception
    assert any(re.search(r"Started \d{4}-\d\d-\d\d \d\d:\d\d · last message .* · 2 messages",
                         fmt_plain(c.value)) for c in at.caption)
    assert "close_sidebar" not in at.session_state  # the closing script was rendered once
    # rename through the form
    at.text_input(key=f"rename-{fermat}").set_value("Fermat's marvellous proof")
    at.button(key=f"FormSubmitter:rename-form-{fermat}-Save").click().run()
    assert not at.exception
    assert library.conversation(fermat).title == "Fermat's marvellous proof"
    assert any("Fermat's marvellous proof" in fmt_plain(m.value) for m in at.markdown)
    # a blank title is refused, with a reason, and nothing changes
    at.text_input(key=f"rename-{fermat}").set_value("   ")
    at.button(key=f"FormSubmitter:rename-form-{fermat}-Save").click().run()
    assert at.error and "needs a title" in at.error[0].value
    assert library.conversation(fermat).title == "Fermat's marvellous proof"
    # the export button carries the Markdown of this conversation
    download = at.get("download_button")[0]
    assert download.proto.label == "Export"
    name, markdown = library.export_conversation(fermat)
    assert name == "fermat-s-marvellous-proof.md" and "Cited passages" in markdown


def fmt_plain(markdown: str) -> str:
    return re.sub(r"\\(.)", r"\1", markdown)
