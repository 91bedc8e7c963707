"""The offline embedder: weights from installed packages, unit vectors, sensible similarity."""

from __future__ import annotations

import numpy as np

from marginalia_core.config import Settings
from marginalia_core.providers.embeddings import get_embedder
from marginalia_core.providers.embeddings.local import (
    DIMENSION,
    model_files,
    similar_length_batches,
)


def test_weights_come_from_installed_packages():
    model, tokenizer = model_files()
    assert model.is_file() and model.stat().st_size > 10_000_000
    assert tokenizer.is_file()
    assert any(part in ("site-packages", "dist-packages") for part in model.parts)


def test_vectors_are_unit_float32(local_embedder):
    texts = ["short", "a much longer passage about retrieval " * 40, ""]
    vectors = local_embedder.embed_documents(texts)
    assert vectors.shape == (3, DIMENSION) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors[:2], axis=1), 1.0, atol=1e-5)


def test_order_preserved_despite_length_sorting(local_embedder):
    texts = ["The cat sat on the mat.", "x " * 200, "Stock markets fell sharply today."]
    together = local_embedder.embed_documents(texts)
    alone = np.stack([local_embedder.embed_documents([t])[0] for t in texts])
    assert np.allclose(together, alone, atol=1e-4)


def test_related_text_scores_higher(local_embedder):
    docs = local_embedder.embed_documents(
        ["A feline rested on the rug.", "Quarterly revenue grew by ten percent."]
    )
    q = local_embedder.embed_query("Where did the cat sit?")
    assert docs[0] @ q > docs[1] @ q + 0.2


def test_registry_selects_local_without_key():
    embedder = get_embedder(Settings())
    assert embedder.name == "local" and embedder.key.endswith("@384")


def test_batches_end_where_padding_would_grow():
    lengths = [40, 500, 42, 45, 120, 51, 130, 498, 52]
    batches = similar_length_batches(lengths, size=3, ratio=1.3)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))  # each once
    for b in batches:
        assert len(b) <= 3
        assert max(lengths[i] for i in b) <= 1.3 * min(lengths[i] for i in b)
    # short ones together, long ones together: no sentence is padded to a passage's length
    assert [sorted(lengths[i] for i in b) for b in batches] == [
        [40, 42, 45], [51, 52], [120, 130], [498, 500]]

