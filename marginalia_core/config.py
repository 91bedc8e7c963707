"""Settings: environment variables first, then an optional secrets mapping (``st.secrets`` in the
app), then defaults. The core never reads Streamlit itself; the app passes its secrets in."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

DEFAULT_DB = "data/marginalia.db"
POSTGRES_SCHEMES = ("postgresql://", "postgres://")  # MARGINALIA_DATABASE_URL selects PostgreSQL
DEFAULT_CHAT_MODEL = "gemini-2.5-flash"  # the Gemini answerer's model when none is set
DEFAULT_MAX_UPLOAD_MB = 50
RETRIEVAL_MODES = ("hybrid", "dense", "lexical")
ON_DUPLICATE_CHOICES = ("refuse", "replace")  # what a near-duplicate upload does
# every retrieval default, written once: RetrievalConfig's fields below
DEFAULT_RETRIEVAL_MODE = "hybrid"
DEFAULT_TOP_K = 6  # passages a question gets
DEFAULT_CHUNK_TARGET = 1400  # characters per passage (chosen on SciFact, benchmarks/README.md)
DEFAULT_CHUNK_OVERLAP = 200
NO_RERANKER = "none"

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


def _flag(raw: str) -> bool:
    """An on/off setting: 1/0, true/false, yes/no, on/off (any case)."""
    value = str(raw).strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError(raw)


@dataclass(frozen=True)
class RetrievalConfig:
    """How passages are retrieved: one frozen value that Chat, the Inspector, the metrics and
    the lab's saved configurations share, nested in ``Settings`` the way paper-qa nests its
    setting groups. ``None`` where a default depends on something else (the threshold on the
    embedder, the fusion weight on ``retrieval.lexical.ALPHA``)."""

    mode: str = DEFAULT_RETRIEVAL_MODE  # hybrid | dense | lexical
    threshold: float | None = None  # cosine floor; None: the embedder's own default
    top_k: int = DEFAULT_TOP_K
    alpha: float | None = None  # hybrid: base weight of the cosine (1 - alpha: BM25)
    chunk_target: int = DEFAULT_CHUNK_TARGET
    chunk_overlap: int = DEFAULT_CHUNK_OVERLAP
    reranker: str = NO_RERANKER  # a name in retrieval.rerank's registry

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))

    @classmethod
    def field_name(cls, name: str) -> str | None:
        """The field ``name`` stands for (also the older ``retrieval_mode`` / ``fusion_alpha``
        that saved library settings may hold), or None."""
        name = RETRIEVAL_ALIASES.get(name, name)
        return name if name in cls.names() else None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RetrievalConfig:
        """From a saved dict: unknown keys and ``None`` values are left out (defaults)."""
        return cls().with_overrides(**d)

    def with_overrides(self, **changes: Any) -> RetrievalConfig:
        """A copy with the non-None ``changes`` (by field name or older alias); other keys are
        ignored."""
        known = {}
        for key, value in changes.items():
            name = self.field_name(key)
            if name is not None and value is not None:
                known[name] = value
        return replace(self, **known)


# older names of RetrievalConfig fields, as the flat Settings and saved library settings had them
RETRIEVAL_ALIASES = {"retrieval_mode": "mode", "fusion_alpha": "alpha"}

# env var -> (field, converter); "retrieval.x" is a field of Settings.retrieval
_ENV: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "MARGINALIA_DB": ("db_path", str),
    "MARGINALIA_DATABASE_URL": ("database_url", str),
    "GEMINI_API_KEY": ("gemini_api_key", str),
    "GOOGLE_API_KEY": ("gemini_api_key", str),
    "GOOGLE_GEMINI_BASE_URL": ("gemini_base_url", str),
    "MARGINALIA_GEMINI_BASE_URL": ("gemini_base_url", str),
    "MARGINALIA_EMBEDDER": ("embedder", str),
    "MARGINALIA_ANSWERER": ("answerer", str),
    "MARGINALIA_CHAT_MODEL": ("chat_model", str),
    "MARGINALIA_RETRIEVAL": ("retrieval.mode", str),
    "MARGINALIA_TOP_K": ("retrieval.top_k", int),
    "MARGINALIA_THRESHOLD": ("retrieval.threshold", float),
    "MARGINALIA_FUSION_ALPHA": ("retrieval.alpha", float),
    "MARGINALIA_CHUNK_TARGET": ("retrieval.chunk_target", int),
    "MARGINALIA_CHUNK_OVERLAP": ("retrieval.chunk_overlap", int),
    "MARGINALIA_RERANKER": ("retrieval.reranker", str),
    "MARGINALIA_MAX_UPLOAD_MB": ("max_upload_mb", float),
    "MARGINALIA_GEMINI_TIMEOUT": ("gemini_timeout_s", float),
    "MARGINALIA_GEMINI_CONCURRENCY": ("gemini_concurrency", int),
    # OpenAI-compatible servers (Ollama, llama.cpp, vLLM, LM Studio, api.openai.com)
    "OPENAI_API_BASE": ("openai_base_url", str),  # older name; OPENAI_BASE_URL wins
    "OPENAI_BASE_URL": ("openai_base_url", str),
    "OPENAI_API_KEY": ("openai_api_key", str),
    "MARGINALIA_EMBED_MODEL": ("embed_model", str),
    "MARGINALIA_OPENAI_TIMEOUT": ("openai_timeout_s", float),
    "MARGINALIA_OPENAI_CONCURRENCY": ("openai_concurrency", int),
    "MARGINALIA_LOCAL_SERVERS": ("local_servers", str),
    "MARGINALIA_OCR": ("ocr", _flag),
    "MARGINALIA_EMBED_BATCH": ("embed_batch", int),
    "MARGINALIA_ON_DUPLICATE": ("on_duplicate", str),
    "MARGINALIA_EMBED_WHILE_READING": ("embed_while_reading", lambda v: v.strip().lower()
                                       not in ("0", "false", "no", "off")),
}


@dataclass(frozen=True)
class Settings:
    db_path: str = DEFAULT_DB
    # postgresql://... selects the PostgreSQL store; may hold a password, so never in repr
    database_url: str | None = field(default=None, repr=False)
    gemini_api_key: str | None = field(default=None, repr=False)
    gemini_base_url: str | None = None
    embedder: str | None = None  # None: "gemini" when keyed, else "local"
    answerer: str | None = None  # None: "gemini" when keyed, else "extractive"
    chat_model: str | None = None  # None: the answerer's own default (Gemini: 2.5 Flash)
    retrieval: RetrievalConfig = field(default_factory=RetrievalConfig)
    max_upload_mb: float = DEFAULT_MAX_UPLOAD_MB
    gemini_timeout_s: float = 30.0
    gemini_concurrency: int = 4
    openai_base_url: str | None = None  # e.g. http://localhost:11434/v1 (Ollama)
    openai_api_key: str | None = field(default=None, repr=False)  # optional for local servers
    embed_model: str | None = None  # the openai embedder's model (MARGINALIA_EMBED_MODEL)
    openai_timeout_s: float = 60.0  # per request / between streamed chunks
    openai_concurrency: int = 2  # embedding batches in flight; local servers queue beyond this
    # more addresses the sidebar probes for a local model server (comma-separated), besides
    # the usual ports (providers.local_servers.CANDIDATE_PORTS) and OPENAI_BASE_URL
    local_servers: str | None = None
    ocr: bool = True  # read PDF pages without a text layer by OCR (when the engine is installed)
    # texts per embedding call; None: the embedder's own tuned size. Also the boundary at which
    # an ingestion job reports progress and notices a cancel.
    embed_batch: int | None = None
    # embed settled passages of a PDF while its later pages are still read (overlap)
    embed_while_reading: bool = True
    # a file whose text matches a document already indexed (store.fingerprint): "refuse" it,
    # naming that document, or "replace" that document with it
    on_duplicate: str = "refuse"

    @property
    def keyed(self) -> bool:
        return bool(self.gemini_api_key)

    @property
    def embedder_name(self) -> str:
        return self.embedder or ("gemini" if self.keyed else "local")

    @property
    def answerer_name(self) -> str:
        return self.answerer or ("gemini" if self.keyed else "extractive")

    @property
    def max_upload_bytes(self) -> int:
        return int(self.max_upload_mb * 1024 * 1024)

    def with_overrides(self, **changes: Any) -> Settings:
        """A copy with the non-None ``changes``; a ``RetrievalConfig`` field name (``top_k``,
        ``mode``, ...) changes ``retrieval``."""
        nested = {k: v for k, v in changes.items() if RetrievalConfig.field_name(k)}
        own = {k: v for k, v in changes.items() if k not in nested and v is not None}
        if nested:
            own["retrieval"] = own.get("retrieval", self.retrieval).with_overrides(**nested)
        return replace(self, **own)

    def ensure_db_dir(self) -> Path:
        path = Path(self.db_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        return path


def mask_url(url: str) -> str:
    """``url`` with any password replaced by ``***``: what logs, errors and the UI may show."""
    return re.sub(r"(://[^:/@\s]*:)[^@/\s]*@", r"\1***@", url or "")


def load_settings(
    env: Mapping[str, str] | None = None, secrets: Mapping[str, Any] | None = None
) -> Settings:
    """Build settings from ``env`` (default ``os.environ``) and an optional secrets mapping.

    Environment wins over secrets so a one-off ``GEMINI_API_KEY=… streamlit run`` behaves as expected.
    """
    env = os.environ if env is None else env
    values: dict[str, Any] = {}
    retrieval: dict[str, Any] = {}
    for source in (secrets or {}, env):
        for key, (name, conv) in _ENV.items():
            raw = source.get(key) if hasattr(source, "get") else None
            if raw is None or raw == "":
                continue
            try:
                value = conv(raw)
            except (TypeError, ValueError) as exc:
                raise ValueError(f"Setting {key} has an invalid value") from exc
            if name.startswith("retrieval."):
                retrieval[name.removeprefix("retrieval.")] = value
            else:
                values[name] = value
    settings = Settings(**values, retrieval=RetrievalConfig(**retrieval))
    if settings.database_url and not settings.database_url.startswith(POSTGRES_SCHEMES):
        raise ValueError("MARGINALIA_DATABASE_URL must start with postgresql://")
    if settings.on_duplicate not in ON_DUPLICATE_CHOICES:
        raise ValueError(
            f"MARGINALIA_ON_DUPLICATE must be one of {', '.join(ON_DUPLICATE_CHOICES)}"
        )
    if settings.retrieval.mode not in RETRIEVAL_MODES:
        raise ValueError(
            f"MARGINALIA_RETRIEVAL must be one of {', '.join(RETRIEVAL_MODES)}"
        )
    return settings
