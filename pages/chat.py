"""Chat: ask a question, read the streamed answer, open its sources in the margin.

An answer's inline marks are in-page links to its cards in the margin on the right (one
sanitised ``st.html`` block, see marginalia_app/passages.py): clicking [2] opens card 2 with
the cited sentence highlighted, scrolled into view, without a rerun. After each answer its
first cited card is open. The pills under an answer ("[1] report.pdf · p. 3") bring that
answer's sources, with their PDF page views, into the margin.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from marginalia_app import passages as margin
from marginalia_app import presentation as fmt
from marginalia_app.ingest_view import index_samples
from marginalia_app.samples import SAMPLE_QUESTIONS, samples_in_library
from marginalia_app.shell import DOCUMENTS_PAGE, INSPECTOR_PAGE, page
from marginalia_core.citations import cited
from marginalia_core.errors import MarginaliaError
from marginalia_core.providers.answerers.prompting import NO_SOURCES_ANSWER

ws = page()
state = st.session_state
state.setdefault("cid", None)


# --------------------------------------------------------------------------- state helpers

def _pick_key(mid: str) -> str:
    return f"cite-{mid}"


def _scope() -> str:
    """Part of every card id; bumped when the margin's default card changes (new answer, a
    pill), so a fragment left in the URL by an earlier mark click no longer overrides it."""
    return f"g{state.get('margin_gen', 0)}"


def _bump_scope() -> None:
    state["margin_gen"] = state.get("margin_gen", 0) + 1


def _on_pick(mid: str) -> None:
    """A citation pill was clicked: show that answer's sources and open the chosen one."""
    state["focus"] = mid
    state["open_n"] = state.get(_pick_key(mid))
    _bump_scope()
    for key in list(state.keys()):
        if isinstance(key, str) and key.startswith("cite-") and key != _pick_key(mid):
            state[key] = None


def _scope_key(cid: str | None) -> str:
    return f"scope-{cid or 'new'}"


def _on_scope(cid: str | None) -> None:
    """The document choice changed: a stored conversation keeps it for its next questions."""
    if cid:
        ws.set_conversation_documents(cid, state.get(_scope_key(cid)) or None)


def _queue(question: str) -> None:
    state["queued_question"] = question


def _run_samples() -> None:
    state["index_samples"] = True


# --------------------------------------------------------------------------- rendering

def _mimes() -> dict[str, str]:
    return {d["id"]: d["mime"] for d in ws.documents()}


def _page_view(source: dict[str, Any], sentences: list[str]) -> margin.PageView | None:
    return margin.page_view(ws, source, sentences)


def render_scope(cid: str | None, documents: list[dict[str, Any]]) -> list[str] | None:
    """"Search in": the documents this conversation's questions search (all by default).
    Returns the chosen ids, or None for all."""
    if len(documents) < 2:
        return None
    key = _scope_key(cid)
    known = {d["id"] for d in documents}
    if key not in state:
        state[key] = list(ws.conversation_documents(cid) or []) if cid else []
    state[key] = [i for i in state[key] if i in known]  # a deleted document drops out
    names = {d["id"]: d["name"] for d in documents}
    st.multiselect(
        "Search in",
        [d["id"] for d in documents],
        format_func=lambda i: fmt.escape_inline(names.get(i, i), 50),
        key=key,
        on_change=_on_scope,
        args=(cid,),
        placeholder="All documents",
        help="Limit this conversation's questions to some documents; empty: all of them.",
    )
    return list(state[key]) or None


def scope_caption(chosen: list[str] | None) -> str:
    if not chosen:
        return "Searching all documents."
    names = {d["id"]: d["name"] for d in ws.documents()}
    listed = ", ".join(fmt.escape_inline(names.get(i, i), 40) for i in chosen)
    return f"Searching only {listed}."


def render_margin(messages: list[dict[str, Any]], focus_id: str | None,
                  scope: list[str] | None = None) -> None:
    """Every answer's cards (so a mark in any answer can open its card); the focused answer's
    group shows by default, with its PDF page views."""
    mimes = _mimes()
    groups = []
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        asked = messages[i - 1]["content"] if i and messages[i - 1]["role"] == "user" else ""
        focused = message["id"] == focus_id
        groups.append(margin.answer_group(
            message,
            question=asked,
            scope=_scope(),
            mimes=mimes,
            default=focused,
            open_n=state.get("open_n") if focused else None,
            page_view=_page_view if focused else None,
        ))
    with st.container(key="margin"):
        st.markdown("##### In the margin", anchors=False)
        st.caption(scope_caption(scope))
        st.html(margin.margin_html(groups))


def render_live_margin(
    sources: list[dict[str, Any]], question: str, scope: list[str] | None = None
) -> None:
    with st.container(key="margin"):
        st.markdown("##### In the margin", anchors=False)
        st.caption(scope_caption(scope))
        if not sources:
            st.caption("No passage matched.")
            return
        st.html(margin.margin_html([margin.live_group(sources, question, _mimes())]))


def render_answer_block(message: dict[str, Any]) -> None:
    sources = message.get("sources") or []
    numbers = [s["n"] for s in sources]
    scope = _scope()
    st.markdown(fmt.render_answer(
        message["content"], set(numbers),
        link=lambda n: margin.anchor_id(scope, message["id"], n),
        support=message.get("support"),
    ))
    _, invalid = cited(message["content"], numbers)
    if invalid:
        listed = ", ".join(f"\\[{n}\\]" for n in invalid)
        st.caption(
            f":red[:material/warning:] {listed} in this answer "
            f"{'does' if len(invalid) == 1 else 'do'} not match any retrieved passage."
        )
    if not sources and message["content"] == NO_SOURCES_ANSWER:
        st.page_link(INSPECTOR_PAGE, label="Open the retrieval settings Chat uses",
                     icon=":material/tune:")
    if sources:
        by_n = {s["n"]: s for s in sources}
        mimes = _mimes()
        st.pills(
            "Cited passages",
            numbers,
            format_func=lambda n: fmt.escape_inline(
                margin.card_label({**by_n[n], "score": None}, margin.source_mime(by_n[n], mimes)),
                56,
            ),
            key=_pick_key(message["id"]),
            on_change=_on_pick,
            args=(message["id"],),
            label_visibility="collapsed",
        )


def _rename(cid: str) -> None:
    try:
        ws.rename_conversation(cid, state.get(f"rename-{cid}", ""))
    except MarginaliaError as exc:
        state["rename_error"] = exc.message
    else:
        state.pop("rename_error", None)
        st.toast("Conversation renamed.", icon=":material/edit:")


def render_conversation_header(conversation: dict[str, Any], count: int) -> None:
    """The open conversation's title and dates, with rename and export."""
    cid = conversation["id"]
    with st.container(key="conversation_header", horizontal=True, vertical_alignment="center"):
        with st.container():
            st.markdown(f"**{fmt.escape_inline(conversation['title'] or 'Untitled', 90)}**")
            st.caption(
                f"Started {fmt.escape_inline(fmt.format_created(conversation['created']))} · "
                f"last message {fmt.escape_inline(fmt.format_created(conversation['updated']))}"
                f" · {count} message{'s' * (count != 1)}"
            )
        with (
            st.popover("Rename", icon=":material/edit:", key=f"rename-pop-{cid}"),
            st.form(key=f"rename-form-{cid}", border=False),
        ):
            st.text_input("Title", value=conversation["title"], key=f"rename-{cid}",
                          max_chars=120)
            st.form_submit_button("Save", type="primary", on_click=_rename, args=(cid,))
        filename, markdown = ws.export_conversation(cid)
        st.download_button(
            "Export",
            data=markdown.encode("utf-8"),
            file_name=filename,
            mime="text/markdown",
            icon=":material/download:",
            key=f"export-{cid}",
            help="Download this conversation as Markdown, with the passages it cited",
            on_click="ignore",
        )
    problem = state.pop("rename_error", None)
    if problem:
        st.error(fmt.escape_inline(problem), icon=":material/error:")


def render_empty_state(documents: list[dict[str, Any]]) -> None:
    with st.container(key="hero"):
        st.title("Marginalia", anchor=False)
        st.markdown(
            "Ask questions of your own documents. Every answer cites the passages it came "
            "from: click a citation to read it in the margin."
        )
    if not documents:
        with st.container(border=True):
            st.markdown("**Your library is empty.**")
            st.markdown(
                "Add PDF, text or Markdown files on the Documents page, or try Marginalia "
                "right away with three short sample documents: a guide to this app, a short "
                "history of notes in book margins, and a practical guide to caring for old "
                "books. It takes a few seconds and works offline."
            )
            row = st.container(horizontal=True, gap="small")
            row.button(
                "Try it with sample documents",
                type="primary",
                icon=":material/auto_stories:",
                on_click=_run_samples,
                key="try_samples",
            )
            row.page_link(DOCUMENTS_PAGE, label="Add your own documents", icon=":material/upload:")
        return
    count = len(documents)
    if not samples_in_library(documents):
        st.caption(
            f"{count} document{'s' * (count != 1)} in your library. Type a question below."
        )
        return
    st.caption("Try one of these, or type your own question below.")
    row = st.container(horizontal=True, gap="small")
    for i, q in enumerate(SAMPLE_QUESTIONS):
        row.button(q, key=f"suggest-{i}", on_click=_queue, args=(q,), icon=":material/help:")


# --------------------------------------------------------------------------- page

question = st.chat_input("Ask a question about your documents", key="question")
question = (question or state.pop("queued_question", None) or "").strip() or None

if state.pop("index_samples", False):
    with st.container(border=True):
        heading = st.empty()
        heading.markdown("**Adding the sample documents…**")
        results = index_samples(ws)
        added = sum(r.state == "indexed" for r in results)
        heading.markdown(
            f"**Added {added} sample document{'s' * (added != 1)}.** Ask one of the questions "
            "below, or your own."
        )
    state["upload_results"] = results

cid = state.get("cid")
if cid and not ws.has_conversation(cid):
    cid = state["cid"] = None
messages = ws.messages(cid) if cid else []
answers = [m for m in messages if m["role"] == "assistant"]
error = state.get("last_error")
if error and error.get("cid") != cid:
    error = None

if not messages and not question and not error:
    render_empty_state(ws.documents())
elif cid and messages:
    render_conversation_header(ws.conversation(cid), len(messages))

library = ws.documents()
scope = render_scope(cid, library) if library else None

left, right = st.columns([3, 2], gap="large")

with left:
    for message in messages:
        with st.chat_message(message["role"]):
            if message["role"] == "user":
                st.markdown(fmt.escape_multiline(message["content"]))
            else:
                render_answer_block(message)
    if error and not question:
        with st.chat_message("user"):
            st.markdown(fmt.escape_multiline(error["question"]))
        with st.chat_message("assistant"):
            st.error(fmt.escape_inline(error["message"]), icon=":material/error:")

if not question:
    focus_id = state.get("focus")
    focused = next((m for m in answers if m["id"] == focus_id), answers[-1] if answers else None)
    if focused is not None:
        with right:
            render_margin(messages, focused["id"], scope)
    st.stop()

# ---- a new question: stream the answer, then show the saved exchange
state.pop("last_error", None)
with left:
    with st.chat_message("user"):
        st.markdown(fmt.escape_multiline(question))
    with st.chat_message("assistant"):
        # a stored conversation searches its own documents; a new one those chosen above
        events = ws.ask(question, cid, documents=None if cid else (scope or []))
        with st.spinner("Searching your documents…"):
            first = next(events, None)
        if first is None or first["type"] == "error":
            message = (first or {}).get("message") or "Something went wrong."
            st.error(fmt.escape_inline(message), icon=":material/error:")
            state["last_error"] = {"cid": cid, "question": question, "message": message}
            st.stop()
        sources = first.get("sources") or []
        with right:
            render_live_margin(sources, question, first.get("documents") or scope)
        renderer = fmt.AnswerStream(len(sources))
        outcome: dict[str, Any] = {}

        def answer_text():
            """Only text reaches st.write_stream: safe markdown increments of the answer."""
            for event in events:
                if event["type"] == "token":
                    piece = renderer.feed(event["text"])
                    if piece:
                        yield piece
                else:
                    outcome["end"] = event
            tail = renderer.finish()
            if tail:
                yield tail

        st.write_stream(answer_text)
        end = outcome.get("end") or {"type": "error", "message": "The answer stopped early."}
        if end["type"] == "done":
            state["cid"] = end.get("conversation_id") or first["conversation_id"]
            state["focus"] = end["message_id"]
            state.pop("open_n", None)
            state.pop(_scope_key(None), None)  # the next new conversation starts with all
            _bump_scope()
            st.rerun()
        new_cid = first.get("conversation_id")
        kept = new_cid if ws.has_conversation(new_cid) else cid
        state["cid"] = kept
        st.error(fmt.escape_inline(end.get("message", "")), icon=":material/error:")
        state["last_error"] = {"cid": kept, "question": question, "message": end.get("message", "")}
