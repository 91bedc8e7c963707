"""Chat: ask a question, read the streamed answer, open its sources in the margin.

Citation marks in an answer are badges; under each answer a row of pills ("[1] report.pdf ·
p. 3") opens that passage in the margin on the right, with the sentence the answer cited
highlighted. Streamlit markdown cannot run Python when a link is clicked, so the pills are the
click target; the margin cards are keyed expanders that a pill opens through session state.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from marginalia_app import presentation as fmt
from marginalia_app.ingest_view import index_samples
from marginalia_app.samples import SAMPLE_QUESTIONS, samples_in_library
from marginalia_app.shell import DOCUMENTS_PAGE, INSPECTOR_PAGE, page
from marginalia_core.citations import cited
from marginalia_core.providers.answerers.prompting import NO_SOURCES_ANSWER

ws = page()
state = st.session_state
state.setdefault("cid", None)


# --------------------------------------------------------------------------- state helpers

def _card_key(mid: str, n: int) -> str:
    return f"card-{mid}-{n}"


def _pick_key(mid: str) -> str:
    return f"cite-{mid}"


def _on_pick(mid: str, numbers: list[int]) -> None:
    """A citation pill was clicked: show that answer's sources and open the chosen one."""
    chosen = state.get(_pick_key(mid))
    state["focus"] = mid
    for n in numbers:
        state[_card_key(mid, n)] = n == chosen
    for key in list(state.keys()):
        if isinstance(key, str) and key.startswith("cite-") and key != _pick_key(mid):
            state[key] = None


def _queue(question: str) -> None:
    state["queued_question"] = question


def _run_samples() -> None:
    state["index_samples"] = True


# --------------------------------------------------------------------------- rendering

def render_margin(
    sources: list[dict[str, Any]],
    answer: str,
    mid: str | None,
    *,
    question: str = "",
    live: bool = False,
) -> None:
    """The margin: one card per source, ``[n] document · page · 82 %``, the cited part
    highlighted. Cards of a saved answer are keyed so a citation pill can open them."""
    with st.container(key="margin"):
        st.markdown("##### In the margin", anchors=False)
        if question:
            st.caption(f"Sources for “{fmt.escape_inline(question, 70)}”")
        if not sources:
            st.caption(
                "No passage was cited for this answer." if not live else "No passage matched."
            )
            return
        if live:
            st.caption("Retrieved passages. The answer is being written…")
        cited = fmt.cited_sentences(answer, None) if answer else {}
        for source in sources:
            n = source["n"]
            label = (
                f"**\\[{n}\\]** {fmt.escape_inline(source.get('document_name', ''), 30)}"
                f" · {fmt.page_label(source.get('page'), source.get('page_end'))}"
                f" · {fmt.percent(source.get('score'))}"
            )
            options: dict[str, Any] = {"icon": ":material/format_quote:"}
            if mid is not None:
                key = _card_key(mid, n)
                options.update(key=key, on_change="rerun")
                if key not in state:
                    options["expanded"] = False
            with st.expander(label, **options):
                render_passage(source, cited.get(n, []), mid)


def render_passage(source: dict[str, Any], sentences: list[str], mid: str | None) -> None:
    """A source's passage, escaped, the cited sentences highlighted; a long passage opens on
    the cited part, with a toggle for the whole of it."""
    content = source.get("content") or source.get("excerpt") or ""
    spans = fmt.highlight_spans(fmt.display_text(content), sentences)
    window = fmt.cited_window(content, spans)
    whole_key = f"whole-{mid}-{source['n']}"
    whole = window is None or mid is None or bool(state.get(whole_key))
    st.markdown(fmt.passage_markdown(content, spans, window=None if whole else window))
    where = f"Passage {int(source['idx']) + 1}" if source.get("idx") is not None else "Passage"
    note = " · the cited part is highlighted" if spans else ""
    st.caption(f"{where} of {fmt.escape_inline(source.get('document_name', ''), 60)}{note}")
    if window is not None and mid is not None:
        st.toggle("Show the whole passage", key=whole_key)


def render_answer_block(message: dict[str, Any]) -> None:
    sources = message.get("sources") or []
    numbers = [s["n"] for s in sources]
    st.markdown(fmt.render_answer(message["content"], set(numbers)))
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
        st.pills(
            "Cited passages",
            numbers,
            format_func=lambda n: fmt.escape_inline(
                fmt.source_label(by_n[n], with_score=False), 56
            ),
            key=_pick_key(message["id"]),
            on_change=_on_pick,
            args=(message["id"], numbers),
            label_visibility="collapsed",
        )


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
        index = messages.index(focused)
        asked = messages[index - 1]["content"] if index and messages[index - 1]["role"] == "user" else ""
        with right:
            render_margin(focused.get("sources") or [], focused["content"], focused["id"],
                          question=asked)
    st.stop()

# ---- a new question: stream the answer, then show the saved exchange
state.pop("last_error", None)
with left:
    with st.chat_message("user"):
        st.markdown(fmt.escape_multiline(question))
    with st.chat_message("assistant"):
        events = ws.ask(question, cid)
        with st.spinner("Searching your documents…"):
            first = next(events, None)
        if first is None or first["type"] == "error":
            message = (first or {}).get("message") or "Something went wrong."
            st.error(fmt.escape_inline(message), icon=":material/error:")
            state["last_error"] = {"cid": cid, "question": question, "message": message}
            st.stop()
        sources = first.get("sources") or []
        with right:
            render_margin(sources, "", None, question=question, live=True)
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
            st.rerun()
        new_cid = first.get("conversation_id")
        kept = new_cid if ws.has_conversation(new_cid) else cid
        state["cid"] = kept
        st.error(fmt.escape_inline(end.get("message", "")), icon=":material/error:")
        state["last_error"] = {"cid": kept, "question": question, "message": end.get("message", "")}
