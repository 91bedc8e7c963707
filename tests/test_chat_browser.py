# ruff: noqa: F811 - the fixtures of test_browser.py are imported, then requested by name
"""Chat in a real browser (issue 25): no question lost while an answer streams, Stop, the
conversation's address, evidence scrolled into view, the page view, and the notes that say the
state. `streamlit run` + Playwright over Debian's chromium (the helpers of test_browser.py),
answers from the fake OpenAI-compatible server (tests/fake_openai.py) streaming slowly, so an
answer is still being written when the test acts; embeddings offline.
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest
from test_browser import (  # noqa: F401 - fixtures
    DOCS,
    _serve,
    add_samples,
    browser,
    choose,
    chromium_path,
    external,
    idle,
    server,
)

pytestmark = pytest.mark.browser

DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}
FERMAT = "What did Fermat write in the margin?"
BOOKS = "How should old books be stored?"
SLOW = {"chunk_delay": 0.4}  # the default answer in ~12 pieces: about 5 s per answer


@pytest.fixture(scope="module")
def chat_server(chromium_path, tmp_path_factory, fake_openai_server):  # noqa: F811
    """The app answering from the fake model server; its own database."""
    tmp = tmp_path_factory.mktemp("chat-browser")
    env = fake_openai_server.env(MARGINALIA_EMBEDDER="local", MARGINALIA_OPENAI_TIMEOUT="30")
    for url in _serve(tmp, **env):
        yield url, tmp / "marginalia.db"


VIEWPORTS = {"argnames": "viewport", "argvalues": [DESKTOP, PHONE], "ids": ["1280", "390"]}


@pytest.fixture(params=VIEWPORTS["argvalues"], ids=VIEWPORTS["ids"])
def chat(browser, chat_server, fake_openai, request):  # noqa: F811
    """A page on Chat, at 1280x800 and at 390x844, with the sample documents in the library."""
    url, db = chat_server
    pg = open_chat(browser, url, request.param)
    yield pg, url, db, fake_openai
    pg.context.close()


def rows(db: Path, sql: str, *params) -> list[tuple]:
    with sqlite3.connect(db) as conn:
        return conn.execute(sql, params).fetchall()


def type_question(pg, question: str) -> None:
    box = pg.locator('[data-testid="stChatInputTextArea"]')
    box.fill(question)
    box.press("Enter")


def conversation_id(pg) -> str:
    match = re.search(r"[?&]c=([0-9a-f]{32})", pg.url)
    assert match, pg.url
    return match.group(1)


def test_a_second_question_typed_during_a_slow_answer_is_queued_then_answered(chat):
    from playwright.sync_api import expect

    pg, _, db, fake = chat
    fake.stream_script(**SLOW, times=2)
    type_question(pg, FERMAT)
    pg.wait_for_timeout(500)
    type_question(pg, BOOKS)
    # both questions on screen at once; the second waits its turn, said so
    messages = pg.locator('[data-testid="stChatMessage"]')
    expect(messages.filter(has_text=FERMAT)).to_have_count(1)
    expect(messages.filter(has_text=BOOKS)).to_have_count(1)
    # one waiting note, under the second question: the first one's note (it waited a moment
    # too) is replaced when its answer starts, not left on screen, stale, while it streams
    waiting = messages.filter(has_text="Waiting: asked when the answer above is finished")
    expect(waiting).to_have_count(1)
    expect(waiting).to_contain_text(BOOKS)
    expect(pg.get_by_role("button", name="Stop")).to_be_visible()
    # then both answered, in order, in the page and in the database
    expect(pg.get_by_text("Waiting: asked")).to_have_count(0, timeout=60_000)
    expect(pg.get_by_role("button", name="Stop")).to_have_count(0, timeout=60_000)
    idle(pg)
    expect(messages).to_have_count(4)
    texts = [messages.nth(i).inner_text() for i in range(4)]
    assert FERMAT in texts[0] and BOOKS in texts[2], texts
    assert all("According to the sources" in t for t in (texts[1], texts[3])), texts
    cid = conversation_id(pg)
    saved = rows(db, "SELECT role, content, status FROM messages WHERE conversation_id = ? "
                 "ORDER BY created, rowid", cid)
    assert [(r[0], r[2]) for r in saved] == [("user", "complete"), ("assistant", "complete")] * 2
    assert saved[0][1] == FERMAT and saved[2][1] == BOOKS
    assert len(fake.requests_for("chat")) == 2
    assert not external(pg.requests), external(pg.requests)


def test_stop_ends_the_answer_and_keeps_what_was_said_marked_stopped(chat):
    from playwright.sync_api import expect

    pg, _, db, fake = chat
    fake.stream_script(chunk_delay=0.6)
    type_question(pg, FERMAT)
    answer = pg.locator('[data-testid="stChatMessage"]').nth(1)
    expect(answer).to_contain_text("According to", timeout=30_000)
    pg.get_by_role("button", name="Stop").click()
    expect(pg.get_by_text("Stopped: the answer ends where you stopped it")).to_be_visible(
        timeout=30_000)
    idle(pg)
    cid = conversation_id(pg)
    saved = rows(db, "SELECT role, content, status FROM messages WHERE conversation_id = ? "
                 "ORDER BY created, rowid", cid)
    assert [r[0] for r in saved] == ["user", "assistant"] and saved[0][1] == FERMAT
    assert saved[1][2] == "stopped" and saved[1][1].startswith("According to")
    full = fake.requests_for("chat")[0]
    assert full is not None
    # what was kept is a beginning of the answer, not all of it
    assert fake.chunks_sent < 12, fake.chunks_sent


def test_reload_and_a_pasted_link_open_the_conversation_an_unknown_one_says_so(chat):
    from playwright.sync_api import expect

    pg, url, _, fake = chat
    fake.stream_script(chunk_delay=0.05, times=2)
    type_question(pg, FERMAT)
    expect(pg.get_by_role("button", name="Stop")).to_have_count(0, timeout=60_000)
    idle(pg)
    cid = conversation_id(pg)
    pg.reload()
    idle(pg)
    messages = pg.locator('[data-testid="stChatMessage"]')
    expect(messages.filter(has_text=FERMAT)).to_have_count(1)
    expect(messages.last.locator('a[href^="#src-"]').first).to_be_in_viewport()
    # a link pasted into a new tab
    other = pg.context.new_page()
    other.goto(f"{url}/?c={cid}")
    idle(other)
    expect(other.locator('[data-testid="stChatMessage"]').filter(has_text=FERMAT)).to_have_count(1)
    other.goto(f"{url}/?c={'0' * 32}")
    idle(other)
    expect(other.get_by_text("There is no conversation")).to_be_visible()
    expect(other.locator('[data-testid="stChatMessage"]')).to_have_count(0)
    assert "c=" not in other.url
    other.close()


# --------------------------------------------------------------------------- evidence in view

def open_offline(browser, server, viewport, **context):  # noqa: F811
    ctx = browser.new_context(viewport=viewport, **context)
    pg = ctx.new_page()
    pg.set_default_timeout(30_000)
    pg.requests = []
    pg.on("request", lambda r: pg.requests.append(r.url))
    pg.goto(server)
    idle(pg)
    return pg


def open_chat(browser, server, viewport):  # noqa: F811
    """Chat with the samples in the library, at ``viewport``. The samples are added through the
    sidebar of a desktop tab (a phone folds the sidebar away); a phone then opens a tab of its
    own, a touch screen, on a new conversation."""
    pg = open_offline(browser, server, DESKTOP)
    add_samples(pg)
    if viewport is DESKTOP:
        pg.get_by_role("link", name="Chat", exact=True).click()
        idle(pg)
        return pg
    pg.context.close()
    return open_offline(browser, server, viewport, is_mobile=True, has_touch=True)


def sentence_in_view(pg, card_id: str) -> dict:
    """Where the card's first highlighted sentence is, against the window and (on a desktop)
    the margin's own scrolling box."""
    return pg.evaluate("""(id) => {
        const card = document.getElementById(id);
        const hl = card && card.querySelector('mark.mg-hl');
        if (!hl) return null;
        const r = hl.getBoundingClientRect();
        const m = document.querySelector('.st-key-margin').getBoundingClientRect();
        return {top: r.top, bottom: r.bottom, height: r.height,
                window: window.innerHeight, mtop: m.top, mbottom: m.bottom};
    }""", card_id)


def in_view(box: dict) -> bool:
    return (box["height"] > 0 and box["top"] >= 0 and box["bottom"] <= box["window"]
            and box["top"] >= box["mtop"] - 1 and box["bottom"] <= box["mbottom"] + 1)


def settled_sentence(pg, card_id: str, tries: int = 50) -> dict | None:
    """``sentence_in_view`` once the scroll has brought the sentence into view, or after
    ``tries`` readings 200 ms apart: on a busy machine the smooth scroll takes longer."""
    box = None
    for _ in range(tries):
        pg.wait_for_timeout(200)
        box = sentence_in_view(pg, card_id)
        if box is None or in_view(box):
            return box
    return box


def assert_marks_bring_sentences_into_view(pg, question: str, name: str) -> None:
    from playwright.sync_api import expect

    type_question(pg, question)
    answer = pg.locator('[data-testid="stChatMessage"]').last
    marks = answer.locator('a[href^="#src-"]')
    expect(marks.first).to_be_visible(timeout=60_000)
    idle(pg)
    hrefs = list(dict.fromkeys(marks.nth(i).get_attribute("href")
                               for i in range(marks.count())))
    checked = 0
    for href in reversed(hrefs):  # the last first: its sentence is the furthest down
        answer.locator(f'a[href="{href}"]').first.click()
        box = settled_sentence(pg, href[1:])
        if box is None:
            continue  # a card whose sentence was paraphrased: nothing highlighted to find
        checked += 1
        assert box["height"] > 0, box
        assert box["top"] >= 0 and box["bottom"] <= box["window"], (name, href, box)
        assert box["top"] >= box["mtop"] - 1 and box["bottom"] <= box["mbottom"] + 1, (name, box)
    assert checked, f"no highlighted sentence to check at {name}"


def test_a_mark_click_brings_the_cited_sentence_into_view_desktop_and_phone(browser, server):
    """At 1280x800 and at 390x844, clicking each mark of a long answer scrolls the margin (or,
    on a phone, the page) until the highlighted sentence itself is inside the window, not just
    its card's header."""
    question = "How should old books be stored, and what about light?"
    pg = open_offline(browser, server, DESKTOP)
    add_samples(pg)
    pg.get_by_role("link", name="Chat", exact=True).click()
    idle(pg)
    assert_marks_bring_sentences_into_view(pg, question, "1280x800")
    pg.context.close()
    phone = open_offline(browser, server, PHONE, is_mobile=True, has_touch=True)
    assert_marks_bring_sentences_into_view(phone, question, "390x844")
    # on a phone the answer stays in view after it is written, with a jump to its source
    from playwright.sync_api import expect

    jump = phone.locator("a.mg-jump").last
    expect(jump).to_be_visible()
    jump.click()
    phone.wait_for_timeout(400)
    target = jump.get_attribute("data-target")
    expect(phone.locator(f"[id='{target}'] .mg-body")).to_be_in_viewport()
    phone.context.close()


# --------------------------------------------------------------------------- the page view

def open_page_view(pg, question: str):
    """Ask, then press the first PDF card's "See on the page"; the dialog."""
    from playwright.sync_api import expect

    type_question(pg, question)
    answer = pg.locator('[data-testid="stChatMessage"]').last
    expect(answer.locator('a[href^="#src-"]').first).to_be_visible(timeout=60_000)
    idle(pg)
    card = pg.locator(".mg-group:visible .mg-card").filter(
        has_text="caring-for-old-books.pdf").first
    if not card.locator(".mg-body").is_visible():
        card.locator(".mg-head").click()
    card.locator("button.mg-pageview").click()
    dialog = pg.get_by_role("dialog")
    expect(dialog.locator(".mg-zoom img")).to_be_visible(timeout=30_000)
    return dialog


@pytest.mark.parametrize(**VIEWPORTS)
def test_the_page_view_opens_full_width_with_a_zoom_and_the_pdf_at_that_page(
        browser, server, viewport):
    from playwright.sync_api import expect

    pg = open_chat(browser, server, viewport)
    dialog = open_page_view(pg, "What temperature and humidity are best for old books?")
    box = dialog.bounding_box()
    assert box["width"] >= 0.9 * viewport["width"], box  # the page, not a 266 px thumbnail
    image = dialog.locator(".mg-zoom img")
    natural = image.evaluate("img => [img.naturalWidth, img.naturalHeight]")
    assert natural[0] >= 600 and natural[1] > natural[0], natural  # a portrait page
    fit = image.bounding_box()["width"]
    assert fit > 0.6 * viewport["width"], fit  # 800 px of 1280, 240 of 390
    dialog.get_by_text("200 %").click()
    idle(pg)
    expect(dialog.locator(".mg-zoom img.mg-z200")).to_be_visible()
    assert image.bounding_box()["width"] > 1.8 * fit
    # the kept original, opened at the cited page in a new tab
    link = dialog.locator("a.mg-openpdf")
    expect(link).to_have_attribute("href", re.compile(r"^blob:.*#page=\d+$"))
    page_number = int(link.get_attribute("href").rsplit("=", 1)[1])
    assert f"p. {page_number}" in dialog.inner_text()
    with pg.context.expect_page() as opened:
        link.click()
    tab = opened.value
    assert tab.url.startswith("blob:") and tab.url.endswith(f"#page={page_number}")
    head = pg.evaluate("""async (href) => {
        const bytes = new Uint8Array(await (await fetch(href.split('#')[0])).arrayBuffer());
        return String.fromCharCode(...bytes.slice(0, 5));
    }""", link.get_attribute("href"))
    assert head == "%PDF-"
    with pg.expect_download() as download:
        dialog.get_by_role("button", name="Download the original").click()
    assert download.value.suggested_filename == "caring-for-old-books.pdf"
    assert not external(pg.requests), external(pg.requests)
    pg.context.close()


def test_every_answer_of_a_conversation_offers_its_page_view(browser, server):
    from playwright.sync_api import expect

    pg = open_offline(browser, server, DESKTOP)
    add_samples(pg)
    pg.get_by_role("link", name="Chat", exact=True).click()
    idle(pg)
    type_question(pg, "How should old books be stored?")
    expect(pg.locator('[data-testid="stChatMessage"]').nth(1).locator('a[href^="#src-"]').first
           ).to_be_visible(timeout=60_000)
    idle(pg)
    type_question(pg, FERMAT)
    expect(pg.locator('[data-testid="stChatMessage"]').nth(3).locator('a[href^="#src-"]').first
           ).to_be_visible(timeout=60_000)
    idle(pg)
    # the first answer's PDF mark opens its card, whose page view still opens
    first = pg.locator('[data-testid="stChatMessage"]').nth(1)
    marks = first.locator('a[href^="#src-"]')
    for i in range(marks.count()):
        href = marks.nth(i).get_attribute("href")
        card = pg.locator(f"[id='{href[1:]}']")
        if "caring-for-old-books.pdf" in card.locator(".mg-head").inner_text():
            marks.nth(i).click()
            pg.wait_for_timeout(300)
            card.locator("button.mg-pageview").click()
            expect(pg.get_by_role("dialog").locator(".mg-zoom img")).to_be_visible()
            break
    else:
        pytest.fail("the first answer cited no PDF passage")
    pg.context.close()


def test_documents_page_downloads_and_opens_the_original(browser, server):
    from playwright.sync_api import expect

    pg = open_offline(browser, server, DESKTOP)
    add_samples(pg)
    pg.get_by_role("link", name="Documents", exact=True).click()
    idle(pg)
    pg.get_by_text("Open or download a document").click()
    choose(pg, "original_choice", re.compile(r"^caring-for-old-books\.pdf \("))
    expect(pg.locator("a.mg-openpdf")).to_have_attribute("href", re.compile(r"^blob:.*#page=1$"))
    with pg.expect_download() as download:
        pg.get_by_role("button", name="Download the original").click()
    path = download.value.path()
    assert Path(path).read_bytes()[:5] == b"%PDF-"
    # any other format's original too, byte for byte, with no PDF link
    name = "how-marginalia-works.md"
    choose(pg, "original_choice", re.compile(rf"^{re.escape(name)} \("))
    expect(pg.get_by_role("button", name="Download the original")).to_be_visible()
    expect(pg.locator("a.mg-openpdf")).to_have_count(0)
    with pg.expect_download() as download:
        pg.get_by_role("button", name="Download the original").click()
    assert download.value.suggested_filename == name
    sample = Path(__file__).resolve().parent.parent / "samples" / name
    assert Path(download.value.path()).read_bytes() == sample.read_bytes()
    pg.context.close()


# --------------------------------------------------------------------------- saying the state

@pytest.fixture(scope="module")
def own_server(chromium_path, tmp_path_factory):
    """An offline app of its own: these tests change the library's settings and documents."""
    tmp = tmp_path_factory.mktemp("chat-state")
    for url in _serve(tmp):
        yield url, tmp / "marginalia.db"


@pytest.mark.parametrize(**VIEWPORTS)
def test_tuned_settings_and_a_deleted_document_are_said(browser, own_server, viewport):
    from playwright.sync_api import expect

    from marginalia_core.config import Settings
    from marginalia_core.workspace import Workspace

    url, db = own_server
    ws = Workspace(Settings(db_path=str(db), embedder="local", answerer="extractive"))
    try:
        list(ws.apply_settings({}))  # the defaults again, after the other viewport's run
    finally:
        ws.close()
    pg = open_chat(browser, url, viewport)  # (the sample deleted by that run added again)
    expect(pg.locator(".st-key-tuned_note")).to_have_count(0)  # the defaults: nothing to say
    type_question(pg, FERMAT)
    expect(pg.locator('[data-testid="stChatMessage"]').last.locator('a[href^="#src-"]').first
           ).to_be_visible(timeout=60_000)
    idle(pg)
    cid = conversation_id(pg)

    # settings applied from the Inspector (here through the same Workspace call it makes)
    ws = Workspace(Settings(db_path=str(db), embedder="local", answerer="extractive"))
    try:
        list(ws.apply_settings({"threshold": 0.31, "top_k": 4}))
        name = "a-short-history-of-marginalia.md"
        doc = next(d for d in ws.documents() if d.name == name)
        assert ws.delete_document(doc.id)
    finally:
        ws.close()
    pg.goto(f"{url}/?c={cid}")
    idle(pg)
    note = pg.locator(".st-key-tuned_note")
    expect(note).to_contain_text("Tuned retrieval settings are in use")
    expect(note).to_contain_text("threshold 0.31")
    expect(note).to_contain_text("passages returned 4")
    expect(note.get_by_role("link", name="See them")).to_be_visible()
    # the answer still shows its passage, marked as from a deleted document, with no page view
    card = pg.locator(".mg-group:visible .mg-card").filter(has_text=name).first
    expect(card.locator(".mg-gone")).to_have_text("document deleted")
    expect(card).to_contain_text("document deleted: this is the passage as it was cited")
    expect(card.locator("button.mg-pageview")).to_have_count(0)
    pg.screenshot(path="/tmp/chat-state.png")
    note.get_by_role("link", name="See them").click()
    idle(pg)
    expect(pg.get_by_role("heading", name="Retrieval Inspector")).to_be_visible()
    pg.context.close()


@pytest.mark.parametrize(**VIEWPORTS)
def test_suggestions_are_whole_and_sidebar_rows_hold_their_delete(browser, own_server, viewport):
    from playwright.sync_api import expect

    url, _ = own_server
    desk = open_offline(browser, url, DESKTOP)
    add_samples(desk)  # through the sidebar, open on a desktop
    desk.context.close()
    pg = open_offline(browser, url, viewport)  # a new conversation: the suggested questions
    idle(pg)
    from marginalia_app.samples import SAMPLE_QUESTIONS

    for i, question in enumerate(SAMPLE_QUESTIONS):
        button = pg.locator(f".st-key-suggest-{i} button")
        expect(button).to_be_visible()
        label = button.locator("p")
        assert label.inner_text().strip() == question
        cut = label.evaluate("e => e.scrollWidth > e.clientWidth + 1 || "
                             "e.scrollHeight > e.clientHeight + 1")
        assert not cut, (question, viewport)
        box = button.bounding_box()
        assert box["x"] + box["width"] <= viewport["width"], (question, box)
    if viewport is PHONE:
        pg.context.close()
        return
    # a suggestion asks itself; then its conversation's row: title left-aligned, its delete
    # control on the same line
    pg.locator(".st-key-suggest-0 button").click()
    expect(pg.locator('[data-testid="stChatMessage"]').last.locator('a[href^="#src-"]').first
           ).to_be_visible(timeout=60_000)
    idle(pg)
    rows = pg.locator('[class*="st-key-convrow-"]')
    expect(rows.first).to_be_visible()
    title = rows.first.locator("button:visible").first
    delete = rows.first.locator("button:visible").last
    t, d = title.bounding_box(), delete.bounding_box()
    assert abs((t["y"] + t["height"] / 2) - (d["y"] + d["height"] / 2)) < 6, (t, d)
    assert d["x"] > t["x"] + t["width"] / 2, (t, d)
    text = title.locator("p").bounding_box()
    assert text["x"] - t["x"] < 48, (text, t)  # left-aligned, after its icon
    # Rename: the popover closes once the title is saved
    pg.locator('[class*="st-key-conv-"] button').first.click()
    idle(pg)
    pg.get_by_role("button", name="Rename").click()
    box = pg.get_by_role("textbox", name="Title")
    box.fill("Fermat's note")
    pg.get_by_role("button", name="Save").click()
    idle(pg)
    expect(pg.get_by_role("textbox", name="Title")).to_be_hidden()
    expect(pg.locator('[data-testid="stSidebar"]')).to_contain_text("Fermat's note")
    pg.context.close()


LONG_NAME = "a_rather_long_file_name_with_no_spaces_at_all_about_walnut_ink_recipes_final.txt"


@pytest.mark.parametrize(**VIEWPORTS)
def test_a_long_file_name_wraps_inside_its_margin_card(browser, own_server, viewport):
    """A file name with no space to break at (real ones: "pypdf__Seige_of_Vicksburg_Sample_OCR
    .pdf") wraps in its card's header instead of running out of the margin."""
    from playwright.sync_api import expect

    from marginalia_core.config import Settings
    from marginalia_core.workspace import Workspace

    url, db = own_server
    ws = Workspace(Settings(db_path=str(db), embedder="local", answerer="extractive"))
    try:
        if not any(d.name == LONG_NAME for d in ws.documents()):
            list(ws.ingest(LONG_NAME, b"Walnut ink was made by boiling green walnut husks for "
                           b"a whole day, then straining the brown liquid through linen."))
    finally:
        ws.close()
    pg = open_offline(browser, url, viewport)
    type_question(pg, "How was walnut ink made?")
    expect(pg.locator('[data-testid="stChatMessage"]').last.locator('a[href^="#src-"]').first
           ).to_be_visible(timeout=60_000)
    idle(pg)
    head = pg.locator(".mg-group:visible .mg-card").filter(has_text="walnut").first.locator(
        ".mg-head")
    head.scroll_into_view_if_needed()
    expect(head).to_contain_text("walnut_ink")
    box = head.evaluate("""e => { const r = e.getBoundingClientRect(),
        m = e.closest('.mg-card').getBoundingClientRect();
        return {over: e.scrollWidth - e.clientWidth, right: r.right, card: m.right,
                window: window.innerWidth}; }""")
    assert box["over"] <= 1 and box["right"] <= box["card"] + 1 <= box["window"] + 1, (
        viewport, box)
    # and the answer's source pill ("[1] a_rather_long… · p. 1") stays inside the window
    pill = pg.locator('[data-testid="stButtonGroup"] button').filter(has_text="a_rather").last
    pill.scroll_into_view_if_needed()
    right = pill.evaluate("e => [e.getBoundingClientRect().right, window.innerWidth]")
    assert right[0] <= right[1], (viewport, right)
    pg.context.close()
