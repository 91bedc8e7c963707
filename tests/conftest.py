"""Shared fixtures: real SQLite files in temporary folders, the real local embedder (loaded once),
the fake Gemini and OpenAI-compatible servers, and paths to ../shared/eval."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED_EVAL = ROOT.parent / "shared" / "eval"
PDFS = SHARED_EVAL / "pdfs"
SAMPLES = ROOT / "samples"

# No test may reach a real model service or hub.
os.environ["HF_HUB_OFFLINE"] = "1"
for var in ("GEMINI_API_KEY", "GOOGLE_API_KEY", "GOOGLE_GEMINI_BASE_URL"):
    os.environ.pop(var, None)
for var in [v for v in os.environ if v.startswith("OPENAI_")]:  # a developer's own server/key
    os.environ.pop(var, None)

from fake_gemini import fake_gemini_fixture, fake_gemini_server_fixture  # noqa: E402,F401
from fake_openai import fake_openai_fixture, fake_openai_server_fixture  # noqa: E402,F401

from marginalia_core.config import Settings  # noqa: E402
from marginalia_core.store.sqlite import Store  # noqa: E402


def offline_cli_env() -> dict[str, str]:
    """Environment for a ``python -m marginalia_core`` subprocess: offline, no key, this repo
    importable, and none of the developer's own Marginalia settings."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("MARGINALIA_", "GEMINI_", "OPENAI_"))
    }
    env.pop("GOOGLE_API_KEY", None)
    env.pop("GOOGLE_GEMINI_BASE_URL", None)
    env["HF_HUB_OFFLINE"] = "1"
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


@pytest.fixture(autouse=True)
def _no_openai_environment(monkeypatch):
    """Every test starts without OPENAI_* variables (a developer's server or key, or one a
    previous test set without monkeypatch), so nothing reaches a real model server."""
    for var in [v for v in os.environ if v.startswith("OPENAI_")]:
        monkeypatch.delenv(var)


def requires_eval(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"{path} is not present (../shared/eval is read-only shared data)")
    return path


@pytest.fixture
def pdf_dir() -> Path:
    return requires_eval(PDFS)


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "marginalia.db"


@pytest.fixture
def store(db_path: Path):
    s = Store(db_path)
    yield s
    s.close()


@pytest.fixture(scope="session")
def local_embedder():
    from marginalia_core.providers.embeddings.local import LocalEmbedder

    return LocalEmbedder()


@pytest.fixture
def settings(db_path: Path) -> Settings:
    return Settings(db_path=str(db_path), embedder="local", answerer="extractive")


@pytest.fixture
def workspace(settings: Settings, local_embedder):
    from marginalia_core.workspace import Workspace

    ws = Workspace(settings)
    ws.__dict__["embedder"] = local_embedder  # share the loaded model across tests
    yield ws
    ws.close()


@pytest.fixture
def gemini_settings(db_path: Path, fake_gemini) -> Settings:
    return Settings(
        db_path=str(db_path),
        gemini_api_key=fake_gemini.api_key,
        gemini_base_url=fake_gemini.base_url,
        gemini_timeout_s=5.0,
    )


# --------------------------------------------------------------------------- the chat margin

class MarginCard:
    """One card of the chat margin's HTML (``st.html``), as AppTest tests read it."""

    def __init__(self, attrs: dict[str, str], group: dict[str, str]):
        self.id = attrs.get("id", "")
        self.classes = set(attrs.get("class", "").split())
        self.default_group = "mg-default" in group.get("class", "").split()
        self.label = ""
        self.text = ""
        self.marked: list[str] = []  # highlighted (cited) text
        self.tags: list[str] = []  # every tag inside the card
        self.page_images: list[str] = []  # src of page view images
        self.links: list[str] = []  # href of every link (only the card's own head is one)

    @property
    def is_open(self) -> bool:
        return "mg-open" in self.classes


def margin_cards(at) -> list[MarginCard]:
    """Cards of the groups shown by default (no fragment in the URL), in order."""
    from html.parser import HTMLParser

    cards: list[MarginCard] = []

    class Parser(HTMLParser):
        def __init__(self):
            super().__init__(convert_charrefs=True)
            self.stack: list[tuple[str, dict[str, str]]] = []
            self.group: dict[str, str] = {}
            self.card: MarginCard | None = None
            self.card_depth = 0
            self.in_head = self.in_mark = False

        def handle_starttag(self, tag, attrs):
            a = {k: v or "" for k, v in attrs}
            classes = a.get("class", "").split()
            if tag in ("img", "hr", "br"):
                if self.card is not None:
                    self.card.tags.append(tag)
                    if "mg-page-img" in classes:
                        self.card.page_images.append(a.get("src", ""))
                return
            self.stack.append((tag, a))
            if "mg-group" in classes:
                self.group = a
            if "mg-card" in classes:
                self.card = MarginCard(a, self.group)
                self.card_depth = len(self.stack)
                cards.append(self.card)
            elif self.card is not None:
                self.card.tags.append(tag)
                if tag == "a":
                    self.card.links.append(a.get("href", ""))
            self.in_head = self.in_head or "mg-head" in classes
            self.in_mark = self.in_mark or tag == "mark"

        def handle_endtag(self, tag):
            if not self.stack:
                return
            _, a = self.stack.pop()
            if "mg-head" in a.get("class", "").split():
                self.in_head = False
            if tag == "mark":
                self.in_mark = False
            if self.card is not None and len(self.stack) < self.card_depth:
                self.card = None

        def handle_data(self, data):
            if self.card is None:
                return
            if self.in_head:
                self.card.label += data
            else:
                self.card.text += data
            if self.in_mark:
                self.card.marked.append(data)

    for element in at.get("html"):
        body = element.proto.body
        if body.startswith("<div class=\"mg-margin\">"):
            Parser().feed(body)
    return [c for c in cards if c.default_group]
