"""The retrieval lab in a real browser (done-when of issue 13): in the Inspector make a set of
3 questions by ticking the passages that answer them, evaluate it, sweep the threshold and see
the curve, save two configurations and compare them. `streamlit run` + Playwright over Debian's
chromium, offline, its own database (the fixtures of test_browser.py, a server of its own).
Saves docs/screenshot-lab-questions.png, -lab-evaluate.png and -lab-compare.png.

And issue 23's done-when: on a set where the best-F1 threshold loses recall, the suggestion
keeps it; a saved configuration loads into the controls; B is applied from Compare; "why
wasn't it found?" explains a missed passage and reruns with the setting that includes it.
Saves docs/screenshot-lab-suggestion.png and -lab-why.png."""

from __future__ import annotations

import re

import pytest
from test_browser import (  # noqa: F401 - fixtures
    _serve,
    browser,
    choose,
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


def assert_readable(pg) -> None:
    """Every lab table and button on the page at 1280 px: inside the window, and no cell,
    header or button label cut (its text fits the box it is drawn in)."""
    cut = pg.evaluate(f"""() => {{
        const out = [];
        for (const t of document.querySelectorAll('.lab-table')) {{
            const box = t.getBoundingClientRect();
            if (box.width && box.right > {WIDTH}) out.push('table past the window: ' + box.right);
            for (const c of t.querySelectorAll('th, td')) {{
                if (c.offsetParent && c.scrollWidth > c.clientWidth + 1)
                    out.push('cell cut: ' + c.innerText.slice(0, 60));
            }}
        }}
        const texts = '[data-testid="stMain"] button p, [data-testid="stMetricValue"] div';
        for (const b of document.querySelectorAll(texts)) {{
            if (b.offsetParent && b.scrollWidth > b.clientWidth + 1)
                out.push('text cut: ' + b.innerText);
        }}
        // a selectbox shows its choice in an input, whose scrollWidth does not grow: measure
        const ctx = document.createElement('canvas').getContext('2d');
        for (const e of document.querySelectorAll('[data-testid="stMain"] [data-testid="stSelectbox"] input')) {{
            const st = getComputedStyle(e);
            ctx.font = st.font;
            const room = e.clientWidth - parseFloat(st.paddingLeft) - parseFloat(st.paddingRight);
            if (e.offsetParent && ctx.measureText(e.value).width > room + 1)
                out.push('choice cut: ' + e.value);
        }}
        return out;
    }}""")
    assert cut == [], cut


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
        expect(page.get_by_text(f"browser set has {n} question{'s' * (n != 1)}.")).to_be_visible()
    page.wait_for_timeout(500)
    screenshot(page, "screenshot-lab-questions.png")

    section(page, "Evaluate and tune")
    page.get_by_role("button", name="Evaluate", exact=True).click()
    idle(page)
    ndcg = page.locator('[data-testid="stMetric"]').filter(has_text="Ranking (nDCG@10)")
    expect(ndcg).to_contain_text(re.compile(r"[01]\.\d{3}"))
    table = page.locator(".lab-table").filter(has_text="first relevant at")
    expect(table).to_be_visible()
    expect(table).not_to_contain_text("None")
    expect(table).not_to_contain_text("chars")
    table.locator("summary").first.click()  # a found passage opens whole, with its page
    expect(table.locator("details[open] .mg-passage").first).to_be_visible()
    assert_readable(page)

    page.get_by_role("button", name="Sweep the threshold").click()
    idle(page)
    expect(page.get_by_text(re.compile(r"Threshold sweep · now \d\.\d\d · suggested \d\.\d\d"))
           ).to_be_visible()
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
    expect(page.get_by_text(re.compile(r"\d questions? better, \d worse"))).to_be_visible()
    expect(page.locator('[data-testid="stMetric"]').filter(has_text="Right on top")
           ).to_be_visible()
    assert_readable(page)
    page.locator(".lab-table").last.scroll_into_view_if_needed()
    page.wait_for_timeout(800)
    screenshot(page, "screenshot-lab-compare.png")

    section(page, "Passage size")  # the split preview: a wrapping table too
    preview = page.locator(".lab-table").filter(has_text="characters")
    expect(preview).to_be_visible()
    preview.locator("summary").first.click()
    expect(preview.locator("details[open] .mg-passage").first).to_be_visible()
    assert_readable(page)
    choose(page, "inspector_rerank", "Sentence windows")  # the longest choice of the controls
    idle(page)
    assert_readable(page)
    # on a phone the three search methods wrap onto a second line instead of running out
    page.set_viewport_size({"width": 390, "height": 844})
    page.wait_for_timeout(500)
    rights = page.locator(".st-key-inspector_mode").evaluate(
        "e => [...e.querySelectorAll('button')].map(b => b.getBoundingClientRect().right)")
    assert len(rights) >= 3 and max(rights) <= 390, rights
    assert not external(page.requests), external(page.requests)


# Document-level judgments over the samples: by meaning only, the passage that answers "How
# are answers cited?" has a low cosine, so the best-F1 threshold drops it.
TUNING_SET = "question,document,page\n" + "".join(f"{q},{d},\n" for q, d in [
    ("What did Fermat write in the margin?", "a-short-history-of-marginalia.md"),
    ("How should old books be stored?", "caring-for-old-books.pdf"),
    ("How are answers cited?", "how-marginalia-works.md"),
    ("Who annotated books in the Middle Ages?", "a-short-history-of-marginalia.md"),
    ("What humidity is best for paper?", "caring-for-old-books.pdf"),
    ("What is the relevance threshold?", "how-marginalia-works.md"),
    ("Why do readers write notes in books?", "a-short-history-of-marginalia.md"),
    ("How do I clean a dusty book?", "caring-for-old-books.pdf"),
])


@pytest.fixture(scope="module")
def lab_server(chromium_path, tmp_path_factory):  # noqa: F811 - the imported fixture
    """A server of its own: this test starts from an empty library."""
    yield from _serve(tmp_path_factory.mktemp("lab-browser"))


@pytest.fixture
def lab_page(browser, lab_server):  # noqa: F811 - the imported fixture
    context = browser.new_context(viewport={"width": WIDTH, "height": 900})
    pg = context.new_page()
    pg.set_default_timeout(30_000)
    pg.requests = []
    pg.on("request", lambda r: pg.requests.append(r.url))
    pg.goto(lab_server)
    idle(pg)
    yield pg
    context.close()


def threshold_now(pg) -> float:
    return float(pg.locator('.st-key-inspector_threshold [data-testid="stSliderThumbValue"]')
                 .inner_text())


def metric(pg, label: str):
    return pg.locator('[data-testid="stMetric"]').filter(has_text=label).first


def test_suggestion_keeps_recall_load_apply_b_and_why_wasnt_it_found(lab_page, tmp_path):
    from playwright.sync_api import expect

    page = lab_page  # noqa: F811 - this test's own page
    go(page, "Documents")
    page.get_by_role("button", name=re.compile("sample documents")).first.click()
    expect(page.get_by_text(re.compile("3 indexed")).first).to_be_visible(timeout=90_000)
    idle(page)

    go(page, "Retrieval Inspector")
    section(page, "Question sets")
    csv = tmp_path / "tuning.csv"
    csv.write_text(TUNING_SET, encoding="utf-8")
    page.locator('[data-testid="stFileUploaderDropzoneInput"]').set_input_files(str(csv))
    idle(page)
    fill(page, "Name of the imported set", "tuning set")
    page.get_by_role("button", name="Import", exact=True).click()
    idle(page)
    expect(page.get_by_text("Imported 8 questions into tuning set.")).to_be_visible()

    # the threshold sweep: best F1 loses a ticked passage, the suggestion keeps them all
    section(page, "Evaluate and tune")
    page.get_by_role("radiogroup", name="Search method").get_by_role(
        "radio", name="Meaning only").click()
    idle(page)
    page.get_by_role("button", name="Sweep the threshold").click()
    idle(page)
    card = page.locator(".st-key-inspector_tsweep_card")
    expect(card).to_contain_text(re.compile(r"Best F1 would be \d\.\d\d .* but it finds only "
                                            r"0\.\d\d of the ticked passages \(now 1\.00\)"))
    expect(card).to_contain_text(re.compile(r"found 1\.00 → 1\.00"))
    card.scroll_into_view_if_needed()
    page.wait_for_timeout(800)
    screenshot(page, "screenshot-lab-suggestion.png")
    use = card.get_by_role("button", name=re.compile("Use the suggested threshold"))
    suggested = use.inner_text().split()[-1]
    use.click()
    idle(page)
    assert abs(threshold_now(page) - float(suggested)) < 0.006
    page.get_by_role("button", name="Evaluate", exact=True).click()
    idle(page)
    expect(metric(page, "Found")).to_contain_text("1.000")  # recall kept
    assert_readable(page)
    fill(page, "Save these settings as", "kept recall")
    page.get_by_role("button", name="Save configuration").click()
    idle(page)
    page.get_by_role("radiogroup", name="Search method").get_by_role(
        "radio", name="Meaning + keywords").click()
    idle(page)
    fill(page, "Save these settings as", "hybrid")
    page.get_by_role("button", name="Save configuration").click()
    idle(page)
    expect(page.get_by_text("Saved hybrid.")).to_be_visible()

    # load a saved configuration into the controls
    choose(page, "inspector_load_name", "kept recall")
    page.get_by_role("button", name="Load", exact=True).click()
    idle(page)
    expect(page.get_by_text("Loaded “kept recall” into the settings.")).to_be_visible()
    expect(page.get_by_role("radiogroup", name="Search method").get_by_role(
        "radio", name="Meaning only")).to_be_checked()

    # apply B from Compare: Chat uses it, and says which saved configuration it is
    section(page, "Compare")
    for side, name in (("A", "hybrid"), ("B", "kept recall")):
        choose(page, f"inspector_cfg_{side.lower()}", name)
    page.get_by_role("button", name="Compare", exact=True).click()
    idle(page)
    expect(page.get_by_text(re.compile(r"\d questions? better, \d worse"))).to_be_visible()
    assert_readable(page)
    page.get_by_role("button", name="Apply B to Chat").click()
    idle(page)
    expect(page.get_by_text("Chat now uses “kept recall” (B).")).to_be_visible()
    expect(page.get_by_text(re.compile("saved configuration “kept recall”"))).to_be_visible()

    # why wasn't it found? a stricter threshold misses a passage; rerun with the fix
    section(page, "Evaluate and tune")
    page.locator('.st-key-inspector_threshold input[type=range]').focus()
    while threshold_now(page) < 0.55:
        page.keyboard.press("ArrowRight")
    idle(page)
    page.get_by_role("button", name="Evaluate", exact=True).click()
    idle(page)
    page.get_by_role("button", name="Why wasn't it found?").click()
    idle(page)
    why = page.locator(".st-key-inspector_why_card")
    expect(why).to_contain_text("the relevance threshold")
    expect(why).to_contain_text(re.compile(r"cosine 0\.\d{3}"))
    rerun = why.get_by_role("button", name=re.compile(r"Rerun with threshold"))
    fix = re.search(r"Rerun with (.+)", rerun.inner_text()).group(1).strip()
    rerun.click()
    idle(page)
    expect(why).to_contain_text(f"With {fix}, this passage is found.")
    expect(why).to_contain_text(re.compile(r"What else changes on the set: \d+ questions? "
                                           r"better, \d+ worse"))
    assert_readable(page)
    why.scroll_into_view_if_needed()
    page.wait_for_timeout(800)
    screenshot(page, "screenshot-lab-why.png")
    assert not external(page.requests), external(page.requests)
