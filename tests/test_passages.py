"""marginalia_app.passages: markdown passages as sanitised HTML, text passages as text, the
highlight through both, and the margin cards the inline marks open."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest
from conftest import message

from marginalia_app import passages as mg
from marginalia_app import presentation as fmt
from marginalia_core.store.records import Message

ALLOWED_TAGS = {"p", "h4", "h5", "h6", "ul", "ol", "li", "blockquote", "pre", "code", "strong",
                "em", "span", "mark", "hr"}


class Tags(HTMLParser):
    def __init__(self, markup: str):
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str]]] = []
        self.text = ""
        self.feed(markup)

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text += data


def test_markdown_structure_renders_as_html():
    out = mg.markdown_html(
        "# Title\n\nSome *emphasis*, **bold** and `code`.\n\n- one\n- two\n\n1. first\n"
        "2. second\n\n> quoted\n\n```\nx = 1\n```\n"
    )
    assert '<h4 class="mg-h">Title</h4>' in out
    assert "<em>emphasis</em>" in out and "<strong>bold</strong>" in out
    assert "<code>code</code>" in out
    assert "<ul><li>one</li><li>two</li></ul>" in out
    assert "<ol><li>first</li><li>second</li></ol>" in out
    assert "<blockquote>quoted</blockquote>" in out
    assert "<pre><code>x = 1</code></pre>" in out
    assert "#" not in Tags(out).text and "*" not in Tags(out).text


@pytest.mark.parametrize("hostile", [
    "<script>alert(1)</script>",
    '<img src="http://example.invalid/x.png" onerror="alert(1)">',
    "<iframe src=//example.invalid></iframe>",
    '<a href="javascript:alert(1)">x</a>',
    "<style>body{display:none}</style>",
    "&lt;script&gt; <!-- comment -->",
])
def test_raw_html_is_shown_as_text_never_as_markup(hostile):
    out = mg.markdown_html(f"Before {hostile} after.")
    parsed = Tags(out)
    assert {t for t, _ in parsed.tags} <= ALLOWED_TAGS
    assert hostile in parsed.text  # exactly what the document says
    assert not any(attrs for t, attrs in parsed.tags if t not in ("span", "mark", "h4"))


def test_images_are_never_loaded_only_their_alt_text_shown():
    out = mg.markdown_html("See ![a tracking pixel](http://example.invalid/p.png \"title\") here.")
    parsed = Tags(out)
    assert "img" not in {t for t, _ in parsed.tags} and "example.invalid" not in out
    assert '<span class="mg-img">a tracking pixel</span>' in out


@pytest.mark.parametrize("link", [
    "[click me](javascript:alert(1))",
    "[click me](http://example.invalid/page)",
    "[click me](data:text/html,<script>alert(1)</script>)",
    "[click me](<http://example.invalid>)",
])
def test_links_keep_their_text_and_lose_their_address(link):
    out = mg.markdown_html(f"A {link} here.")
    parsed = Tags(out)
    assert "a" not in {t for t, _ in parsed.tags}
    assert "javascript" not in out and "example.invalid" not in out and "data:" not in out
    assert parsed.text == "A click me here."


def test_autolinks_and_escapes_are_text():
    out = mg.markdown_html("Mail <mailto:x@example.invalid> or \\*not emphasis\\*.")
    assert "<a" not in out and "<em>" not in out and "*not emphasis*" in Tags(out).text


def test_intraword_underscores_are_not_emphasis():
    out = mg.markdown_html("window.__pwned=1 and snake_case_name and __real__ strong")
    assert "window.__pwned=1" in Tags(out).text and "snake_case_name" in Tags(out).text
    assert "<strong>real</strong>" in out


def test_highlight_works_through_markdown_formatting():
    content = "## Care\n\nKeep books **out of direct sunlight**, which fades covers.\n\nOther."
    body, found = mg.passage_html(content, "text/markdown",
                                  ["Keep books out of direct sunlight, which fades covers."])
    assert found
    marked = "".join(re.findall(r'<mark class="mg-hl">(.*?)</mark>', body))
    assert marked == "Keep books out of direct sunlight, which fades covers."
    assert "<strong><mark" in body  # the bold part stays bold inside the highlight
    assert "Other" not in marked


def test_text_passages_are_text_and_highlighted():
    content = "Line one of a text file with *stars* and # hash.\nStill the same paragraph.\n\nNext."
    body, found = mg.passage_html(content, "text/plain", ["Still the same paragraph."])
    assert found and "<em>" not in body and "*stars*" in body and "# hash" in body
    assert '<mark class="mg-hl">Still the same paragraph.</mark>' in body
    assert body.count("<p>") == 2


def test_pages_are_labelled_only_for_pdfs():
    source = {"n": 2, "document_name": "notes.md", "page": 1, "page_end": 1, "score": 0.8}
    assert mg.card_label(source, "text/markdown") == "[2] notes.md · 80 %"
    assert mg.card_label(source, "text/plain") == "[2] notes.md · 80 %"
    pdf = {**source, "document_name": "r.pdf", "page": 3, "page_end": 4}
    assert mg.card_label(pdf, "application/pdf") == "[2] r.pdf · pp. 3–4 · 80 %"
    assert mg.source_mime({"document_id": "gone", "document_name": "r.PDF"}, {}) == "application/pdf"


def _answer(content: str, sources: list[dict]) -> Message:
    return message(id="m1234567890abcdef", content=content, sources=sources)


def _source(n: int, content: str) -> dict:
    return {"n": n, "document_id": "d", "document_name": "a.md", "idx": n - 1, "score": 0.5,
            "content": content}


def test_the_first_cited_card_is_open_and_every_mark_links_to_its_card():
    sources = [_source(1, "Alpha is the first letter of the alphabet."),
               _source(2, "Beta is the second letter of the alphabet.")]
    answer = _answer("Beta is the second letter of the alphabet [2]. Alpha too [1]. No [5].",
                     sources)
    group = mg.answer_group(answer, question="Q?", scope="g3", mimes={"d": "text/markdown"},
                            default=True)
    cards = re.findall(r'<div class="([^"]+)" id="([^"]+)"', group)
    assert [c for c, _ in cards] == ["mg-card mg-cited", "mg-card mg-open mg-cited"]
    ids = [i for _, i in cards]
    assert ids == [mg.anchor_id("g3", answer.id, 1), mg.anchor_id("g3", answer.id, 2)]
    md = fmt.render_answer(answer.content, {1, 2},
                           link=lambda n: mg.anchor_id("g3", answer.id, n))
    assert f"[\\[2\\]](#{ids[1]})" in md and f"[\\[1\\]](#{ids[0]})" in md
    assert ":red[\\[5\\]]" in md and "#src" not in md.split(":red")[1]  # [5] unlinked, flagged
    # a chosen card (a pill) wins over the first cited one
    chosen = mg.answer_group(answer, question="", scope="g4", mimes={}, default=True, open_n=1)
    assert 'class="mg-card mg-open mg-cited" id="' + mg.anchor_id("g4", answer.id, 1) in chosen


def test_uncited_sources_are_marked_and_scope_changes_every_id():
    answer = _answer("Only the first [1].", [_source(1, "Only the first."), _source(2, "Other.")])
    group = mg.answer_group(answer, question="", scope="g1", mimes={}, default=False)
    assert "mg-uncited" in group and "retrieved, not cited" in group
    assert "mg-default" not in group
    assert mg.anchor_id("g1", "m", 1) != mg.anchor_id("g2", "m", 1)
    assert re.fullmatch(r"src-[\w-]+", mg.anchor_id("g1", "<x y>", 1))


def test_ingest_outcomes_name_pages_only_for_pdfs():
    from marginalia_app.ingest_view import outcome_label
    from marginalia_core.ingest.pipeline import IngestOutcome

    md = IngestOutcome("notes.md", "indexed", chunks=2, pages=1, mime="text/markdown")
    assert outcome_label(md) == "notes\\.md — indexed: 2 passages"
    pdf = IngestOutcome("r.pdf", "indexed", chunks=1, pages=4, mime="application/pdf")
    assert outcome_label(pdf) == "r\\.pdf — indexed: 1 passage, 4 pages"


def test_a_heading_s_closing_hashes_and_padding_are_not_its_text():
    """The heading pattern ended '\\s*#*\\s*$' after a lazy text: a heading padded with spaces
    made it backtrack for seconds per card. Its closing #s are now found without a regex."""
    blocks = mg.parse_markdown("## Tools ##\n\n# C#\n\n# a" + " " * 1500 + "b  #")
    assert [(b.kind, b.plain) for b in blocks] == [
        ("h", "Tools"), ("h", "C#"), ("h", "a b")]
    assert "<h" in mg.markdown_html("# a" + " " * 1500 + "b")


def test_strong_emphasis_reads_as_both_not_stray_asterisks():
    """'***both***' showed as strong '*both' and a stray '*' (section names, which read headings
    with the same reader, were 'both' only by a second pass of their own)."""
    assert mg.parse_inline("a ***both*** b") == [
        mg.Segment("a "), mg.Segment("both", ("strong", "em")), mg.Segment(" b")]
