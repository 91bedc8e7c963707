"""Builders for the wire contract (SPEC.md "Event stream"): plain dicts, one JSON object per line
on the CLI. The chat page, the CLI and the tests all consume these same dicts."""

from __future__ import annotations

import json
from typing import Any

Event = dict[str, Any]


def meta(conversation_id: str, title: str, sources: list[dict[str, Any]]) -> Event:
    return {"type": "meta", "conversationId": conversation_id, "title": title, "sources": sources}


def token(text: str) -> Event:
    return {"type": "token", "text": text}


def done(**fields: Any) -> Event:
    return {"type": "done", **fields}


def error(message: str, reason: str = "error", **fields: Any) -> Event:
    return {"type": "error", "message": message, "reason": reason, **fields}


def stage(name: str, file: str, **fields: Any) -> Event:
    """Ingestion progress: extracting, chunking, embedding (done/total), storing."""
    return {"type": "stage", "stage": name, "file": file, **fields}


def to_json(event: Event) -> str:
    return json.dumps(event, ensure_ascii=False, separators=(",", ":"))
