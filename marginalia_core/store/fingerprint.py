"""What makes two documents the same text: a fingerprint the store keeps with every document.

A copy that differs by a byte (re-saved, re-exported, one typo fixed, a metadata stamp) has
another content hash, so it would be indexed again and every search would show each passage
twice. Two signals catch it, both independent of the passage size a library uses:

* the **text hash**: SHA-256 of the text's words, case and Unicode forms folded, spacing and
  punctuation ignored;
* **passages shared**: the text cut into passages of ~``UNIT_WORDS`` words at content-defined
  boundaries (a word whose hash is 0 modulo ``UNIT_WORDS`` ends a passage, as rsync's rolling
  cuts do), so an edit changes the one or two passages around it and the cuts after it fall
  where they fell before. Two documents are near-duplicates when they share at least
  ``NEAR_DUPLICATE_SHARE`` of the passages of the larger one.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from dataclasses import dataclass

# average passage length in words (the boundary rule) and the passage length cap
UNIT_WORDS = 24
UNIT_MAX_WORDS = 96
NEAR_DUPLICATE_SHARE = 0.95
_WORD = re.compile(r"\w+")
_HASH_CHARS = 24  # of a passage's hex digest: 96 bits, no accidental collisions in a library


@dataclass(frozen=True)
class Fingerprint:
    text_hash: str
    units: frozenset[str]  # distinct passage hashes


def words(text: str) -> list[str]:
    return _WORD.findall(unicodedata.normalize("NFKC", text).casefold())


def _digest(data: str) -> str:
    return hashlib.sha256(data.encode("utf-8", "surrogatepass")).hexdigest()


def _ends_unit(word: str) -> bool:
    return int(hashlib.blake2b(word.encode("utf-8", "surrogatepass"), digest_size=4)
               .hexdigest(), 16) % UNIT_WORDS == 0


def fingerprint(text: str) -> Fingerprint:
    ws = words(text)
    units: set[str] = set()
    current: list[str] = []
    for word in ws:
        current.append(word)
        if _ends_unit(word) or len(current) >= UNIT_MAX_WORDS:
            units.add(_digest(" ".join(current))[:_HASH_CHARS])
            current = []
    if current:
        units.add(_digest(" ".join(current))[:_HASH_CHARS])
    return Fingerprint(_digest(" ".join(ws)), frozenset(units))


def shared_share(shared: int, mine: int, theirs: int) -> float:
    """Share of the larger document's passages the two have in common."""
    larger = max(mine, theirs)
    return shared / larger if larger else 0.0
