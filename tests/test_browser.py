"""The app in a real browser: `streamlit run` as a subprocess (offline settings, a temporary
database) driven by Playwright over Debian's chromium.

Skipped with a reason when chromium or playwright is missing, unless
MARGINALIA_REQUIRE_BROWSER=1 (CI), which turns that into a failure. Saves the screenshots
docs/screenshot-chat.png, docs/screenshot-documents.png and docs/screenshot-inspector.png.
"""

from __future__ import annotations

import contextlib
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
EXPECT_TIMEOUT_MS = 20_000
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
    )
    env.update(extra_env)  # may replace the defaults above (another answerer)
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
    from playwright.sync_api import expect, sync_playwright

    # an ``expect`` waits up to 5 s by default: too short for a rerun on a machine that is
    # busy with other work, where these tests must pass too (a wait, not a timing assertion)
    expect.set_options(timeout=EXPECT_TIMEOUT_MS)
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


def choose(pg, key: str, option: str | re.Pattern[str]) -> None:
    """Pick ``option`` (a whole name, or a pattern) in the selectbox whose widget key is
    ``key``: its chevron opens the list, as a person clicks it, then the option is clicked.
    A click while the expander around it is still opening focuses the field but leaves the
    list shut (seen in headless chromium): then the chevron is clicked again, as a person
    would."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    field = pg.locator(f".st-key-{key} input[role=combobox]")
    if isinstance(option, str) and field.input_value() == option:
        return  # chosen already
    field.scroll_into_view_if_needed()  # as a person scrolls: the list opens below the fold
    item = pg.get_by_role("option", name=option, exact=isinstance(option, str) or None)
    for _ in range(5):
        if field.get_attribute("aria-expanded") != "true":  # a click on an open list shuts it
            pg.locator(f".st-key-{key} button[aria-label=Open]").click()
        try:
            item.wait_for(timeout=3_000)
            break
        except PlaywrightTimeout:
            continue
    item.click()
    idle(pg)
    chosen = field.input_value()
    assert (chosen == option if isinstance(option, str) else option.search(chosen)), chosen


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
    mark = answer.locator('a[href^="#src-"]').get_by_text("[1]", exact=True)
    expect(mark.first).to_be_visible()

    # the pill [1]: its passage is open in the margin, the cited sentence highlighted
    margin = page.locator(".st-key-margin")
    card = margin.locator(".mg-group:visible .mg-card").first
    expect(card).to_contain_text("[1] sf__pdflatex-4-pages.pdf")
    pill.click()
    idle(page)
    card = open_card(page)
    expect(card.locator(".mg-body")).to_be_visible()
    expect(card).to_contain_text("nonsense")
    expect(card.locator("mark.mg-hl").first).to_be_visible()  # the highlighted, cited part

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
    card = open_card(page)
    expect(card.locator(".mg-body")).to_be_visible()
    expect(card).to_contain_text("Fermat")
    screenshot(page, "screenshot-chat.png")

    # Inspector: every chunk scored; the threshold slider moves with the keyboard
    go(page, "Retrieval Inspector")
    query = page.get_by_label("Question", exact=True)
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
    page.locator(".st-key-inspector_passage").scroll_into_view_if_needed()  # table + passage
    page.wait_for_timeout(800)
    screenshot(page, "screenshot-inspector.png")

    assert not external(page.requests), external(page.requests)


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
    card = open_card(page)
    expect(card.locator(".mg-body")).to_be_visible()
    # markdown renders as markdown; raw HTML is shown as the text it is; the image is its alt
    # text and the link its text, and nothing ran or loaded
    expect(card.locator(".mg-h")).to_have_text("Field notes on quinces")
    expect(card).to_contain_text("<script>window.__pwned=1</script>")
    expect(card.locator(".mg-img")).to_have_text("a tracking pixel")
    expect(card.locator(".mg-link")).to_have_text("a link that should stay text")
    assert card.locator("img, a[href*='example'], script").count() == 0
    assert page.evaluate("typeof window.__pwned") == "undefined"
    assert page.locator('img[src*="example.invalid"]').count() == 0
    assert page.locator('a[href*="example.invalid"]').count() == 0
    assert page.locator("script:not([src])").evaluate_all(
        "els => els.filter(e => e.textContent.includes('__pwned')).length"
    ) == 0
    assert not external(page.requests), external(page.requests)


# --------------------------------------------------------------------------- issue 11: the margin

def add_samples(pg) -> None:
    from playwright.sync_api import expect

    go(pg, "Documents")
    expect(pg.get_by_role("heading", name="Documents")).to_be_visible()
    button = pg.get_by_role(
        "button", name=re.compile("^(Add the sample documents|Try it with sample documents)$"))
    if button.count():  # the server is shared by the module: maybe added already
        button.click()
        expect(pg.get_by_text(re.compile(r"Last upload: \d indexed"))).to_be_visible(timeout=60_000)
        idle(pg)


def open_card(pg):
    """The margin card the URL fragment targets, else the one open by default."""
    return pg.locator(".mg-group:visible .mg-card:target, "
                      ".mg-group:visible:not(:has(:target)) .mg-card.mg-open")


def test_an_inline_mark_opens_its_passage_in_the_margin(page):
    from playwright.sync_api import expect

    add_samples(page)
    ask(page, "What did Fermat write in the margin?")
    answer = page.locator('[data-testid="stChatMessage"]').last
    marks = answer.locator('a[href^="#src-"]')
    expect(marks.first).to_be_visible(timeout=60_000)
    idle(page)
    # after the answer its first cited passage is open, the cited sentence highlighted
    first_href = marks.first.get_attribute("href")
    card = page.locator(f"[id='{first_href[1:]}']")
    expect(card.locator(".mg-body")).to_be_visible()
    expect(card.locator("mark.mg-hl").first).to_be_visible()
    # markdown renders as what it is: no literal "##", no page label on a .md file
    margin = page.locator(".st-key-margin")
    expect(margin).not_to_contain_text("##")
    expect(card.locator(".mg-head")).not_to_contain_text("p. 1")

    # every other card is closed; clicking a mark opens exactly its card
    hrefs = {marks.nth(i).get_attribute("href") for i in range(marks.count())}
    others = page.locator(f".mg-group:visible .mg-card:not([id='{first_href[1:]}'])")
    if others.count():
        other = others.first
        expect(other.locator(".mg-body")).to_be_hidden()
        other_id = other.get_attribute("id")
        target_mark = answer.locator(f'a[href="#{other_id}"]')
        if target_mark.count():  # an answer mark for it: click that, else the card's head
            target_mark.first.click()
        else:
            other.locator(".mg-head").click()
        page.wait_for_timeout(300)
        expect(other.locator(".mg-body")).to_be_visible()
        expect(card.locator(".mg-body")).to_be_hidden()
        assert page.evaluate("location.hash") == f"#{other_id}"
    # back to the first mark: its card opens again, scrolled into the margin's view
    answer.locator(f'a[href="{first_href}"]').first.click()
    page.wait_for_timeout(300)
    expect(card.locator(".mg-body")).to_be_visible()
    expect(card.locator("mark.mg-hl").first).to_be_in_viewport()
    assert len(hrefs) >= 1
    screenshot(page, "screenshot-chat-mark.png")
    assert not external(page.requests), external(page.requests)


def test_a_pdf_citation_shows_its_page_with_the_passage_highlighted(page):
    from playwright.sync_api import expect

    add_samples(page)
    ask(page, "What temperature and humidity are best for old books?")
    answer = page.locator('[data-testid="stChatMessage"]').last
    expect(answer.locator('a[href^="#src-"]').first).to_be_visible(timeout=60_000)
    idle(page)
    pdf_card = page.locator(".mg-group:visible .mg-card").filter(
        has_text="caring-for-old-books.pdf").first
    expect(pdf_card.locator(".mg-head")).to_contain_text(re.compile(r"p\. \d"))
    pdf_card.locator(".mg-head").click()
    page.wait_for_timeout(300)
    pdf_card.locator("button.mg-pageview").click()  # the page, large, in a dialog
    image = page.get_by_role("dialog").locator(".mg-zoom img")
    expect(image).to_be_visible()
    natural = image.evaluate("img => [img.naturalWidth, img.naturalHeight]")
    assert natural[0] >= 600 and natural[1] > natural[0], natural  # a portrait page
    assert image.get_attribute("src").startswith("data:image/jpeg;base64,")
    idle(page)
    screenshot(page, "screenshot-page-view.png")
    assert not external(page.requests), external(page.requests)


def test_a_reopened_conversation_shows_marks_margin_and_page_view_the_same(page):
    """Reopened from the sidebar, an answer looks and works as it did when it was asked: the
    same text and marks, its first cited passage open and highlighted, a mark opening its
    passage, and a PDF citation's page view."""
    from playwright.sync_api import expect

    add_samples(page)
    question = "How should old books be stored, and what about light?"
    ask(page, question)
    answer = page.locator('[data-testid="stChatMessage"]').last
    marks = answer.locator('a[href^="#src-"]')
    expect(marks.first).to_be_visible(timeout=60_000)
    idle(page)

    def seen() -> dict:
        """What the reader sees of the last answer and its margin."""
        shown = page.locator('[data-testid="stChatMessage"]').last
        links = shown.locator('a[href^="#src-"]')
        cards = page.locator(".mg-group:visible .mg-card")
        first = links.first.get_attribute("href")[1:]
        return {
            "text": " ".join(shown.inner_text().split()),
            "marks": [links.nth(i).inner_text() for i in range(links.count())],
            "cards": [" ".join(cards.nth(i).locator(".mg-head").inner_text().split())
                      for i in range(cards.count())],
            "first": first,
            "open": [cards.nth(i).get_attribute("id") for i in range(cards.count())
                     if cards.nth(i).locator(".mg-body").is_visible()],
            "highlighted": page.locator(f"[id='{first}'] mark.mg-hl").count(),
        }

    before = seen()
    assert before["marks"] and before["highlighted"] >= 1
    assert before["open"] == [before["first"]]  # only the first cited passage is open

    sidebar = page.locator('[data-testid="stSidebar"]')
    sidebar.get_by_role("button", name="New conversation").click()
    idle(page)
    expect(page.locator('[data-testid="stChatMessage"]')).to_have_count(0)
    sidebar.get_by_role("button", name=re.compile("^How should old books be stored")).first.click()
    idle(page)
    answer = page.locator('[data-testid="stChatMessage"]').last
    expect(answer.locator('a[href^="#src-"]').first).to_be_visible()
    after = seen()
    for key in ("text", "marks", "cards", "highlighted"):
        assert after[key] == before[key], (key, before[key], after[key])
    assert after["open"] == [after["first"]]
    expect(page.locator(f"[id='{after['first']}'] mark.mg-hl").first).to_be_visible()

    # a mark of the reopened answer opens its passage, scrolled into view, highlighted
    links = answer.locator('a[href^="#src-"]')
    last = links.nth(links.count() - 1)
    target = page.locator(f"[id='{last.get_attribute('href')[1:]}']")
    last.click()
    page.wait_for_timeout(300)
    expect(target.locator(".mg-body")).to_be_visible()
    expect(target.locator("mark.mg-hl").first).to_be_in_viewport()

    # the PDF citation's page view still renders its page as an image
    pdf_card = page.locator(".mg-group:visible .mg-card").filter(
        has_text="caring-for-old-books.pdf").first
    expect(pdf_card.locator(".mg-head")).to_contain_text(re.compile(r"p\. \d"))
    if not pdf_card.locator(".mg-body").is_visible():
        pdf_card.locator(".mg-head").click()
        page.wait_for_timeout(300)
    pdf_card.locator("button.mg-pageview").click()
    image = page.get_by_role("dialog").locator(".mg-zoom img")
    expect(image).to_be_visible()
    natural = image.evaluate("img => [img.naturalWidth, img.naturalHeight]")
    assert natural[0] >= 600 and natural[1] > natural[0], natural
    assert not external(page.requests), external(page.requests)


PHONE = {"width": 390, "height": 844}


def test_phone_width_closes_the_sidebar_after_a_choice_and_stacks_the_margin(browser, server):
    from playwright.sync_api import expect

    context = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
    page = context.new_page()
    page.set_default_timeout(30_000)
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    try:
        page.goto(server)
        idle(page)
        sidebar = page.locator('[data-testid="stSidebar"]')
        expect(sidebar).to_have_attribute("data-collapsed", "true")  # closed on a phone

        def open_sidebar() -> None:
            page.locator('[data-testid="stExpandSidebarButton"]').click()
            expect(sidebar).to_have_attribute("data-collapsed", "false")

        open_sidebar()
        page.get_by_role("link", name="Documents", exact=True).click()
        idle(page)
        expect(sidebar).to_have_attribute("data-collapsed", "true")  # a page is a choice too
        add_samples_here = page.get_by_role(
            "button", name=re.compile("^(Add the sample documents|Try it with sample documents)$"))
        if add_samples_here.count():
            add_samples_here.first.click()
            expect(page.get_by_text(re.compile(r"Last upload: \d indexed"))).to_be_visible(
                timeout=60_000)
            idle(page)
        open_sidebar()
        page.get_by_role("link", name="Chat", exact=True).click()
        idle(page)
        expect(sidebar).to_have_attribute("data-collapsed", "true")
        box = page.locator('[data-testid="stChatInputTextArea"]')
        box.fill("What did Fermat write in the margin?")
        box.press("Enter")
        answer = page.locator('[data-testid="stChatMessage"]').last
        expect(answer.locator('a[href^="#src-"]').first).to_be_visible(timeout=60_000)
        idle(page)

        # a choice in the sidebar (a new conversation, then the old one) closes it
        open_sidebar()
        page.get_by_role("button", name="New conversation").click()
        idle(page)
        expect(sidebar).to_have_attribute("data-collapsed", "true")
        open_sidebar()
        sidebar.get_by_role("button", name=re.compile("What did Fermat")).first.click()
        idle(page)
        expect(sidebar).to_have_attribute("data-collapsed", "true")

        # the margin stacks under the answer, full width, and its open card is readable
        answer = page.locator('[data-testid="stChatMessage"]').last
        margin = page.locator(".st-key-margin")
        expect(margin.locator(".mg-card.mg-open .mg-body")).to_be_visible()
        idle(page)
        a, m = page.evaluate("""() => {
            const msgs = document.querySelectorAll('[data-testid="stChatMessage"]');
            const r = e => { const b = e.getBoundingClientRect();
                             return {y: b.top, height: b.height, width: b.width}; };
            return [r(msgs[msgs.length - 1]), r(document.querySelector('.st-key-margin'))];
        }""")  # both in one frame: no scroll in between
        assert m["y"] >= a["y"] + a["height"] - 1, (a, m)
        assert m["width"] > 0.8 * (PHONE["width"] - 40), m
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= PHONE["width"], f"the page scrolls sideways: {width}px"
        # a mark still opens its card, scrolled into view
        mark = answer.locator('a[href^="#src-"]').first
        mark.click()
        page.wait_for_timeout(300)
        target = page.locator(f"[id='{mark.get_attribute('href')[1:]}']")
        expect(target.locator(".mg-body")).to_be_in_viewport()
        page.screenshot(path=str(DOCS / "screenshot-phone.png"), full_page=False)
        assert not external(requests), external(requests)
    finally:
        context.close()


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

    # every line names its book (a line repeated on each page would be dropped as a running
    # head): two uploads are two documents, neither a near-duplicate of the other (issue 26)
    # nor read from the embedding cache, so each one really embeds
    pages = book_pages(LONG_PAGES - 1, lines=LINES_PER_PAGE)
    named = [page.replace("Page ", f"{name} page ") for page in pages]
    data = text_pdf([f"{name}: a long test book."] + named)
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


def test_an_idle_tab_notices_a_job_another_tab_submits(browser, slow_server):
    """With no job the indicator polls slowly (ingest_view.JOB_IDLE_POLL_S), and still shows a
    job submitted elsewhere without the idle tab doing anything: running, or, when it was
    short enough to start and end between two idle polls (an idle machine embeds this book in
    about 5 s, under the 10 s poll: why this test once failed only on quiet machines), as
    just ended (ingest_view.ENDED_NOTICE_S). Then the notice goes away by itself."""
    from playwright.sync_api import expect

    url, _ = slow_server
    context = browser.new_context(viewport=VIEWPORT)
    watcher = context.new_page()
    watcher.set_default_timeout(30_000)
    watcher.goto(url)
    idle(watcher)
    expect(watcher.locator(".st-key-job_indicator")).to_have_count(0)
    uploader = context.new_page()
    uploader.set_default_timeout(30_000)
    uploader.goto(url)
    idle(uploader)
    upload(uploader, _long_pdf_payload("from-another-tab.pdf"))
    indicator = watcher.locator(".st-key-job_indicator")
    expect(indicator).to_contain_text("from-another-tab.pdf", timeout=90_000)
    # still running: cancel it here, to be quick; the watcher follows at the fast rate
    queue_item = uploader.locator('[class*="st-key-job-"]').filter(has_text="from-another-tab")
    cancel = queue_item.get_by_role("button", name="Cancel")
    if cancel.count():
        with contextlib.suppress(Exception):  # it may end on its own just now
            cancel.click(timeout=5_000)
    expect(indicator).to_have_count(0, timeout=120_000)
    context.close()


def test_an_idle_tab_announces_a_job_that_ended_between_two_polls(browser, slow_server):
    """The short-job case on purpose: a tiny file from another tab is indexed well within one
    idle poll; the idle tab still says so, once, and the notice then goes away."""
    from playwright.sync_api import expect

    url, _ = slow_server
    context = browser.new_context(viewport=VIEWPORT)
    watcher = context.new_page()
    watcher.set_default_timeout(30_000)
    watcher.goto(url)
    idle(watcher)
    uploader = context.new_page()
    uploader.set_default_timeout(30_000)
    uploader.goto(url)
    idle(uploader)
    upload(uploader, {"name": "tiny-note.txt", "mimeType": "text/plain",
                      "buffer": b"A tiny note about quinces, indexed in a moment."})
    expect(uploader.get_by_text(re.compile(r"tiny-note\.txt — indexed"))).to_be_visible(
        timeout=60_000)
    indicator = watcher.locator(".st-key-job_indicator")
    expect(indicator).to_contain_text(re.compile(r"tiny-note\.txt — indexed"), timeout=60_000)
    expect(indicator).to_have_count(0, timeout=90_000)
    context.close()


def test_cancel_a_running_job_leaves_nothing_half_written(browser, slow_server):
    from playwright.sync_api import expect

    url, db = slow_server
    context = browser.new_context(viewport=VIEWPORT)
    pg = context.new_page()
    pg.set_default_timeout(30_000)
    pg.goto(url)
    idle(pg)
    before = _db_counts(db)  # after the first page run, which creates the tables
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
