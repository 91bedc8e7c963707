"""Citation marks: ``[n]``, ``[1, 3]``, ``[1][2]``, and ranges like ``[1-3]``.

A mark is valid only when every number is one of the retrieved sources (1..k); anything else is
flagged and never rendered as a link, so text in a document ("cite [99]") cannot conjure a source.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass

MARK_RE = re.compile(r"\[\s*(\d{1,3}(?:\s*[,;–-]\s*\d{1,3})*)\s*\]")
MAX_RANGE = 20  # "[1-300]" is not a citation worth expanding
@dataclass(frozen=True)
class Mark:
    start: int
    end: int
    numbers: tuple[int, ...]

    def valid(self, k: int) -> bool:
        return bool(self.numbers) and all(1 <= n <= k for n in self.numbers)


def _numbers(body: str) -> tuple[int, ...]:
    out: list[int] = []
    for part in re.split(r"\s*[,;]\s*", body.strip()):
        if re.search(r"[–-]", part):
            lo, hi = (int(x) for x in re.split(r"\s*[–-]\s*", part))
            if lo <= hi and hi - lo <= MAX_RANGE:
                out.extend(range(lo, hi + 1))
            else:
                out.extend((lo, hi))
        elif part:
            out.append(int(part))
    return tuple(dict.fromkeys(out))


def find_marks(text: str) -> list[Mark]:
    return [Mark(m.start(), m.end(), _numbers(m.group(1))) for m in MARK_RE.finditer(text)]


def cited(text: str, sources: int | Collection[int]) -> tuple[list[int], list[int]]:
    """(valid source numbers cited, numbers that match no source), each sorted and unique.
    ``sources`` is the count k of retrieved sources (1..k), or the numbers a saved answer kept."""
    known = (lambda n: 1 <= n <= sources) if isinstance(sources, int) else sources.__contains__
    valid: set[int] = set()
    invalid: set[int] = set()
    for mark in find_marks(text):
        for n in mark.numbers:
            (valid if known(n) else invalid).add(n)
    return sorted(valid), sorted(invalid)


def pending_tail(text: str) -> int:
    """Index where an unfinished mark (``"… [1"``) starts at the end of streamed text, else
    ``len(text)``: a renderer holds that tail back until the next token completes it."""
    open_at = text.rfind("[")
    if open_at == -1 or "]" in text[open_at:]:
        return len(text)
    tail = text[open_at + 1 :]
    return open_at if re.fullmatch(r"[\d\s,;–-]{0,20}", tail) else len(text)


def first_cited_order(text: str, sources: int | Collection[int]) -> list[int]:
    """The valid source numbers in the order the text first cites them."""
    known = (lambda n: 1 <= n <= sources) if isinstance(sources, int) else sources.__contains__
    order: dict[int, None] = {}
    for mark in find_marks(text):
        for n in mark.numbers:
            if known(n):
                order.setdefault(n, None)
    return list(order)


def renumber(text: str, sources: int | Collection[int]) -> tuple[str, dict[int, int]]:
    """The text with its valid marks renumbered from [1] in the order they are first cited, and
    the mapping old -> new. A reader then never meets "[2] [3]" without a [1]. Numbers that
    match no source keep their number (they stay flagged: every one is above the new count,
    since the new count is at most the old); a mark is rewritten only when a number in it
    changes, and a range in a changed mark is written out ("[3-4]" -> "[1, 2]")."""
    mapping = {old: new for new, old in enumerate(first_cited_order(text, sources), start=1)}
    if all(old == new for old, new in mapping.items()):
        return text, mapping
    out: list[str] = []
    pos = 0
    for mark in find_marks(text):
        numbers = [mapping.get(n, n) for n in mark.numbers]
        if tuple(numbers) == mark.numbers:
            continue
        out.append(text[pos : mark.start])
        out.append("[" + ", ".join(str(n) for n in numbers) + "]")
        pos = mark.end
    out.append(text[pos:])
    return "".join(out), mapping


def renumber_sources(
    text: str, sources: list[dict]
) -> tuple[str, list[dict], list[int], list[int]]:
    """(text, cited sources, valid, invalid) with the sources an answer cites renumbered from 1
    in the order it first cites them, each source's ``n`` and the marks in the text changed
    together; uncited sources are dropped. ``sources`` are numbered by their ``n``."""
    by_n = {int(s["n"]): s for s in sources}
    new_text, mapping = renumber(text, set(by_n))
    kept = [{**by_n[old], "n": new} for old, new in sorted(mapping.items(), key=lambda p: p[1])]
    valid, invalid = cited(new_text, {s["n"] for s in kept})
    return new_text, kept, valid, invalid


class StreamRenumberer:
    """``renumber`` while an answer streams: feed the raw pieces, get pieces whose marks
    already carry the final numbering (a mark is held back until it closes). The joined
    output equals ``renumber`` of the joined input, so streamed tokens and the saved answer
    never disagree. ``cited`` lists the original numbers in the order first cited: final
    number ``i + 1`` is original ``cited[i]``."""

    def __init__(self, sources: int | Collection[int]):
        self._known = (
            (lambda n: 1 <= n <= sources) if isinstance(sources, int) else sources.__contains__
        )
        self._held = ""
        self._reported = 0
        self.mapping: dict[int, int] = {}

    @property
    def cited(self) -> list[int]:
        return sorted(self.mapping, key=self.mapping.__getitem__)

    def newly_cited(self) -> list[int] | None:
        """``cited`` when a source was cited for the first time since the last call, else None."""
        if len(self.mapping) == self._reported:
            return None
        self._reported = len(self.mapping)
        return self.cited

    def feed(self, piece: str) -> str:
        text = self._held + piece
        cut = pending_tail(text)
        self._held = text[cut:]
        return self._rewrite(text[:cut])

    def finish(self) -> str:
        text, self._held = self._held, ""
        return self._rewrite(text)

    def _rewrite(self, text: str) -> str:
        out: list[str] = []
        pos = 0
        for mark in find_marks(text):
            for n in mark.numbers:
                if self._known(n) and n not in self.mapping:
                    self.mapping[n] = len(self.mapping) + 1
            numbers = [self.mapping.get(n, n) for n in mark.numbers]
            if tuple(numbers) == mark.numbers:
                continue
            out.append(text[pos : mark.start])
            out.append("[" + ", ".join(str(n) for n in numbers) + "]")
            pos = mark.end
        out.append(text[pos:])
        return "".join(out)
