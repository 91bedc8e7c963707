"""The app in a real browser: `streamlit run` as a subprocess (offline settings, a temporary
database) driven by Playwright over Debian's chromium.

Skipped with a reason when chromium or playwright is missing, unless
MARGINALIA_REQUIRE_BROWSER=1 (CI), which turns that into a failure. Saves the screenshots
docs/screenshot-chat.png, docs/screenshot-documents.png and docs/screenshot-inspector.png.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from conftest import PDFS, ROOT

pytestmark = pytest.mark.browser

PDF = PDFS / "sf__pdflatex-4-pages.pdf"
DOCS = ROOT / "docs"
VIEWPORT = {"width": 1400, "height": 900}
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
IDLE = '[data-testid="stApp"][data-test-script-state="notRunning"]'
MAX_SCREENSHOT_BYTES = 500_000
HOSTILE_MD = b"""# Field notes on quinces

Quinces are hard, fragrant fruit that turn pink and soft when they are slowly cooked.
<script>window.__pwned=1</script>
<img src="http://example.invalid/x.png" onerror="window.__pwned=1">
![a tracking pixel](http://example.invalid/pixel.png)
[a link that should stay text](http://example.invalid/page)

Quince paste is made by cooking quinces with sugar for several hours until it sets.
"""


def _require(condition: bool, reason: str) -> None:
    if condition:
        return
    if os.environ.get("MARGINALIA_REQUIRE_BROWSER") == "1":
        pytest.fail(f"{reason} (MARGINALIA_REQUIRE_BROWSER=1)")
    pytest.skip(reason)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def chromium_path() -> str:
    path = shutil.which("chromium")
    _require(path is not None, "chromium is not installed (apt-get install -y chromium)")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        _require(False, "the playwright Python package is not installed")
    return path


def _serve(tmp: Path, **extra_env: str):
    """`streamlit run app.py` on a free port, offline, with its own database in ``tmp``; yields
    the URL and stops it afterwards."""
    port = _free_port()
    env = {k: v for k, v in os.environ.items()
           if k not in ("GEMINI_API_KEY", "GOOGLE_API_KEY", "GOOGLE_GEMINI_BASE_URL")}
    env.update(
        MARGINALIA_DB=str(tmp / "marginalia.db"),
        MARGINALIA_EMBEDDER="local",
        MARGINALIA_ANSWERER="extractive",
        HF_HUB_OFFLINE="1",
        **extra_env,
    )
    log = open(tmp / "streamlit.log", "wb")  # noqa: SIM115 - closed in teardown
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "streamlit", "run", "app.py",
            "--server.port", str(port),
            "--server.address", "127.0.0.1",
            "--server.headless", "true",
            "--browser.gatherUsageStats", "false",
            "--server.fileWatcherType", "none",
        ],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=1) as r:
                if r.status == 200:
                    break
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            log.close()
            pytest.fail("streamlit did not start:\n" + (tmp / "streamlit.log").read_text()[-3000:])
        time.sleep(0.2)
    yield url
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
    log.close()


@pytest.fixture(scope="module")
def server(chromium_path, tmp_path_factory):
    yield from _serve(tmp_path_factory.mktemp("browser"))


@pytest.fixture(scope="module")
def browser(chromium_path):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium_path, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture
def page(browser, server):
    context = browser.new_context(viewport=VIEWPORT)
    pg = context.new_page()
    pg.set_default_timeout(30_000)
    pg.requests = []  # every URL the page asked for
    pg.on("request", lambda r: pg.requests.append(r.url))
    pg.goto(server)
    idle(pg)
    yield pg
    context.close()


def idle(pg, settle_ms: int = 400) -> None:
    pg.wait_for_timeout(settle_ms)
    pg.wait_for_selector(IDLE, timeout=60_000)


def go(pg, name: str) -> None:
    pg.get_by_role("link", name=name, exact=True).click()
    idle(pg)


def upload(pg, path_or_payload) -> None:
    go(pg, "Documents")
    pg.locator('[data-testid="stFileUploaderDropzoneInput"]').set_input_files(path_or_payload)


def ask(pg, question: str) -> None:
    go(pg, "Chat")
    box = pg.locator('[data-testid="stChatInputTextArea"]')
    box.fill(question)
    box.press("Enter")


def watch_answer_lengths(pg) -> None:
    """Record the length of the newest chat message's text at every DOM change, to see the
    answer grow token by token."""
    pg.evaluate(
        """() => {
        window.__lengths = [];
        new MutationObserver(() => {
          const msgs = document.querySelectorAll('[data-testid="stChatMessage"]');
          if (msgs.length) window.__lengths.push(msgs[msgs.length - 1].innerText.length);
        }).observe(document.body, {subtree: true, childList: true, characterData: true});
    }"""
    )


def screenshot(pg, name: str) -> Path:
    path = DOCS / name
    DOCS.mkdir(exist_ok=True)
    pg.screenshot(path=str(path))
    assert path.stat().st_size < MAX_SCREENSHOT_BYTES, f"{name} is {path.stat().st_size} bytes"
    return path


def external(requests: list[str]) -> list[str]:
    return [u for u in requests if not re.match(r"^(https?|wss?)://127\.0\.0\.1[:/]", u)
            and not u.startswith(("data:", "blob:", "about:"))]


@pytest.mark.parametrize("path,heading", [
    ("/documents", "Documents"),  # first: the server's very first run is this URL
    ("/inspector", "Retrieval Inspector"),
    ("/", "Marginalia"),
    ("/documents?from=bookmark", "Documents"),
    ("/inspector?q=1", "Retrieval Inspector"),
])
def test_each_page_address_opened_first_gets_the_whole_app(browser, server, path, heading):
    """A fresh browser opening a page's address first. On the server's first run Streamlit's
    legacy multipage mode runs pages/documents.py alone; the page's shell call renders the app
    around it: navigation, sidebar and the wide layout, with no Streamlit internals."""
    from playwright.sync_api import expect

    context = browser.new_context(viewport=VIEWPORT)
    pg = context.new_page()
    pg.goto(f"{server}{path}")
    idle(pg)
    expect(pg.get_by_role("heading", name=heading).first).to_be_visible()
    for link in ("Chat", "Documents", "Retrieval Inspector"):
        expect(pg.get_by_role("link", name=link, exact=True)).to_be_visible()
    expect(pg.get_by_text("Offline mode")).to_be_visible()
    expect(pg.get_by_role("link", name="common", exact=True)).to_have_count(0)
    width = pg.locator('[data-testid="stMainBlockContainer"]').bounding_box()["width"]
    assert width > 900, f"not the wide layout: main column {width}px at {VIEWPORT['width']}px"
    context.close()


def test_upload_ask_click_citation_and_inspect(page):
    from playwright.sync_api import expect

    if not PDF.exists():
        pytest.skip(f"{PDF} is not present (../shared/eval is shared data)")
    started = time.monotonic()

    # Documents: upload the PDF, see it indexed with its pages
    upload(page, str(PDF))
    expect(page.get_by_text(re.compile(r"sf__pdflatex-4-pages\.pdf — indexed: \d+ passages, 4 pages"))
           ).to_be_visible(timeout=60_000)
    idle(page)
    expect(page.locator('[data-testid="stDataFrame"]')).to_be_visible()

    # Chat: the answer streams in, with citation marks and a pill per cited passage
    go(page, "Chat")
    watch_answer_lengths(page)
    ask(page, "Is there a difference between this text and some nonsense?")
    pill = page.get_by_role("radio", name=re.compile(r"^\[1\] sf__pdflatex-4-pages\.pdf · p\. \d"))
    expect(pill).to_be_visible(timeout=60_000)
    idle(page)
    lengths = [n for n in page.evaluate("window.__lengths") if n]
    assert len(set(lengths)) >= 3, f"the answer did not stream: {lengths[:20]}"
    answer = page.locator('[data-testid="stChatMessage"]').last
    expect(answer).to_contain_text("nonsense")
    badge = answer.locator('[data-testid="stMarkdownContainer"]').first.get_by_text("1", exact=True)
    expect(badge.first).to_be_visible()

    # click [1]: its passage opens in the margin, the cited sentence highlighted
    margin = page.locator(".st-key-margin")
    card = margin.locator('[data-testid="stExpander"]').first
    expect(card).to_contain_text("[1] sf__pdflatex-4-pages.pdf")
    expect(card.locator("details")).not_to_have_attribute("open", "")
    pill.click()
    idle(page)
    expect(card.locator("details")).to_have_attribute("open", "")
    expect(card).to_contain_text("nonsense")
    expect(card.locator("strong").first).to_be_visible()  # the highlighted, cited part

    # the sample documents, then a question about them: the screenshots show real answers
    go(page, "Documents")
    page.get_by_role("button", name="Add the sample documents").click()
    expect(page.get_by_text("Last upload: 3 indexed")).to_be_visible(timeout=60_000)
    idle(page)
    page.wait_for_timeout(800)  # the grid paints on a canvas after it mounts
    screenshot(page, "screenshot-documents.png")
    go(page, "Chat")
    page.get_by_role("button", name="New conversation").click()
    idle(page)
    ask(page, "What did Fermat write in the margin?")
    pill = page.get_by_role("radio", name=re.compile(r"^\[\d\] a-short-history-of-marginalia\.md")).first
    expect(pill).to_be_visible(timeout=60_000)
    idle(page)
    pill.click()
    idle(page)
    card = page.locator(".st-key-margin [data-testid='stExpander']").first
    expect(card.locator("details")).to_have_attribute("open", "")
    expect(card).to_contain_text("Fermat")
    screenshot(page, "screenshot-chat.png")

    # Inspector: every chunk scored; the threshold slider moves with the keyboard
    go(page, "Retrieval Inspector")
    query = page.get_by_label("Query")
    query.fill("What did Fermat write in the margin?")
    query.press("Enter")
    idle(page)
    passing = page.locator('[data-testid="stMetric"]').first
    expect(passing).to_contain_text(re.compile(r"\d+ of \d+"))
    before = passing.inner_text()
    slider = page.locator('[data-testid="stSlider"]').first
    thumb = slider.locator('input[type="range"]')  # the slider thumb's keyboard handle
    expect(thumb).to_have_value("0.25")
    thumb.focus()
    for _ in range(15):
        thumb.press("ArrowRight")
    idle(page, 800)
    expect(thumb).to_have_value("0.4")
    expect(slider.get_by_test_id("stSliderThumbValue")).to_have_text("0.40")
    expect(page.locator('[data-testid="stMetric"]').nth(3)).to_contain_text("0.40")
    after = passing.inner_text()
    assert before != after, "moving the threshold did not change how many chunks pass"
    expect(page.locator('[data-testid="stVegaLiteChart"]').first).to_be_visible()
    page.wait_for_timeout(800)
    screenshot(page, "screenshot-inspector.png")

    assert not external(page.requests), external(page.requests)
    assert time.monotonic() - started < 90


def test_hostile_markdown_stays_text(page):
    from playwright.sync_api import expect

    upload(page, {"name": "quinces.md", "mimeType": "text/markdown", "buffer": HOSTILE_MD})
    expect(page.get_by_text(re.compile(r"quinces\.md — indexed"))).to_be_visible(timeout=60_000)
    idle(page)
    ask(page, "How is quince paste made?")
    pill = page.get_by_role("radio", name=re.compile(r"^\[1\] quinces\.md"))
    expect(pill).to_be_visible(timeout=60_000)
    idle(page)
    pill.click()
    idle(page)
    card = page.locator(".st-key-margin [data-testid='stExpander']").first
    expect(card.locator("details")).to_have_attribute("open", "")
    toggle = card.get_by_text("Show the whole passage")
    if toggle.count():
        toggle.click()
        idle(page)
    # the markup is shown as the text it is, and nothing ran or loaded
    expect(card).to_contain_text("<script>window.__pwned=1</script>")
    expect(card).to_contain_text("![a tracking pixel](http")
    assert page.evaluate("typeof window.__pwned") == "undefined"
    assert page.locator('img[src*="example.invalid"]').count() == 0
    assert page.locator('a[href*="example.invalid"]').count() == 0
    assert page.locator("script:not([src])").evaluate_all(
        "els => els.filter(e => e.textContent.includes('__pwned')).length"
    ) == 0
    assert not external(page.requests), external(page.requests)


# --------------------------------------------------------------------------- background jobs

LONG_PAGES = 160
LINES_PER_PAGE = 5  # short pages: a long PDF whose passages a busy machine embeds in a minute


@pytest.fixture(scope="module")
def slow_server(chromium_path, tmp_path_factory):
    """A server whose embedder works one passage per batch (MARGINALIA_EMBED_BATCH=1, a real
    setting), so a long PDF stays in the queue long enough to walk away from it."""
    tmp = tmp_path_factory.mktemp("browser-jobs")
    for url in _serve(tmp, MARGINALIA_EMBED_BATCH="1"):
        yield url, tmp / "marginalia.db"


def _long_pdf_payload(name: str) -> dict:
    from pdf_maker import book_pages, text_pdf

    # a title page of its own, so two uploads are two documents, not a duplicate
    data = text_pdf([f"{name}: a long test book."] + book_pages(LONG_PAGES - 1, lines=LINES_PER_PAGE))
    return {"name": name, "mimeType": "application/pdf", "buffer": data}


def _db_counts(db: Path) -> tuple[int, int]:
    import sqlite3

    with sqlite3.connect(db) as conn:
        return (conn.execute("SELECT COUNT(*) FROM documents").fetchone()[0],
                conn.execute("SELECT COUNT(*) FROM chunks").fetchone()[0])


def test_long_upload_keeps_running_across_pages_and_tabs_then_is_indexed(browser, slow_server):
    from playwright.sync_api import expect

    url, db = slow_server
    context = browser.new_context(viewport=VIEWPORT)
    pg = context.new_page()
    pg.set_default_timeout(30_000)
    pg.goto(url)
    idle(pg)
    upload(pg, _long_pdf_payload("long-book.pdf"))
    queue_item = pg.locator('[class*="st-key-job-"]').filter(has_text="long-book.pdf")
    expect(queue_item).to_be_visible(timeout=60_000)
    expect(queue_item.get_by_role("button", name="Cancel")).to_be_visible()
    expect(queue_item).to_contain_text(re.compile(r"page \d+ of 160|passages embedded"))

    # leave for Chat: the job goes on, and the sidebar says so with its progress
    go(pg, "Chat")
    indicator = pg.locator(".st-key-job_indicator")
    expect(indicator).to_contain_text("Indexing 1 file", timeout=30_000)
    expect(indicator).to_contain_text(re.compile(r"long-book\.pdf — .*(page|passages)"))
    # a second tab sees the same job
    other = context.new_page()
    other.goto(url)
    idle(other)
    expect(other.locator(".st-key-job_indicator")).to_contain_text("long-book.pdf",
                                                                   timeout=30_000)
    other.close()
    # progress moves while nobody watches the Documents page
    first = indicator.inner_text()
    expect(indicator).not_to_have_text(first, timeout=30_000)

    # back to Documents: still in the queue (or just finished), then indexed with every page
    go(pg, "Documents")
    indexed = pg.get_by_text(re.compile(r"long-book\.pdf — indexed: \d+ passages, 160 pages"))
    expect(queue_item.or_(indexed).first).to_be_visible()
    expect(indexed).to_be_visible(timeout=600_000)
    idle(pg)
    expect(pg.locator('[data-testid="stDataFrame"]')).to_be_visible(timeout=60_000)
    documents, chunks = _db_counts(db)
    assert documents == 1 and chunks > LONG_PAGES * LINES_PER_PAGE // 20
    expect(pg.locator(".st-key-job_indicator")).to_have_count(0)
    context.close()


def test_cancel_a_running_job_leaves_nothing_half_written(browser, slow_server):
    from playwright.sync_api import expect

    url, db = slow_server
    before = _db_counts(db)
    context = browser.new_context(viewport=VIEWPORT)
    pg = context.new_page()
    pg.set_default_timeout(30_000)
    pg.goto(url)
    idle(pg)
    upload(pg, _long_pdf_payload("to-cancel.pdf"))
    queue_item = pg.locator('[class*="st-key-job-"]').filter(has_text="to-cancel.pdf")
    expect(queue_item).to_contain_text("passages embedded", timeout=120_000)
    queue_item.get_by_role("button", name="Cancel").click()
    expect(pg.get_by_text("to-cancel.pdf — cancelled")).to_be_visible(timeout=120_000)
    idle(pg)
    expect(pg.get_by_text("nothing was saved").first).to_be_visible()
    assert _db_counts(db) == before  # no document, no chunks
    table = pg.locator('[data-testid="stDataFrame"]')
    if table.count():
        expect(table).not_to_contain_text("to-cancel.pdf")
    context.close()
