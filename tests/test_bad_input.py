"""Bad input: every file in ../shared/eval/pdfs plus generated hostile files is indexed or refused
with its reason, through ``ingest_bytes``, ``ingest_path`` and the CLI subprocess; never an
unhandled exception (no ``internal`` reason, no traceback on stderr), always within bounded time
and memory.

Hostile files: random bytes named .pdf, a PDF header over random bytes, real PDFs cut at several
points, PDF bombs (20,000 blank pages from pypdf; in the slow tests a 99,000-page tree, a
300,000-page tree, a stream that inflates past pypdf's limit and 4,999 pages of small text), 0-byte
files, UTF-16/UTF-32 text (with and without BOM), legacy encodings, binaries with text names, a
.md just over the 50 MB limit (refused from ``stat`` alone: the file is never opened), names with
path separators and control characters, a directory and a FIFO named like documents.

Extraction + chunking is fuzzed with hypothesis (bounded ``max_examples`` and ``deadline``) on
random bytes and on mutated PDF bytes. Ingestion here uses a tiny hashing embedder: the embedder
is not what is under test, and the real one would make the suite minutes long (the CLI runs use
the real offline embedder).
"""

from __future__ import annotations

import builtins
import codecs
import io
import json
import os
import pathlib
import random
import re
import sqlite3
import subprocess
import sys
import time
import zipfile
import zlib
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest
from conftest import offline_cli_env, settle
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pdf_maker import serialize

from marginalia_core.config import Settings
from marginalia_core.errors import ExtractionError
from marginalia_core.ingest.chunking import chunk_text
from marginalia_core.ingest.extraction import MAX_PAGES
from marginalia_core.ingest.formats import extract
from marginalia_core.ingest.pipeline import ingest_bytes, ingest_path
from marginalia_core.providers.embeddings.base import EmbedderBase, l2_normalize
from marginalia_core.store.sqlite import Store

ROOT = Path(__file__).resolve().parents[1]
PDFS = ROOT.parent / "shared" / "eval" / "pdfs"

# Every refusal reason extraction/ingestion may give for a file (errors.py + MislabelledFileError).
FILE_REASONS = {
    "unsupported", "binary", "encoding", "encrypted", "wrong_password", "no_text", "corrupt",
    "empty", "too_large", "unreadable", "mislabelled", "macros",
    "near_duplicate",  # the same text as a document already indexed (issue 26): refused, named
}
DAMAGED = {"indexed", "corrupt", "no_text", "empty", "mislabelled"}  # acceptable for random damage
FIGURES: dict[str, object] = {}


# ----------------------------------------------------------------------------- fixtures/helpers

class HashEmbedder(EmbedderBase):
    """Fast deterministic stand-in embedder (hashed bag of words, unit length)."""

    name = "hash"
    model = "hash-test"
    dimension = 64
    batch_size = 64
    default_threshold = 0.0

    def embed_batch(self, texts, *, query):
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for i, text in enumerate(texts):
            for word in re.findall(r"\w+", text.lower())[:4000]:
                out[i, zlib.crc32(word.encode()) % self.dimension] += 1.0
        out[:, 0] += 1e-3
        return l2_normalize(out)


@pytest.fixture
def env(tmp_path):
    """(store, embedder, settings) on a fresh database."""
    store = Store(tmp_path / "bad.db")
    settings = Settings(db_path=str(tmp_path / "bad.db"), embedder="local", answerer="extractive")
    yield store, HashEmbedder(), settings
    store.close()


def outcome(events: list[dict]) -> str:
    """'indexed' / 'duplicate' / the refusal reason, after checking the event stream's shape."""
    assert events, "no events"
    kinds = [e["type"] for e in events]
    assert kinds[-1] in ("done", "error") and set(kinds[:-1]) <= {"stage"}, kinds
    last = events[-1]
    if last["type"] == "done":
        return "duplicate" if last.get("duplicate") else "indexed"
    assert last["reason"] != "internal", f"unhandled exception: {last['message']}"
    assert last["reason"] in FILE_REASONS, last
    assert last["message"].strip() and "Traceback" not in last["message"]
    if last["reason"] == "near_duplicate":  # the refusal names the document it matches
        # Python events say existing_name; the CLI's NDJSON (the wire form) existingName
        name = last.get("existing_name", last.get("existingName"))
        assert name and name in last["message"], last
        assert last.get("existing_id", last.get("existingId")), last
    return last["reason"]


def timed(gen) -> tuple[list[dict], float]:
    started = time.monotonic()
    events = list(gen)
    return events, time.monotonic() - started


def check_store(store: Store) -> None:
    report = store.integrity_report()
    assert report["integrity"] == "ok"
    assert report["mismatched_documents"] == [] and report["orphan_chunks"] == 0
    conn = store.conn
    assert conn.execute("SELECT COUNT(*) FROM chunks_fts_docsize").fetchone()[0] == \
        conn.execute("SELECT COUNT(*) FROM chunks").fetchone()[0]


def build_pdf(n_pages: int, content: bytes, *, fanout: int = 1000, compress: bool = False) -> bytes:
    """A valid PDF whose ``n_pages`` pages (in a two-level page tree) share one content stream:
    a tiny file that declares a huge document."""
    objs: list[bytes | None] = []

    def add(body: bytes | None) -> int:
        objs.append(body)
        return len(objs)

    catalog, root = add(None), add(None)
    font = add(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    if compress:
        packed = zlib.compress(content, 9)
        stream = add(b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(packed) + packed
                     + b"\nendstream")
    else:
        stream = add(b"<< /Length %d >>\nstream\n" % len(content) + content + b"\nendstream")
    mids, left = [], n_pages
    while left > 0:
        k = min(fanout, left)
        left -= k
        mid = add(None)
        kids = [
            add(b"<< /Type /Page /Parent %d 0 R /MediaBox [0 0 612 792] /Resources << /Font "
                b"<< /F1 %d 0 R >> >> /Contents %d 0 R >>" % (mid, font, stream))
            for _ in range(k)
        ]
        objs[mid - 1] = (b"<< /Type /Pages /Parent %d 0 R /Kids [" % root
                         + b" ".join(b"%d 0 R" % x for x in kids) + b"] /Count %d >>" % k)
        mids.append(mid)
    objs[catalog - 1] = b"<< /Type /Catalog /Pages %d 0 R >>" % root
    objs[root - 1] = (b"<< /Type /Pages /Kids [" + b" ".join(b"%d 0 R" % m for m in mids)
                      + b"] /Count %d >>" % n_pages)
    return serialize(objs)


PAGE_TEXT = b"BT /F1 12 Tf 72 720 Td (A small page of text about glosses and margins.) Tj ET"


def blank_pages_pdf(n: int) -> bytes:
    from pypdf import PdfWriter

    writer = PdfWriter()
    for _ in range(n):
        writer.add_blank_page(612, 792)
    buf = io.BytesIO()
    writer.write(buf)
    return buf.getvalue()


FORMATS_DIR = ROOT / "tests" / "data" / "formats"


def small_docx(*paragraphs: str) -> bytes:
    import docx

    document = docx.Document()
    for text in paragraphs:
        document.add_paragraph(text)
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def with_member(data: bytes, member: str, content: bytes, *, compress: bool = True) -> bytes:
    """A copy of ZIP ``data`` with one more member."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as src, zipfile.ZipFile(out, "w") as dst:
        for item in src.infolist():
            dst.writestr(item, src.read(item.filename))
        dst.writestr(member, content, zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED)
    return out.getvalue()


def office_hostile_files() -> dict[str, tuple[bytes, set[str]]]:
    """Word, Excel, PowerPoint, OpenDocument, EPUB, CSV and HTML files that must be refused,
    each with its reason (issue 26 item 3)."""
    docx = small_docx("A paragraph about quince rootstocks and their yields.")
    xlsx = (FORMATS_DIR / "inventory-table.xlsx").read_bytes()
    locked = (FORMATS_DIR / "pass_protected.xlsx").read_bytes()  # a real encrypted workbook
    files: dict[str, tuple[bytes, set[str]]] = {
        "real.docx": (docx, {"indexed"}),
        "locked.xlsx": (locked, {"encrypted"}),
        "locked-named.docx": (locked, {"encrypted"}),
        "macros.docm": (docx, {"macros"}),
        "macros.xlsm": (xlsx, {"macros"}),
        "hidden-macros.docx": (with_member(docx, "word/vbaProject.bin", b"\xd0\xcf" * 64),
                               {"macros"}),
        # 64 MB of zeros in one member: ~60 KB packed, a 1000x ratio
        "bomb.docx": (with_member(docx, "word/media/filler.bin", bytes(64 * 1024 * 1024)),
                      {"too_large"}),
        "bomb.xlsx": (with_member(xlsx, "xl/media/filler.bin", bytes(64 * 1024 * 1024)),
                      {"too_large"}),
        "empty.docx": (b"", {"empty"}),
        "no-text.docx": (small_docx(), {"empty"}),
        "empty.csv": (b"", {"empty"}),
        "only-commas.csv": (b",,,\n,,,\n", {"empty"}),
        "empty.html": (b"<html><head><script>x()</script></head><body><nav>Home</nav></body>"
                       b"</html>", {"empty"}),
        "xlsx-named.docx": (xlsx, {"mislabelled"}),
        "docx-named.pptx": (docx, {"mislabelled"}),
        "text-named.xlsx": (b"Item,Cost\nPaper,4\n", {"mislabelled"}),
        "docx-named.csv": (docx, {"mislabelled"}),
        "plain-zip.epub": (_plain_zip(), {"mislabelled"}),
        "cut-half.docx": (docx[: len(docx) // 2], {"corrupt"}),
        "cut-half.xlsx": (xlsx[: len(xlsx) // 2], {"corrupt"}),
        "old-format.doc": (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(500), {"unsupported"}),
    }
    pdfs = sorted(PDFS.glob("sf__minimal-document.pdf"))
    if pdfs:
        files["pdf-named.pptx"] = (pdfs[0].read_bytes(), {"mislabelled"})
        files["pdf-named.html"] = (pdfs[0].read_bytes(), {"mislabelled"})
    return files


def _plain_zip() -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("notes.txt", "hello")
    return out.getvalue()


def hostile_files() -> dict[str, tuple[bytes, set[str]]]:
    """name -> (bytes, acceptable outcomes)."""
    rng = random.Random(1234)
    files: dict[str, tuple[bytes, set[str]]] = {}
    for i, size in enumerate((1, 700, 4096, 65536)):
        files[f"random-{i}.pdf"] = (rng.randbytes(size), {"mislabelled", "corrupt"})
    files["random-with-pdf-header.pdf"] = (b"%PDF-1.7\n" + rng.randbytes(20_000), {"corrupt"})
    files["header-only.pdf"] = (b"%PDF-1.4\n", {"corrupt", "empty"})
    files["header-and-eof.pdf"] = (b"%PDF-1.4\n%%EOF\n", {"corrupt", "empty"})
    for source in ("sf__pdflatex-4-pages.pdf", "sf__multicolumn.pdf"):
        path = PDFS / source
        if path.exists():
            data = path.read_bytes()
            for frac in (0.01, 0.1, 0.5, 0.9, 0.99):
                files[f"cut-{int(frac * 100):02d}pct-{source}"] = (data[: int(len(data) * frac)],
                                                                    DAMAGED)
            files[f"cut-last-byte-{source}"] = (data[:-1], DAMAGED)
            files[f"no-header-{source}"] = (data[9:], DAMAGED)
    files["empty.txt"] = (b"", {"empty"})
    files["empty.md"] = (b"", {"empty"})
    files["empty.pdf"] = (b"", {"empty"})
    files["whitespace.md"] = (b"  \n\t\n   \r\n", {"empty"})
    prose = "Glosses in the margin of a manuscript are called marginalia. Über naïve café.\n" * 20
    files["utf16-bom.txt"] = (codecs.BOM_UTF16_LE + prose.encode("utf-16-le"), {"indexed"})
    files["utf16be-bom.md"] = (codecs.BOM_UTF16_BE + prose.encode("utf-16-be"), {"indexed"})
    files["utf32-bom.txt"] = (prose.encode("utf-32"), {"indexed"})
    files["utf8-bom.txt"] = (codecs.BOM_UTF8 + ("Other " + prose).encode(), {"indexed"})
    files["utf16-no-bom.txt"] = (prose.encode("utf-16-le"), {"binary"})
    files["bad-utf16-after-bom.txt"] = (codecs.BOM_UTF16_LE + b"\x00\xd8a", {"encoding", "binary"})
    files["cp1252.txt"] = (("Legacy " + prose).encode("cp1252"), {"indexed"})
    files["cp1251-cyrillic.txt"] = (("Глоссы на полях рукописи. " * 40).encode("cp1251"),
                                    {"encoding"})
    files["nul-bytes.txt"] = (b"text\x00with\x00nuls " * 50, {"binary"})
    files["control-chars.md"] = (bytes(range(1, 9)) * 200 + b"some text", {"binary"})
    files["png-named.txt"] = (b"\x89PNG\r\n\x1a\n" + rng.randbytes(500), {"binary"})
    files["zip-named.pdf"] = (b"PK\x03\x04" + rng.randbytes(500), {"mislabelled"})
    files["elf-named.md"] = (b"\x7fELF" + rng.randbytes(500), {"binary"})
    if (PDFS / "sf__minimal-document.pdf").exists():
        files["pdf-named.md"] = ((PDFS / "sf__minimal-document.pdf").read_bytes(), {"mislabelled"})
    files["report.docx"] = (b"PK\x03\x04" + rng.randbytes(100), {"corrupt"})
    files["script.exe"] = (b"MZ" + rng.randbytes(100), {"unsupported"})
    files["no-extension"] = (("Plain words with no extension. " * 30).encode(), {"indexed"})
    files["one-long-line.txt"] = (("".join(rng.choice("abcdefgh") for _ in range(200_000))).encode(),
                                  {"indexed"})
    files["html-and-scripts.md"] = (
        b"# Title\n\n<script>alert(1)</script> <img src=x onerror=alert(2)> [x](javascript:alert(3))"
        b" and some real prose about margins and glosses in old books.\n" * 10,
        {"indexed"},
    )
    files.update(office_hostile_files())
    return files


# --------------------------------------------------------------------------- eval PDFs

BIG_PDF = 1_000_000  # bytes; the fast run leaves out the one 1.8 MB, 117-page eval PDF


@pytest.mark.parametrize("everything", [False, pytest.param(True, marks=pytest.mark.slow)],
                         ids=["small", "all"])
def test_every_eval_pdf_is_indexed_or_refused_with_its_reason(pdf_dir, env, everything):
    store, embedder, settings = env
    outcomes, slowest = {}, (0.0, "")
    for path in sorted(pdf_dir.glob("*.pdf")):
        if not everything and path.stat().st_size > BIG_PDF:
            continue
        events, seconds = timed(ingest_path(store, embedder, settings, path))
        result = outcome(events)
        if result not in ("indexed", "duplicate"):
            assert path.name in events[-1]["message"], events[-1]["message"]
        outcomes[path.name] = result
        slowest = max(slowest, (seconds, path.name))
    check_store(store)
    counts = {r: sum(v == r for v in outcomes.values()) for r in sorted(set(outcomes.values()))}
    FIGURES[f"eval pdfs ({'all' if everything else 'small'})"] = {
        "files": len(outcomes), **counts, "slowest_s": round(slowest[0], 2),
        "slowest": slowest[1]}
    assert outcomes["sf__imagemagick-CCITTFaxDecode.pdf"] == "no_text"
    assert outcomes["pypdf__encrypted-file.pdf"] == "encrypted"
    # two eval PDFs repeat another's text (r6-user-password ~ r2-owner-password, with-attachment
    # ~ minimal-document): refused as near-duplicates naming the first, so they count as read
    assert counts.get("indexed", 0) + counts.get("near_duplicate", 0) >= (18 if everything else 17)


# ----------------------------------------------------------------------- generated hostile files

HOSTILE = hostile_files()


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_file_through_ingest_bytes_and_ingest_path(name, env, tmp_path):
    store, embedder, settings = env
    data, acceptable = HOSTILE[name]
    events, seconds = timed(ingest_bytes(store, embedder, settings, name, data))
    got = outcome(events)
    assert got in acceptable, (name, got, events[-1])
    FIGURES.setdefault("hostile files (s)", {})[name] = round(seconds, 3)
    # the same file from disk gives the same outcome (or duplicate, if it was just indexed)
    path = tmp_path / name
    path.write_bytes(data)
    again = outcome(list(ingest_path(store, embedder, settings, path)))
    assert again == ("duplicate" if got == "indexed" else got), (name, got, again)
    check_store(store)
    if got == "indexed":
        (doc,) = store.list_documents()
        assert doc.name == name
        for chunk in store.document_chunks(doc.id):
            assert chunk.content.strip()


def test_utf16_text_is_decoded_not_mangled(env):
    store, embedder, settings = env
    data, _ = HOSTILE["utf16-bom.txt"]
    events = list(ingest_bytes(store, embedder, settings, "utf16-bom.txt", data))
    assert outcome(events) == "indexed"
    text, _ = store.document_source(events[-1]["document"]["id"])
    assert text.startswith("Glosses in the margin") and "Über naïve café." in text
    assert "\x00" not in text


def test_pdf_bomb_of_20k_blank_pages_is_refused_quickly(env):
    """20,000 pages sharing one tiny content stream (the slow test also runs pypdf's own
    20,000-blank-page file through a subprocess, with its memory measured)."""
    store, embedder, settings = env
    started = time.monotonic()
    data = build_pdf(20_000, b"")
    built = time.monotonic() - started
    events, seconds = timed(ingest_bytes(store, embedder, settings, "blank-bomb.pdf", data))
    FIGURES["20k blank-page bomb"] = {"bytes": len(data), "build_s": round(built, 2),
                                      "refused_in_s": round(seconds, 2)}
    assert outcome(events) == "too_large"
    assert f"{MAX_PAGES:,}" in events[-1]["message"]
    assert store.list_documents() == []


NAMES_WITH_TRICKS = [
    "../../etc/passwd.txt",
    "..\\..\\windows\\system32\\evil.md",
    "/absolute/path/notes.txt",
    "evil\x1b[31mred\x1b[0m.txt",
    "line\nbreak\rreturn\ttab.md",
    "nul\x00byte.txt",
    "bidi\u202egnp.txt",
    "zero\u200bwidth\u2060.md",
    "a" * 5000 + ".txt",
    "",
    "   ",
    "/",
]


@pytest.mark.parametrize("name", NAMES_WITH_TRICKS, ids=range(len(NAMES_WITH_TRICKS)))
def test_names_with_path_separators_and_control_characters(name, env):
    store, embedder, settings = env
    data = f"Notes for the name test {name!r}: glosses and marginalia.".encode()
    events = list(ingest_bytes(store, embedder, settings, name, data))
    result = outcome(events)
    shown = events[-1]["file"]
    for event in events:
        assert event["file"] == shown  # every event names the file the same, safe way
    assert "/" not in shown and "\\" not in shown
    assert all(ch.isprintable() for ch in shown), repr(shown)
    assert 0 < len(shown) <= 200
    if result == "indexed":
        assert store.list_documents()[0].name == shown
    else:  # no extension left (e.g. "" or "/") is fine as text; anything else must say why
        assert result in FILE_REASONS


@pytest.mark.parametrize(
    "ext,data,expected",
    [
        (".docx", b"PK\x03\x04" + b"\x00" * 100, "corrupt"),
        (".pdf", b"just some text, not a PDF", "mislabelled"),
        (".md", b"# A heading\n\nSome markdown about margins.", "indexed"),
    ],
    ids=["docx", "pdf", "md"],
)
def test_a_long_name_keeps_its_extension(env, ext, data, expected):
    """Shortening a long name must not drop its extension: the extension decides the type.
    (Fails until ingestion.safe_name keeps the suffix when it truncates.)"""
    store, embedder, settings = env
    events = list(ingest_bytes(store, embedder, settings, "r" * 300 + ext, data))
    assert events[-1]["file"].endswith(ext) and len(events[-1]["file"]) <= 200
    assert outcome(events) == expected


def test_files_on_disk_with_control_characters_in_their_names(env, tmp_path):
    store, embedder, settings = env
    for i, name in enumerate(["evil\x1b[31m\nname\t.txt", "back\\slash.md", "spaced  name .txt"]):
        path = tmp_path / name
        path.write_text(f"Document number {i} about manuscripts and glosses.", encoding="utf-8")
        events = list(ingest_path(store, embedder, settings, path))
        assert outcome(events) == "indexed"
        shown = events[-1]["document"]["name"]
        assert "/" not in shown and "\\" not in shown and shown.isprintable()
    check_store(store)


@pytest.mark.timeout(60)
def test_directories_fifos_and_missing_paths_are_refused_without_blocking(env, tmp_path):
    store, embedder, settings = env
    folder = tmp_path / "folder.pdf"
    folder.mkdir()
    fifo = tmp_path / "pipe.txt"
    os.mkfifo(fifo)  # reading it would block forever
    for path in (folder, fifo, tmp_path / "missing.md"):
        # a blocking read would hang here until the test's timeout
        assert outcome(list(ingest_path(store, embedder, settings, path))) == "unreadable"


def test_oversize_markdown_is_refused_before_being_read(env, tmp_path, monkeypatch):
    """50 MB + 1 byte (a sparse file): refused from its size alone; no open() of it happens."""
    store, embedder, settings = env
    assert settings.max_upload_mb == 50
    big = tmp_path / "huge.md"
    with open(big, "wb") as fh:
        fh.truncate(settings.max_upload_bytes + 1)
    opened: list[str] = []
    target = str(big)

    def guard(real):
        def wrapper(file, *args, **kwargs):
            if str(file) == target or str(getattr(file, "name", "")) == target:
                opened.append(real.__name__)
                raise AssertionError("the oversize file was opened")
            return real(file, *args, **kwargs)
        wrapper.__name__ = getattr(real, "__name__", "open")
        return wrapper

    monkeypatch.setattr(builtins, "open", guard(builtins.open))
    monkeypatch.setattr(io, "open", guard(io.open))
    monkeypatch.setattr(os, "open", guard(os.open))
    real_read_bytes, real_path_open = pathlib.Path.read_bytes, pathlib.Path.open
    monkeypatch.setattr(pathlib.Path, "read_bytes",
                        lambda self: guard(lambda p: real_read_bytes(Path(p)))(self))
    monkeypatch.setattr(pathlib.Path, "open",
                        lambda self, *a, **k: guard(lambda p, *a2, **k2: real_path_open(
                            Path(p), *a2, **k2))(self, *a, **k))
    events, seconds = timed(ingest_path(store, embedder, settings, big))
    assert opened == []
    assert outcome(events) == "too_large"
    assert "50 MB" in events[-1]["message"] and "huge.md" in events[-1]["message"]
    FIGURES["50 MB + 1 .md refused in (s)"] = round(seconds, 4)


def test_oversize_bytes_are_refused_before_hashing_or_parsing(env):
    store, embedder, settings = env
    small = settings.with_overrides(max_upload_mb=0.01)  # 10 KiB
    data = b"%PDF-1.4\n" + b"0" * (small.max_upload_bytes + 1)
    events = list(ingest_bytes(store, embedder, small, "big.pdf", data))
    assert outcome(events) == "too_large"
    assert [e["type"] for e in events] == ["stage", "error"]  # refused at the first step


# ------------------------------------------------------------------------------------- CLI

def run_cli_ingest(db: Path, files: list[Path], timeout: float = 300) -> tuple[int, list, str]:
    cmd = [sys.executable, "-m", "marginalia_core", "ingest", *map(str, files), "--db", str(db),
           "--embedder", "local", "--answerer", "extractive", "--target", "8000",
           "--overlap", "0"]
    proc = subprocess.run(cmd, cwd=ROOT, env=offline_cli_env(), capture_output=True, text=True,
                          timeout=timeout)
    events = [json.loads(line) for line in proc.stdout.splitlines()]  # all NDJSON
    return proc.returncode, events, proc.stderr


def assert_cli_outcomes(code: int, events: list[dict], stderr: str, files: list[Path]) -> dict:
    assert "Traceback" not in stderr, stderr
    assert code in (0, 1), (code, stderr)
    finals = [e for e in events if e["type"] in ("done", "error")]
    assert len(finals) == len(files), "every file gets exactly one done/error line"
    results = {}
    for path, event in zip(files, finals, strict=True):
        results[path.name] = outcome([event])
    refused = sum(e["type"] == "error" for e in finals)
    assert code == (1 if refused else 0)
    assert stderr.count("refused:") == refused
    return results


def test_cli_ingests_hostile_files_without_a_traceback(tmp_path):
    folder = tmp_path / "hostile"
    folder.mkdir()
    files = []
    for name in sorted(HOSTILE):
        if HOSTILE[name][1] == {"indexed"} and name != "utf16-bom.txt":
            continue  # indexing is the in-process tests' job; keep the real embedder's work small
        path = folder / name
        path.write_bytes(HOSTILE[name][0])
        files.append(path)
    weird = folder / "evil\x1b[31m\nname.txt"
    weird.write_text("A document whose name has control characters.", encoding="utf-8")
    huge = folder / "huge.md"
    with open(huge, "wb") as fh:
        fh.truncate(50 * 1024 * 1024 + 1)
    fifo = folder / "pipe.txt"
    os.mkfifo(fifo)
    files += [weird, huge, fifo, folder / "missing.pdf"]
    for name in ("pypdf__encrypted-file.pdf", "sf__imagemagick-CCITTFaxDecode.pdf",
                 "sf__unreadablemetadata.pdf", "pypdf__issue-297.pdf"):
        if (PDFS / name).exists():
            files.append(PDFS / name)
    started = time.monotonic()
    code, events, stderr = run_cli_ingest(tmp_path / "cli.db", files)
    FIGURES["CLI hostile batch"] = {"files": len(files), "seconds": round(time.monotonic()
                                                                          - started, 2)}
    results = assert_cli_outcomes(code, events, stderr, files)
    for name, got in results.items():
        if name in HOSTILE:
            assert got in HOSTILE[name][1], (name, got)
    assert results["huge.md"] == "too_large"
    assert results["pipe.txt"] == results["missing.pdf"] == "unreadable"
    assert code == 1


@pytest.mark.slow
def test_cli_ingests_every_eval_pdf_without_a_traceback(tmp_path, pdf_dir):
    files = sorted(pdf_dir.glob("*.pdf"))
    started = time.monotonic()
    code, events, stderr = run_cli_ingest(tmp_path / "cli.db", files)
    results = assert_cli_outcomes(code, events, stderr, files)
    FIGURES["CLI eval pdfs"] = {"files": len(files), "seconds": round(time.monotonic() - started,
                                                                      2),
                                "indexed": sum(v == "indexed" for v in results.values())}
    assert results["pypdf__r2-owner-password.pdf"] == "indexed"
    assert results["sf__libreoffice-writer-password.pdf"] == "encrypted"


# ------------------------------------------------------------------- bombs: time and memory

MEASURE = r"""
import json, sys, time
from marginalia_core.ingest.chunking import chunk_text
from marginalia_core.errors import ExtractionError
from marginalia_core.ingest.formats import extract


def peak_mb():  # VmHWM: this process's own peak RSS (ru_maxrss survives exec from pytest)
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


data = open(sys.argv[1], "rb").read()
before = peak_mb()
started = time.monotonic()
try:
    ex = extract(sys.argv[2], data, max_bytes=50 * 1024 * 1024)
    result, chunks = "indexed", len(chunk_text(ex.text, page_starts=ex.page_starts))
except ExtractionError as err:
    result, chunks = err.reason, 0
seconds = time.monotonic() - started
print(json.dumps({"result": result, "chunks": chunks, "seconds": round(seconds, 2),
                  "peak_rss_mb": round(peak_mb(), 1),
                  "rss_growth_mb": round(peak_mb() - before, 1)}))
"""
BOMB_HANG_S = 180.0  # still parsing a bomb after this is a hang (its time is a figure)
BOMB_BOUND_MB = 1500.0


def measure_extract(tmp_path: Path, name: str, data: bytes) -> dict:
    path = tmp_path / name
    path.write_bytes(data)
    proc = subprocess.run([sys.executable, "-c", MEASURE, str(path), name], cwd=ROOT,
                          capture_output=True, text=True, timeout=BOMB_HANG_S)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    return {"bytes": len(data), **json.loads(proc.stdout)}


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_pdf_bombs_are_refused_or_handled_in_bounded_time_and_memory(tmp_path):
    bombs = {
        # just under pypdf's own 100,000-entry page-tree limit: parsed whole, then refused
        "tree-99k-pages.pdf": (build_pdf(99_000, PAGE_TEXT), {"too_large"}),
        # past it (pypdf stops at 100,000 entries and says so: refused as damaged)
        "tree-120k-pages.pdf": (build_pdf(120_000, PAGE_TEXT), {"too_large", "corrupt"}),
        # one page whose content stream inflates to ~200 MB (pypdf caps inflation at 75 MB)
        "inflate-200mb.pdf": (
            build_pdf(1, (b"BT /F1 12 Tf 72 720 Td (" + b"A" * 60 + b") Tj ET\n") * 2_500_000,
                      compress=True),
            {"corrupt", "too_large", "indexed"},
        ),
        # many pages of small text, under the page limit: indexed, in bounded time
        f"text-{MAX_PAGES - 1}-pages.pdf": (build_pdf(MAX_PAGES - 1, PAGE_TEXT), {"indexed"}),
        "blank-20k-pages.pdf": (blank_pages_pdf(20_000), {"too_large"}),
    }
    figures = {}
    for name, (data, acceptable) in bombs.items():
        got = measure_extract(tmp_path, name, data)
        figures[name] = got
        assert got["result"] in acceptable, (name, got)
        assert got["rss_growth_mb"] < BOMB_BOUND_MB, (name, got)
    FIGURES["bombs (extract+chunk in a subprocess)"] = figures


@pytest.mark.slow
def test_many_small_pages_are_indexed_end_to_end(env):
    store, embedder, settings = env
    data = build_pdf(MAX_PAGES - 1, PAGE_TEXT)
    events, seconds = timed(ingest_bytes(store, embedder, settings, "many-pages.pdf", data))
    assert outcome(events) == "indexed"
    doc = events[-1]["document"]
    assert doc["page_count"] == MAX_PAGES - 1
    chunks = store.document_chunks(doc["id"])
    assert chunks[0].page_start == 1 and chunks[-1].page_end == MAX_PAGES - 1
    FIGURES[f"{MAX_PAGES - 1} text pages ingested (s)"] = round(seconds, 2)
    check_store(store)


# ----------------------------------------------------------------------------------- fuzzing

FUZZ_EXAMPLES = int(os.environ.get("MARGINALIA_FUZZ_EXAMPLES", "150"))
SLOW_FUZZ_EXAMPLES = int(os.environ.get("MARGINALIA_SLOW_FUZZ_EXAMPLES", "600"))
FUZZ_DEADLINE = timedelta(seconds=10)
SEED_PDFS = [
    name for name in ("sf__minimal-document.pdf", "sf__crazyones-pdfa.pdf",
                      "sf__pdflatex-4-pages.pdf", "pypdf__multilang.pdf", "sf__annotated_pdf.pdf",
                      "pypdf__issue-297.pdf", "pypdf__encrypted-file.pdf")
    if (PDFS / name).exists()
]
SEED_BYTES = {name: (PDFS / name).read_bytes() for name in SEED_PDFS}


def check_extract_and_chunk(name: str, data: bytes) -> str:
    """extract() either refuses with an ExtractionError (reason + message) or returns text whose
    chunks satisfy the chunker's contract. Any other exception fails the test."""
    try:
        ex = extract(name, data, max_bytes=50 * 1024 * 1024)
    except ExtractionError as err:
        assert err.reason in FILE_REASONS and err.message.strip()
        return err.reason
    assert ex.text.strip()
    assert len(ex.page_starts) == ex.page_count >= 1
    assert ex.page_starts == sorted(ex.page_starts) and ex.page_starts[0] == 0
    assert ex.page_starts[-1] <= len(ex.text)
    chunks = chunk_text(ex.text, target=300, overlap=60, page_starts=ex.page_starts)
    assert chunks
    covered = 0
    for i, c in enumerate(chunks):
        assert c.idx == i and c.text == ex.text[c.start:c.end] and c.text.strip()
        assert len(c.text) <= 300
        assert 1 <= c.page_start <= c.page_end <= ex.page_count
        assert c.start <= covered or not ex.text[covered:c.start].strip()  # no text skipped
        covered = max(covered, c.end)
    assert not ex.text[covered:].strip()
    return "indexed"


MUTATION = st.tuples(
    st.sampled_from(["flip", "insert", "delete", "truncate", "duplicate", "digit"]),
    st.floats(min_value=0.0, max_value=1.0, allow_nan=False),
    st.binary(min_size=1, max_size=64),
)


def mutate(data: bytes, mutations) -> bytes:
    buf = bytearray(data)
    for op, where, payload in mutations:
        if not buf:
            break
        at = min(len(buf) - 1, int(where * len(buf)))
        if op == "flip":
            buf[at] ^= payload[0] or 0xFF
        elif op == "insert":
            buf[at:at] = payload
        elif op == "delete":
            del buf[at: at + 1 + payload[0]]
        elif op == "truncate":
            del buf[at:]
        elif op == "duplicate":
            buf[at:at] = buf[at: at + 1 + payload[0] * 4]
        else:  # change a digit: object numbers, lengths, xref offsets
            digits = [m.start() for m in re.finditer(rb"\d", bytes(buf[at: at + 400]))]
            if digits:
                buf[at + digits[0]] = ord("0") + payload[0] % 10
    return bytes(buf)


NAMES = st.sampled_from(["f.pdf", "f.txt", "f.md", "f", "F.PDF", "f.markdown", "f.docx", "f.pptx",
                         "f.xlsx", "f.csv", "f.odt", "f.epub", "f.html"])
# Real files of each new format (tests/data/formats) and the member of each that holds its text
FORMAT_SEEDS = {
    "comments-rich-para.docx": "word/document.xml",
    "txt-fit-text.pptx": "ppt/slides/slide1.xml",
    "inventory-table.xlsx": "xl/worksheets/sheet1.xml",
    "headers.odt": "content.xml",
    "wasteland.epub": "EPUB/wasteland-content.xhtml",
    "analysis-data.csv": "",
    "creativecommons.org.html": "",
}
FORMAT_BYTES = {name: (FORMATS_DIR / name).read_bytes() for name in FORMAT_SEEDS}


def mutate_member(data: bytes, member: str, mutations) -> bytes:
    """``data`` (a ZIP) with one member's bytes mutated and the archive rebuilt, so the damage
    reaches the format's XML parser instead of stopping at the ZIP checksum."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as src, zipfile.ZipFile(out, "w") as dst:
        for item in src.infolist():
            body = src.read(item.filename)
            if item.filename == member:
                body = mutate(body, mutations)
            dst.writestr(item, body)
    return out.getvalue()


def _fuzz_random_bytes(name, data):
    check_extract_and_chunk(name, data)


def _fuzz_mutated_pdf(seed_name, mutations):
    check_extract_and_chunk("mutated.pdf", mutate(SEED_BYTES[seed_name], mutations))


def _fuzz_text(text, ext):
    check_extract_and_chunk(f"t{ext}", text.encode("utf-8"))


COMMON = {"deadline": FUZZ_DEADLINE, "suppress_health_check": [HealthCheck.too_slow]}
random_bytes_strategy = given(name=NAMES, data=st.binary(max_size=4096))
mutated_strategy = given(seed_name=st.sampled_from(SEED_PDFS or ["none"]),
                         mutations=st.lists(MUTATION, min_size=1, max_size=8))
text_strategy = given(
    text=st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=3000),
    ext=st.sampled_from([".txt", ".md"]),
)

test_fuzz_extract_chunk_random_bytes = settings(max_examples=FUZZ_EXAMPLES, **COMMON)(
    random_bytes_strategy(_fuzz_random_bytes))
test_fuzz_extract_chunk_text = settings(max_examples=FUZZ_EXAMPLES, **COMMON)(
    text_strategy(_fuzz_text))
test_fuzz_extract_chunk_random_bytes_long = pytest.mark.slow(
    settings(max_examples=SLOW_FUZZ_EXAMPLES, **COMMON)(random_bytes_strategy(_fuzz_random_bytes)))


@pytest.mark.skipif(not SEED_PDFS, reason="../shared/eval/pdfs is not present")
@settings(max_examples=FUZZ_EXAMPLES, **COMMON)
@mutated_strategy
def test_fuzz_extract_chunk_mutated_pdfs(seed_name, mutations):
    _fuzz_mutated_pdf(seed_name, mutations)


@pytest.mark.slow
@pytest.mark.skipif(not SEED_PDFS, reason="../shared/eval/pdfs is not present")
@settings(max_examples=SLOW_FUZZ_EXAMPLES, **COMMON)
@mutated_strategy
def test_fuzz_extract_chunk_mutated_pdfs_long(seed_name, mutations):
    _fuzz_mutated_pdf(seed_name, mutations)


@settings(max_examples=FUZZ_EXAMPLES, **COMMON)
@given(seed_name=st.sampled_from(sorted(FORMAT_SEEDS)),
       mutations=st.lists(MUTATION, min_size=1, max_size=8), inside=st.booleans())
def test_fuzz_extract_chunk_mutated_documents(seed_name, mutations, inside):
    """Word, PowerPoint, Excel, OpenDocument, EPUB, CSV and HTML files damaged as bytes, or
    inside the ZIP member that holds their text: indexed or refused with a reason."""
    data, member = FORMAT_BYTES[seed_name], FORMAT_SEEDS[seed_name]
    damaged = (mutate_member(data, member, mutations) if inside and member
               else mutate(data, mutations))
    check_extract_and_chunk(seed_name, damaged)


@pytest.fixture(scope="module")
def fuzz_store(tmp_path_factory):
    db = tmp_path_factory.mktemp("fuzz") / "fuzz.db"
    store = Store(db)
    yield store, Settings(db_path=str(db), max_upload_mb=1)
    check_store(store)
    store.close()


@settings(max_examples=max(20, FUZZ_EXAMPLES // 2), **COMMON)
@given(name=NAMES, data=st.one_of(
    st.binary(max_size=2048),
    st.builds(lambda s, m: mutate(SEED_BYTES[s], m), st.sampled_from(SEED_PDFS or ["none"]),
              st.lists(MUTATION, min_size=1, max_size=4)) if SEED_PDFS else st.binary(max_size=1),
))
def test_fuzz_whole_ingestion_never_raises(fuzz_store, name, data):
    store, fuzz_settings = fuzz_store
    events = list(ingest_bytes(store, HashEmbedder(), fuzz_settings, name, data))
    outcome(events)


@pytest.fixture(scope="module", autouse=True)
def _print_figures():
    yield
    if FIGURES:
        print("\n[bad-input figures]")
        for key, value in FIGURES.items():
            print(f"  {key}: {value}")


# ----------------------------------------------------------------------- passwords (issue 12)

LOCKED = "sf__libreoffice-writer-password.pdf"
LOCKED_PASSWORD = "openpassword"  # MANIFEST.tsv
WRONG_PASSWORD = "not-the-pass-9317"


def _plain(markdown: str) -> str:
    return re.sub(r"\\(.)", r"\1", markdown)


def _stored_bytes(db: Path) -> bytes:
    """Every byte SQLite may hold for the database: the file and its WAL/journal."""
    return b"".join(p.read_bytes() for p in db.parent.glob(db.name + "*") if p.is_file())


@pytest.fixture
def locked_pdf() -> bytes:
    path = PDFS / LOCKED
    if not path.exists():
        pytest.skip(f"{path} is not present (../shared/eval is read-only shared data)")
    return path.read_bytes()


def test_refusal_card_asks_for_the_password_and_indexes_with_the_right_one(
    tmp_path, monkeypatch, caplog, locked_pdf
):
    import logging

    import streamlit as stl
    from streamlit.testing.v1 import AppTest

    db = tmp_path / "app.db"
    monkeypatch.setenv("MARGINALIA_DB", str(db))
    monkeypatch.setenv("MARGINALIA_EMBEDDER", "local")
    monkeypatch.setenv("MARGINALIA_ANSWERER", "extractive")
    stl.cache_resource.clear()
    caplog.set_level(logging.DEBUG)
    try:
        at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60).run()
        at.switch_page("pages/documents.py").run()
        at.file_uploader[0].set_value([(LOCKED, locked_pdf, "application/pdf")]).run()
        assert not at.exception
        settle(at, db)  # the upload is a background job; come back when it has ended
        card = next(s for s in at.status if "refused: password-protected" in s.label)
        assert "is password-protected" in _plain(card.markdown[0].value)
        field = next(t for t in at.text_input if t.label.startswith("Password for"))
        assert field.proto.type == field.proto.PASSWORD  # typed as dots, never echoed

        field.input(WRONG_PASSWORD)
        next(b for b in at.button if b.label == "Unlock and index").click().run()
        assert not at.exception
        settle(at, db)  # the refused job ran again with the password given
        (card,) = at.status
        assert "refused: wrong password" in card.label
        assert any("is not correct" in _plain(m.value) for m in card.markdown)
        field = next(t for t in at.text_input if t.label.startswith("Password for"))
        assert field.value == ""  # the form cleared it
        assert len(at.dataframe) == 0  # nothing indexed

        field.input(LOCKED_PASSWORD)
        next(b for b in at.button if b.label == "Unlock and index").click().run()
        assert not at.exception
        settle(at, db)
        (card,) = at.status
        assert "indexed: 1 passage, 1 page" in card.label and card.state == "complete"
        assert not [t for t in at.text_input if t.label.startswith("Password for")]
        assert at.dataframe[0].value["Document"].tolist() == [LOCKED]
        kept = repr(at.session_state)  # every session value, widgets included
        assert LOCKED_PASSWORD not in kept and WRONG_PASSWORD not in kept
    finally:
        stl.cache_resource.clear()
    stored = _stored_bytes(db)
    assert stored and LOCKED_PASSWORD.encode() not in stored
    assert WRONG_PASSWORD.encode() not in stored
    logged = caplog.text
    assert LOCKED_PASSWORD not in logged and WRONG_PASSWORD not in logged


def test_a_locked_pdf_keeps_asking_for_its_password_after_a_reload(
    tmp_path, monkeypatch, locked_pdf
):
    """The refusal card is not tied to the tab that uploaded: a new session (a reload, a second
    tab) finds the PDF waiting for its password, unlocks it or discards it."""
    import streamlit as stl
    from streamlit.testing.v1 import AppTest

    db = tmp_path / "app.db"
    monkeypatch.setenv("MARGINALIA_DB", str(db))
    monkeypatch.setenv("MARGINALIA_EMBEDDER", "local")
    monkeypatch.setenv("MARGINALIA_ANSWERER", "extractive")
    stl.cache_resource.clear()
    try:
        first = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60).run()
        first.switch_page("pages/documents.py").run()
        first.file_uploader[0].set_value([(LOCKED, locked_pdf, "application/pdf")]).run()
        settle(first, db)
        assert not [s for s in first.subheader if s.value == "Waiting for you"]  # its card

        later = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60).run()
        later.switch_page("pages/documents.py").run()
        assert not later.exception
        assert [s.value for s in later.subheader if s.value == "Waiting for you"]
        (card,) = [s for s in later.status if "password-protected" in s.label]
        assert LOCKED in _plain(card.label)
        field = next(t for t in later.text_input if t.label == f"Password for {LOCKED}")
        field.input(LOCKED_PASSWORD)
        next(b for b in later.button if b.label == "Unlock and index").click().run()
        settle(later, db)
        assert not later.exception
        assert later.dataframe[0].value["Document"].tolist() == [LOCKED]
        assert not [s for s in later.subheader if s.value == "Waiting for you"]

        # a second locked upload, discarded from a fresh session: its bytes go
        again = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60).run()
        again.switch_page("pages/documents.py").run()
        again.file_uploader[0].set_value([("copy.pdf", locked_pdf + b"\n", "application/pdf")])
        again.run()
        settle(again, db)
        fresh = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60).run()
        fresh.switch_page("pages/documents.py").run()
        next(b for b in fresh.button if b.label == "Discard").click().run()
        assert not fresh.exception
        assert not [s for s in fresh.subheader if s.value == "Waiting for you"]
        with sqlite3.connect(db) as conn:
            held = conn.execute("SELECT count(*) FROM ingest_jobs WHERE data IS NOT NULL")
            assert held.fetchone()[0] == 0
    finally:
        stl.cache_resource.clear()


def test_cli_password_file_and_stdin_index_an_encrypted_pdf(tmp_path, locked_pdf):
    pdf = tmp_path / LOCKED
    pdf.write_bytes(locked_pdf)
    db = tmp_path / "cli.db"

    def ingest(*extra: str, stdin: str = "", into: pathlib.Path = db) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "marginalia_core", "ingest", str(pdf), "--db", str(into),
             *extra], input=stdin, capture_output=True, text=True, env=offline_cli_env(),
            timeout=300,
        )

    bare = ingest()
    assert bare.returncode == 1 and "password-protected" in bare.stderr
    wrong = ingest("--password-file", "-", stdin=WRONG_PASSWORD + "\n")
    assert wrong.returncode == 1 and "is not correct" in wrong.stderr
    assert json.loads(wrong.stdout.splitlines()[-1])["reason"] == "wrong_password"
    secret = tmp_path / "pw.txt"
    secret.write_text(LOCKED_PASSWORD + "\n", encoding="utf-8")
    right = ingest("--password-file", str(secret))
    assert right.returncode == 0, right.stderr
    assert json.loads(right.stdout.splitlines()[-1])["type"] == "done"
    stdin_run = ingest("--password-file", "-", stdin=LOCKED_PASSWORD + "\n")
    assert stdin_run.returncode == 0 and '"duplicate":true' in stdin_run.stdout
    flag = ingest("--password", LOCKED_PASSWORD, into=tmp_path / "flag.db")  # a library of its own
    assert flag.returncode == 0, flag.stderr
    assert json.loads(flag.stdout.splitlines()[-1])["document"]["chunkCount"] > 0
    for run in (bare, wrong, right, stdin_run, flag):
        assert LOCKED_PASSWORD not in run.stdout + run.stderr
        assert WRONG_PASSWORD not in run.stdout + run.stderr
        assert "Traceback" not in run.stderr
    stored = _stored_bytes(db)
    assert LOCKED_PASSWORD.encode() not in stored and WRONG_PASSWORD.encode() not in stored
    empty = tmp_path / "empty.txt"
    empty.write_text("", encoding="utf-8")
    refused = ingest("--password-file", str(empty))
    assert refused.returncode == 2 and "password file is empty" in refused.stderr
