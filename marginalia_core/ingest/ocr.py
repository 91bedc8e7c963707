"""OCR for pages without a text layer: render with pypdfium2, recognise with Debian's tesseract.

Page by page (one rendered image in memory at a time). The tesseract binary is called directly
(no pytesseract); ``OMP_THREAD_LIMIT=1`` because tesseract's OpenMP threads make it ~8x slower
on a busy 2-core machine (measured 2.9 s vs 22.9 s for one 200 dpi page).
Not yet wired into extraction.py (issue 12 part 3, work in progress).
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess

OCR_DPI = 200
OCR_LANG = "eng"
OCR_PAGE_TIMEOUT_S = 120
TESSERACT = "tesseract"


def tesseract_available() -> bool:
    """Whether the tesseract binary is on PATH (apt-get install tesseract-ocr tesseract-ocr-eng)."""
    return shutil.which(TESSERACT) is not None


def recognise_png(png: bytes, *, lang: str = OCR_LANG, timeout: float = OCR_PAGE_TIMEOUT_S) -> str:
    """Text of one page image (PNG bytes)."""
    env = {**os.environ, "OMP_THREAD_LIMIT": "1"}
    done = subprocess.run(
        [TESSERACT, "stdin", "stdout", "-l", lang],
        input=png, capture_output=True, timeout=timeout, env=env, check=True,
    )
    return done.stdout.decode("utf-8", "replace")


def ocr_pdf_page(data: bytes, index: int, *, dpi: int = OCR_DPI) -> str:
    """Render page ``index`` (0-based) of the PDF ``data`` and recognise it."""
    import pypdfium2 as pdfium

    pdf = pdfium.PdfDocument(data)
    try:
        image = pdf[index].render(scale=dpi / 72, grayscale=True).to_pil()
        buf = io.BytesIO()
        image.save(buf, format="PNG")
    finally:
        pdf.close()
    return recognise_png(buf.getvalue())
