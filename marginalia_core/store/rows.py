"""Values both store backends share: ids, timestamps, the vector byte format, a conversation's
stored scope and the ``KEEP`` sentinel. Pure Python, no SQL: the layers above import these
instead of a backend."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime

import numpy as np

VECTOR_DTYPE = np.dtype("<f4")  # float32 little-endian, as SPEC.md stores them
# the documents columns both backends select, in this order
DOCUMENT_COLUMNS = (
    "id, name, mime, size, chunk_count, page_count, content_hash, embed_model, embed_dim, "
    "chunk_target, chunk_overlap, created, ocr_pages, locations, source_url, fetched_at, "
    "parse_health"
)


class Keep:
    """The type of ``KEEP``: "leave this as it is" where None already means something."""


KEEP = Keep()


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


def new_id() -> str:
    return uuid.uuid4().hex


def scope_json(document_ids: Sequence[str] | None) -> str | None:
    """A conversation's stored document scope: the ids de-duplicated in order, NULL for all."""
    ids = list(dict.fromkeys(str(i) for i in document_ids or ()))
    return json.dumps(ids) if ids else None


def vector_to_blob(vector: np.ndarray) -> bytes:
    return np.asarray(vector, dtype=VECTOR_DTYPE).tobytes()


def blob_to_vector(blob: bytes) -> np.ndarray:
    return np.frombuffer(blob, dtype=VECTOR_DTYPE)
