"""Model-server mode end to end against the fake OpenAI-compatible server: settings (environment
and ``.streamlit/secrets.toml``), the mode summary and model list, the CLI as a subprocess, the
app through AppTest (sidebar, model picker, streamed answer, clear errors) and one browser test."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request

import pytest
import streamlit as st
from conftest import ROOT, offline_cli_env
from fake_openai import CHAT_MODEL, EMBED_MODEL
from streamlit.testing.v1 import AppTest

from marginalia_core.config import Settings, load_settings
from marginalia_core.errors import ModelServerError
from marginalia_core.workspace import Workspace

APP = str(ROOT / "app.py")
SECRET_KEY = "sk-marginalia-APP-secret-93e1f0c4d2"
SOURDOUGH = b"""# Sourdough notes

A sourdough starter is a mixture of flour and water that wild yeast and bacteria ferment.
Feed the starter every day with equal weights of flour and water to keep it active.
A healthy starter doubles in size within six hours of feeding at room temperature.
"""
QUESTION = "How often should I feed a sourdough starter?"


# ------------------------------------------------------------------------- settings
def test_environment_names_and_precedence():
    env = {
        "MARGINALIA_ANSWERER": "openai",
        "MARGINALIA_EMBEDDER": "openai",
        "OPENAI_API_BASE": "http://old-name:8000/v1",
        "OPENAI_API_KEY": SECRET_KEY,
        "MARGINALIA_CHAT_MODEL": "llama3.2",
        "MARGINALIA_EMBED_MODEL": "nomic-embed-text",
    }
    s = load_settings(env=env)
    assert (s.answerer_name, s.embedder_name) == ("openai", "openai")
    assert s.openai_base_url == "http://old-name:8000/v1"  # the older name is accepted
    assert (s.chat_model, s.embed_model, s.openai_api_key) == (
        "llama3.2", "nomic-embed-text", SECRET_KEY
    )
    assert SECRET_KEY not in repr(s)
    both = load_settings(env={**env, "OPENAI_BASE_URL": "http://new-name:8000/v1"})
    assert both.openai_base_url == "http://new-name:8000/v1"  # OPENAI_BASE_URL wins


def test_secrets_file_keys_and_environment_wins():
    secrets = {
        "MARGINALIA_ANSWERER": "openai",
        "OPENAI_BASE_URL": "http://from-secrets:1234/v1",
        "OPENAI_API_KEY": SECRET_KEY,
        "MARGINALIA_CHAT_MODEL": "qwen2.5",
    }
    s = load_settings(env={}, secrets=secrets)
    assert (s.answerer_name, s.openai_base_url, s.openai_api_key, s.chat_model) == (
        "openai", "http://from-secrets:1234/v1", SECRET_KEY, "qwen2.5"
    )
    s = load_settings(env={"OPENAI_BASE_URL": "http://from-env:1/v1"}, secrets=secrets)
    assert s.openai_base_url == "http://from-env:1/v1"


def test_subprocess_environment_drops_the_developers_openai_settings(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-developer-own")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://developer:1/v1")
    env = offline_cli_env()
    assert not [k for k in env if k.startswith("OPENAI_")]


def test_no_test_sees_a_developers_openai_settings():
    assert not [k for k in os.environ if k.startswith("OPENAI_")]
    assert load_settings().openai_base_url is None and load_settings().openai_api_key is None


def test_the_server_label_never_carries_credentials():
    from marginalia_core.providers.openai_client import base_url, server_label

    url = base_url(Settings(openai_base_url="https://user:hunter2@Models.Example:8443/v1/?k=zz"))
    assert server_label(url) == "https://models.example:8443/v1"
    assert base_url(Settings(openai_base_url="localhost:11434")) == "http://localhost:11434/v1"
    assert base_url(Settings(openai_api_key=SECRET_KEY)) == "https://api.openai.com/v1"


def test_mode_summary_names_server_and_model(fake_openai, db_path):
    ws = Workspace(fake_openai.settings(db_path=str(db_path), openai_api_key=SECRET_KEY))
    summary = ws.mode_summary()
    assert summary["mode"] == "Model server"
    assert summary["server"] == fake_openai.base_url
    assert (summary["chat_model"], summary["embed_model"]) == (CHAT_MODEL, EMBED_MODEL)
    assert SECRET_KEY not in json.dumps(summary)
    offline = Workspace(Settings(db_path=str(db_path), embedder="local", answerer="extractive"))
    assert offline.mode_summary()["mode"] == "Offline" and offline.mode_summary()["server"] == ""


def test_list_models(fake_openai):
    ws = Workspace(fake_openai.settings())
    assert ws.list_models() == sorted([CHAT_MODEL, EMBED_MODEL])
    fake_openai.set_models([])
    with pytest.raises(ModelServerError, match="lists no models"):
        ws.list_models()
    fake_openai.set_models(None)  # GET /v1/models is a 404 on this server
    with pytest.raises(ModelServerError, match="does not list its models"):
        ws.list_models()


# ------------------------------------------------------------------------- CLI (subprocess)
def test_cli_ask_streams_meta_tokens_done_with_citations_in_the_retrieved_set(
    fake_openai, tmp_path
):
    doc = tmp_path / "sourdough.md"
    doc.write_bytes(SOURDOUGH)
    env = {**offline_cli_env(), **fake_openai.env(OPENAI_API_KEY=SECRET_KEY),
           "MARGINALIA_DB": str(tmp_path / "m.db")}

    def run(*argv: str) -> tuple[subprocess.CompletedProcess, list[dict]]:
        proc = subprocess.run(
            [sys.executable, "-m", "marginalia_core", *argv],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
        )
        return proc, [json.loads(line) for line in proc.stdout.splitlines()]

    proc, lines = run("ingest", str(doc))
    assert proc.returncode == 0 and lines[-1]["type"] == "done", proc.stderr
    proc, lines = run("ask", QUESTION)
    assert proc.returncode == 0, proc.stderr
    types = [e["type"] for e in lines]
    assert types[0] == "meta" and types[-1] == "done"
    assert set(types[1:-1]) == {"token"} and len(types) > 3
    retrieved = {s["n"] for s in lines[0]["sources"]}
    assert lines[-1]["citations"] and set(lines[-1]["citations"]) <= retrieved
    assert "".join(e["text"] for e in lines if e["type"] == "token").startswith(
        "According to the sources"
    )
    assert fake_openai.requests_for("chat")[0].body["model"] == CHAT_MODEL
    assert SECRET_KEY not in proc.stdout + proc.stderr

    # a fault: an error event and a non-zero exit, never a traceback
    fake_openai.set_models([EMBED_MODEL])  # the chat model is gone
    proc, lines = run("ask", QUESTION)
    assert proc.returncode != 0 and lines[-1]["type"] == "error"
    assert "not available" in lines[-1]["message"]
    assert "Traceback" not in proc.stderr and SECRET_KEY not in proc.stdout + proc.stderr


# ------------------------------------------------------------------------- the app (AppTest)
@pytest.fixture
def openai_env(db_path, monkeypatch, fake_openai):
    for name, value in fake_openai.env(OPENAI_API_KEY=SECRET_KEY).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("MARGINALIA_DB", str(db_path))
    st.cache_resource.clear()
    st.cache_data.clear()
    yield fake_openai
    st.cache_resource.clear()
    st.cache_data.clear()


def _seed(fake, db_path) -> None:
    ws = Workspace(fake.settings(db_path=str(db_path), openai_api_key=SECRET_KEY))
    end = list(ws.ingest("sourdough.md", SOURDOUGH))[-1]
    assert end["type"] == "done", end
    ws.close()


def _everything(at: AppTest) -> str:
    parts = [m.value for m in at.markdown] + [m.value for m in at.sidebar.markdown]
    parts += [c.value for c in at.caption] + [c.value for c in at.sidebar.caption]
    parts += [e.value for e in at.error] + [str(s.value) for s in at.sidebar.selectbox]
    return "\n".join(parts)


def test_chat_page_streams_from_the_model_server(openai_env, db_path):
    _seed(openai_env, db_path)
    at = AppTest.from_file(APP, default_timeout=60).run()
    assert not at.exception
    assert any("Model server mode" in v for v in at.sidebar.markdown.values)
    caption = " ".join(c.value for c in at.sidebar.caption).replace("\\", "")
    assert CHAT_MODEL in caption and EMBED_MODEL in caption
    assert f"127.0.0.1:{openai_env.port}/v1" in caption
    picker = at.sidebar.selectbox(key="chat_model_select")
    assert picker.options == sorted([CHAT_MODEL, EMBED_MODEL]) and picker.value == CHAT_MODEL

    at.chat_input[0].set_value(QUESTION).run()
    assert not at.exception and not at.error
    answer = at.chat_message[1].markdown[0].value
    assert answer.startswith("According to the sources") and "[\\[1\\]](#src-" in answer  # a mark linking to its margin card
    assert at.pills and at.pills[0].options[0].startswith("\\[1\\] sourdough\\.md")
    (chat,) = openai_env.requests_for("chat")
    assert chat.body["stream"] is True and chat.body["messages"][0]["role"] == "system"
    assert SECRET_KEY not in _everything(at)


def test_choosing_a_model_in_the_sidebar_is_used_for_the_next_answer(openai_env, db_path):
    _seed(openai_env, db_path)
    openai_env.set_models([CHAT_MODEL, EMBED_MODEL, "other-chat"])
    at = AppTest.from_file(APP, default_timeout=60).run()
    at.sidebar.selectbox(key="chat_model_select").set_value("other-chat").run()
    assert not at.exception
    assert "other-chat ·" in " ".join(c.value for c in at.sidebar.caption).replace("\\", "")
    at.chat_input[0].set_value(QUESTION).run()
    assert not at.exception and not at.error
    assert openai_env.requests_for("chat")[-1].body["model"] == "other-chat"


def test_a_server_without_a_model_list_gets_a_text_box(openai_env, db_path):
    _seed(openai_env, db_path)
    openai_env.set_models(None)
    at = AppTest.from_file(APP, default_timeout=60).run()
    assert not at.exception and not at.sidebar.selectbox
    box = at.sidebar.text_input(key="chat_model_text")
    assert box.value == CHAT_MODEL
    assert any("does not list its models" in c.value for c in at.sidebar.caption)
    box.set_value("typed-model").run()
    at.chat_input[0].set_value(QUESTION).run()
    assert not at.exception
    assert openai_env.requests_for("chat")[-1].body["model"] == "typed-model"


def test_a_missing_model_is_a_clear_error_and_nothing_is_saved(openai_env, db_path):
    _seed(openai_env, db_path)
    openai_env.set_models([EMBED_MODEL])
    at = AppTest.from_file(APP, default_timeout=60).run()
    at.chat_input[0].set_value(QUESTION).run()
    assert not at.exception
    message = at.error[0].value.replace("\\", "") if at.error else ""
    assert "'fake-chat' is not available" in message and "MARGINALIA_CHAT_MODEL" in message
    ws = Workspace(openai_env.settings(db_path=str(db_path)))
    assert ws.store.list_conversations() == []
    ws.close()


def test_settings_from_secrets(openai_env, db_path, monkeypatch):
    _seed(openai_env, db_path)
    for name in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "MARGINALIA_CHAT_MODEL"):
        monkeypatch.delenv(name)
    openai_env.require_key(SECRET_KEY)
    at = AppTest.from_file(APP, default_timeout=60)
    at.secrets["OPENAI_BASE_URL"] = openai_env.base_url
    at.secrets["OPENAI_API_KEY"] = SECRET_KEY
    at.secrets["MARGINALIA_CHAT_MODEL"] = CHAT_MODEL
    at.run()
    assert not at.exception
    at.chat_input[0].set_value(QUESTION).run()
    assert not at.exception and not at.error
    assert at.chat_message[1].markdown[0].value.startswith("According to the sources")
    assert SECRET_KEY not in _everything(at)


# ------------------------------------------------------------------------- the browser
@pytest.mark.browser
def test_browser_chat_streams_from_the_model_server(fake_openai, tmp_path):
    import test_browser as tb

    tb._require(shutil.which("chromium") is not None, "chromium is not installed")
    try:
        from playwright.sync_api import expect, sync_playwright
    except ImportError:
        tb._require(False, "the playwright Python package is not installed")
    _seed(fake_openai, tmp_path / "marginalia.db")
    fake_openai.stream_script(
        ["According to ", "the sources, ", "feed the starter ", "every day ", "[1]."],
        chunk_delay=0.15,
    )
    port = tb._free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GEMINI_", "GOOGLE_"))}
    env.update(fake_openai.env(OPENAI_API_KEY=SECRET_KEY))
    env.update(MARGINALIA_DB=str(tmp_path / "marginalia.db"), HF_HUB_OFFLINE="1")
    log = open(tmp_path / "streamlit.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(port),
         "--server.address", "127.0.0.1", "--server.headless", "true",
         "--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{url}/_stcore/health", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail("streamlit did not start:\n"
                            + (tmp_path / "streamlit.log").read_text()[-3000:])
            time.sleep(0.2)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=shutil.which("chromium"),
                                        args=tb.CHROMIUM_ARGS)
            pg = browser.new_page(viewport=tb.VIEWPORT)
            pg.set_default_timeout(30_000)
            pg.goto(url)
            tb.idle(pg)
            expect(pg.get_by_text("Model server mode")).to_be_visible()
            expect(pg.locator('[data-testid="stSidebar"]')).to_contain_text(CHAT_MODEL)
            tb.watch_answer_lengths(pg)
            box = pg.locator('[data-testid="stChatInputTextArea"]')
            box.fill(QUESTION)
            box.press("Enter")
            pill = pg.get_by_role("radio", name=re.compile(r"^\[1\] sourdough\.md"))
            expect(pill).to_be_visible(timeout=60_000)
            tb.idle(pg)
            lengths = [n for n in pg.evaluate("window.__lengths") if n]
            assert len(set(lengths)) >= 3, f"the answer did not stream: {lengths[:20]}"
            answer = pg.locator('[data-testid="stChatMessage"]').last
            expect(answer).to_contain_text("feed the starter every day")
            assert SECRET_KEY not in pg.content()
            browser.close()
        assert fake_openai.requests_for("chat")
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


@pytest.mark.parametrize("page", [None, "pages/documents.py", "pages/inspector.py"])
def test_every_page_renders_when_the_server_is_down(openai_env, db_path, monkeypatch, page):
    _seed(openai_env, db_path)
    with type(openai_env)() as gone:
        dead = gone.base_url
    monkeypatch.setenv("OPENAI_BASE_URL", dead)
    monkeypatch.setenv("MARGINALIA_CHAT_MODEL", "never-dimension-probed")
    monkeypatch.setenv("MARGINALIA_EMBED_MODEL", "never-dimension-probed")
    at = AppTest.from_file(APP, default_timeout=60).run()
    assert not at.exception
    if page:
        at.switch_page(page).run()
        assert not at.exception
    else:
        at.chat_input[0].set_value(QUESTION).run()
        assert not at.exception
        assert at.error and "Could not connect" in at.error[0].value.replace("\\", "")
    assert SECRET_KEY not in _everything(at)


def test_a_missing_embed_model_is_said_at_start_not_a_traceback(openai_env, monkeypatch):
    monkeypatch.delenv("MARGINALIA_EMBED_MODEL")
    at = AppTest.from_file(APP, default_timeout=60).run()
    assert not at.exception
    message = at.error[0].value.replace("\\", "") if at.error else ""
    assert "could not start" in message and "MARGINALIA_EMBED_MODEL" in message


def test_cli_without_a_server_is_an_error_event(tmp_path):
    env = {**offline_cli_env(), "MARGINALIA_ANSWERER": "openai", "MARGINALIA_EMBEDDER": "local",
           "MARGINALIA_CHAT_MODEL": "llama3.2", "MARGINALIA_DB": str(tmp_path / "m.db")}
    doc = tmp_path / "sourdough.md"
    doc.write_bytes(SOURDOUGH)
    subprocess.run([sys.executable, "-m", "marginalia_core", "ingest", str(doc)],
                   cwd=ROOT, env=env, capture_output=True, timeout=120, check=True)
    proc = subprocess.run([sys.executable, "-m", "marginalia_core", "ask", QUESTION],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    last = json.loads(proc.stdout.splitlines()[-1])
    assert proc.returncode != 0 and last["type"] == "error"
    assert "OPENAI_BASE_URL" in last["message"] and "Traceback" not in proc.stderr
