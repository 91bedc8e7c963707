"""Content-addressed embedding cache for benchmarks. It lives outside the repository, in
``~/.cache/marginalia-bench`` (``MARGINALIA_BENCH_CACHE`` overrides it), so every work tree and
checkout shares one copy: SciFact's 8,154 passages are embedded once per machine, not once per
clone.

Every vector is keyed by ``blake2b(model key, role, text)``, so a cache entry is valid for any
corpus, chunking or subset that produces the same text: changing TARGET/OVERLAP re-embeds only
the chunks whose text changed, and ``--quick`` runs reuse the full run's vectors. Vectors are
appended in small ``.npz`` shards as they are computed, so an interrupted run loses at most one
shard.
"""

from __future__ import annotations

import hashlib
import os
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

CACHE_DIR = Path(
    os.environ.get("MARGINALIA_BENCH_CACHE") or Path.home() / ".cache" / "marginalia-bench"
).expanduser()
SHARD_SIZE = 128  # texts embedded between two writes


def _slug(model_key: str) -> str:
    return "".join(c if c.isalnum() or c in "-_.@" else "_" for c in model_key)


def text_key(model_key: str, role: str, text: str) -> bytes:
    h = hashlib.blake2b(digest_size=16)
    h.update(f"{model_key}\x00{role}\x00".encode())
    h.update(text.encode("utf-8", "surrogatepass"))
    return h.hexdigest().encode()


class EmbeddingCache:
    def __init__(self, model_key: str, dimension: int, root: Path = CACHE_DIR):
        self.model_key = model_key
        self.dimension = dimension
        self.dir = root / "embeddings" / _slug(model_key)
        self.dir.mkdir(parents=True, exist_ok=True)
        self._index: dict[bytes, np.ndarray] = {}
        for shard in sorted(self.dir.glob("*.npz")):
            try:
                with np.load(shard) as z:
                    for k, v in zip(z["keys"], z["vecs"], strict=True):
                        self._index[bytes(k)] = v
            except Exception:  # a shard cut short by a kill: ignore it, it will be recomputed
                continue

    def __len__(self) -> int:
        return len(self._index)

    def missing(self, texts: Sequence[str], role: str) -> list[int]:
        return [
            i for i, t in enumerate(texts) if text_key(self.model_key, role, t) not in self._index
        ]

    def _write(self, keys: list[bytes], vecs: np.ndarray) -> None:
        name = f"{time.strftime('%Y%m%d%H%M%S')}-{uuid.uuid4().hex[:8]}"
        tmp = self.dir / f"{name}.tmp.npz"
        np.savez(tmp, keys=np.array(keys, dtype="S32"), vecs=vecs.astype(np.float32))
        tmp.rename(self.dir / f"{name}.npz")
        for k, v in zip(keys, vecs, strict=True):
            self._index[k] = v

    def get(
        self,
        texts: Sequence[str],
        embed: Callable[[list[str]], np.ndarray],
        *,
        role: str = "document",
        progress: Callable[[int, int, float], None] | None = None,
    ) -> np.ndarray:
        """Vectors for ``texts`` (in order), embedding only what is not cached yet.

        Missing texts are embedded shortest first in SHARD_SIZE groups (``embed`` receives a
        list of texts and returns their unit vectors); ``progress(done, todo, seconds)``.
        """
        keys = [text_key(self.model_key, role, t) for t in texts]
        todo: dict[bytes, str] = {}
        for k, t in zip(keys, texts, strict=True):
            if k not in self._index:
                todo.setdefault(k, t)
        items = sorted(todo.items(), key=lambda kv: len(kv[1]))
        t0 = time.perf_counter()
        for start in range(0, len(items), SHARD_SIZE):
            group = items[start : start + SHARD_SIZE]
            vecs = np.asarray(embed([t for _, t in group]), dtype=np.float32)
            self._write([k for k, _ in group], vecs)
            if progress:
                progress(min(start + SHARD_SIZE, len(items)), len(items), time.perf_counter() - t0)
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for i, k in enumerate(keys):
            out[i] = self._index[k]
        return out
