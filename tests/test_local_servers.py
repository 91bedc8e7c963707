"""A local model server in one click (issue 22, item 5): probing OpenAI-compatible servers on this
machine (providers/local_servers.py) against the fake OpenAI server on a random port passed as a
candidate, the choice remembered per library (Workspace.use_local_model), and the sidebar of the
real app (AppTest) finding the server and answering through it after one click."""

from __future__ import annotations

import socket

import pytest
import streamlit as st
from conftest import ROOT
from fake_openai import CHAT_MODEL, EMBED_MODEL
from streamlit.testing.v1 import AppTest

from marginalia_core.config import Settings
from marginalia_core.errors import InvalidInputError
from marginalia_core.providers import local_servers as ls
from marginalia_core.workspace import Workspace

APP = str(ROOT / "app.py")
KEY = "sk-local-test-key-5d1e"
NOTES = b"""# Sourdough notes

A sourdough starter is a mixture of flour and water that wild yeast and bacteria ferment.
Feed the starter every day with equal weights of flour and water to keep it active.
"""
QUESTION = "How often should I feed a sourdough starter?"


def closed_port() -> int:
    """A port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ------------------------------------------------------------------------- probing
def test_candidates_are_the_usual_ports_the_configured_server_and_extras_without_duplicates():
    found = ls.candidates("localhost:11434", KEY, ["127.0.0.1:9999", "http://127.0.0.1:8080/v1"])
    bases = [c.base_url for c in found]
    assert bases[:3] == ["http://127.0.0.1:9999/v1", "http://127.0.0.1:8080/v1",
                         "http://localhost:11434/v1"]
    assert len(bases) == len(set(bases))
    for _label, port in ls.CANDIDATE_PORTS:
        assert f"http://{ls.LOCAL_HOST}:{port}/v1" in bases
    keyed = [c for c in found if c.api_key]
    assert [c.base_url for c in keyed] == ["http://localhost:11434/v1"]  # only where configured
    assert ls.candidates(None, None, ["file:///etc/passwd"], ports=()) == []


def test_a_running_server_is_found_with_its_models_and_a_closed_port_is_not(fake_openai):
    fake_openai.set_models([CHAT_MODEL, EMBED_MODEL])
    dead = f"http://127.0.0.1:{closed_port()}/v1"
    found = ls.discover(ls.candidates(None, None, [dead, fake_openai.base_url], ports=()))
    assert found == [ls.LocalServer(f"127.0.0.1:{fake_openai.port}", fake_openai.base_url,
                                    (CHAT_MODEL, EMBED_MODEL))]
    (request,) = fake_openai.requests_for("models")
    assert "authorization" not in request.headers


def test_a_server_without_a_model_list_or_wanting_a_key_is_not_offered(fake_openai):
    fake_openai.set_models(None)
    assert ls.probe(ls.Candidate("x", fake_openai.base_url)) is None
    fake_openai.set_models([CHAT_MODEL])
    fake_openai.require_key(KEY)
    assert ls.probe(ls.Candidate("x", fake_openai.base_url)) is None
    # the configured server gets its own key
    found = ls.probe(ls.Candidate("OPENAI_BASE_URL", fake_openai.base_url, KEY))
    assert found is not None and found.models == (CHAT_MODEL,)


# ------------------------------------------------------------------------- per library
def test_the_choice_is_remembered_per_library_and_switches_the_answerer(db_path, fake_openai,
                                                                          local_embedder):
    fake_openai.set_models([CHAT_MODEL])
    settings = Settings(db_path=str(db_path), embedder="local", answerer="extractive",
                        openai_api_key=KEY)
    ws = Workspace(settings, embedder=local_embedder)
    list(ws.ingest("notes.md", NOTES))
    assert ws.answerer.name == "extractive" and ws.local_model() is None
    with pytest.raises(InvalidInputError):
        ws.use_local_model(fake_openai.base_url, "")
    ws.use_local_model(f"127.0.0.1:{fake_openai.port}", CHAT_MODEL, "fake")
    assert ws.local_model() == {"server": fake_openai.base_url, "model": CHAT_MODEL,
                                "label": "fake"}
    # the same Workspace answers through it at once; the key stays home (another server)
    events = list(ws.ask(QUESTION))
    assert events[-1]["type"] == "done", events[-1]
    assert events[-1]["answer"].startswith("According to the sources")
    (chat,) = fake_openai.requests_for("chat")
    assert chat.body["model"] == CHAT_MODEL and "authorization" not in chat.headers
    # "Apply to Chat" (retrieval settings) keeps it; another Workspace on the library sees it
    list(ws.apply_settings({"top_k": 4}))
    other = Workspace(settings, embedder=local_embedder)
    assert other.answerer.name == "openai" and other.settings.retrieval.top_k == 4
    assert ws.answerer.name == "openai"  # "Apply to Chat" kept it
    other.use_local_model(None)
    ws.settings  # noqa: B018 - every operation reads the library's settings first
    assert ws.local_model() is None and ws.answerer.name == "extractive"
    other.close()
    ws.close()


# ------------------------------------------------------------------------- the sidebar
@pytest.fixture
def offline_app(db_path, monkeypatch, fake_openai, local_embedder):
    """The offline app with the fake server (random port) as an extra local candidate."""
    monkeypatch.setenv("MARGINALIA_DB", str(db_path))
    monkeypatch.setenv("MARGINALIA_EMBEDDER", "local")
    monkeypatch.setenv("MARGINALIA_ANSWERER", "extractive")
    monkeypatch.setenv("MARGINALIA_LOCAL_SERVERS", fake_openai.base_url)
    fake_openai.set_models([CHAT_MODEL])
    ws = Workspace(Settings(db_path=str(db_path), embedder="local"), embedder=local_embedder)
    assert list(ws.ingest("notes.md", NOTES))[-1]["type"] == "done"
    ws.close()
    st.cache_resource.clear()
    st.cache_data.clear()
    yield fake_openai
    st.cache_resource.clear()
    st.cache_data.clear()


def test_the_sidebar_finds_the_server_and_answers_through_it_after_one_click(offline_app, db_path):
    at = AppTest.from_file(APP, default_timeout=90).run()
    assert not at.exception
    assert any("Offline mode" in v for v in at.sidebar.markdown.values)
    use = at.sidebar.button(key="local_model_use_0")
    label = use.label.replace("\\", "")
    assert CHAT_MODEL in label and f"127.0.0.1:{offline_app.port}" in label
    use.click().run()  # the one click
    assert not at.exception
    assert any("Model server mode" in v for v in at.sidebar.markdown.values)
    at.chat_input[0].set_value(QUESTION).run()
    assert not at.exception and not at.error
    assert at.chat_message[1].markdown[0].value.startswith("According to the sources")
    assert offline_app.requests_for("chat")[-1].body["model"] == CHAT_MODEL
    # remembered with the library: a new session starts with it, and can go back
    again = AppTest.from_file(APP, default_timeout=90).run()
    assert any("Model server mode" in v for v in again.sidebar.markdown.values)
    again.sidebar.button(key="local_model_stop").click().run()
    assert any("Offline mode" in v for v in again.sidebar.markdown.values)
    ws = Workspace(Settings(db_path=str(db_path)))
    assert ws.local_model() is None
    ws.close()


def test_no_server_running_says_so(db_path, monkeypatch):
    monkeypatch.setenv("MARGINALIA_DB", str(db_path))
    monkeypatch.setenv("MARGINALIA_LOCAL_SERVERS", f"127.0.0.1:{closed_port()}")
    monkeypatch.setattr(ls, "CANDIDATE_PORTS", ())  # whatever this machine runs on them
    st.cache_data.clear()
    at = AppTest.from_file(APP, default_timeout=90).run()
    assert not at.exception
    assert any("No model server is running" in c.value for c in at.sidebar.caption)
    st.cache_data.clear()
