"""A conversation as a Markdown file a person can keep: every question, its answer with the
``[n]`` marks as they were, and under each answer the passages it cited, quoted whole, with
where they came from. Readable as plain text and as rendered Markdown.

Document text is quoted, not interpreted: each passage line goes into a blockquote with
markdown punctuation escaped, so a passage's own ``#`` or ``<script>`` stays text in any viewer.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from marginalia_core.citations import find_marks
from marginalia_core.ingest import formats
from marginalia_core.store.records import ANSWER_STOPPED, Conversation, Message

FILENAME_CHARS = 60
_MD_SPECIAL_RE = re.compile(r"([\\`*_{}\[\]<>()#+\-.!|~])")


def _when(stamp: str | None) -> str:
    if not stamp:
        return ""
    try:
        return datetime.fromisoformat(stamp).astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
    except ValueError:
        return stamp


def _literal(text: str) -> str:
    """``text`` as Markdown that shows exactly those characters."""
    return _MD_SPECIAL_RE.sub(r"\\\1", text)


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _pages(source: dict[str, Any]) -> str:
    if source.get("location") is not None:  # saved since issue 26: its own label
        return str(source["location"])
    page, end = source.get("page"), source.get("page_end")
    paged = formats.by_name(str(source.get("document_name", "")))
    if not page or paged is None or paged.location != "page":  # older answers: PDFs only
        return ""
    return formats.location_label("page", (), int(page), int(end or page))


def _quote(text: str) -> str:
    paragraphs = [p for p in re.split(r"\n\s*\n", text.strip()) if p.strip()]
    return "\n>\n".join("> " + _literal(_one_line(p)) for p in paragraphs)


def _cited_in_order(answer: str, numbers: Sequence[int]) -> list[int]:
    valid, seen = set(numbers), []
    for mark in find_marks(answer):
        for n in mark.numbers:
            if n in valid and n not in seen:
                seen.append(n)
    return seen + [n for n in numbers if n not in seen]


def conversation_markdown(
    conversation: Conversation, messages: Sequence[Message], *, now: str | None = None
) -> str:
    """The whole conversation as Markdown, oldest message first."""
    title = _one_line(conversation.title or "Untitled conversation")
    exported = _when(now or datetime.now(UTC).isoformat())
    lines = [
        f"# {_literal(title)}",
        "",
        f"Started {_when(conversation.created)} · last message "
        f"{_when(conversation.updated)} · exported from Marginalia {exported}",
    ]
    turn = 0
    for message in messages:
        if message.role == "user":
            turn += 1
            lines += ["", f"## {turn}. {_literal(_one_line(message.content))}", ""]
            continue
        # the answer keeps its own formatting, but never becomes HTML in a viewer
        lines += ["", message.content.strip().replace("<", "\\<"), ""]
        if message.status == ANSWER_STOPPED:
            lines += ["_Stopped by the reader: the answer ends here._", ""]
        sources = message.sources
        if not sources:
            lines += ["_No passage was cited for this answer._"]
            continue
        by_n = {int(s["n"]): s for s in sources}
        lines += ["**Cited passages**", ""]
        for n in _cited_in_order(message.content, list(by_n)):
            source = by_n[n]
            where = " · ".join(
                p for p in (_literal(_one_line(source.get("document_name", ""))), _pages(source))
                if p
            )
            lines += [f"\\[{n}\\] {where}", ""]
            lines += [_quote(source.get("content") or source.get("excerpt") or ""), ""]
    return "\n".join(lines).rstrip() + "\n"


def export_filename(conversation: Conversation) -> str:
    """A safe file name from the title: "what-did-fermat-write.md"."""
    slug = re.sub(r"[^a-z0-9]+", "-", _one_line(conversation.title).lower()).strip("-")
    return f"{(slug[:FILENAME_CHARS].rstrip('-') or 'conversation')}.md"
