"""marginalia_app.presentation: safe markdown for answers and passages, highlights, labels."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from marginalia_app import passages as mg
from marginalia_app import presentation as fmt

UNESCAPED_DANGER = re.compile(r"(?<!\\)(<|!\[|\]\(|\$)")


def unescape(markdown: str) -> str:
    return re.sub(r"\\(.)", r"\1", markdown).replace(fmt.WORD_JOINER, "")


# --------------------------------------------------------------------------- escaping


def test_escape_markdown_makes_every_punctuation_literal():
    text = "<script>alert(1)</script> ![x](http://e.invalid) **b** # h $x$ :red[y] `c`"
    out = fmt.escape_markdown(text)
    assert unescape(out) == text
    assert not UNESCAPED_DANGER.search(out)
    for ch in "<>[]()!*#$:`":
        assert f"\\{ch}" in out


def test_autolinks_are_broken_with_an_invisible_joiner():
    out = fmt.escape_markdown("see http://e.invalid, www.e.invalid and me@e.invalid")
    assert "http\\:" + fmt.WORD_JOINER in out
    assert "www" + fmt.WORD_JOINER + "\\." in out
    assert "\\@" + fmt.WORD_JOINER in out
    assert unescape(out) == "see http://e.invalid, www.e.invalid and me@e.invalid"


def test_escape_inline_collapses_whitespace_and_truncates():
    assert fmt.escape_inline("a\n  b\tc") == "a b c"
    assert fmt.escape_inline("abcdefghij", 5) == "abcd…"


def test_escape_multiline_keeps_paragraphs_and_lines():
    out = fmt.escape_multiline("line one\nline *two*\n\nnext")
    assert out == "line one  \nline \\*two\\*\n\nnext"


# --------------------------------------------------------------------------- answers


def test_valid_marks_become_badges_and_invalid_ones_are_flagged_text():
    out = fmt.render_answer("Founded in 1851 [2]. Also [1, 3] and [9].", 3)
    assert "1851 :blue-badge[2]." in out
    assert ":blue-badge[1] :blue-badge[3]" in out
    assert ":red[\\[9\\]]" in out
    assert "](" not in out


def test_valid_marks_can_be_a_set_of_saved_source_numbers():
    out = fmt.render_answer("A [1]. B [3]. C [2].", {1, 3})
    assert ":blue-badge[1]" in out and ":blue-badge[3]" in out and ":red[\\[2\\]]" in out


def test_answer_keeps_formatting_but_not_html_images_links_or_math():
    text = (
        "# Heading\n\n**bold** and *italic*, `a<b>`\n\n- item\n1. first\n\n"
        "<img src=x onerror=alert(1)> ![p](http://e.invalid/p.png) [l](http://e.invalid) $5 & $6"
    )
    out = fmt.render_answer(text, 1)
    assert out.startswith("# Heading\n\n**bold** and *italic*, `a<b>`\n\n- item\n1. first")
    tail = out.split("first", 1)[1]
    assert not UNESCAPED_DANGER.search(tail)
    assert "\\<img" in tail and "\\!\\[p\\]" in tail and "\\$5 \\& \\$6" in tail


def test_code_is_verbatim_and_marks_inside_code_are_not_badges():
    text = "Use `x[1]` here [1].\n\n```python\nprint('<b>[1]</b>')\n```\nafter [1]"
    out = fmt.render_answer(text, 1)
    assert "`x[1]` here :blue-badge[1]." in out
    assert "```python\nprint('<b>[1]</b>')\n```\n" in out
    assert out.endswith("after :blue-badge[1]")


def test_an_unclosed_backtick_is_a_literal_backtick():
    out = fmt.render_answer("a ` b <i>", 1)
    assert out == "a \\` b \\<i>"


def test_an_unclosed_fence_runs_to_the_end_verbatim():
    out = fmt.render_answer("text\n```\n![x](http://e.invalid)", 1)
    assert out == "text\n```\n![x](http://e.invalid)"


STREAM_TEXT = st.lists(
    st.sampled_from([*"ab [1]2,`*<!()$:/.w@\n", "www.", "http://", "```", "\n\n", "[1, 2]"]),
    max_size=40,
).map("".join)


@settings(max_examples=300, deadline=None)
@given(text=STREAM_TEXT, cuts=st.lists(st.integers(min_value=0, max_value=120), max_size=12))
def test_streaming_increments_add_up_to_the_final_rendering(text, cuts):
    stream = fmt.AnswerStream(2)
    out = ""
    pos = 0
    for cut in sorted(set(c for c in cuts if c <= len(text))):
        out += stream.feed(text[pos:cut])
        pos = cut
    out += stream.feed(text[pos:])
    out += stream.finish()
    assert out == fmt.render_answer(text, 2)


def test_a_backtick_run_at_the_end_of_a_piece_waits_for_the_next_piece():
    """Found by hypothesis: "`x`" then "``" is one unclosed run of three, not a code span."""
    text = "aaa`http://```"
    stream = fmt.AnswerStream(2)
    out = stream.feed(text[:12]) + stream.feed(text[12:]) + stream.finish()
    assert out == fmt.render_answer(text, 2)
    assert "`http://`" not in out  # never shown as a code span


def test_a_mark_split_across_tokens_is_held_back_until_complete():
    stream = fmt.AnswerStream(3)
    assert stream.feed("Yes [") == "Yes "
    assert stream.feed("1") == ""
    assert stream.feed("] and") == ":blue-badge[1] and"
    assert stream.finish() == ""


# --------------------------------------------------------------------------- highlights


PASSAGE = (
    "Marginalia are notes in the margins of books.\nThe word comes from Latin.\n\n"
    "Around 1637 Pierre de Fermat wrote a note in his copy of the Arithmetica. "
    "He claimed a proof that the margin was too narrow to contain. "
    "His son published the note."
)


def test_cited_sentences_attach_marks_to_their_sentence():
    answer = "Fermat wrote a note [2]. The word is Latin. [1] Both [1][2]."
    cited = fmt.cited_sentences(answer, 2)
    assert cited[2] == ["Fermat wrote a note.", "Both."]
    assert cited[1] == ["The word is Latin.", "Both."]
    assert fmt.cited_sentences("Bad [7].", 2) == {}


def test_exact_sentence_is_highlighted_in_the_passage():
    display = fmt.display_text(PASSAGE)
    answer = "Around 1637 Pierre de Fermat wrote a note in his copy of the Arithmetica [1]."
    spans = fmt.highlight_spans(display, fmt.cited_sentences(answer, 1)[1])
    assert len(spans) == 1
    a, b = spans[0]
    assert display[a:b] == "Around 1637 Pierre de Fermat wrote a note in his copy of the Arithmetica."
    body = mg.text_html(PASSAGE, spans)
    assert ('<mark class="mg-hl">Around 1637 Pierre de Fermat wrote a note in his copy of the '
            'Arithmetica.</mark>') in body


def test_a_paraphrase_highlights_the_closest_sentence():
    display = fmt.display_text(PASSAGE)
    spans = fmt.highlight_spans(display, ["Fermat's son later published that note"])
    assert [display[a:b] for a, b in spans] == ["His son published the note."]
    assert fmt.highlight_spans(display, ["Something about gardening entirely"]) == []


def test_quoted_part_of_a_sentence_is_found():
    display = fmt.display_text(PASSAGE)
    sentence = "The closest one says: “He claimed a proof that the margin was too narrow to contain.”"
    (span,) = fmt.highlight_spans(display, [sentence])
    assert display[span[0]:span[1]].startswith("He claimed a proof")


def test_passage_html_escapes_document_text_and_never_crosses_paragraphs():
    content = "<b>x</b> first [1](http://e.invalid).\n\nsecond line"
    display = fmt.display_text(content)
    body = mg.text_html(content, [(0, len(display))])
    assert body.count("<p>") == 2 and body.count('<mark class="mg-hl">') == 2
    assert "<b>" not in body and "&lt;b&gt;x&lt;/b&gt;" in body and "href" not in body


# --------------------------------------------------------------------------- labels


def test_numbers_and_labels():
    assert fmt.format_size(512) == "512 bytes"
    assert fmt.format_size(3 * 1024 + 200) == "3.2 KB"
    assert fmt.format_size(25 * 1024 * 1024) == "25 MB"
    assert fmt.percent(0.8234) == "82 %"
    assert fmt.percent(-0.1) == "0 %"
    assert fmt.page_label(3) == "p. 3" and fmt.page_label(3, 4) == "pp. 3–4"
    source = {"n": 1, "document_name": "report\n.pdf", "page": 3, "page_end": 3, "score": 0.82}
    assert mg.card_label(source, "application/pdf") == "[1] report .pdf · p. 3 · 82 %"
    assert mg.card_label({**source, "ocr": True}, "application/pdf") == (
        "[1] report .pdf · p. 3 · OCR · 82 %")
    assert fmt.format_created("2024-05-01T10:00:00+00:00")[:4] == "2024"
    assert fmt.format_created("nonsense") == "nonsense"


def test_stage_progress_moves_forward():
    events = [
        {"stage": "extracting"},
        {"stage": "chunking"},
        {"stage": "chunking", "chunks": 4},
        {"stage": "embedding", "done": 0, "total": 4},
        {"stage": "embedding", "done": 4, "total": 4},
        {"stage": "storing"},
    ]
    shares = [fmt.stage_progress(e)[0] for e in events]
    assert shares == sorted(shares) and shares[0] > 0 and shares[-1] < 1
    assert fmt.stage_progress(events[3])[1] == "Embedding passages 0/4"


def test_job_progress_line_says_file_pages_passages_and_time():
    from datetime import UTC, datetime, timedelta

    from marginalia_app.presentation import format_duration, job_progress
    from marginalia_core.ingest.jobs import Job

    start = datetime(2026, 1, 1, tzinfo=UTC)
    job = Job(id="j", batch_id="b", position=3, batch_size=7, name="book.pdf", mime=None,
              size=1, status="running", stage="embedding", pages_done=352, pages_total=352,
              chunks_done=340, chunks_total=687, reason=None, message="", document_id=None,
              duplicate=False, cancel_requested=False, owner=None, heartbeat=None,
              created=start.isoformat(), started=start.isoformat(), finished=None)
    share, line = job_progress(job, start + timedelta(seconds=72))
    assert 0 < share < 1
    assert line.startswith("file 3 of 7 · page 352 of 352 · 340 of 687 passages embedded")
    assert "1 min 12 s elapsed" in line and "left" in line
    queued = Job(**{**job.__dict__, "status": "queued", "position": 4})
    assert job_progress(queued) == (0.0, "file 4 of 7 · waiting")
    cancelling = Job(**{**job.__dict__, "cancel_requested": True})
    assert "cancelling" in job_progress(cancelling, start)[1]
    assert "left" not in job_progress(cancelling, start + timedelta(seconds=5))[1]
    assert [format_duration(s) for s in (None, 4.4, 65, 3725)] == [
        "", "4 s", "1 min 05 s", "1 h 02 min"]


def test_plural_counts_read_as_words_never_with_parenthesised_s():
    assert fmt.plural(1, "question") == "1 question"
    assert fmt.plural(0, "question") == "0 questions"
    assert fmt.plural(1200, "expected answer") == "1,200 expected answers"
