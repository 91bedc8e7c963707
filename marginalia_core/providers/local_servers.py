"""Finding an OpenAI-compatible model server already running on this machine (issue 22, item 5):
Ollama, llama.cpp's ``llama-server``, LM Studio and vLLM on their usual ports, the configured
``OPENAI_BASE_URL``, and any address listed in ``MARGINALIA_LOCAL_SERVERS``.

Each candidate is asked ``GET <base>/models`` with a short timeout, all at once (a port where
nothing listens is refused at once; one that hangs costs ``PROBE_TIMEOUT_S``). Only the app's
sidebar probes, and only while it is shown; nothing here runs at start-up or in the CLI. A key
is sent only to the address it was configured for (``OPENAI_BASE_URL``), never to a port that
merely answered.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from urllib.parse import urlsplit

LOCAL_HOST = "127.0.0.1"
CANDIDATE_PORTS = (  # (what usually listens there, port)
    ("Ollama", 11434),
    ("llama.cpp", 8080),
    ("LM Studio", 1234),
    ("vLLM", 8000),
)
PROBE_TIMEOUT_S = 0.5
MAX_MODELS = 50  # listed per server
MAX_BODY_BYTES = 1_000_000


@dataclass(frozen=True)
class Candidate:
    label: str  # "Ollama", "OPENAI_BASE_URL", or the address itself
    base_url: str  # the API root, ending in /v1 (or the configured path)
    api_key: str | None = None  # sent only to the address it was configured for


@dataclass(frozen=True)
class LocalServer:
    """A server that answered with its model list."""

    label: str
    base_url: str
    models: tuple[str, ...]


def normalize(url: str) -> str:
    """``host:port`` or ``http://host:port`` -> ``http://host:port/v1``; a given path is kept."""
    raw = url.strip()
    if "://" not in raw:
        raw = "http://" + raw
    parts = urlsplit(raw)
    path = parts.path.rstrip("/") or "/v1"
    return f"{parts.scheme}://{parts.netloc}{path}"


def candidates(
    configured: str | None = None,
    configured_key: str | None = None,
    extra: Sequence[str] = (),
    ports: Sequence[tuple[str, int]] | None = None,
) -> list[Candidate]:
    """The addresses to probe, without duplicates: ``extra`` first (as given), then the
    configured ``OPENAI_BASE_URL`` (with its key), then the usual ports on this machine."""
    out: dict[str, Candidate] = {}
    for url in extra:
        base = normalize(url) if url.strip() else ""
        if base.startswith(("http://", "https://")):
            out.setdefault(base, Candidate(urlsplit(base).netloc, base))
    base = normalize(configured) if configured and configured.strip() else ""
    if base.startswith(("http://", "https://")):
        out.setdefault(base, Candidate("OPENAI_BASE_URL", base, configured_key))
    for label, port in CANDIDATE_PORTS if ports is None else ports:
        base = f"http://{LOCAL_HOST}:{port}/v1"
        out.setdefault(base, Candidate(label, base))
    return list(out.values())


def probe(candidate: Candidate, timeout: float = PROBE_TIMEOUT_S) -> LocalServer | None:
    """The server at ``candidate`` with its models, or None when nothing usable answered."""
    request = urllib.request.Request(f"{candidate.base_url}/models",
                                     headers={"Accept": "application/json"})
    if candidate.api_key:
        request.add_header("Authorization", f"Bearer {candidate.api_key}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 - http(s) only
            if response.status != 200:
                return None
            body = json.loads(response.read(MAX_BODY_BYTES))
    except (OSError, ValueError, urllib.error.URLError):
        return None
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list):
        return None
    models = [str(m["id"]) for m in data if isinstance(m, dict) and m.get("id")]
    if not models:
        return None
    return LocalServer(candidate.label, candidate.base_url, tuple(models[:MAX_MODELS]))


def discover(found_in: Sequence[Candidate], timeout: float = PROBE_TIMEOUT_S) -> list[LocalServer]:
    """Every candidate that answers, probed in parallel, in the candidates' order."""
    if not found_in:
        return []
    with ThreadPoolExecutor(max_workers=len(found_in)) as pool:
        results = list(pool.map(lambda c: probe(c, timeout), found_in))
    return [r for r in results if r is not None]
