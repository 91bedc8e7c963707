"""Turn an uploaded file's bytes into one text string plus page boundaries.

Every refusal is an :class:`~marginalia_core.errors.ExtractionError` whose message names the
file and says why in plain words; no pypdf exception or traceback ever reaches the user.

Type policy: the extension decides what the user *meant*; the bytes are cross-checked, and a
file whose content contradicts its name is refused as mislabelled (a ``.pdf`` that is not a
PDF, and also a ``.txt``/``.md`` that is really a PDF: guessing would silently index the
wrong thing, and renaming is a one-second fix for the user). A name without an extension
falls back to the ``mime`` hint, then to the content.
"""

from __future__ import annotations

import codecs
import io
import logging
import re
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass

from pypdf import PasswordType, PdfReader
from pypdf.errors import DependencyError

from marginalia_core.errors import (
    BinaryFileError,
    CorruptFileError,
    EmptyFileError,
    EncodingError,
    EncryptedError,
    NoTextLayerError,
    TooLargeError,
    WrongPasswordError,
)
from marginalia_core.ingest import ocr as ocr_engine
from marginalia_core.ingest import word_gaps
from marginalia_core.ingest.cleanup import clean_pages

PDF_MIME = "application/pdf"
TEXT_MIME = "text/plain"
MARKDOWN_MIME = "text/markdown"

# Acrobat (and pypdf) accept a "%PDF" header anywhere in the first KiB.
PDF_MAGIC = b"%PDF"
PDF_HEADER_WINDOW = 1024
PDF_EOF = b"%%EOF"
# A PDF bomb can declare millions of empty pages; real documents this long are rare.
MAX_PAGES = 5000
# ~7000 dense book pages; beyond this the embedding bill, not the parser, is the problem.
MAX_TEXT_CHARS = 20_000_000
# "No text layer" rule: fewer letters/digits than this per page, on average. Low enough that
# a one-word page ("Example") or a line of Arabic counts as text; high enough that a scanned
# book whose only text is page numbers does not.
MIN_ALNUM_PER_PAGE = 5
# Join "hyphen-\nated" words split across PDF lines (only when a lower-case letter follows).
DEHYPHENATE = True
# Put spaces back where the page geometry shows a word gap but pypdf read none
# (ingest/word_gaps.py: "Inthefallof" -> "In the fall of"); off only to measure it.
REJOIN_WORDS = True
# Remove printing leftovers (running heads, stamps, page/line numbers, ornaments) page by page
# (ingest/cleanup.py); off only to measure what it does (benchmarks/pdf_cleanup.py).
CLEAN_PAGES = True
# Decoded text with more control characters than this is a binary file, not text.
MAX_CONTROL_RATIO = 0.05
# Legacy (non-UTF-8) text is decoded as Windows-1252. Cyrillic/Greek/CJK legacy files also
# "decode" as cp1252, into mojibake that is almost all non-ASCII; above this share of
# non-ASCII among non-space characters we refuse instead of indexing gibberish (Western
# European prose is a few percent non-ASCII).
LEGACY_MAX_NON_ASCII_RATIO = 0.3
LEGACY_ENCODING = "cp1252"
LEGACY_SAMPLE_CHARS = 200_000

MB = 1024 * 1024

# Order matters: the UTF-32-LE BOM starts with the UTF-16-LE BOM.
BOMS: tuple[tuple[bytes, str], ...] = (
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)
# Magic numbers of files people commonly upload by mistake, for a friendlier refusal.
BINARY_MAGIC: tuple[tuple[bytes, str, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "image/png", "a PNG image"),
    (b"\xff\xd8\xff", "image/jpeg", "a JPEG image"),
    (b"GIF87a", "image/gif", "a GIF image"),
    (b"GIF89a", "image/gif", "a GIF image"),
    (b"PK\x03\x04", "application/zip", "a ZIP archive (or a Word/Excel/EPUB file)"),
    (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1", "application/x-ole-storage", "an old Office file"),
    (b"\x1f\x8b", "application/gzip", "a gzip archive"),
    (b"\x7fELF", "application/x-executable", "a program"),
)
MAGIC_DESCRIPTION = {mime: what for _, mime, what in BINARY_MAGIC}
MAGIC_DESCRIPTION[PDF_MIME] = "a PDF"
OCTET_STREAM = "application/octet-stream"

log = logging.getLogger(__name__)

_PYPDF_LOGGER = "pypdf"
# pypdf logs recoverable damage at ERROR; we report what matters as our own typed errors
logging.getLogger(_PYPDF_LOGGER).setLevel(logging.CRITICAL)

# PDF text cleanup tables: ligatures hurt keyword search; soft hyphens are invisible noise;
# control characters (pypdf emits stray NULs) become spaces, form/vertical feeds line breaks.
_LIGATURES = {
    "\ufb00": "ff",
    "\ufb01": "fi",
    "\ufb02": "fl",
    "\ufb03": "ffi",
    "\ufb04": "ffl",
    "\ufb05": "st",
    "\ufb06": "st",
}
_CONTROL_CHARS = [*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0)]
_PDF_TABLE = str.maketrans(
    {
        **{chr(c): " " for c in _CONTROL_CHARS},
        "\n": "\n",
        "\t": " ",
        "\x0b": "\n",
        "\x0c": "\n",
        "\r": "\n",
        "\u2028": "\n",
        "\u2029": "\n\n",
        "\u00ad": None,
        **_LIGATURES,
    }
)
# Plain text keeps tabs and indentation (Markdown code blocks need them) but loses controls.
_TEXT_TABLE = str.maketrans(
    {
        **{chr(c): None for c in _CONTROL_CHARS},
        "\n": "\n",
        "\t": "\t",
        "\x0b": "\n",
        "\x0c": "\n",
        "\u2028": "\n",
        "\u2029": "\n\n",
    }
)
# Controls that never occur in real text (tab, newlines and page feeds excluded).
_DROP_BINARY_CONTROLS = str.maketrans(
    {chr(c): None for c in _CONTROL_CHARS if chr(c) not in "\t\n\r\x0b\x0c"}
)
_HSPACE_RUN = re.compile(r"[^\S\n]+")
_SPACE_AROUND_NEWLINE = re.compile(r" ?\n ?")
_MANY_NEWLINES = re.compile(r"\n{3,}")
# The word before a line-end hyphen (with any hyphens of its own) and the letter after.
# Starts only where a word starts: from every letter of a long run it was quadratic per page.
_HYPHEN_BREAK = re.compile(
    r"(?<![^\W\d_])(?<![^\W\d_]-)([^\W\d_]+(?:-[^\W\d_]+)*)-\n([^\W\d_]+-?)")
# A soft hyphen (U+00AD) at a line end is the text layer saying "this word was broken here".
_SOFT_HYPHEN_BREAK = re.compile("\u00ad[^\\S\n]*\n[^\\S\n]*")


PageProgress = Callable[[int, int, str], None]  # (pages done, page count, that page's text)


@dataclass(frozen=True)
class Unit:
    """One location of a document without pages: a slide, a spreadsheet row, a chapter or a
    section. ``name`` is the sheet, chapter title or section heading; ``number`` the slide,
    row or chapter number (0 when the format has none)."""

    name: str = ""
    number: int = 0


@dataclass(frozen=True)
class Extracted:
    """``page_starts[i]`` is the offset in ``text`` where page ``i + 1`` begins. An empty page
    gets the offset of the text that follows it, so starts never decrease. For formats
    without pages the "pages" are its locations (slides, rows, chapters, sections), named by
    ``units`` (one per location, same order)."""

    text: str
    mime: str
    page_starts: list[int]
    page_count: int
    skipped_pages: tuple[int, ...] = ()  # 1-based pages pypdf could not read (PDF only)
    ocr_pages: tuple[int, ...] = ()  # 1-based pages whose text came from OCR (PDF only)
    units: tuple[Unit, ...] = ()


@dataclass(frozen=True)
class ReadOptions:
    """What a reader may be given besides the bytes (each reader uses what applies to it)."""

    mime: str = TEXT_MIME
    password: str | None = None
    ocr: bool = True
    ocr_progress: ocr_engine.Progress | None = None
    on_page: PageProgress | None = None


def join_units(name: str, mime: str, parts: list[tuple[Unit, str]]) -> Extracted:
    """An ``Extracted`` from (location, text) parts in reading order; locations without text
    are dropped, so a chunk never names an empty slide. Refuses a document with no text."""
    kept = [(u, t.strip()) for u, t in parts if t and t.strip()]
    if not kept:
        raise EmptyFileError(f"{name} holds no text; there is nothing to index.")
    starts: list[int] = []
    pieces: list[str] = []
    length = 0
    for _, piece in kept:
        if pieces:
            pieces.append("\n\n")
            length += 2
        starts.append(length)
        pieces.append(piece)
        length += len(piece)
        if length > MAX_TEXT_CHARS:
            raise too_much_text(name)
    return Extracted(text="".join(pieces), mime=mime, page_starts=starts,
                     page_count=len(kept), units=tuple(u for u, _ in kept))


def read_text(name: str, data: bytes, options: ReadOptions) -> Extracted:
    """Plain text and Markdown: decoded by the policy of :func:`_decode`, one location."""
    return _extract_text(name, data, options.mime)


def read_pdf(name: str, data: bytes, options: ReadOptions) -> Extracted:
    """A PDF's text layer page by page (OCR for scanned pages)."""
    return _extract_pdf(name, data, options.password, on_page=options.on_page,
                        ocr=options.ocr, ocr_progress=options.ocr_progress)


def base_name(name: str) -> str:
    return name.replace("\\", "/").rsplit("/", 1)[-1]


def extension(name: str) -> str:
    base = base_name(name)
    dot = base.rfind(".")
    return base[dot:].lower() if dot > 0 else ""


def human_size(n: int) -> str:
    if n >= MB // 10:
        return f"{n / MB:.1f}".removesuffix(".0") + " MB"
    if n >= 1024:
        return f"{n / 1024:.0f} KB"
    return f"{n} bytes"


def looks_like_pdf(data: bytes, *, strict: bool = False) -> bool:
    """Loose: the header pypdf would accept. Strict also wants the header first (after
    whitespace) or an end-of-file marker, so a note that merely mentions "%PDF-1.7" near its
    top is not taken for a PDF."""
    if PDF_MAGIC not in data[:PDF_HEADER_WINDOW]:
        return False
    if not strict:
        return True
    return data.lstrip().startswith(PDF_MAGIC) or PDF_EOF in data[-PDF_HEADER_WINDOW:]


# --------------------------------------------------------------------------- plain text


def _decode(name: str, data: bytes) -> str:
    """Decoding policy, in order:

    1. a BOM decides (UTF-8, UTF-16 or UTF-32); bytes invalid for it -> EncodingError;
    2. NUL bytes without a BOM -> BinaryFileError (no real text encoding besides UTF-16/32
       contains NULs, and BOM-less UTF-16 is too rare to justify guessing);
    3. valid UTF-8 -> UTF-8;
    4. otherwise Windows-1252 (the usual legacy encoding of Western text; a superset of the
       printable Latin-1 range) if every byte is defined in it and the result does not look
       like another legacy encoding's mojibake; else EncodingError asking for UTF-8.
    """
    for bom, encoding in BOMS:
        if data.startswith(bom):
            try:
                return data.decode(encoding)
            except UnicodeDecodeError:
                label = encoding.removesuffix("-sig").upper()
                raise EncodingError(
                    f"{name} starts with a {label} byte-order mark but is not valid {label}; "
                    "re-save it as UTF-8."
                ) from None
    if b"\x00" in data:
        raise BinaryFileError(f"{name} contains binary data (NUL bytes), not text.")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        pass
    refusal = EncodingError(
        f"{name} is not UTF-8 and not in a legacy encoding Marginalia can recognise; "
        "re-save it as UTF-8 and upload it again."
    )
    try:
        text = data.decode(LEGACY_ENCODING)
    except UnicodeDecodeError:
        raise refusal from None
    sample = "".join(text[:LEGACY_SAMPLE_CHARS].split())
    non_ascii = len(sample) - len(sample.encode("ascii", "ignore"))
    if sample and non_ascii / len(sample) > LEGACY_MAX_NON_ASCII_RATIO:
        raise refusal
    return text


def _control_ratio(text: str) -> float:
    if not text:
        return 0.0
    return (len(text) - len(text.translate(_DROP_BINARY_CONTROLS))) / len(text)


def decode_text(name: str, data: bytes) -> str:
    """The text of a text-based file (TXT, Markdown, CSV, HTML) with line ends normalised and
    control characters removed; binary data is refused."""
    text = _decode(name, data)
    if "\x00" in text:  # a UTF-16/32 BOM followed by binary
        raise BinaryFileError(f"{name} contains binary data (NUL characters), not text.")
    if _control_ratio(text) > MAX_CONTROL_RATIO:
        raise BinaryFileError(
            f"{name} looks like a binary file (too many control characters), not text."
        )
    return text.replace("\r\n", "\n").replace("\r", "\n").translate(_TEXT_TABLE)


def _extract_text(name: str, data: bytes, mime: str) -> Extracted:
    text = decode_text(name, data)
    if not text.strip():
        raise EmptyFileError(f"{name} contains only whitespace; there is nothing to index.")
    if len(text) > MAX_TEXT_CHARS:
        raise too_much_text(name)
    return Extracted(text=text, mime=mime, page_starts=[0], page_count=1)


def too_much_text(name: str) -> TooLargeError:
    return TooLargeError(
        f"{name} holds more than {MAX_TEXT_CHARS // 1_000_000} million characters of text; "
        "split it into smaller files."
    )


# --------------------------------------------------------------------------------- PDF


def _dehyphenate(match: re.Match[str]) -> str:
    """"hyphen-\nated" -> "hyphenated"; a compound already hyphenated on either side keeps the
    line-end hyphen ("stop-the-\nworld" and "stop-\nthe-world" -> "stop-the-world", not
    "stop-theworld" / "stopthe-world")."""
    before, after = match.group(1), match.group(2)
    if not after[0].islower():
        return match.group(0)
    compound = "-" in before or after.endswith("-")
    return f"{before}-{after}" if compound else before + after


def normalize_pdf_text(text: str) -> str:
    """Undo PDF layout artefacts (runs of spaces, ragged line ends, blank-line stacks,
    ligatures, line-end hyphenation) so chunks and keyword search see plain prose."""
    text = _SOFT_HYPHEN_BREAK.sub("", text.replace("\r\n", "\n")).translate(_PDF_TABLE)
    text = _HSPACE_RUN.sub(" ", text)
    text = _SPACE_AROUND_NEWLINE.sub("\n", text)
    if DEHYPHENATE:
        text = _HYPHEN_BREAK.sub(_dehyphenate, text)
    text = _MANY_NEWLINES.sub("\n\n", text)
    return text.strip()


def _corrupt(name: str, detail: str = "") -> CorruptFileError:
    suffix = f" ({detail})" if detail else ""
    return CorruptFileError(
        f"{name} could not be read: the PDF is damaged or incomplete{suffix}. "
        "Try re-downloading it, or re-saving it with a PDF viewer's \u201cSave as\u201d/\u201cPrint to PDF\u201d."
    )


def plain_detail(err: BaseException) -> str:
    """A short, single-line hint from a pypdf error, never a traceback."""
    text = " ".join(str(err).split())
    return text[:120] if text else type(err).__name__


def _open_pdf(name: str, data: bytes, password: str | None) -> PdfReader:
    try:
        reader = PdfReader(io.BytesIO(data))
        encrypted = reader.is_encrypted
    except Exception as err:  # pypdf raises many types on malformed input
        raise _corrupt(name, plain_detail(err)) from None
    if not encrypted:
        return reader
    try:
        # Owner-password-only files (a permissions lock, not secrecy) open with "".
        if reader.decrypt("") != PasswordType.NOT_DECRYPTED:
            return reader
        if not password:
            raise EncryptedError(f"{name} is password-protected; give its password to index it.")
        if reader.decrypt(password) == PasswordType.NOT_DECRYPTED:
            raise WrongPasswordError(f"The password given for {name} is not correct.")
    except EncryptedError:
        raise
    except DependencyError:
        raise EncryptedError(
            f"{name} uses AES encryption, which needs the Python package 'cryptography' "
            "installed to open."
        ) from None
    except Exception as err:
        raise EncryptedError(
            f"{name} is encrypted with a method Marginalia cannot open ({plain_detail(err)})."
        ) from None
    return reader


def _has_alnum(text: str, needed: int) -> bool:
    """Whether ``text`` holds at least ``needed`` letters/digits (stops counting early)."""
    if needed <= 0:
        return True
    for c in text:
        if c.isalnum():
            needed -= 1
            if needed == 0:
                return True
    return False


def _declared_page_count(reader: PdfReader) -> int | None:
    """The page tree's own /Count, read without walking the tree (a page-tree bomb can hold
    100k+ nodes that take pypdf half a minute and hundreds of MB to enumerate)."""
    try:
        count = reader.trailer["/Root"]["/Pages"]["/Count"]  # type: ignore[index]
        return int(count)
    except Exception:
        return None


def _too_many_pages(name: str, page_count: int) -> TooLargeError:
    return TooLargeError(
        f"{name} has {page_count:,} pages; the limit is {MAX_PAGES:,}. Split it into "
        "smaller files."
    )


def _extract_pdf(
    name: str,
    data: bytes,
    password: str | None,
    *,
    on_page: PageProgress | None = None,
    ocr: bool = True,
    ocr_progress: ocr_engine.Progress | None = None,
) -> Extracted:
    reader = _open_pdf(name, data, password)
    declared = _declared_page_count(reader)
    if declared is not None and declared > MAX_PAGES:
        raise _too_many_pages(name, declared)
    try:
        pages = reader.pages
        page_count = len(pages)
    except Exception as err:
        raise _corrupt(name, plain_detail(err)) from None
    if page_count == 0:
        raise EmptyFileError(f"{name} is a PDF with no pages; there is nothing to index.")
    if page_count > MAX_PAGES:
        raise _too_many_pages(name, page_count)

    page_texts: list[str] = []
    skipped: list[int] = []
    first_error: BaseException | None = None
    with word_gaps.open_pages(data, password) if REJOIN_WORDS else nullcontext() as geometry:
        for number in range(page_count):
            try:
                raw = pages[number].extract_text() or ""
            except Exception as err:  # one bad page must not sink the others
                skipped.append(number + 1)
                first_error = first_error or err
                raw = ""
            if raw and geometry is not None:
                raw = _respace(name, geometry, number, raw)
            page_texts.append(normalize_pdf_text(raw))
            if on_page is not None:  # progress, a cancel point, and text to embed early
                on_page(number + 1, page_count, page_texts[-1])
    if len(skipped) == page_count:
        raise _corrupt(name, plain_detail(first_error) if first_error else "")

    ocr_pages: tuple[int, ...] = ()
    empty = [i for i, t in enumerate(page_texts)
             if i + 1 not in skipped and not _has_alnum(t, MIN_ALNUM_PER_PAGE)]
    if empty and ocr and ocr_engine.available():
        ocr_pages = _ocr_empty_pages(name, data, password, empty, page_texts, ocr_progress)
    text, page_starts = join_pages(finish_pages(page_texts))
    if len(text) > MAX_TEXT_CHARS:
        raise too_much_text(name)

    if not _has_alnum(text, MIN_ALNUM_PER_PAGE * page_count):
        if skipped:
            raise _corrupt(name, f"{len(skipped)} of {page_count} pages unreadable")
        raise NoTextLayerError(_no_text_message(name, ocr, tried=bool(empty)))
    return Extracted(
        text=text,
        mime=PDF_MIME,
        page_starts=page_starts,
        page_count=page_count,
        skipped_pages=tuple(skipped),
        ocr_pages=ocr_pages,
    )


def finish_pages(page_texts: list[str]) -> list[str]:
    """The cross-page steps on the pages read so far (printing leftovers out). Ingestion calls
    it on a growing book too, to embed early the passages that will not change."""
    return clean_pages(page_texts) if CLEAN_PAGES else list(page_texts)


def join_pages(page_texts: list[str]) -> tuple[str, list[int]]:
    """One text from the pages (a blank line between non-empty ones) and each page's start."""
    parts: list[str] = []
    page_starts: list[int] = []
    length = 0
    for page_text in page_texts:
        if page_text and parts:
            parts.append("\n\n")
            length += 2
        page_starts.append(length)
        if page_text:
            parts.append(page_text)
            length += len(page_text)
    return "".join(parts), page_starts


def _respace(name: str, geometry: object, number: int, raw: str) -> str:
    """``raw`` with the word gaps pdfium's glyph boxes show; pypdf's text as it was when pdfium
    cannot read the page (the repair is a bonus, never a reason to lose a page)."""
    try:
        return word_gaps.respace_page(geometry, number, raw)
    except Exception:
        log.warning("word gaps of %s page %d not checked", name, number + 1, exc_info=True)
        return raw


def _ocr_empty_pages(
    name: str,
    data: bytes,
    password: str | None,
    empty: list[int],
    page_texts: list[str],
    progress: ocr_engine.Progress | None,
) -> tuple[int, ...]:
    """Recognise the pages without a text layer in place; the 1-based pages OCR gave text for.
    A PDF pdfium cannot open keeps its empty pages (pypdf read the rest)."""
    recognised: list[int] = []
    try:
        for index, raw in ocr_engine.recognise_pages(
            data, empty, password=password or None, progress=progress
        ):
            page_text = normalize_pdf_text(raw)
            if _has_alnum(page_text, MIN_ALNUM_PER_PAGE):
                page_texts[index] = page_text
                recognised.append(index + 1)
    except Exception:  # pdfium refuses some files pypdf repairs; never a traceback for them
        log.warning("OCR could not render %s; its pages without text stay empty", name,
                    exc_info=True)
    return tuple(recognised)


def _no_text_message(name: str, ocr: bool, *, tried: bool) -> str:
    scanned = f"{name} has no text layer \u2014 it looks scanned (images of pages)"
    if not ocr:
        return (f"{scanned}, and OCR is turned off (MARGINALIA_OCR=0). Turn it on to read "
                "scans, or upload a copy that has a text layer.")
    if not ocr_engine.available():
        return (f"{scanned}, and the OCR engine is not installed. Install it "
                "(apt-get install tesseract-ocr tesseract-ocr-eng) and upload the file again.")
    if tried:
        return f"{scanned}, and OCR found no readable text in its page images."
    return f"{scanned}."
