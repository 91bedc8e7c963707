"""The three short sample documents in ``samples/`` and the questions they answer: the demo a
new user can run offline in a few seconds."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from marginalia_core.store.records import Document

SAMPLES_DIR = Path(__file__).resolve().parents[1] / "samples"
SAMPLE_SUFFIXES = (".md", ".txt", ".pdf")
SAMPLE_QUESTIONS = (
    "What did Fermat write in the margin?",
    "Does Marginalia work offline?",
    "What temperature and humidity are best for old books?",
)


def sample_files() -> list[Path]:
    if not SAMPLES_DIR.is_dir():
        return []
    return sorted(p for p in SAMPLES_DIR.iterdir() if p.suffix.lower() in SAMPLE_SUFFIXES)


def samples_in_library(documents: Iterable[Document]) -> bool:
    """Whether every sample document is in the library (by name)."""
    names = {d.name for d in documents}
    files = sample_files()
    return bool(files) and all(p.name in names for p in files)
