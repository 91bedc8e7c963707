"""A model answer that cites the wrong passage, seen in a real browser (issue 22, item 4): the app
(`streamlit run`, Gemini answers through the real google-genai SDK to the fake Gemini server,
local embedder) shows a "not found in [n]" note on the mark of the sentence its passage lacks,
and none on the sentence its passage holds. Fixtures of test_browser.py, a server of its own."""

from __future__ import annotations

import re

import pytest
from test_browser import _serve, browser, chromium_path, idle, upload  # noqa: F401 - fixtures
from test_browser import ask as ask_in_chat
from test_chat import BEES, MILL

pytestmark = pytest.mark.browser

VIEWPORT = {"width": 1280, "height": 900}


@pytest.fixture(scope="module")
def gemini_server(chromium_path, tmp_path_factory, fake_gemini_server):  # noqa: F811
    yield from _serve(
        tmp_path_factory.mktemp("support-browser"),
        MARGINALIA_ANSWERER="gemini",
        GEMINI_API_KEY=fake_gemini_server.api_key,
        GOOGLE_GEMINI_BASE_URL=fake_gemini_server.base_url,
    )


def test_a_wrongly_cited_sentence_is_marked_not_found(browser, gemini_server, fake_gemini):  # noqa: F811
    from playwright.sync_api import expect

    context = browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    page.set_default_timeout(30_000)
    try:
        page.goto(gemini_server)
        idle(page)
        for name, text in (("mill.txt", MILL), ("bees.txt", BEES)):
            upload(page, {"name": name, "mimeType": "text/plain", "buffer": text.encode()})
            expect(page.get_by_text(re.compile(rf"{re.escape(name)} — indexed"))).to_be_visible(
                timeout=60_000)
            idle(page)
        # whatever passage the question ranks first, exactly one of these two sentences is
        # not in it: the model cites [1] for both
        fake_gemini.set_answer("The mill was built in 1851 by the Carter family [1]. "
                               "Worker bees turn nectar into honey and store it in wax combs [1].")
        ask_in_chat(page, "When was the mill built, and what do worker bees do?")
        answer = page.locator('[data-testid="stChatMessage"]').last
        expect(answer).to_contain_text("wax combs", timeout=60_000)
        idle(page)
        notes = answer.get_by_text(re.compile(r"not found in \[1\]"))
        expect(notes).to_have_count(1)
        page.screenshot(path="/tmp/support-browser.png")
    finally:
        context.close()
