"""In a real browser: a web page served by a local HTTP server is added from the Documents page,
and an answer cites it by its URL with its section, its table shown as a table in the margin;
a slide deck's passage is cited as "slide 1"; a Markdown file's by its section."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from test_browser import (  # noqa: F401 (fixtures)
    browser,
    chromium_path,
    go,
    idle,
    open_card,
    page,
    server,
    upload,
)
from test_web_pages import PageServer

from marginalia_core.ingest import formats

pytestmark = pytest.mark.browser

DATA = Path(__file__).parent / "data" / "formats"


def test_a_local_web_page_is_added_from_the_documents_page_and_cited_by_its_url(page):  # noqa: F811
    from playwright.sync_api import expect

    with PageServer() as pages:
        url = pages.base + "/article.html"
        # labels break autolinking with a word joiner; playwright wants "/" escaped in a regex
        shown = re.escape(url).replace("://", ":\u2060?//").replace("/", r"\/")
        go(page, "Documents")
        box = page.get_by_role("textbox", name="Add a web page")
        box.fill(url)
        page.get_by_role("button", name="Add page").click()
        expect(page.get_by_text(re.compile(shown + " — indexed"))).to_be_visible(
            timeout=60_000)
        idle(page)
        assert "/article.html" in pages.requests  # fetched because it was asked for
        expect(page.get_by_text("Refresh web pages")).to_be_visible()

        go(page, "Chat")
        question = page.locator('[data-testid="stChatInputTextArea"]')
        question.fill("How long do quinces keep on a cool dark shelf?")
        question.press("Enter")
        pill = page.get_by_role("radio", name=re.compile(r"^\[1\] " + shown))
        expect(pill).to_be_visible(timeout=60_000)
        idle(page)
        pill.click()
        idle(page)
        card = open_card(page)
        expect(card).to_contain_text(url)
        expect(card).to_contain_text("Storing the fruit")
        expect(card.locator("table td").first).to_be_visible()
        expect(card.locator("table")).to_contain_text("Vranja")
        page.screenshot(path="/tmp/formats-web-cited.png")


def _upload_and_ask(page, name: str, mime: str, indexed: str, question: str):  # noqa: F811
    """Upload one of pandoc's or python-pptx's test files, wait for ``indexed`` (a pattern of
    the outcome line), ask ``question`` in Chat; the citation pills' locator."""
    from playwright.sync_api import expect

    upload(page, {"name": name, "mimeType": mime, "buffer": (DATA / name).read_bytes()})
    expect(page.get_by_text(re.compile(re.escape(name) + " — indexed" + indexed))).to_be_visible(
        timeout=60_000)
    idle(page)
    go(page, "Chat")
    box = page.locator('[data-testid="stChatInputTextArea"]')
    box.fill(question)
    box.press("Enter")
    return page.get_by_role("radio", name=re.compile(r"^\[\d\] " + re.escape(name)))


def test_a_slide_deck_is_cited_by_its_slide(page):  # noqa: F811
    from playwright.sync_api import expect

    pills = _upload_and_ask(page, "txt-fit-text.pptx", formats.PPTX_MIME, "",
                            "What are designers of typefaces called?")
    expect(pills.filter(has_text="· slide 1").first).to_be_visible(timeout=60_000)
    page.screenshot(path="/tmp/formats-slide-cited.png")


def test_a_markdown_file_is_cited_by_its_section(page):  # noqa: F811
    """pandoc's test suite in Markdown: the passage that answers is cited by the headings of
    its sections, and the outcome line counts them."""
    from playwright.sync_api import expect

    pills = _upload_and_ask(page, "testsuite.md", "text/markdown",
                            r": \d+ passages, \d+ sections", "Which block quote is pretty short?")
    pill = pills.filter(has_text=re.compile(r"· sections? ")).first
    expect(pill).to_be_visible(timeout=60_000)
    idle(page)
    pill.click()
    idle(page)
    card = open_card(page)
    expect(card).to_contain_text("Block Quotes")
    expect(card).to_contain_text("pretty short")
    page.screenshot(path="/tmp/formats-markdown-cited.png")
