"""The Chat page's "Search in" choice (issue 11 item 6): a conversation limited to some
documents, chosen above the chat, shown in the margin, kept with the conversation."""

from __future__ import annotations

import pytest
import streamlit as st
from conftest import ROOT, SAMPLES
from streamlit.testing.v1 import AppTest

FERMAT = "What did Fermat write in the margin?"


@pytest.fixture
def app(db_path, monkeypatch, workspace):
    for path in sorted(SAMPLES.iterdir()):
        if path.suffix in (".md", ".pdf"):
            assert list(workspace.ingest(path.name, path.read_bytes()))[-1]["type"] == "done"
    monkeypatch.setenv("MARGINALIA_DB", str(db_path))
    monkeypatch.setenv("MARGINALIA_EMBEDDER", "local")
    monkeypatch.setenv("MARGINALIA_ANSWERER", "extractive")
    st.cache_resource.clear()
    yield workspace
    st.cache_resource.clear()


def test_a_conversation_searches_only_the_chosen_documents(app):
    docs = {d.name: d.id for d in app.documents()}
    guide = docs["how-marginalia-works.md"]
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60).run()
    choice = at.multiselect(key="scope-new")
    assert choice.label == "Search in" and choice.value == []  # all documents by default
    choice.set_value([guide]).run()
    at.chat_input[0].set_value(FERMAT).run()
    assert not at.exception
    (conv,) = app.conversations()
    assert app.conversation_documents(conv.id) == [guide]
    saved = app.messages(conv.id)[-1].sources
    assert all(s["document_id"] == guide for s in saved)
    assert any("Searching only how\\-marginalia\\-works\\.md" in c.value for c in at.caption)
    # the stored conversation's own choice is shown; widening it is kept for the next question
    scoped = at.multiselect(key=f"scope-{conv.id}")
    assert scoped.value == [guide]
    scoped.set_value([]).run()
    assert app.conversation_documents(conv.id) is None
    assert any("Searching all documents" in c.value for c in at.caption)
