"""The retrieval lab in a real browser (done-when of issue 13): in the Inspector make a set of
3 questions by ticking the passages that answer them, evaluate it, sweep the threshold and see
the curve, save two configurations and compare them. `streamlit run` + Playwright over Debian's
chromium, offline, its own database (the fixtures of test_browser.py, a server of its own).
Saves docs/screenshot-lab-questions.png, -lab-evaluate.png and -lab-compare.png."""

from __future__ import annotations

import re

import pytest
from test_browser import (  # noqa: F401 - fixtures
    browser,
    chromium_path,
    external,
    go,
    idle,
    page,
    screenshot,
    server,
)

pytestmark = pytest.mark.browser

WIDTH = 1280  # the window the tables must fit without clipping
QUESTIONS = [
    ("What did Fermat write in the margin?", "a-short-history-of-marginalia.md"),
    ("How should old books be stored?", "caring-for-old-books.pdf"),
    ("How are answers cited?", "how-marginalia-works.md"),
]


def assert_not_clipped(grid) -> None:
    """The table fits the window and needs no sideways scrolling."""
    box = grid.bounding_box()
    assert box["x"] + box["width"] <= WIDTH, f"the table runs past {WIDTH} px: {box}"
    scroller = grid.locator(".dvn-scroller").first
    wide, shown = scroller.evaluate("e => [e.scrollWidth, e.clientWidth]")
    assert wide <= shown + 1, f"the table scrolls sideways at {WIDTH} px ({wide} > {shown})"


def section(pg, name: str) -> None:
    pg.get_by_role("radiogroup", name="Show").get_by_role("radio", name=name,
                                                          exact=True).click()
    idle(pg)


def fill(pg, label: str, text: str) -> None:
    box = pg.get_by_label(label, exact=True)
    box.fill(text)
    box.press("Enter")
    idle(pg)


def test_make_a_set_evaluate_sweep_and_compare(page):  # noqa: F811 - the imported fixture
    from playwright.sync_api import expect

    page.set_viewport_size({"width": WIDTH, "height": 900})
    go(page, "Documents")
    page.get_by_role("button", name=re.compile("sample documents")).first.click()
    expect(page.get_by_text(re.compile("3 indexed")).first).to_be_visible(timeout=90_000)
    idle(page)

    go(page, "Retrieval Inspector")
    fill(page, "Question", QUESTIONS[0][0])
    why = page.locator('[data-testid="stDataFrame"]').first
    expect(why).to_be_visible()
    assert_not_clipped(why)  # the score table: every column in view at 1280 px
    expect(page.locator(".st-key-inspector_passage")).to_contain_text("Fermat")

    section(page, "Question sets")
    for n, (question, document) in enumerate(QUESTIONS, 1):
        fill(page, "Question", question)
        page.locator('[data-testid="stCheckbox"]').filter(has_text=document).first.click()
        idle(page)
        fill(page, "Question set", "browser set")
        page.get_by_role("button", name="Save question").click()
        idle(page)
        expect(page.get_by_text(f"browser set has {n} question(s)")).to_be_visible()
    page.wait_for_timeout(500)
    screenshot(page, "screenshot-lab-questions.png")

    section(page, "Evaluate and tune")
    page.get_by_role("button", name="Evaluate", exact=True).click()
    idle(page)
    ndcg = page.locator('[data-testid="stMetric"]').filter(has_text="Ranking (nDCG@10)")
    expect(ndcg).to_contain_text(re.compile(r"[01]\.\d{3}"))
    grid = page.locator('[data-testid="stDataFrame"]').first
    expect(grid).to_be_visible()
    assert_not_clipped(grid)

    page.get_by_role("button", name="Sweep the threshold").click()
    idle(page)
    expect(page.get_by_text(re.compile(r"Threshold sweep · suggested \d\.\d\d"))).to_be_visible()
    curve = page.locator('[data-testid="stVegaLiteChart"]').first
    expect(curve).to_be_visible()
    curve.scroll_into_view_if_needed()
    expect(curve.locator("canvas, svg").first).to_be_visible()  # the chart drew
    page.wait_for_timeout(800)
    screenshot(page, "screenshot-lab-evaluate.png")

    fill(page, "Save these settings as", "hybrid default")
    page.get_by_role("button", name="Save configuration").click()
    idle(page)
    expect(page.get_by_text("Saved hybrid default.")).to_be_visible()
    page.get_by_role("radiogroup", name="Search method").get_by_role(
        "radio", name="Meaning only").click()
    idle(page)
    page.get_by_role("button", name="Evaluate", exact=True).click()
    idle(page)
    fill(page, "Save these settings as", "meaning only")
    page.get_by_role("button", name="Save configuration").click()
    idle(page)
    expect(page.get_by_text("Saved meaning only.")).to_be_visible()

    section(page, "Compare")
    page.get_by_role("button", name="Compare", exact=True).click()
    idle(page)
    expect(page.get_by_text(re.compile(r"\d question\(s\) better, \d worse"))).to_be_visible()
    expect(page.locator('[data-testid="stMetric"]').filter(has_text="Right on top")
           ).to_be_visible()
    for n in range(page.locator('[data-testid="stDataFrame"]').count()):
        assert_not_clipped(page.locator('[data-testid="stDataFrame"]').nth(n))
    page.locator('[data-testid="stDataFrame"]').last.scroll_into_view_if_needed()
    page.wait_for_timeout(800)
    screenshot(page, "screenshot-lab-compare.png")
    assert not external(page.requests), external(page.requests)
