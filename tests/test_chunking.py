"""Chunker properties (hypothesis) and the spec's preferences (examples)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from marginalia_core.ingest.chunking import (
    OVERLAP,
    TARGET,
    Chunk,
    chunk_stats,
    chunk_text,
    effective_overlap,
)

PROPERTY_SETTINGS = settings(max_examples=200, deadline=None)

# Words, separators and odd whitespace, so every kind of break (and none) gets exercised.
_tokens = st.one_of(
    st.text(alphabet="abcdefghij", min_size=1, max_size=12),
    st.text(alphabet="xyzΩжé漢", min_size=1, max_size=60),
    st.sampled_from([" ", "  ", "\n", "\n\n", "\n\n\n", ". ", "? ", "! ", "\t", " \n ", "."]),
)
texts = st.lists(_tokens, max_size=120).map("".join)


@st.composite
def cases(draw):
    text = draw(texts)
    target = draw(st.integers(min_value=1, max_value=300))
    overlap = draw(st.integers(min_value=0, max_value=400))
    cuts = draw(st.lists(st.integers(min_value=0, max_value=max(len(text), 1)), max_size=6))
    page_starts = draw(st.sampled_from([None, sorted({0, *cuts})]))
    return text, target, overlap, page_starts


def _is_word_start(text: str, i: int) -> bool:
    return not text[i].isspace() and (i == 0 or text[i - 1].isspace())


def _page(page_starts: list[int] | None, offset: int) -> int:
    if not page_starts:
        return 1
    return max(1, sum(1 for p in page_starts if p <= offset))


@PROPERTY_SETTINGS
@given(cases())
def test_chunk_invariants(case):
    text, target, overlap, page_starts = case
    chunks = chunk_text(text, target=target, overlap=overlap, page_starts=page_starts)
    used_overlap = effective_overlap(target, overlap)

    if not text.strip():
        assert chunks == []
        return
    for i, c in enumerate(chunks):
        assert c.idx == i
        assert c.text == text[c.start : c.end]
        assert 0 < len(c.text) <= target
        assert c.text == c.text.strip(), "chunks are trimmed of whitespace"
        assert c.page_start == _page(page_starts, c.start)
        assert c.page_end == _page(page_starts, c.end - 1)
        assert c.page_start <= c.page_end

    # In order, always moving forward, and covering every non-space character.
    assert not text[: chunks[0].start].strip()
    assert not text[chunks[-1].end :].strip()
    for prev, cur in zip(chunks, chunks[1:], strict=False):
        assert cur.start > prev.start
        assert cur.end > prev.end
        assert not text[prev.end : cur.start].strip(), "gap between chunks holds text"

    # Each later window starts at the first word start at/after (previous end - overlap);
    # mid-word only when the text offers no word start there (e.g. a run without spaces).
    for prev, cur in zip(chunks, chunks[1:], strict=False):
        back = max(prev.end - used_overlap, prev.start + 1)
        if cur.start >= prev.end:  # no overlap: only if no word started in the overlap zone
            first_word = next((j for j in range(back, prev.end) if _is_word_start(text, j)), None)
            assert first_word is None or first_word + target <= cur.start
        else:
            assert cur.start >= back
            if _is_word_start(text, cur.start):
                assert not any(_is_word_start(text, j) for j in range(back, cur.start))
            else:
                assert cur.start == back
                assert not any(_is_word_start(text, j) for j in range(back, prev.end + 1))


@PROPERTY_SETTINGS
@given(cases())
def test_deterministic(case):
    text, target, overlap, page_starts = case
    first = chunk_text(text, target=target, overlap=overlap, page_starts=page_starts)
    again = chunk_text(text, target=target, overlap=overlap, page_starts=page_starts)
    assert first == again


def _words(n: int, word: str = "word") -> str:
    return " ".join([word] * n)


def test_defaults_match_spec():
    assert (TARGET, OVERLAP) == (1400, 200)


def test_prefers_paragraph_break():
    para1 = _words(180) + ". " + _words(10) + "."  # ~950 chars with a sentence end inside
    para2 = _words(200) + "."
    text = para1 + "\n\n" + para2
    chunks = chunk_text(text)
    assert chunks[0].text == para1
    assert chunks[1].start < chunks[0].end  # overlaps back into the first paragraph


def test_prefers_sentence_end_over_line_break_and_space():
    sentences = "This is a sentence with several words in it. " * 20  # ~920 chars
    text = sentences + "\n".join(["words on a line"] * 100)
    first = chunk_text(text)[0]
    window_end = first.start + TARGET
    assert first.text.endswith("in it.")
    assert first.end == text.rfind(". ", 0, window_end) + 1  # the last sentence end
    assert text.rfind("\n", 0, window_end) > first.end  # a later line break was passed over


def test_line_break_before_space():
    text = "\n".join(["alpha beta gamma delta"] * 100)
    first = chunk_text(text)[0]
    assert text[first.end] == "\n"


def test_latest_sentence_end_wins_whatever_its_mark():
    text = ("Is this a question? " * 40) + ("Wow! " * 200)
    first = chunk_text(text, target=1000, overlap=100)[0]
    assert first.text.endswith("Wow!")
    assert len(first.text) > 990


def test_short_break_near_window_start_is_not_taken():
    text = "Title\n\n" + ("A longer sentence follows the heading here. " * 60)
    first = chunk_text(text)[0]
    assert len(first.text) > TARGET // 2
    assert first.text.startswith("Title\n\n")


def test_text_without_spaces_is_hard_cut_with_overlap():
    text = "x" * 10_000
    chunks = chunk_text(text)
    assert [len(c.text) for c in chunks[:-1]] == [TARGET] * (len(chunks) - 1)
    assert all(b.start == a.end - OVERLAP for a, b in zip(chunks, chunks[1:], strict=False))
    assert chunks[-1].end == len(text)


def test_overlap_starts_at_a_word():
    text = _words(2000, "lorem")
    chunks = chunk_text(text)
    for prev, cur in zip(chunks, chunks[1:], strict=False):
        assert _is_word_start(text, cur.start)
        assert prev.end - cur.start <= OVERLAP
        assert prev.end - cur.start > OVERLAP - len("lorem ")


def test_short_text_is_one_chunk():
    assert chunk_text("  Hello world.  ") == [Chunk(0, 2, 14, "Hello world.", 1, 1)]


@pytest.mark.parametrize("text", ["", "   ", "\n\n\t \n"])
def test_blank_text_gives_no_chunks(text):
    assert chunk_text(text) == []


def test_overlap_not_below_target_is_clamped():
    text = _words(1000)
    chunks = chunk_text(text, target=100, overlap=500)
    assert effective_overlap(100, 500) == 50
    assert all(len(c.text) <= 100 for c in chunks)
    assert all(a.end - b.start <= 50 for a, b in zip(chunks, chunks[1:], strict=False))
    assert len(chunks) < len(text) / 40  # real progress, not one chunk per character


def test_invalid_target():
    with pytest.raises(ValueError):
        chunk_text("abc", target=0)


def test_page_ranges():
    pages = ["Page one sentence. " * 60, "Page two sentence. " * 60, "Page three. " * 5]
    text = "\n\n".join(p.strip() for p in pages)
    starts = [0]
    for p in pages[:-1]:
        starts.append(starts[-1] + len(p.strip()) + 2)
    chunks = chunk_text(text, page_starts=starts)
    assert chunks[0].page_start == 1
    assert chunks[-1].page_end == 3
    assert any(c.page_start == 1 and c.page_end == 2 for c in chunks)  # spans the boundary
    # Empty pages share their start offset with the next page; the later page wins.
    assert chunk_text("abc", page_starts=[0, 0, 0])[0].page_start == 3


def test_chunk_stats():
    chunks = chunk_text(_words(1000))
    stats = chunk_stats(chunks)
    assert stats["count"] == len(chunks)
    assert stats["min_len"] <= stats["mean_len"] <= stats["max_len"] <= TARGET
    assert 0 < stats["mean_overlap"] <= OVERLAP
    assert chunk_stats([])["count"] == 0


def test_a_2_mb_text_is_chunked_end_to_end():
    """Speed is measured in benchmarks/bench_ingest.py; here: a large text is covered."""
    text = ("A sentence of ordinary prose, with commas. " * 12 + "\n\n") * 4000  # ~2 MB
    chunks = chunk_text(text)
    assert chunks[0].start == 0 and chunks[-1].end == len(text.rstrip())
    assert all(a.end > b.start for a, b in zip(chunks, chunks[1:]))  # overlapping, no gap
