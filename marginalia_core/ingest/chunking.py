"""Split extracted text into overlapping windows for embedding.

Per the spec: windows of at most ``target`` characters, cut preferably at a paragraph break,
else a sentence end, else a line break, else a space, else anywhere; each window after the
first starts ``overlap`` characters before the previous one ended, moved forward to the start
of a word. Only ``str.rfind`` over one window at a time, so the cost is linear in the text.

Two refinements the spec leaves open:

* A break is only taken from the second half of the window (``MIN_FILL``) when one exists
  there, so a heading followed by a long paragraph does not become a five-character chunk.
* Chunk edges are trimmed of whitespace; ``text[c.start:c.end] == c.text`` always holds.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass

from marginalia_core.config import DEFAULT_CHUNK_OVERLAP, DEFAULT_CHUNK_TARGET

TARGET = DEFAULT_CHUNK_TARGET
OVERLAP = DEFAULT_CHUNK_OVERLAP
# Breaks in the first MIN_FILL of a window are used only if the rest of the window has none.
MIN_FILL = 0.5
# An overlap above half the window would put most characters in 3+ chunks (and multiply the
# embedding bill); larger settings are clamped to this share of ``target``.
MAX_OVERLAP_RATIO = 0.5

# (separator, characters of it kept at the end of the chunk), in order of preference.
# Sentence ends share one rank: the latest of them wins.
_PARAGRAPH = (("\n\n", 0),)
_SENTENCE = ((". ", 1), ("? ", 1), ("! ", 1))
_LINE = (("\n", 0),)
_SPACE = ((" ", 0),)
_RANKS = (_PARAGRAPH, _SENTENCE, _LINE, _SPACE)

_NON_SPACE = re.compile(r"\S")
_WORD_START = re.compile(r"(?<!\S)\S")


@dataclass(frozen=True)
class Chunk:
    """``idx`` is 0-based; ``page_start``/``page_end`` are 1-based and inclusive."""

    idx: int
    start: int
    end: int
    text: str
    page_start: int
    page_end: int
    location: str = ""  # what a citation calls pages page_start..page_end ("slides 3–4")


def effective_overlap(target: int, overlap: int) -> int:
    """The overlap actually used for these settings (what the chunking lab should show)."""
    return max(0, min(overlap, int(target * MAX_OVERLAP_RATIO)))


def _best_break(text: str, lo: int, hi: int) -> int:
    """Largest chunk end in ``[lo, hi]`` at the most preferred kind of break, or -1."""
    if lo > hi:
        return -1
    for rank in _RANKS:
        best = -1
        for sep, keep in rank:
            # A break whose kept part ends at e spans text[e - keep : e - keep + len(sep)].
            idx = text.rfind(sep, lo - keep, hi - keep + len(sep))
            if idx >= 0:
                best = max(best, idx + keep)
        if best >= 0:
            return best
    return -1


def _page_of(page_starts: list[int], offset: int) -> int:
    return max(1, bisect_right(page_starts, offset))


def chunk_text(
    text: str,
    *,
    target: int = TARGET,
    overlap: int = OVERLAP,
    page_starts: list[int] | None = None,
) -> list[Chunk]:
    """Chunks of ``text`` in order; empty or whitespace-only text gives ``[]``.

    ``page_starts[i]`` is the offset where page ``i + 1`` begins (as from extraction);
    ``None`` means the whole text is page 1.
    """
    if target < 1:
        raise ValueError(f"target must be at least 1 character, got {target}")
    overlap = effective_overlap(target, overlap)
    starts = list(page_starts) if page_starts else [0]
    fill = int(target * MIN_FILL)

    first = _NON_SPACE.search(text)
    if first is None:
        return []
    stop = len(text.rstrip())  # end of the last non-space character
    chunks: list[Chunk] = []
    start = first.start()
    covered_to = start  # first non-space offset not yet in any chunk
    while True:
        limit = start + target
        if limit >= stop:
            end = stop
        else:
            # The chunk must reach past covered_to, or it would add nothing new.
            end = _best_break(text, max(start + fill, covered_to + 1), limit)
            if end < 0:
                end = _best_break(text, covered_to + 1, limit)
            if end < 0:
                end = limit
            while text[end - 1].isspace():  # text[covered_to] is not, so this stops there
                end -= 1
        chunks.append(
            Chunk(
                idx=len(chunks),
                start=start,
                end=end,
                text=text[start:end],
                page_start=_page_of(starts, start),
                page_end=_page_of(starts, end - 1),
            )
        )
        if end >= stop:
            return chunks
        nxt = _NON_SPACE.search(text, end)
        covered_to = nxt.start() if nxt else stop  # nxt exists: end < stop
        # Step back by the overlap, but always forward of the previous start.
        back = max(end - overlap, start + 1)
        word = _WORD_START.search(text, back, covered_to + 1)
        # Mid-word only when no word starts in the overlap (text without spaces).
        new_start = word.start() if word else back
        if new_start + target <= covered_to:  # a huge whitespace gap: skip the overlap
            new_start = covered_to
        start = new_start


def chunk_stats(chunks: list[Chunk]) -> dict[str, float]:
    """Summary numbers for the chunking lab; overlap is measured between neighbours."""
    if not chunks:
        return {
            "count": 0,
            "min_len": 0,
            "mean_len": 0.0,
            "max_len": 0,
            "mean_overlap": 0.0,
            "total_chars": 0,
        }
    lengths = [len(c.text) for c in chunks]
    overlaps = [max(0, a.end - b.start) for a, b in zip(chunks, chunks[1:], strict=False)]
    return {
        "count": len(chunks),
        "min_len": min(lengths),
        "mean_len": sum(lengths) / len(lengths),
        "max_len": max(lengths),
        "mean_overlap": sum(overlaps) / len(overlaps) if overlaps else 0.0,
        "total_chars": sum(lengths),
    }
