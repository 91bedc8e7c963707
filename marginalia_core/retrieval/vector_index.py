"""Dense ranking: exact float32 for small libraries, quantised pre-selection for big ones.

Small libraries (fewer than ``QUANTISE_ABOVE_ROWS`` chunks of one embedder) keep a normalized
float32 matrix in memory and score it with one matrix-vector product: exact, and at 100k x 384
a ~20 ms GEMV. Past that the matrix costs more memory and time than a query is worth (1M x 384:
1.5 GB resident, ~200 ms a query, ~12 s to load), so the index keeps only compact codes:

1. binary codes (one sign bit per dimension of the vector minus the library mean; 48 bytes at
   384 d), scanned with XOR + ``np.bitwise_count`` over uint64 words to pre-select ``~0.5 %``
   of the rows (ranking by cosine is unchanged by subtracting the mean:
   q.x = q.(x - mean) + q.mean);
2. int8 codes (per-dimension scale) of those candidates re-score them approximately;
3. the best few hundred are re-scored exactly from their float32 vectors.

All three live in a sidecar directory next to the SQLite file (``<db>.vectors/<model>@<dim>/``)
as contiguous files: the codes memory-mapped and the float32 rows read with ``pread`` (the
~200 a query rescores), so opening 1M chunks is a few ``mmap`` calls (no read, no per-row work)
and the float32 matrix never becomes resident.
The database stays the source of truth: the sidecar records the library token (m012),
generation and deletions it matches; a load checks those, the row count, and a few rows, and
catches up (appends, tombstones) or rebuilds from the database when stale. Additions append to
the files and to small in-memory blocks (never copying the mapped ones); deletions tombstone
rows (the store's deletions counter says when to check), and many of them rewrite the files.

The index reloads only when the store's generation counter moves (any process), never per query.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from marginalia_core.config import DEFAULT_TOP_K
from marginalia_core.store.base import DatabaseRanking, LibraryStore

QUANTISE_ABOVE_ROWS = 100_000  # below this the exact float32 matrix is both small and fast
BLOCK_ROWS = 65_536  # growth unit of the code blocks (appends never copy earlier blocks)
PRESELECT_FRACTION = 0.005  # share of rows the binary scan passes to the int8 stage
PRESELECT_MIN = 2_000  # ... but at least this many (small quantised libraries)
RESCORE_FACTOR = 4  # exact float32 rescoring of RESCORE_FACTOR x k int8 candidates
RESCORE_MIN = 200  # ... and at least this many
FIT_SAMPLE_ROWS = 50_000  # rows the mean and int8 scales are fitted on
SCALE_QUANTILE = 0.999  # per-dimension |x - mean| quantile mapped to 127 (rare outliers clip)
SPOT_CHECK_ROWS = 4  # sidecar float32 rows compared with the database at every load
SELF_CHECK_ROWS = 4  # rows per block re-encoded from the sidecar's float32 at every load
COMPACT_DEAD_FRACTION = 0.05  # rewrite the sidecar once this share of its rows is deleted
SIDECAR_FORMAT = 2  # 2: memory-mapped, word-major bits in blocks, float32 file
GROWTH_FACTOR = 1.5  # exact path: spare capacity when the float32 buffer is reallocated
SCORE_ALL_BLOCK = 65_536  # rows dequantised at a time by score_all
SCAN_SLICE = 32_768  # rows per step of the binary scan (its scratch stays in L2)
CUT_SAMPLE = 65_536  # distances sampled to place the pre-selection cut-off


@dataclass(frozen=True)
class Scored:
    chunk_ids: np.ndarray  # int64
    scores: np.ndarray  # float32 cosine, same order


# --------------------------------------------------------------------------- quantisation


@dataclass(frozen=True)
class Quantiser:
    """Library mean and per-dimension int8 scale, fitted once on a sample; codes of rows added
    later use the same parameters (values past the fitted range clip)."""

    mean: np.ndarray  # float32 (d,)
    scale: np.ndarray  # float32 (d,), value of one int8 step per dimension

    @classmethod
    def fit(cls, sample: np.ndarray) -> Quantiser:
        sample = np.asarray(sample, dtype=np.float32)
        mean = sample.mean(axis=0)
        spread = np.quantile(np.abs(sample - mean), SCALE_QUANTILE, axis=0)
        scale = np.maximum(spread, 1e-6) / 127.0
        return cls(mean.astype(np.float32), scale.astype(np.float32))

    @property
    def words(self) -> int:
        return (len(self.mean) + 63) // 64

    def encode(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(bits (n, words) uint64, codes (n, d) int8) of float32 rows."""
        centered = np.asarray(rows, dtype=np.float32) - self.mean
        codes = np.clip(np.rint(centered / self.scale), -127, 127).astype(np.int8)
        return self.bits(centered), codes

    def bits(self, centered: np.ndarray) -> np.ndarray:
        centered = np.atleast_2d(centered)
        packed = np.packbits(centered > 0, axis=1)
        pad = self.words * 8 - packed.shape[1]
        if pad:
            packed = np.pad(packed, ((0, 0), (0, pad)))
        return np.ascontiguousarray(packed).view(np.uint64)


class _Block:
    """One slab of rows: ids, int8 codes and float32 vectors row-major, binary codes word-major
    (``bits_t[w]`` is one contiguous run per 64-bit word, so the XOR + popcount scan streams
    memory). Either memory-mapped from the sidecar (fixed: additions go to a new block), or in
    memory and growable; an in-memory block keeps no float32 (the exact stage reads its few
    candidates from the store), so resident memory stays at the codes. A sidecar block reads
    its float32 rows from the file (``RowFile``)."""

    def __init__(self, ids: np.ndarray, bits_t: np.ndarray, codes: np.ndarray,
                 vecs: np.ndarray | RowFile | None, n: int, *, growable: bool):
        self.ids, self.bits_t, self.codes, self.vecs = ids, bits_t, codes, vecs
        self.alive = np.ones(len(ids), dtype=bool)
        self.n = n
        self.dead = 0
        self.growable = growable
        self.fd: _Fd | None = None

    @classmethod
    def empty(cls, capacity: int, words: int, dim: int) -> _Block:
        return cls(np.zeros(capacity, np.int64), np.zeros((words, capacity), np.uint64),
                   np.zeros((capacity, dim), np.int8), None, 0, growable=True)

    @classmethod
    def full(cls, ids: np.ndarray, bits_t: np.ndarray, codes: np.ndarray,
             vecs: np.ndarray | RowFile | None = None) -> _Block:
        """A block over existing arrays (``bits_t`` may hold more columns than rows: a
        sidecar's last block)."""
        return cls(ids, bits_t, codes, vecs, len(ids), growable=False)

    @property
    def free(self) -> int:
        return len(self.ids) - self.n if self.growable else 0

    def put(self, ids: np.ndarray, bits: np.ndarray, codes: np.ndarray) -> None:
        a, b = self.n, self.n + len(ids)
        self.ids[a:b] = ids
        self.bits_t[:, a:b] = bits.T
        self.codes[a:b] = codes
        self.n = b

    def tombstone(self, local: np.ndarray) -> int:
        """Mark rows dead; returns how many were alive."""
        was = int(self.alive[local].sum())
        self.alive[local] = False
        self.dead += was
        return was

    def hamming(self, qbits: np.ndarray, out: np.ndarray, scratch: tuple[np.ndarray, np.ndarray]) -> None:
        """Hamming distance of the first ``len(out)`` rows to ``qbits`` into ``out`` (uint16);
        dead rows get the maximum. Works through cache-sized slices with preallocated scratch,
        so the scan allocates nothing per word. (``len(out)``, not ``self.n``: a concurrent
        append may grow the block while a query that sized its arrays earlier reads it.)"""
        x64, c8 = scratch
        n = len(out)
        for a in range(0, n, len(x64)):
            z = min(n, a + len(x64))
            d, x, c = out[a:z], x64[: z - a], c8[: z - a]
            np.bitwise_xor(self.bits_t[0, a:z], qbits[0], out=x)
            np.bitwise_count(x, out=c)
            d[:] = c
            for w in range(1, len(qbits)):
                np.bitwise_xor(self.bits_t[w, a:z], qbits[w], out=x)
                np.bitwise_count(x, out=c)
                np.add(d, c, out=d)
        if self.dead:
            out[~self.alive[:n]] = np.iinfo(np.uint16).max

    def locate(self, chunk_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(mask over ``chunk_ids`` of the live rows here, their local positions)."""
        n = self.n
        if not n or not len(chunk_ids):
            return np.zeros(len(chunk_ids), bool), np.zeros(0, np.int64)
        pos = np.clip(np.searchsorted(self.ids[:n], chunk_ids), 0, n - 1)
        found = (self.ids[pos] == chunk_ids) & self.alive[pos]
        return found, pos[found]


class CodeIndex:
    """The quantised rows of one embedder: blocks in ascending id order, plus the quantiser."""

    def __init__(self, quantiser: Quantiser, dim: int):
        self.q = quantiser
        self.dim = dim
        self.blocks: list[_Block] = []

    def __len__(self) -> int:
        return sum(b.n - b.dead for b in self.blocks)

    @property
    def rows(self) -> int:
        return sum(b.n for b in self.blocks)

    @property
    def dead(self) -> int:
        return sum(b.dead for b in self.blocks)

    @property
    def last_id(self) -> int:
        for b in reversed(self.blocks):
            if b.n:
                return int(b.ids[b.n - 1])
        return 0

    @property
    def nbytes(self) -> int:
        """Bytes the scan and the int8 stage keep touching (ids, both codes, live flags) of
        the filled rows; a growable block's free tail is calloc'd (np.zeros), resident only
        once written. The float32 rows stay in their file (``float32_file_bytes``): a query
        reads ~200 of them."""
        per_row = 8 + 8 * self.q.words + self.dim + 1
        return sum(b.n for b in self.blocks) * per_row

    @property
    def float32_file_bytes(self) -> int:
        return sum(b.n for b in self.blocks if b.vecs is not None) * self.dim * 4

    def append(self, ids: np.ndarray, bits: np.ndarray, codes: np.ndarray) -> None:
        """Add rows (ids above every present one) into the free tail, then new blocks."""
        done = 0
        while done < len(ids):
            if not self.blocks or self.blocks[-1].free == 0:
                self.blocks.append(_Block.empty(BLOCK_ROWS, self.q.words, self.dim))
            block = self.blocks[-1]
            m = min(block.free, len(ids) - done)
            block.put(ids[done : done + m], bits[done : done + m], codes[done : done + m])
            done += m

    def alive_ids(self) -> np.ndarray:
        parts = [b.ids[: b.n][b.alive[: b.n]] for b in self.blocks]
        return np.concatenate(parts) if parts else np.zeros(0, np.int64)

    def contains(self, chunk_ids: np.ndarray) -> np.ndarray:
        """Mask of the ids that are live rows here (no copy of the id arrays)."""
        found = np.zeros(len(chunk_ids), dtype=bool)
        for b in self.blocks:
            found |= b.locate(chunk_ids)[0]
        return found

    def drop(self, chunk_ids: np.ndarray) -> int:
        """Tombstone these ids (those present and alive); returns how many."""
        gone = 0
        for b in self.blocks:
            gone += b.tombstone(b.locate(np.asarray(chunk_ids, np.int64))[1])
        return gone

    def keep_only(self, present: np.ndarray) -> list[int]:
        """Tombstone every live row whose id is not in ``present`` (ascending); returns them."""
        gone: list[int] = []
        for b in self.blocks:
            live = np.flatnonzero(b.alive[: b.n])
            lost = live[~np.isin(b.ids[live], present, assume_unique=True)]
            b.tombstone(lost)
            gone.extend(b.ids[lost].tolist())
        return gone

    def exact(self, q: np.ndarray, chunk_ids: np.ndarray, fetch) -> Scored:
        """Exact float32 cosines of live ``chunk_ids`` (ascending ids): memory-mapped rows
        where the block has them, else the rows ``fetch(ids)`` reads from the store."""
        chunk_ids = np.unique(np.asarray(chunk_ids, np.int64))
        ids_parts, score_parts, ask = [], [], []
        for b in self.blocks:
            found, local = b.locate(chunk_ids)
            if not len(local):
                continue
            if b.vecs is None:
                ask.append(chunk_ids[found])
            else:
                ids_parts.append(chunk_ids[found])
                score_parts.append(_dot(b.vecs[local], q))
        if ask:
            got, rows = fetch(np.concatenate(ask).tolist())
            if len(got):
                ids_parts.append(got)
                score_parts.append(_dot(rows, q))
        if not ids_parts:
            return Scored(np.zeros(0, np.int64), np.zeros(0, np.float32))
        ids, scores = np.concatenate(ids_parts), np.concatenate(score_parts).astype(np.float32)
        order = np.argsort(ids, kind="stable")
        return Scored(ids[order], scores[order])

    def candidates(self, query: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
        """(chunk ids, approximate centred scores) of the ``count`` best rows by int8 score,
        among the rows the binary scan pre-selected."""
        # the int8 stage ranks by q.(x - mean), exactly the cosine order; the binary scan
        # compares signs of the centred query and rows (measured: the uncentred query's signs
        # mostly repeat the mean's and lose neighbours on libraries with a strong mean)
        query = np.asarray(query, dtype=np.float32)
        qbits = self.q.bits(query - self.q.mean)[0]
        sized = [(b, b.n) for b in list(self.blocks) if b.n]
        if not sized:
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        blocks = [b for b, _ in sized]
        offsets = np.cumsum([0] + [n for _, n in sized])
        dist = np.empty(offsets[-1], dtype=np.uint16)
        scratch = (np.empty(SCAN_SLICE, np.uint64), np.empty(SCAN_SLICE, np.uint8))
        for i, b in enumerate(blocks):
            b.hamming(qbits, dist[offsets[i] : offsets[i + 1]], scratch)
        live = sum(b.n - b.dead for b in blocks)
        want = min(live, max(PRESELECT_MIN, int(live * PRESELECT_FRACTION), count))
        pos = _smallest(dist, want, self.q.words * 64)
        weights = (self.q.scale * query).astype(np.float32)
        ids_parts, score_parts = [], []
        for i, b in enumerate(blocks):
            lo, hi = np.searchsorted(pos, [offsets[i], offsets[i + 1]])
            if lo == hi:
                continue
            local = pos[lo:hi] - offsets[i]
            ids_parts.append(b.ids[local])
            score_parts.append(_dot(b.codes[local].astype(np.float32), weights))
        ids = np.concatenate(ids_parts)
        approx = np.concatenate(score_parts)
        if len(ids) > count:
            keep = np.argpartition(-approx, count - 1)[:count]
            ids, approx = ids[keep], approx[keep]
        return ids, approx

    def approx_scores(self, query: np.ndarray) -> Scored:
        """int8-approximate cosine of every live row (ascending ids), dequantised block-wise."""
        query = np.asarray(query, dtype=np.float32)
        weights = (self.q.scale * query).astype(np.float32)
        offset = float(np.dot(query, self.q.mean))
        ids_parts, score_parts = [], []
        for b in self.blocks:
            for a in range(0, b.n, SCORE_ALL_BLOCK):
                z = min(b.n, a + SCORE_ALL_BLOCK)
                alive = b.alive[a:z]
                s = b.codes[a:z].astype(np.float32) @ weights + offset
                ids_parts.append(b.ids[a:z][alive])
                score_parts.append(s[alive])
        if not ids_parts:
            return Scored(np.zeros(0, np.int64), np.zeros(0, np.float32))
        return Scored(np.concatenate(ids_parts), np.concatenate(score_parts).astype(np.float32))


def _dot(rows: np.ndarray, q: np.ndarray) -> np.ndarray:
    """``rows @ q`` for the few thousand candidate rows of a query, without BLAS: a threaded
    GEMV this small waits for a descheduled worker on a busy machine (measured: 2.9 ms on one
    thread, 16-20 ms on two while the other core is taken)."""
    return np.einsum("ij,j->i", rows, q, optimize=False)


def _smallest(dist: np.ndarray, want: int, top: int) -> np.ndarray:
    """Ascending positions of (about) the ``want`` smallest distances (all values <= ``top``
    are real; dead rows carry the uint16 maximum and are never chosen). The cut-off comes from
    a strided sample's partition, then is widened until enough rows pass: a full histogram or
    partition of 1M values costs more than the whole scan's popcounts."""
    n = len(dist)
    if want >= n:
        return np.flatnonzero(dist <= top)
    sample = dist[:: max(1, n // CUT_SAMPLE)]
    kth = min(len(sample) - 1, int(want / n * len(sample)))
    cut = min(int(np.partition(sample, kth)[kth]), top)
    pos = np.flatnonzero(dist <= cut)
    while len(pos) < want and cut < top:
        cut += 1 if len(pos) > want // 2 else 4
        pos = np.flatnonzero(dist <= min(cut, top))
    if len(pos) > 2 * want:  # a coarse cut (many ties): keep the want best
        pos = np.sort(pos[np.argpartition(dist[pos], want - 1)[:want]])
    return pos


# --------------------------------------------------------------------------- sidecar


def sidecar_dir(db_path: str, embed_model: str, embed_dim: int) -> Path | None:
    """Where the codes of one embedder are kept next to the database (None for :memory:)."""
    if db_path == ":memory:":
        return None
    slug = "".join(c if c.isalnum() or c in "-_." else "_" for c in embed_model)
    return Path(f"{db_path}.vectors") / f"{slug}@{embed_dim}"


SIDECAR_EXTS = ("ids", "bits", "codes", "f32")


class Sidecar:
    """Four files per epoch plus ``meta.json`` (written last, atomically), all memory-mapped at
    load (the float32 file read row by row, ``RowFile``), so opening 1M rows is a few ``mmap``
    calls, no read and no per-row work:

    - ``.ids`` int64, ``.codes`` int8 (n, d), ``.f32`` float32 (n, d): row-major, appended;
    - ``.bits`` uint64 in blocks of ``BLOCK_ROWS`` rows, each block word-major
      (words, BLOCK_ROWS): the layout the scan wants, and an append writes into the last block.

    A reader trusts only the rows meta counts, so a writer killed mid-append leaves nothing
    half-visible. Writers hold an exclusive ``flock``; every file set is named by an epoch, so
    a rewrite writes a new set and swaps meta, never touching files a reader has mapped."""

    def __init__(self, path: Path, dim: int):
        self.path = path
        self.dim = dim

    @contextlib.contextmanager
    def locked(self):
        self.path.mkdir(parents=True, exist_ok=True)
        with open(self.path / "lock", "a+") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def meta(self) -> dict | None:
        try:
            return json.loads((self.path / "meta.json").read_text())
        except (OSError, ValueError):
            return None

    def _files(self, epoch: str) -> tuple[Path, ...]:
        return tuple(self.path / f"{epoch}.{ext}" for ext in SIDECAR_EXTS)

    def _write_meta(self, meta: dict) -> None:
        tmp = self.path / f"meta.{uuid.uuid4().hex}.tmp"
        tmp.write_text(json.dumps(meta))
        os.replace(tmp, self.path / "meta.json")

    def read(self, meta: dict) -> CodeIndex | None:
        """The index meta describes, memory-mapped; None if a file is missing or short."""
        n, words = int(meta["rows"]), int(meta["words"])
        quantiser = Quantiser(np.asarray(meta["mean"], np.float32), np.asarray(meta["scale"], np.float32))
        index = CodeIndex(quantiser, self.dim)
        if not n:
            return index
        nblocks = -(-n // BLOCK_ROWS)
        f_ids, f_bits, f_codes, f_vecs = self._files(meta["epoch"])
        try:
            ids = _map(f_ids, np.dtype("<i8"), (n,))
            bits = _map(f_bits, np.dtype("<u8"), (nblocks, words, BLOCK_ROWS))
            codes = _map(f_codes, np.dtype(np.int8), (n, self.dim))
            if f_vecs.stat().st_size < n * self.dim * 4:
                raise ValueError(f"{f_vecs.name} is shorter than its meta says")
            fd = _Fd(f_vecs)
        except (OSError, ValueError):
            return None
        for k in range(nblocks):
            a, z = k * BLOCK_ROWS, min(n, (k + 1) * BLOCK_ROWS)
            block = _Block.full(ids[a:z], bits[k], codes[a:z], RowFile(fd.fd, self.dim, a, z - a))
            block.fd = fd  # keeps the descriptor open as long as the block
            index.blocks.append(block)
        if meta.get("dead"):
            index.drop(np.asarray(meta["dead"], np.int64))
        return index

    def write(self, q: Quantiser, pages, base) -> dict:
        """A fresh epoch from ``pages`` of (ids, bits, codes, float32 rows); old epochs are
        removed after the swap. Pages are streamed: the whole set is never in memory.
        ``base``: meta fields, or a function giving them once the pages are read."""
        with self.locked():
            epoch = uuid.uuid4().hex[:12]
            files = self._files(epoch)
            handles = [open(f, "wb") for f in files]  # noqa: SIM115 (closed below)
            n = 0
            try:
                for ids, bits, codes, vecs in pages:
                    ids.astype("<i8", copy=False).tofile(handles[0])
                    _write_bits(handles[1], n, bits, q.words)
                    np.ascontiguousarray(codes, np.int8).tofile(handles[2])
                    np.ascontiguousarray(vecs, "<f4").tofile(handles[3])
                    n += len(ids)
                handles[1].truncate(-(-n // BLOCK_ROWS) * BLOCK_ROWS * q.words * 8)
            finally:
                for fh in handles:
                    fh.close()
            meta = {**(base() if callable(base) else base), "epoch": epoch, "rows": n, "words": q.words, "block_rows": BLOCK_ROWS,
                    "mean": q.mean.tolist(), "scale": q.scale.tolist(), "dead": []}
            self._write_meta(meta)
            for f in self.path.iterdir():
                if f.suffix.lstrip(".") in SIDECAR_EXTS and not f.name.startswith(epoch):
                    f.unlink(missing_ok=True)
        return meta

    def append(self, old: dict, ids: np.ndarray, bits: np.ndarray, codes: np.ndarray,
               vecs: np.ndarray, base: dict, dead: list[int]) -> dict | None:
        """Append rows to the epoch ``old`` describes; None (nothing written) if another process
        changed the sidecar since ``old`` was read: the next load reconciles."""
        with self.locked():
            now = self.meta()
            if not now or now.get("epoch") != old.get("epoch") or now.get("rows") != old.get("rows"):
                return None
            n, words = int(old["rows"]), int(old["words"])
            f_ids, f_bits, f_codes, f_vecs = self._files(old["epoch"])
            for f, arr, size in ((f_ids, ids.astype("<i8"), 8), (f_codes, codes, self.dim),
                                 (f_vecs, np.ascontiguousarray(vecs, "<f4"), 4 * self.dim)):
                with open(f, "r+b" if f.exists() else "wb") as fh:
                    fh.truncate(n * size)  # drop what a killed writer left past meta's rows
                    fh.seek(n * size)
                    arr.tofile(fh)
            with open(f_bits, "r+b" if f_bits.exists() else "wb") as fh:
                _write_bits(fh, n, bits, words)
                fh.truncate(-(-(n + len(ids)) // BLOCK_ROWS) * BLOCK_ROWS * words * 8)
            meta = {**old, **base, "rows": n + len(ids), "dead": sorted(set(old.get("dead", [])) | set(dead))}
            self._write_meta(meta)
        return meta


class RowFile:
    """Rows ``start..start+n`` of a row-major float32 file, read with ``pread`` on demand.
    Not a memory map on purpose: a query reads ~200 scattered rows, and every page fault on a
    mapping maps the 64 KB around it too (fault-around), so after a few hundred queries a 1M
    library's whole 1.5 GB file would count as resident. ``pread`` costs ~1 us a row here."""

    def __init__(self, fd: int, dim: int, start: int, n: int):
        self.fd, self.dim, self.start, self.n = fd, dim, start, n
        self.row_bytes = dim * 4

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, local) -> np.ndarray:
        local = np.asarray(local, np.int64).reshape(-1)
        if not len(local):
            return np.zeros((0, self.dim), np.float32)
        lo, hi = int(local.min()), int(local.max()) + 1
        if hi - lo <= 4 * len(local):  # dense enough: one read of the span
            raw = os.pread(self.fd, (hi - lo) * self.row_bytes, (self.start + lo) * self.row_bytes)
            span = np.frombuffer(raw, "<f4").reshape(-1, self.dim)
            return span[local - lo].astype(np.float32)
        out = bytearray()
        for i in local.tolist():
            out += os.pread(self.fd, self.row_bytes, (self.start + i) * self.row_bytes)
        return np.frombuffer(bytes(out), "<f4").reshape(-1, self.dim).astype(np.float32)


class _Fd:
    """An open read-only file descriptor, closed when the last block using it goes."""

    def __init__(self, path: Path):
        self.fd = os.open(path, os.O_RDONLY)

    def __del__(self):
        with contextlib.suppress(OSError, AttributeError):
            os.close(self.fd)


def _map(path: Path, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    """A read-only memory map of ``shape`` at the start of ``path`` (ValueError if short)."""
    need = int(np.prod(shape)) * dtype.itemsize
    if path.stat().st_size < need:
        raise ValueError(f"{path.name} is shorter than its meta says")
    return np.asarray(np.memmap(path, dtype=dtype, mode="r", shape=shape))


def _write_bits(fh, start: int, bits: np.ndarray, words: int) -> None:
    """Write row-major ``bits`` (m, words) for rows ``start``.. into the block-structured,
    word-major bits file: per block touched, one contiguous run per word."""
    bits = np.asarray(bits, "<u8")
    done = 0
    while done < len(bits):
        row = start + done
        k, at = divmod(row, BLOCK_ROWS)
        m = min(len(bits) - done, BLOCK_ROWS - at)
        part = bits[done : done + m]
        for w in range(words):
            fh.seek(((k * words + w) * BLOCK_ROWS + at) * 8)
            np.ascontiguousarray(part[:, w]).tofile(fh)
        done += m


# --------------------------------------------------------------------------- the index


class VectorIndex:
    """One embedder's vectors (model + dimension), kept in step with the store: an exact float32
    matrix below ``quantise_above`` chunks, quantised codes (plus a sidecar) above it."""

    def __init__(self, store: LibraryStore, embed_model: str, embed_dim: int, *,
                 quantise_above: int = QUANTISE_ABOVE_ROWS):
        self.store = store
        self.embed_model = embed_model
        self.embed_dim = embed_dim
        self.quantise_above = quantise_above
        self._lock = threading.Lock()
        self._generation = -1
        self._deletions = -1
        # (ids, matrix) replaced as one tuple, so a reader never pairs new ids with old vectors
        self._snapshot = (np.zeros(0, dtype=np.int64), np.zeros((0, embed_dim), dtype=np.float32))
        self._spare = self._snapshot  # exact path: buffers with room to append in place
        self._codes: CodeIndex | None = None
        self._meta: dict | None = None  # sidecar state the codes match, if persisted
        path = sidecar_dir(store.path, embed_model, embed_dim)
        self.sidecar = Sidecar(path, embed_dim) if path else None
        self.last_load: dict = {}  # how the last (re)load went: "exact", "sidecar", "rebuilt", ...

    # -- freshness -----------------------------------------------------------------------------

    @property
    def quantised(self) -> bool:
        self._current()
        return self._codes is not None

    def _current(self) -> tuple[np.ndarray, np.ndarray]:
        """(ids, matrix) of the exact path as of the store's current generation (empty when
        quantised); reloads when the generation moved."""
        if self.store.generation() != self._generation:
            with self._lock:
                if self.store.generation() != self._generation:
                    self._reload()
        return self._snapshot

    def _reload(self) -> None:
        if self._codes is not None:
            self._catch_up_codes()
            return
        if self._generation < 0 and (self._open_sidecar() or self._build_codes_from_store()):
            return
        ids, matrix = self._snapshot
        _, deletions = self.store.counters()
        if deletions == self._deletions and len(ids):
            counters, new_ids, new_rows = self.store.load_vectors(
                self.embed_model, self.embed_dim, after_id=int(ids[-1])
            )
            if counters[1] == deletions:  # no delete raced the read
                ids, matrix = self._grow(new_ids, new_rows)
                self._snapshot = (ids, matrix)
                self._generation = counters[0]
                self.last_load = {"path": "exact", "how": "appended", "rows": len(new_ids)}
                self._maybe_quantise(ids, matrix, counters)
                return
        counters, ids, matrix = self.store.load_vectors(self.embed_model, self.embed_dim)
        # generation and vectors come from one snapshot, so a write racing this load is seen
        # by the next query rather than masked
        self._snapshot = (ids, matrix)
        self._spare = (ids, matrix)
        self._generation, self._deletions = counters
        self.last_load = {"path": "exact", "how": "full", "rows": len(ids)}
        self._maybe_quantise(ids, matrix, counters)

    def _build_codes_from_store(self) -> bool:
        """A big library with no usable sidecar: fit on a sample, then encode page by page
        straight into a new sidecar epoch (or in-memory codes without one), so the float32
        matrix is never resident (peak = codes + one page)."""
        counters, present = self.store.vector_ids(self.embed_model, self.embed_dim)
        if len(present) < self.quantise_above:
            return False
        pick = np.random.default_rng(0).choice(present, min(FIT_SAMPLE_ROWS, len(present)), replace=False)
        _, sample = self.store.vectors_by_ids(pick.tolist())
        quantiser = Quantiser.fit(sample)
        seen = [counters]

        def pages():
            for page_counters, ids, rows in self.store.vector_pages(
                self.embed_model, self.embed_dim, page_rows=BLOCK_ROWS // 4
            ):
                seen.append(page_counters)  # the read snapshot's, not the one before it
                yield (ids, *quantiser.encode(rows), rows)

        self._install_pages(quantiser, pages, seen, how="built from the database")
        return True

    def _install_pages(self, quantiser: Quantiser, pages, seen: list[tuple[int, int]], *, how: str) -> None:
        """Codes of ``pages()`` (an iterator of (ids, bits, codes, rows)): written to a new
        sidecar epoch and mapped back, or kept in memory (codes only) when there is no
        sidecar or it cannot be written."""
        codes: CodeIndex | None = None
        self._meta = None
        if self.sidecar is not None:
            def base() -> dict:  # stamped with the counters the rows were read at
                self._generation, self._deletions = seen[-1]
                return self._base_meta()
            try:
                meta = self.sidecar.write(quantiser, pages(), base)
                codes = self.sidecar.read(meta)
                self._meta = meta if codes is not None else None
            except OSError:  # read-only directory, full disk: serve from memory
                codes = None
        if codes is None:
            codes = CodeIndex(quantiser, self.embed_dim)
            for ids, bits, c8, _ in pages():
                codes.append(ids, bits, c8)
        self._codes = codes
        self._snapshot = (np.zeros(0, dtype=np.int64), np.zeros((0, self.embed_dim), dtype=np.float32))
        self._spare = self._snapshot
        self._generation, self._deletions = seen[-1]
        self.last_load = {"path": "quantised", "how": how, "rows": len(codes)}

    def _grow(self, new_ids: np.ndarray, new_rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Rows appended into spare capacity and published as views: an addition costs
        O(new rows). Only when the buffer is full is it reallocated (x GROWTH_FACTOR), so
        copies are amortised; rows already published are never written again, so a reader
        still holding the previous views sees consistent data."""
        ids, matrix = self._snapshot
        buf_ids, buf = self._spare
        n, m = len(ids), len(new_ids)
        if n + m > len(buf_ids):
            cap = max(n + m, int(len(buf_ids) * GROWTH_FACTOR), 1024)
            buf_ids = np.empty(cap, dtype=np.int64)
            buf = np.empty((cap, self.embed_dim), dtype=np.float32)
            buf_ids[:n], buf[:n] = ids, matrix
            self._spare = (buf_ids, buf)
        buf_ids[n : n + m], buf[n : n + m] = new_ids, new_rows
        return buf_ids[: n + m], buf[: n + m]

    def _maybe_quantise(self, ids: np.ndarray, matrix: np.ndarray, counters: tuple[int, int]) -> None:
        """Past the threshold, trade the float32 matrix for codes (fitted on it) and persist."""
        if len(ids) < self.quantise_above:
            return
        quantiser = Quantiser.fit(_sample(matrix))

        def pages():
            for a in range(0, len(ids), BLOCK_ROWS):
                rows = matrix[a : a + BLOCK_ROWS]
                yield (ids[a : a + BLOCK_ROWS], *quantiser.encode(rows), rows)

        self._install_pages(quantiser, pages, [counters], how="quantised from the exact matrix")

    def _base_meta(self) -> dict:
        return {"format": SIDECAR_FORMAT, "library": self.store.library_token(),
                "model": self.embed_model, "dim": self.embed_dim,
                "generation": self._generation, "deletions": self._deletions}

    def _persist_all(self) -> None:
        """Rewrite the sidecar with every live row (dropping tombstones) and map it back, so
        rows held in memory since the load move to the mapped files."""
        codes = self._codes
        if self.sidecar is None or codes is None:
            return

        def pages():
            for b in codes.blocks:
                for a in range(0, b.n, BLOCK_ROWS // 4):
                    z = min(b.n, a + BLOCK_ROWS // 4)
                    keep = np.flatnonzero(b.alive[a:z]) + a
                    if not len(keep):
                        continue
                    ids = b.ids[keep]
                    if b.vecs is not None:
                        rows = b.vecs[keep]
                    else:
                        got, rows = self.store.vectors_by_ids(ids.tolist())
                        if len(got) != len(ids):  # deleted meanwhile: the next catch-up sees it
                            keep = keep[np.isin(ids, got)]
                            ids = b.ids[keep]
                    bits = np.ascontiguousarray(b.bits_t[:, keep].T)
                    yield ids, bits, b.codes[keep], rows

        try:
            meta = self.sidecar.write(codes.q, pages(), self._base_meta())
            mapped = self.sidecar.read(meta)
        except OSError:  # read-only directory, full disk: serve from memory, rebuild next start
            self._meta = None
            return
        if mapped is not None:
            self._codes, self._meta = mapped, meta

    def _open_sidecar(self) -> bool:
        """Start from the sidecar if it belongs to this database and agrees with it: library
        token, counters and row count; a few rows' codes re-encoded from the sidecar's float32
        must give the very codes on disk, and a few float32 rows must equal the database's."""
        if self.sidecar is None:
            return False
        meta = self.sidecar.meta()
        counters = self.store.counters()
        if not meta or not self._sidecar_matches(meta, counters):
            return False
        codes = self.sidecar.read(meta)
        if codes is None or len(codes) < self.quantise_above or not self._spot_check(codes, meta, counters):
            return False
        self._codes, self._meta = codes, meta
        self._snapshot = (np.zeros(0, dtype=np.int64), np.zeros((0, self.embed_dim), dtype=np.float32))
        self._generation, self._deletions = int(meta["generation"]), int(meta["deletions"])
        self._catch_up_codes()
        current = self._generation >= 0 and self.store.counters() == (self._generation, self._deletions)
        if current and len(self._codes) != self.store.chunk_count(self.embed_model, self.embed_dim):
            self._codes = self._meta = None  # rows the counters cannot explain: rebuild
            self._generation = self._deletions = -1
            return False
        self.last_load = {**self.last_load, "path": "quantised", "how": "sidecar" + (
            "" if self.last_load.get("how") is None else f" + {self.last_load['how']}")}
        return True

    def _sidecar_matches(self, meta: dict, counters: tuple[int, int]) -> bool:
        return (
            meta.get("format") == SIDECAR_FORMAT
            and meta.get("library") == self.store.library_token() != 0
            and meta.get("model") == self.embed_model
            and meta.get("dim") == self.embed_dim
            and meta.get("block_rows") == BLOCK_ROWS
            and int(meta.get("generation", 1 << 62)) <= counters[0]
            and int(meta.get("deletions", 1 << 62)) <= counters[1]
        )

    def _spot_check(self, codes: CodeIndex, meta: dict, counters: tuple[int, int]) -> bool:
        """Rows sampled from the sidecar files are self-consistent (float32 -> the very bits
        and int8 codes on disk), and a handful equal the database's (``SPOT_CHECK_ROWS``
        primary-key reads: the one check that the float32 file is this library's)."""
        rng = np.random.default_rng()
        for b in codes.blocks:
            live = np.flatnonzero(b.alive[: b.n])
            if not len(live):
                continue
            if b.vecs is None:
                return False
            local = np.unique(np.concatenate([live[[0, -1]], rng.choice(live, min(SELF_CHECK_ROWS, len(live)))]))
            bits, c8 = codes.q.encode(b.vecs[local])
            if not (np.array_equal(c8, b.codes[local]) and np.array_equal(bits, b.bits_t[:, local].T)):
                return False
        alive = codes.alive_ids()
        if not len(alive):
            return True
        pick = np.unique(np.concatenate([alive[[0, -1]], rng.choice(alive, min(SPOT_CHECK_ROWS, len(alive)))]))
        ids, rows = self.store.vectors_by_ids(pick.tolist())
        if len(ids) < len(pick) and int(meta["deletions"]) == counters[1]:
            return False  # rows vanished though nothing was deleted: not this library's codes
        for b in codes.blocks:
            found, local = b.locate(ids)
            if len(local) and not np.array_equal(b.vecs[local], rows[found]):  # type: ignore[index]
                return False
        return True

    def _catch_up_codes(self) -> None:
        """Bring the codes to the store's state: tombstone deleted rows, append new ones."""
        codes = self._codes
        assert codes is not None
        counters = self.store.counters()
        dead: list[int] = []
        how = []
        if counters[1] != self._deletions:
            counters, present = self.store.vector_ids(self.embed_model, self.embed_dim)
            dead = codes.keep_only(present)
            how.append(f"{len(dead)} deleted")
        checked = counters[1]
        new: list[tuple[np.ndarray, ...]] = []
        last = codes.last_id
        for page_counters, ids, rows in self.store.vector_pages(self.embed_model, self.embed_dim, after_id=last):
            counters = page_counters
            bits, c8 = codes.q.encode(rows)
            codes.append(ids, bits, c8)
            new.append((ids, bits, c8, rows))
        how.append(f"{sum(len(p[0]) for p in new)} added")
        self._generation, self._deletions = counters
        if counters[1] != checked:  # a delete raced this catch-up: check again next query
            self._generation, self._deletions = -1, checked
        self.last_load = {"path": "quantised", "how": ", ".join(how), "rows": len(codes)}
        self._persist_increment(new, dead)

    def _persist_increment(self, new: list[tuple[np.ndarray, ...]], dead: list[int]) -> None:
        if self.sidecar is None or self._codes is None:
            return
        codes = self._codes
        if self._meta is None or codes.dead > COMPACT_DEAD_FRACTION * max(codes.rows, 1):
            self._persist_all()  # a fresh epoch of the live rows (compaction)
            return
        words, dim = codes.q.words, self.embed_dim
        empty = (np.zeros(0, np.int64), np.zeros((0, words), np.uint64),
                 np.zeros((0, dim), np.int8), np.zeros((0, dim), np.float32))
        ids, bits, c8, rows = (np.concatenate([empty[i], *(page[i] for page in new)]) for i in range(4))
        try:
            self._meta = self.sidecar.append(self._meta, ids, bits, c8, rows, self._base_meta(), dead)
        except OSError:
            self._meta = None

    def refresh(self) -> None:
        """Drop everything in memory and load again (from the sidecar when it is current)."""
        with self._lock:
            self._generation = self._deletions = -1
            self._codes = self._meta = None
            self._snapshot = (np.zeros(0, dtype=np.int64), np.zeros((0, self.embed_dim), dtype=np.float32))
            self.last_load = {}
        self._current()

    def __len__(self) -> int:
        ids = self._current()[0]
        return len(self._codes) if self._codes is not None else len(ids)

    @property
    def nbytes(self) -> int:
        """Resident bytes of the index (codes, or the float32 matrix and its ids)."""
        if self._codes is not None:
            return int(self._codes.nbytes)
        ids, matrix = self._snapshot
        return int(matrix.nbytes + ids.nbytes)

    # -- scoring -------------------------------------------------------------------------------

    def score_all(self, query_vector: np.ndarray) -> Scored:
        """Cosine score of every chunk (ascending ids), for the Inspector's full table. Exact on
        the float32 path; on the quantised path int8-approximate, with the top rows exact."""
        ids, matrix = self._current()
        q = np.asarray(query_vector, dtype=np.float32)
        codes = self._codes
        if codes is None:
            if not len(ids):
                return Scored(ids, np.zeros(0, dtype=np.float32))
            return Scored(ids, matrix @ q)
        approx = codes.approx_scores(q)
        exact = codes.exact(q, codes.candidates(q, RESCORE_MIN)[0], self.store.vectors_by_ids)
        pos = np.searchsorted(approx.chunk_ids, exact.chunk_ids)
        approx.scores[pos] = exact.scores
        return approx

    def search(
        self, query_vector: np.ndarray, *, k: int = DEFAULT_TOP_K, threshold: float | None = None
    ) -> Scored:
        """The best ``k`` chunks at or above ``threshold``, best first (exact cosines)."""
        self._current()
        codes = self._codes
        if codes is None:
            return top_k(self.score_all(query_vector), k=k, threshold=threshold)
        q = np.asarray(query_vector, dtype=np.float32)
        cand, _ = codes.candidates(q, max(RESCORE_MIN, RESCORE_FACTOR * k))
        return top_k(codes.exact(q, cand, self.store.vectors_by_ids), k=k, threshold=threshold)

    def cosine(self, query_vector: np.ndarray, chunk_ids: list[int]) -> list[float | None]:
        """Exact cosine of each chunk id (None if it is not indexed by this embedder)."""
        if not chunk_ids:
            return []
        ids, matrix = self._current()
        q = np.asarray(query_vector, dtype=np.float32)
        codes = self._codes
        if codes is None:
            wanted = np.asarray(chunk_ids, dtype=np.int64)
            pos = np.clip(np.searchsorted(ids, wanted), 0, max(len(ids) - 1, 0))
            hit = np.unique(pos[ids[pos] == wanted]) if len(ids) else pos[:0]
            scored = Scored(ids[hit], matrix[hit] @ q)
        else:
            scored = codes.exact(q, np.asarray(chunk_ids, dtype=np.int64), self.store.vectors_by_ids)
        return _lookup(scored, chunk_ids)


class ServerIndex:
    """Dense ranking done by the database (PostgreSQL + pgvector): ``search`` is one
    ``ORDER BY embedding <=> q LIMIT k`` over the embedder's HNSW index, scoped to documents in
    the same query; cosines of given chunks are computed there too. Nothing is resident, so
    every app process sharing the library starts at once and sees every write immediately."""

    quantised = False
    nbytes = 0

    def __init__(self, store: DatabaseRanking, embed_model: str, embed_dim: int):
        self.store = store
        self.embed_model = embed_model
        self.embed_dim = embed_dim
        self.last_load: dict = {"path": "database", "how": "HNSW in the database", "rows": None}

    def __len__(self) -> int:
        return self.store.chunk_count(self.embed_model, self.embed_dim)

    def search(
        self, query_vector: np.ndarray, *, k: int = DEFAULT_TOP_K, threshold: float | None = None,
        documents: list[str] | None = None,
    ) -> Scored:
        """The best ``k`` chunks (of ``documents`` only, if given) at or above ``threshold``."""
        pairs = self.store.nearest(self.embed_model, self.embed_dim, query_vector, k=k, documents=documents)
        scored = Scored(np.asarray([c for c, _ in pairs], np.int64), np.asarray([v for _, v in pairs], np.float32))
        return top_k(scored, k=k, threshold=threshold)  # ties in the stable order VectorIndex uses

    def cosine(self, query_vector: np.ndarray, chunk_ids: list[int]) -> list[float | None]:
        if not chunk_ids:
            return []
        ids, scores = self.store.cosines(self.embed_model, self.embed_dim, query_vector, chunk_ids)
        return _lookup(Scored(ids, scores), chunk_ids)

    def score_all(self, query_vector: np.ndarray) -> Scored:
        """Every chunk's exact cosine (ascending ids), for the Inspector's full table."""
        ids, scores = self.store.cosines(self.embed_model, self.embed_dim, query_vector)
        return Scored(ids, scores)

    def refresh(self) -> None:
        """Nothing to reload: the database is read at every query."""


def dense_index(store: LibraryStore, embed_model: str, embed_dim: int) -> VectorIndex | ServerIndex:
    """The database's own ranking when it has one (PostgreSQL), else the in-process index."""
    if isinstance(store, DatabaseRanking):
        return ServerIndex(store, embed_model, embed_dim)
    return VectorIndex(store, embed_model, embed_dim)


def _sample(matrix: np.ndarray) -> np.ndarray:
    if len(matrix) <= FIT_SAMPLE_ROWS:
        return matrix
    pick = np.random.default_rng(0).choice(len(matrix), FIT_SAMPLE_ROWS, replace=False)
    return matrix[np.sort(pick)]


def _lookup(scored: Scored, chunk_ids: list[int]) -> list[float | None]:
    wanted = np.asarray(chunk_ids, dtype=np.int64)
    if not len(scored.chunk_ids):
        return [None] * len(chunk_ids)
    pos = np.clip(np.searchsorted(scored.chunk_ids, wanted), 0, len(scored.chunk_ids) - 1)
    found = scored.chunk_ids[pos] == wanted
    return [float(scored.scores[p]) if ok else None for p, ok in zip(pos, found)]


def top_k(scored: Scored, *, k: int, threshold: float | None = None) -> Scored:
    """Best-first top k via argpartition (O(n)) then a sort of only k items."""
    ids, scores = scored.chunk_ids, scored.scores
    if threshold is not None:
        keep = scores >= threshold
        if not keep.all():
            ids, scores = ids[keep], scores[keep]
    n = len(scores)
    if n == 0 or k <= 0:
        return Scored(ids[:0], scores[:0])
    part = np.argpartition(-scores, k - 1)[:k] if k < n else np.arange(n)
    # stable tie-break on chunk id keeps results deterministic
    order = part[np.lexsort((ids[part], -scores[part]))]
    return Scored(ids[order], scores[order])
