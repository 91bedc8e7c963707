"""ZIP-based documents (Word, PowerPoint, Excel, OpenDocument, EPUB) opened safely.

Checked before any reader parses them: a damaged archive, a zip bomb (declared uncompressed
size far beyond what a document needs), embedded macros and an encrypted Office file (an OLE
container with an ``EncryptedPackage`` stream) are each refused with their own reason.
"""

from __future__ import annotations

import functools
import io
import zipfile
from collections.abc import Callable
from typing import TypeVar

from marginalia_core.errors import CorruptFileError, MacroError, MarginaliaError, TooLargeError
from marginalia_core.ingest.extraction import human_size, plain_detail

R = TypeVar("R")

# Real documents unpack to a few times their size (XML compresses ~10x); a 50 MB upload that
# unpacks past this is a bomb, not a report.
MAX_UNPACKED_BYTES = 400 * 1024 * 1024
# One member far more compressed than XML ever is, and big: the classic bomb shape.
MAX_MEMBER_RATIO = 200
MIN_RATIO_CHECKED_BYTES = 8 * 1024 * 1024
MAX_MEMBERS = 20_000
_MACRO_MEMBER = "vbaproject.bin"
_ENCRYPTED_STREAM = "EncryptedPackage".encode("utf-16-le")


def is_encrypted_ole(data: bytes) -> bool:
    """An OLE compound file holding an encrypted OOXML package: a password-protected Office
    file (Office stores those as OLE, not ZIP, whatever the extension)."""
    return _ENCRYPTED_STREAM in data


def damaged(name: str, what: str, err: BaseException | None = None) -> CorruptFileError:
    detail = f" ({plain_detail(err)})" if err is not None else ""
    return CorruptFileError(
        f"{name} could not be read: the {what} is damaged or incomplete{detail}. Try opening "
        "it and saving it again."
    )


def guarded(what: str) -> Callable[[Callable[..., R]], Callable[..., R]]:
    """A reader whose library fails on damaged input in its own ways: anything but our own
    refusals becomes "the {what} is damaged" (never a traceback for the user)."""

    def wrap(reader: Callable[..., R]) -> Callable[..., R]:
        @functools.wraps(reader)
        def read(name: str, *args: object, **kwargs: object) -> R:
            try:
                return reader(name, *args, **kwargs)
            except MarginaliaError:
                raise
            except RecursionError:
                raise damaged(name, what) from None
            except Exception as err:
                raise damaged(name, what, err) from None

        return read

    return wrap


def check_archive(name: str, data: bytes, what: str) -> zipfile.ZipFile:
    """The archive, after the bomb and macro checks; the caller closes it."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        members = archive.infolist()
    except Exception as err:
        raise damaged(name, what, err) from None
    if len(members) > MAX_MEMBERS:
        raise TooLargeError(f"{name} holds {len(members):,} parts; a {what} never needs that "
                            "many. It was not opened.")
    unpacked = sum(m.file_size for m in members)
    bomb = unpacked > MAX_UNPACKED_BYTES or any(
        m.file_size > MIN_RATIO_CHECKED_BYTES
        and m.file_size > MAX_MEMBER_RATIO * max(m.compress_size, 1)
        for m in members
    )
    if bomb:
        raise TooLargeError(
            f"{name} would unpack to {human_size(unpacked)} from {human_size(len(data))}: "
            "that is a zip bomb, not a document. It was not opened."
        )
    if any(m.filename.replace("\\", "/").rsplit("/", 1)[-1].lower() == _MACRO_MEMBER
           for m in members):
        raise MacroError(
            f"{name} contains macros (code that runs when it is opened); Marginalia does not "
            "index files with macros. Save a copy without them and upload that."
        )
    return archive
