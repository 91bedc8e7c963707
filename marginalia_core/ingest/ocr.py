"""OCR for pages without a text layer: render with pypdfium2, recognise with Debian's tesseract.

Engine chosen by measurement (benchmarks/results/ocr.md): tesseract 5 (apt ``tesseract-ocr
tesseract-ocr-eng``) read our rendered scans at a lower character error rate than
rapidocr-onnxruntime and ~8x faster per page on this 2-core machine, and installs without any
download at run time. The binary is called directly (no pytesseract); ``OMP_THREAD_LIMIT=1``
because tesseract's OpenMP threads make it ~8x slower on a busy 2-core machine (2.9 s vs 22.9 s
for one 200 dpi page). One rendered page is held in memory at a time.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

OCR_ENGINE = "tesseract"
OCR_DPI = 250
OCR_LANG = "eng"
OCR_PAGE_TIMEOUT_S = 120
# tesseract page segmentation mode: 3 = fully automatic layout analysis (its default).
OCR_PSM = 3
TESSERACT = "tesseract"
# pdfium's page-object types for images and for drawn shapes (FPDF_PAGEOBJ_IMAGE, _PATH): a
# page without text holding either is read by OCR (a scan is images; text converted to
# outlines is shapes); a page with neither is blank and costs no OCR time.
_PATH_OBJECT = 2
_IMAGE_OBJECT = 3
# Image-only copies for measuring OCR (benchmarks/ocr_cer.py, tests): a typical scan's dpi.
RASTER_DPI = 200

Progress = Callable[[int, int], None]


class OcrFailed(Exception):
    """tesseract crashed or timed out on one page (the page is then treated as unreadable)."""


def available() -> bool:
    """Whether the OCR engine is installed (apt-get install tesseract-ocr tesseract-ocr-eng)."""
    return shutil.which(TESSERACT) is not None


def recognise_png(png: bytes, *, lang: str = OCR_LANG, timeout: float = OCR_PAGE_TIMEOUT_S) -> str:
    """Text of one page image (PNG bytes)."""
    env = {**os.environ, "OMP_THREAD_LIMIT": "1"}
    try:
        done = subprocess.run(
            [TESSERACT, "stdin", "stdout", "-l", lang, "--psm", str(OCR_PSM)],
            input=png, capture_output=True, timeout=timeout, env=env, check=True,
        )
    except (subprocess.SubprocessError, OSError) as err:
        raise OcrFailed(type(err).__name__) from None
    return done.stdout.decode("utf-8", "replace")


@contextmanager
def _pdfium_document(data: bytes, password: str | None) -> Iterator:
    import pypdfium2 as pdfium

    pdf = pdfium.PdfDocument(data, password=password)
    try:
        yield pdf
    finally:
        pdf.close()


def _has_ink(page) -> bool:  # noqa: ANN001 - a pypdfium2 PdfPage
    return any(True for _ in page.get_objects(filter=[_IMAGE_OBJECT, _PATH_OBJECT], max_depth=2))


def _page_png(page, dpi: int) -> bytes:  # noqa: ANN001 - a pypdfium2 PdfPage
    image = page.render(scale=dpi / 72, grayscale=True).to_pil()
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return buf.getvalue()


def recognise_pages(
    data: bytes,
    indices: Iterable[int],
    *,
    password: str | None = None,
    dpi: int | None = None,
    progress: Progress | None = None,
) -> Iterator[tuple[int, str]]:
    """``(index, text)`` for each 0-based page in ``indices`` that holds an image or drawn
    shapes (text converted to outlines); pages with neither (blank pages) are skipped without
    rendering. A page tesseract fails on yields ``""``."""
    wanted = list(indices)
    dpi = dpi or OCR_DPI
    with _pdfium_document(data, password) as pdf:
        for done, index in enumerate(wanted, start=1):
            page = pdf[index]
            try:
                if not _has_ink(page):
                    continue
                try:
                    text = recognise_png(_page_png(page, dpi))
                except OcrFailed:
                    text = ""
            finally:
                page.close()
                if progress is not None:
                    progress(done, len(wanted))
            yield index, text


def rasterize_pdf(data: bytes, *, dpi: int = RASTER_DPI, password: str | None = None) -> bytes:
    """An image-only copy of a PDF (each page rendered at ``dpi``, no text layer), as a scanner
    would make it: the input for measuring OCR against the original's text layer."""
    from PIL import Image

    pages: list[Image.Image] = []
    with _pdfium_document(data, password) as pdf:
        for page in pdf:
            pages.append(page.render(scale=dpi / 72, grayscale=True).to_pil())
            page.close()
    buf = io.BytesIO()
    pages[0].save(buf, format="PDF", save_all=True, append_images=pages[1:], resolution=dpi)
    return buf.getvalue()
