"""The format table: one row per file format Marginalia indexes, and the one entry point that
uses it (:func:`extract`).

A row says everything the rest of the app needs to know about a format: the extensions and MIME
types that name it, the reader that turns its bytes into text plus locations, what a location
is called (a PDF's page, a slide, a spreadsheet row, a chapter, a section), whether the
original bytes are kept (the margin renders a PDF's cited page from them) and how a passage is
shown (``markdown``, ``text`` or ``pdf``). Adding a format is one row here plus one reader.

Type policy: the extension decides what the user *meant*; the bytes are cross-checked, and a
file whose content contradicts its name is refused as mislabelled (a ``.pdf`` that is not a
PDF, a ``.txt`` that is really a PDF, a ``.docx`` that is a spreadsheet): guessing would
silently index the wrong thing, and renaming is a one-second fix for the user. A name without
an extension falls back to the ``mime`` hint, then to the content.
"""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from marginalia_core.errors import (
    BinaryFileError,
    EmptyFileError,
    EncryptedError,
    MacroError,
    MislabelledFileError,
    TooLargeError,
    UnsupportedTypeError,
)
from marginalia_core.ingest import markup, office, sheets
from marginalia_core.ingest import ocr as ocr_engine
from marginalia_core.ingest.containers import is_encrypted_ole
from marginalia_core.ingest.extraction import (
    BINARY_MAGIC,
    BOMS,
    MAGIC_DESCRIPTION,
    MARKDOWN_MIME,
    OCTET_STREAM,
    PDF_MIME,
    TEXT_MIME,
    Extracted,
    PageProgress,
    ReadOptions,
    Unit,
    base_name,
    extension,
    human_size,
    looks_like_pdf,
    read_pdf,
    read_text,
)

Reader = Callable[[str, bytes, ReadOptions], Extracted]

DOCX_MIME = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
PPTX_MIME = "application/vnd.openxmlformats-officedocument.presentationml.presentation"
XLSX_MIME = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
ODT_MIME = "application/vnd.oasis.opendocument.text"
EPUB_MIME = "application/epub+zip"
CSV_MIME = "text/csv"
HTML_MIME = "text/html"
ZIP_MIME = "application/zip"
DAMAGED_ZIP = "application/x-damaged-zip"  # starts like a ZIP, does not open as one
OLE_MIME = "application/x-ole-storage"
OOXML_TYPES_MEMBER = "[Content_Types].xml"  # an Office file's list of its parts' types
MAX_OOXML_TYPES_BYTES = 1_000_000  # read to identify the format; a real one is a few KB

# What a location is called, per kind: (one, several). "none": the document is one piece.
LOCATION_KINDS = ("page", "slide", "sheet", "chapter", "section", "none")


@dataclass(frozen=True)
class Format:
    """One row of the table. ``mimes[0]`` is the MIME type stored with the document."""

    name: str  # short, for lists of formats: "Word"
    label: str  # what one file is called: "Word document"
    extensions: tuple[str, ...]
    mimes: tuple[str, ...]
    reader: Reader
    location: str  # one of LOCATION_KINDS
    keep_original: bool  # the uploaded bytes are stored (download, and page views of PDFs)
    renders: str  # "pdf" | "markdown" | "text"
    zip_marker: str = ""  # for ZIP-based formats: the member (or mimetype) that identifies it

    @property
    def mime(self) -> str:
        return self.mimes[0]


FORMATS: tuple[Format, ...] = (
    Format("PDF", "PDF", (".pdf",), (PDF_MIME, "application/x-pdf"), read_pdf,
           location="page", keep_original=True, renders="pdf"),
    Format("Word", "Word document", (".docx",), (DOCX_MIME,), office.read_docx,
           location="section", keep_original=True, renders="markdown",
           zip_marker="word/document.xml"),
    Format("PowerPoint", "PowerPoint presentation", (".pptx",), (PPTX_MIME,), office.read_pptx,
           location="slide", keep_original=True, renders="markdown",
           zip_marker="ppt/presentation.xml"),
    Format("Excel", "Excel workbook", (".xlsx",), (XLSX_MIME,), sheets.read_xlsx,
           location="sheet", keep_original=True, renders="markdown",
           zip_marker="xl/workbook.xml"),
    Format("CSV", "CSV file", (".csv",), (CSV_MIME, "application/csv"), sheets.read_csv,
           location="sheet", keep_original=True, renders="markdown"),
    Format("TSV", "tab-separated file", (".tsv", ".tab"), ("text/tab-separated-values",),
           sheets.read_csv, location="sheet", keep_original=True, renders="markdown"),
    Format("OpenDocument", "OpenDocument text", (".odt",), (ODT_MIME,), office.read_odt,
           location="section", keep_original=True, renders="markdown",
           zip_marker="mimetype:" + ODT_MIME),
    Format("EPUB", "EPUB book", (".epub",), (EPUB_MIME,), markup.read_epub,
           location="chapter", keep_original=True, renders="markdown",
           zip_marker="mimetype:" + EPUB_MIME),
    Format("HTML", "web page", (".html", ".htm"), (HTML_MIME, "application/xhtml+xml"),
           markup.read_html, location="section", keep_original=True, renders="markdown"),
    Format("plain-text", "plain-text file", (".txt",), (TEXT_MIME,), read_text,
           location="none", keep_original=True, renders="text"),
    Format("Markdown", "Markdown file", (".md", ".markdown"), (MARKDOWN_MIME, "text/x-markdown"),
           markup.read_markdown, location="section", keep_original=True, renders="markdown"),
)

# Office files that can carry macros: refused by name, with that reason.
MACRO_EXTENSIONS = {".docm": "Word", ".xlsm": "Excel", ".pptm": "PowerPoint", ".dotm": "Word",
                    ".xltm": "Excel", ".potm": "PowerPoint", ".ppsm": "PowerPoint"}
# Formats people try that we do not read, with what to do instead.
_OLD_OFFICE = (".doc", ".xls", ".ppt", ".rtf")

_BY_EXTENSION = {ext: f for f in FORMATS for ext in f.extensions}
_BY_MIME = {m: f for f in FORMATS for m in f.mimes}
SUPPORTED_EXTENSIONS: tuple[str, ...] = tuple(_BY_EXTENSION)
MIME_BY_EXTENSION: dict[str, str] = {ext: f.mime for ext, f in _BY_EXTENSION.items()}
# What the upload widget accepts (extensions without the dot).
UPLOAD_TYPES: tuple[str, ...] = tuple(ext[1:] for ext in SUPPORTED_EXTENSIONS)
# Formats with no signature in their bytes (not a PDF, not a ZIP container): told apart by name
_TEXT_FORMATS = {f.mime for f in FORMATS if f.renders != "pdf" and not f.zip_marker}
_PLAIN = Format("text", "document", (), (TEXT_MIME,), read_text, location="none",
                keep_original=False, renders="text")


def _canonical(mime: str | None) -> str:
    return (mime or "").split(";", 1)[0].strip().lower()


def by_mime(mime: str | None) -> Format:
    """The row of a stored document's MIME type; unknown types are shown as plain text."""
    return _BY_MIME.get(_canonical(mime), _PLAIN)


def by_name(name: str) -> Format | None:
    return _BY_EXTENSION.get(extension(name))


def mime_for_name(name: str) -> str:
    """The MIME type a file of this name is stored as ("" when the name does not say)."""
    found = by_name(name)
    return found.mime if found else ""


def supported_list() -> str:
    return ", ".join(SUPPORTED_EXTENSIONS)


def upload_help() -> str:
    """The accepted formats in words, from the table: "PDF, Word, ... and Markdown files"."""
    names = [f.name for f in FORMATS]
    return f"{', '.join(names[:-1])} and {names[-1]} files"


# ------------------------------------------------------------------------------- locations


def has_locations(mime: str | None) -> bool:
    """Whether a document of this type is cut into named locations (pages, slides, ...)."""
    return by_mime(mime).location != "none"


def _span(one: str, many: str, a: int, b: int) -> str:
    return f"{one} {a}" if a == b else f"{many} {a}\u2013{b}"


def location_label(kind: str, units: Sequence[Unit], start: int, end: int) -> str:
    """How a citation names locations ``start``..``end`` (1-based): "p. 3", "slides 3–4",
    "sheet Budget, rows 12–40", "chapter 2", "section ‘Results’"; "" for a text file, and
    for a document in sections that has none (a Markdown file without headings)."""
    if kind == "none" or start < 1 or (kind == "section" and not units):
        return ""
    end = max(start, end)
    if kind == "page":
        return _span("p.", "pp.", start, end)
    if kind == "slide":
        return _span("slide", "slides", start, end)
    first = units[start - 1] if start <= len(units) else Unit(number=start)
    last = units[end - 1] if end <= len(units) else first
    if kind == "chapter":
        return _span("chapter", "chapters", first.number or start, last.number or end)
    if kind == "sheet":
        rows = _span("row", "rows", first.number, last.number)
        if first.name == last.name:
            return f"sheet {first.name}, {rows}" if first.name else rows
        return f"sheet {first.name}, row {first.number} \u2013 sheet {last.name}, row {last.number}"
    # sections: by heading; the text before the first heading is the opening
    names = [f"\u2018{u.name}\u2019" if u.name else "opening" for u in (first, last)]
    if start == end or names[0] == names[1]:
        return f"section {names[0]}"
    return f"sections {names[0]} \u2013 {names[1]}"


def extent(mime: str | None, count: int, units: Sequence[Unit] = ()) -> str:
    """A document's size in its own locations, for the Documents table: "12 slides"."""
    kind = by_mime(mime).location
    if kind == "none" or (kind in ("section", "chapter") and count <= 1):
        return ""  # one section is the whole text: saying so tells nothing
    if kind == "page":
        return str(count)
    if kind == "sheet":
        names = {u.name for u in units}
        rows = f"{count:,} row{'s' if count != 1 else ''}"
        return f"{len(names)} sheets, {rows}" if len(names) > 1 else rows
    return f"{count} {kind}{'s' if count != 1 else ''}"


def encode_units(units: Sequence[Unit]) -> str:
    """Units as stored with the document: runs ``[first, name, number]`` where a location
    continues the previous one's name with the next number (a sheet's rows) joined up."""
    runs: list[list[object]] = []
    previous: Unit | None = None
    for i, unit in enumerate(units, start=1):
        if previous is None or unit.name != previous.name or (
            unit.number != previous.number + 1 or not unit.number
        ):
            runs.append([i, unit.name, unit.number])
        previous = unit
    return json.dumps(runs, ensure_ascii=False)


def decode_units(stored: str | None, count: int) -> tuple[Unit, ...]:
    """The inverse of :func:`encode_units` for a document of ``count`` locations."""
    try:
        runs = json.loads(stored or "[]")
    except ValueError:
        return ()
    if not runs:
        return ()
    units: list[Unit] = []
    for n, (first, name, number) in enumerate(runs):
        stop = runs[n + 1][0] if n + 1 < len(runs) else count + 1
        units.extend(Unit(str(name), int(number) + (i - first) if number else 0)
                     for i in range(int(first), int(stop)))
    return tuple(units)


# ----------------------------------------------------------------------------- identifying


def _zip_kind(data: bytes) -> str:
    """Which ZIP-based format these bytes are (its MIME type), ``ZIP_MIME`` if none."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            names = set(archive.namelist())
            mimetype = ""
            if "mimetype" in names and archive.getinfo("mimetype").file_size < 200:
                mimetype = archive.read("mimetype").decode("ascii", "replace").strip()
            types = ""
            if (OOXML_TYPES_MEMBER in names
                    and archive.getinfo(OOXML_TYPES_MEMBER).file_size < MAX_OOXML_TYPES_BYTES):
                types = archive.read(OOXML_TYPES_MEMBER).decode("utf-8", "replace")
    except Exception:  # damaged: the reader says how
        return DAMAGED_ZIP
    for fmt in FORMATS:
        marker = fmt.zip_marker
        if marker.startswith("mimetype:") and mimetype == marker.split(":", 1)[1]:
            return fmt.mime
        if marker and not marker.startswith("mimetype:") and marker in names:
            return fmt.mime
    # An Office file whose main part is not at the usual path (Word and python-docx follow the
    # package's relationships; pandoc's test/docx/alternate_document_path.docx): its
    # [Content_Types].xml still names the main part's type, the format's MIME type + ".main+xml".
    for fmt in FORMATS:
        if fmt.zip_marker and not fmt.zip_marker.startswith("mimetype:") and types \
                and f"{fmt.mime}.main+xml" in types:
            return fmt.mime
    return ZIP_MIME


def sniff_mime(name: str, data: bytes) -> str:
    """What the bytes actually are, as a MIME type; the name only picks between the text types
    (plain, Markdown, CSV, HTML) since those can't be told apart reliably by content."""
    if looks_like_pdf(data, strict=True):
        return PDF_MIME
    if data.startswith(b"PK\x03\x04"):
        return _zip_kind(data)
    for magic, mime, _ in BINARY_MAGIC:
        if data.startswith(magic):
            return mime
    head = data[:8192]
    if not any(head.startswith(bom) for bom, _ in BOMS) and b"\x00" in head:
        return OCTET_STREAM
    declared = MIME_BY_EXTENSION.get(extension(name), TEXT_MIME)
    return declared if declared in _TEXT_FORMATS else TEXT_MIME


def _description(mime: str) -> str:
    if mime in MAGIC_DESCRIPTION and mime != ZIP_MIME:
        return MAGIC_DESCRIPTION[mime]
    if mime in _BY_MIME and mime not in _TEXT_FORMATS:
        return f"a{'n' if _BY_MIME[mime].label[0] in 'AEIOU' else ''} {_BY_MIME[mime].label}"
    if mime in (ZIP_MIME, DAMAGED_ZIP):
        return "a ZIP archive"
    return "a text file" if mime in _TEXT_FORMATS else "some other binary format"


def _declared(name: str, mime: str | None, data: bytes) -> Format:
    ext = extension(name)
    if ext in _BY_EXTENSION:
        return _BY_EXTENSION[ext]
    if ext in MACRO_EXTENSIONS:
        raise MacroError(
            f"{name} is a macro-enabled {MACRO_EXTENSIONS[ext]} file; Marginalia does not open "
            f"files that can run code. Save it without macros (as {_macro_free(ext)}) and "
            "upload that."
        )
    if ext in _OLD_OFFICE:
        raise UnsupportedTypeError(
            f"{name}: {ext} files (the old Office formats) are not supported. Save it as "
            f".docx, .xlsx or .pptx (or PDF) and upload that. Supported: {supported_list()}."
        )
    if ext:
        raise UnsupportedTypeError(
            f"{name}: {ext} files are not supported. Upload {upload_help()} ({supported_list()})."
        )
    hint = _BY_MIME.get(_canonical(mime))
    if hint:
        return hint
    sniffed = sniff_mime(name, data)
    return _BY_MIME.get(sniffed, _BY_EXTENSION[".txt"])


def _macro_free(ext: str) -> str:
    return {"Word": ".docx", "Excel": ".xlsx", "PowerPoint": ".pptx"}[MACRO_EXTENSIONS[ext]]


def _check_label(name: str, fmt: Format, actual: str, data: bytes) -> None:
    """Refuse bytes that are not what the name says, with what they look like instead."""
    if fmt.mime == PDF_MIME:
        if not looks_like_pdf(data):
            raise MislabelledFileError(
                f"{name} is named .pdf but is not a PDF (it looks like {_description(actual)})."
            )
        return
    ext = extension(name) or "as text"
    if actual == PDF_MIME:
        raise MislabelledFileError(
            f"{name} is named {ext} but is a PDF; rename it to .pdf and upload it again."
        )
    if fmt.zip_marker:
        if actual in (fmt.mime, DAMAGED_ZIP):  # a damaged one: the reader says what is wrong
            return
        if actual == OLE_MIME:
            if is_encrypted_ole(data):
                raise EncryptedError(
                    f"{name} is password-protected; Marginalia cannot open password-protected "
                    f"Office files. Remove the password (in Office: File \u203a Info \u203a "
                    "Protect) and upload it again."
                )
            raise MislabelledFileError(
                f"{name} is named {ext} but is an old-format Office file (.doc/.xls/.ppt); "
                f"save it as {ext} and upload it again."
            )
        raise MislabelledFileError(
            f"{name} is named {ext} but is not a{'n' if fmt.label[0] in 'AEIOU' else ''} "
            f"{fmt.label} (it looks like {_description(actual)})."
        )
    if actual in _BY_MIME and actual not in _TEXT_FORMATS:
        raise MislabelledFileError(
            f"{name} is named {ext} but is {_description(actual)}; rename it to "
            f"{_BY_MIME[actual].extensions[0]} and upload it again."
        )
    if actual in MAGIC_DESCRIPTION or actual in (ZIP_MIME, DAMAGED_ZIP):
        raise BinaryFileError(
            f"{name} is {_description(actual)}, not text; Marginalia indexes {upload_help()}."
        )


def extract(
    name: str,
    data: bytes,
    *,
    mime: str | None = None,
    password: str | None = None,
    max_bytes: int | None = None,
    ocr: bool = True,
    ocr_progress: ocr_engine.Progress | None = None,
    on_page: PageProgress | None = None,
    declared_mime: str | None = None,
) -> Extracted:
    """Extract ``data`` (the bytes of file ``name``) or raise an ExtractionError.

    Checks run cheapest first, so a huge or unsupported file is refused before any parsing.
    ``mime`` is only a hint for names without an extension (browsers report it unreliably).
    ``on_page(done, total, page_text)`` is called after each PDF page is read, with its text
    before the cross-page cleanup; it may raise to stop extraction there (a cancelled ingestion
    job). PDF pages without a text layer are OCR'd when ``ocr`` is on and the engine is
    installed; ``ocr_progress(done, total)`` is called after each such page.
    ``declared_mime`` is a type that is known, not guessed (a fetched page's Content-Type):
    it decides the format whatever the name says.
    """
    data = bytes(data)
    if declared_mime and _canonical(declared_mime) in _BY_MIME:
        fmt = _BY_MIME[_canonical(declared_mime)]
        name = name or "This page"
    else:
        name = base_name(name) or "This file"
        fmt = _declared(name, mime, data)
    if not data:
        raise EmptyFileError(f"{name} is empty (0 bytes); there is nothing to index.")
    if max_bytes is not None and len(data) > max_bytes:
        raise TooLargeError(
            f"{name} is {human_size(len(data))}; the limit is {human_size(max_bytes)}. "
            "Split it into smaller files or raise the upload limit."
        )
    _check_label(name, fmt, sniff_mime(name, data), data)
    options = ReadOptions(mime=fmt.mime, password=password, ocr=ocr, ocr_progress=ocr_progress,
                          on_page=on_page)
    return fmt.reader(name, data, options)
