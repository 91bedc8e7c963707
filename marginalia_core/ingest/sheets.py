"""Spreadsheets (.xlsx via openpyxl, .csv via the standard library) as readable rows.

Every row is one location and one line of text that names its columns ("**Item**: Paper ·
**Cost**: 40"), so a passage of rows 12–40 stands alone without the header row, for the
embedder, for keyword search and for the person reading the margin. The first row with text
is the header; a sheet whose first row is all numbers has none (columns are named A, B, ...).
"""

from __future__ import annotations

import csv
import datetime as dt
import io
from collections.abc import Iterable, Sequence
from typing import Any

from openpyxl.utils import get_column_letter

from marginalia_core.ingest.containers import check_archive, damaged, guarded
from marginalia_core.ingest.extraction import (
    Extracted,
    ReadOptions,
    Unit,
    base_name,
    decode_text,
    join_units,
)

MAX_CELL_CHARS = 2000  # a cell holding a whole essay is cut (the row stays readable)
CSV_SNIFF_CHARS = 64 * 1024
CSV_DELIMITERS = ",;\t|"
FIELD_SEPARATOR = " · "


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.10g}"
    if isinstance(value, dt.datetime):
        return value.date().isoformat() if value.time() == dt.time() else value.isoformat(" ")
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    text = " ".join(str(value).split())
    return text[:MAX_CELL_CHARS]


def _is_number(text: str) -> bool:
    try:
        float(text.replace(",", ""))
    except ValueError:
        return False
    return True


def _escape(text: str) -> str:
    return text.replace("*", "\\*")


def sheet_rows(sheet: str, rows: Iterable[Sequence[Any]]) -> list[tuple[Unit, str]]:
    """(location, text) per data row of one sheet; row numbers as the spreadsheet shows."""
    header: list[str] | None = None
    parts: list[tuple[Unit, str]] = []
    for number, raw in enumerate(rows, start=1):
        cells = [_cell(v) for v in raw]
        if not any(cells):
            continue
        if header is None:
            if not all(_is_number(c) for c in cells if c):
                header = cells
                continue
            header = []
        names = [header[i] if i < len(header) and header[i] else get_column_letter(i + 1)
                 for i in range(len(cells))]
        fields = [f"**{_escape(n)}**: {_escape(c)}" for n, c in zip(names, cells, strict=True)
                  if c]
        text = FIELD_SEPARATOR.join(fields)
        if not parts:
            text = f"## {_escape(sheet)}\n\n{text}"
        parts.append((Unit(sheet, number), text))
    return parts


@guarded("Excel workbook")
def read_xlsx(name: str, data: bytes, options: ReadOptions) -> Extracted:
    """Every visible sheet's rows, sheet by sheet (values, not formulas)."""
    from openpyxl import load_workbook  # noqa: PLC0415

    check_archive(name, data, "Excel workbook").close()
    try:
        book = load_workbook(io.BytesIO(data), read_only=True, data_only=True)
    except Exception as err:
        raise damaged(name, "Excel workbook", err) from None
    parts: list[tuple[Unit, str]] = []
    try:
        for sheet in book.worksheets:
            if getattr(sheet, "sheet_state", "visible") != "visible":
                continue
            parts.extend(sheet_rows(sheet.title, sheet.iter_rows(values_only=True)))
    except Exception as err:
        raise damaged(name, "Excel workbook", err) from None
    finally:
        book.close()
    return join_units(name, options.mime, parts)


@guarded("CSV file")
def read_csv(name: str, data: bytes, options: ReadOptions) -> Extracted:
    """A CSV (or semicolon/tab separated) file as one sheet named after the file."""
    text = decode_text(name, data)
    try:
        dialect: Any = csv.Sniffer().sniff(text[:CSV_SNIFF_CHARS], delimiters=CSV_DELIMITERS)
    except csv.Error:
        dialect = csv.excel
    sheet = base_name(name).rsplit(".", 1)[0] or name
    try:
        rows = list(csv.reader(io.StringIO(text), dialect))
    except csv.Error as err:
        raise damaged(name, "CSV file", err) from None
    return join_units(name, options.mime, sheet_rows(sheet, rows))
