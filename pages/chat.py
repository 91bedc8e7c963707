"""Chat: ask a question, read the streamed answer, open its sources in the margin.

An answer's inline marks are in-page links to its cards in the margin on the right (one
sanitised ``st.html`` block, see marginalia_app/passages.py): clicking [2] opens card 2 and
scrolls its cited sentence into view, without a rerun. After each answer its first cited card
is open. The pills under an answer ("[1] report.pdf · p. 3") bring that answer's sources into
the margin; a PDF source's page opens in a dialog.

Questions are answered by the process's AnswerDesk (marginalia_core/chat/desk.py), on a
thread of its own: this page only shows their progress, so a rerun (a second question typed
while the first is answered, a click, a reload) never loses a question. A question typed while
another is being answered is queued and shown as waiting; Stop ends the answer in progress,
keeping what was said, marked "stopped". The open conversation is in the address (``?c=ID``).
"""

from __future__ import annotations

import html
from typing import Any

import streamlit as st

from marginalia_app import passages as margin
from marginalia_app import presentation as fmt
from marginalia_app.ingest_view import index_samples
from marginalia_app.samples import SAMPLE_QUESTIONS, samples_in_library
from marginalia_app.shell import DOCUMENTS_PAGE, INSPECTOR_PAGE, answer_desk, page, page_script
from marginalia_core.chat.desk import FAILED, QUEUED, RUNNING, AnswerRun
from marginalia_core.chat.engine import ANSWERED, NO_SOURCES, outcome
from marginalia_core.citations import cited
from marginalia_core.errors import MarginaliaError
from marginalia_core.store.records import ANSWER_STOPPED, Conversation, Document, Message

ws = page()
desk = answer_desk()
state = st.session_state
state.setdefault("cid", None)
STREAM_TICK_S = 0.15  # how often the page redraws an answer being written
URL_KEY = "c"  # ?c=ID: the open conversation


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
    if cid and ws.has_conversation(cid):
        ws.set_conversation_documents(cid, state.get(_scope_key(cid)) or None)


def _queue(question: str) -> None:
    state["queued_question"] = question


def _search_everywhere(cid: str, question: str) -> None:
    """A scoped conversation's question its documents could not answer: ask it over all."""
    ws.set_conversation_documents(cid, None)
    state[_scope_key(cid)] = []
    _queue(question)


def _run_samples() -> None:
    state["index_samples"] = True


# --------------------------------------------------------------------------- rendering

def _mimes() -> dict[str, str]:
    return {d.id: d.mime for d in ws.documents()}


def render_scope(cid: str | None, documents: list[Document]) -> list[str] | None:
    """"Search in": the documents this conversation's questions search (all by default).
    Returns the chosen ids, or None for all."""
    if len(documents) < 2:
        return None
    key = _scope_key(cid)
    known = {d.id for d in documents}
    if key not in state:
        state[key] = (list(ws.conversation_documents(cid) or [])
                      if cid and ws.has_conversation(cid) else [])
    state[key] = [i for i in state[key] if i in known]  # a deleted document drops out
    names = {d.id: d.name for d in documents}
    st.multiselect(
        "Search in",
        [d.id for d in documents],
        format_func=lambda i: fmt.escape_inline(str(names.get(i, i)), 50),
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
    names = {d.id: d.name for d in ws.documents()}
    listed = ", ".join(fmt.escape_inline(names.get(i, i), 40) for i in chosen)
    return f"Searching only {listed}."


def render_margin(messages: list[Message], focus_id: str | None,
                  scope: list[str] | None = None) -> None:
    """Every answer's cards (so a mark in any answer can open its card); the focused answer's
    group shows by default, with its PDF page views."""
    mimes = _mimes()
    groups = []
    for i, message in enumerate(messages):
        if message.role != "assistant":
            continue
        asked = messages[i - 1].content if i and messages[i - 1].role == "user" else ""
        focused = message.id == focus_id
        groups.append(margin.answer_group(
            message,
            question=asked,
            scope=_scope(),
            mimes=mimes,
            default=focused,
            open_n=state.get("open_n") if focused else None,
            page_buttons=True,
        ))
    with st.container(key="margin"):
        st.markdown("##### In the margin", anchors=False)
        st.caption(scope_caption(scope))
        st.html(margin.margin_html(groups))
    page_view_triggers(messages, mimes)


def _open_page_view(mid: str, n: int) -> None:
    state["page_view"] = (mid, n)


def page_view_triggers(messages: list[Message], mimes: dict[str, str]) -> None:
    """A hidden button per PDF source of every answer: a card's "See on the page" presses it
    (MARK_SCROLL_JS), and the page view opens in a dialog."""
    with st.container(key="pv_triggers"):
        for message in messages:
            for source in message.sources:
                doc = str(source.get("document_id", ""))
                if doc in mimes and margin.has_pages(mimes[doc]):
                    n = int(source["n"])
                    st.button("page view", key=margin.page_view_key(message.id, n),
                              on_click=_open_page_view, args=(message.id, n))


ZOOMS = {"Fit": 100, "150 %": 150, "200 %": 200, "300 %": 300}


@st.dialog("See on the page", width="large")
def page_view_dialog(source: dict[str, Any], sentences: list[str]) -> None:
    """The cited page, large, the passage highlighted; a zoom; the original PDF opened at
    this page in a new tab, or downloaded."""
    name = str(source.get("document_name", ""))
    page = int(source.get("page") or 1)
    view = margin.page_view(ws, source, sentences)
    data = ws.original(str(source.get("document_id", "")))
    if view is None or data is None:
        st.info("No original file is kept for this document (it was indexed before page "
                "views existed): the passage in the margin is its text.",
                icon=":material/description:")
        return
    shown = view.page
    head = st.container(horizontal=True, vertical_alignment="center", gap="small")
    head.markdown(f"**{fmt.escape_inline(name, 60)}** · p. {shown}")
    zoom = head.segmented_control("Zoom", list(ZOOMS), default="Fit", key="pv_zoom",
                                  label_visibility="collapsed") or "Fit"
    if view.data_uri:
        st.html(
            f'<div class="mg-zoom"><img class="mg-z{ZOOMS[zoom]}" src="{view.data_uri}" '
            f'alt="Page {shown} of {html.escape(name, quote=True)} with the cited passage '
            'highlighted"></div>'
        )
    else:
        st.warning(fmt.escape_inline(view.note), icon=":material/broken_image:")
    row = st.container(horizontal=True, vertical_alignment="center", gap="medium")
    with row:
        if len(data) <= margin.MAX_INLINE_PDF_BYTES:
            st.html(margin.original_link(data, shown or page, "Open the PDF at this page ↗"))
        st.download_button("Download the original", data=data, file_name=name,
                           mime="application/pdf", icon=":material/download:",
                           on_click="ignore", key="pv_download")
    page_script("open_pdf", margin.OPEN_PDF_JS)


def live_margin(scope: list[str] | None) -> Any:
    """The margin's frame while an answer is written; returns the slot its cards go in."""
    with st.container(key="margin"):
        st.markdown("##### In the margin", anchors=False)
        st.caption(scope_caption(scope))
        return st.empty()


def draw_live_cards(run: AnswerRun, slot: Any) -> None:
    """The retrieved passages, numbered as the answer cites them so far (the others
    unnumbered)."""
    sources = list((run.meta or {}).get("sources") or [])
    if not sources:
        slot.caption("No passage matched.")
        return
    by_n = {int(s["n"]): s for s in sources}
    shown = [{**by_n[old], "n": new} for new, old in enumerate(run.cited, start=1)
             if old in by_n]
    shown += [{**s, "n": None} for n, s in by_n.items() if n not in run.cited]
    slot.html(margin.margin_html([margin.live_group(shown, run.question, _mimes())]))


def draw_stream(run: AnswerRun, slot: Any) -> None:
    """The answer so far, with its marks as badges (linked once it is saved)."""
    if run.meta is None:
        slot.caption(":material/search: Searching your documents…")
        return
    k = len(run.meta.get("sources") or [])
    text = fmt.AnswerStream(k).feed(run.text) if run.text else ""
    slot.markdown(text or ":gray[Writing the answer…]")


def render_failed_run(run: AnswerRun) -> None:
    """A question whose answer failed: the reason, and what to do next."""
    end = run.end or {}
    reason = end.get("reason")
    with st.chat_message("assistant"):
        if reason == "no_documents":
            st.info(fmt.escape_inline(end.get("message", "")), icon=":material/library_add:")
            st.page_link(DOCUMENTS_PAGE, label="Add documents", icon=":material/upload:")
        else:
            st.error(fmt.escape_inline(end.get("message") or "Something went wrong."),
                     icon=":material/error:")
        st.button("Dismiss", key=f"dismiss-{run.id}", type="tertiary", icon=":material/close:",
                  on_click=_dismiss, args=(run.conversation_id,))


def render_tuned_note(tuned: dict[str, Any]) -> None:
    """Chat answers with retrieval settings tuned in the Inspector: say so, with a link."""
    labels = {"retrieval_mode": "search method", "threshold": "threshold",
              "top_k": "passages returned", "fusion_alpha": "keyword weight",
              "chunk_target": "passage size", "chunk_overlap": "passage overlap"}
    changed = ", ".join(
        f"{labels.get(k, k)} {_setting_value(k, v)}" for k, (v, _) in tuned.items())
    with st.container(key="tuned_note", horizontal=True, vertical_alignment="center",
                      gap="small"):
        st.caption(f":material/tune: Tuned retrieval settings are in use: "
                   f"{fmt.escape_inline(changed, 160)}.")
        st.page_link(INSPECTOR_PAGE, label="See them", icon=":material/arrow_forward:")


def _setting_value(key: str, value: Any) -> str:
    if key == "fusion_alpha":
        return f"{1 - float(value):.2f}"  # the Inspector shows the keyword weight, 1 - alpha
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)


def render_answer_block(message: Message, asked: str | None = None) -> None:
    """A saved answer: its text with linked marks, notes, and the pills of its sources.
    ``asked``: its question, for the last answer (a scoped refusal offers all documents)."""
    sources = message.sources
    numbers = [s["n"] for s in sources]
    scope = _scope()
    st.markdown(fmt.render_answer(
        message.content, set(numbers),
        link=lambda n: margin.anchor_id(scope, message.id, n),
        support=message.support,
    ))
    if message.status == ANSWER_STOPPED:
        st.caption(":material/stop_circle: Stopped: the answer ends where you stopped it."
                   if message.content.strip() else
                   ":material/stop_circle: Stopped before any answer was written.")
    _, invalid = cited(message.content, numbers)
    if invalid:
        listed = ", ".join(f"\\[{n}\\]" for n in invalid)
        st.caption(
            f":red[:material/warning:] {listed} in this answer "
            f"{'does' if len(invalid) == 1 else 'do'} not match any retrieved passage."
        )
    scoped_cid = state.get("cid")
    said = outcome(message.content, sources)
    if asked and scoped_cid and said != ANSWERED and ws.conversation_documents(
            scoped_cid):
        st.button("Search all documents", key=f"everywhere-{message.id}",
                  icon=":material/travel_explore:", on_click=_search_everywhere,
                  args=(scoped_cid, asked),
                  help="This conversation searches only some documents: ask this again over "
                  "all of them.")
    if said == NO_SOURCES:
        st.page_link(INSPECTOR_PAGE, label="Open the retrieval settings Chat uses",
                     icon=":material/tune:")
    if sources:
        by_n = {s["n"]: s for s in sources}
        mimes = _mimes()
        first = margin.first_cited(message.content, numbers)
        if first is not None:  # on a phone the margin is below: a jump to it
            st.html(f'<a class="mg-jump" href="#" data-target='
                    f'"{margin.anchor_id(scope, message.id, first)}">Show the source ↓</a>')
        st.pills(
            "Cited passages",
            numbers,
            format_func=lambda n: fmt.escape_inline(
                margin.card_label({**by_n[n], "score": None}, margin.source_mime(by_n[n], mimes)),
                56,
            ),
            key=_pick_key(message.id),
            on_change=_on_pick,
            args=(message.id,),
            label_visibility="collapsed",
        )


def _rename(cid: str) -> None:
    try:
        ws.rename_conversation(cid, state.get(f"rename-{cid}", ""))
    except MarginaliaError as exc:
        state["rename_error"] = exc.message
    else:
        state.pop("rename_error", None)
        state[f"rename-pop-{cid}"] = False  # saved: the popover closes
        st.toast("Conversation renamed.", icon=":material/edit:")


def render_conversation_header(conversation: Conversation, count: int) -> None:
    """The open conversation's title and dates, with rename and export."""
    cid = conversation.id
    with st.container(key="conversation_header", horizontal=True, vertical_alignment="center"):
        with st.container():
            st.markdown(f"**{fmt.escape_inline(conversation.title or 'Untitled', 90)}**")
            st.caption(
                f"Started {fmt.escape_inline(fmt.format_created(conversation.created))} · "
                f"last message {fmt.escape_inline(fmt.format_created(conversation.updated))}"
                f" · {fmt.plural(count, 'message')}"
            )
        with (
            st.popover("Rename", icon=":material/edit:", key=f"rename-pop-{cid}",
                       on_change="rerun"),
            st.form(key=f"rename-form-{cid}", border=False),
        ):
            st.text_input("Title", value=conversation.title, key=f"rename-{cid}",
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


def render_empty_state(documents: list[Document]) -> None:
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
            f"{fmt.plural(count, 'document')} in your library. Type a question below."
        )
        return
    st.caption("Try one of these, or type your own question below.")
    with st.container(key="suggestions", horizontal=True, gap="small"):
        for i, q in enumerate(SAMPLE_QUESTIONS):  # labels wrap, never cut (CSS in the shell)
            st.button(q, key=f"suggest-{i}", on_click=_queue, args=(q,), icon=":material/help:")


# --------------------------------------------------------------------------- questions and runs

def _asker(run: AnswerRun):
    return ws.ask(run.question, run.conversation_id, documents=run.documents, stop=run.stop)


def _submit(question: str) -> None:
    """Hand a question to the desk: asked now, or queued behind the one being answered."""
    cid = state.get("cid")
    stored = ws.has_conversation(cid)
    scope = list(state.get(_scope_key(cid if stored else None)) or [])
    if not cid:
        cid = state["cid"] = ws.new_conversation_id()
        state.pop(_scope_key(None), None)  # the next new conversation starts with all
    if not stored:
        state[_scope_key(cid)] = scope
    try:
        desk.submit(_asker, question, cid, documents=None if stored else scope)
    except OverflowError as exc:
        st.toast(f"Not queued: {exc}", icon=":material/block:")


def _stop(run_id: str) -> None:
    desk.stop(run_id)


def _dismiss(cid: str) -> None:
    desk.dismiss(cid)


# --------------------------------------------------------------------------- the address

def _known(cid: str) -> bool:
    return ws.has_conversation(cid) or bool(desk.runs(cid))


def from_address() -> None:
    """A conversation named in the address (a reload, a pasted link, back or forward) opens;
    an unknown one is said so, and a new conversation starts."""
    wanted = st.query_params.get(URL_KEY)
    if not wanted or wanted == state.get("address_seen"):
        return
    state["address_seen"] = wanted
    if wanted == state.get("cid"):
        return
    for key in ("focus", "open_n", "last_error"):
        state.pop(key, None)
    if _known(wanted):
        state["cid"] = wanted
        state["scroll_to_last"] = True
    else:
        state["unknown_address"] = wanted
        state["cid"] = None


def to_address(cid: str | None) -> None:
    """Keep ``?c=`` on the open conversation (none for a new one)."""
    if cid:
        if st.query_params.get(URL_KEY) != cid:
            st.query_params[URL_KEY] = cid
    elif URL_KEY in st.query_params:
        del st.query_params[URL_KEY]
    state["address_seen"] = cid


# Our constant scripts (see shell.page_script). A mark click scrolls the cited sentence of its
# card into view (the browser alone brings only the card's top); once per page load. It holds
# the sentence there for HOLD_MS unless the person moves the page: Streamlit's main container
# sticks to its bottom, and a scroll that coincides with the page's height changing (the card
# the click opens, the one it closes) keeps it stuck, so on a phone it pulled the page back
# down past the sentence; scrolling again once the height has settled unsticks it.
MARK_SCROLL_JS = """
if (w.__mgMarks) return; w.__mgMarks = 1;
w.Function(`
  const HOLD_MS = 2500, TICK_MS = 150;
  const inView = (el) => {
    const r = el.getBoundingClientRect();
    if (r.height <= 0 || r.top < 0 || r.bottom > window.innerHeight) return false;
    const m = el.closest('.st-key-margin');
    if (!m || m.scrollHeight <= m.clientHeight + 1) return true;
    const b = m.getBoundingClientRect();
    return r.top >= b.top - 1 && r.bottom <= b.bottom + 1;
  };
  const show = (id, tries, since) => {
    const card = document.getElementById(id);
    if (!card || !card.offsetParent) { if (tries > 0) setTimeout(() => show(id, tries - 1, since), 50); return; }
    const target = () => card.querySelector('mark.mg-hl') || card;
    const put = () => target().scrollIntoView({block: target() === card ? 'start' : 'center', inline: 'nearest'});
    put();
    const hold = () => {
      if ((window.__mgMovedAt || 0) > since || Date.now() - since > HOLD_MS) return;
      if (!inView(target())) put();
      setTimeout(hold, TICK_MS);
    };
    setTimeout(hold, TICK_MS);
  };
  // when the person last moved the page themselves (SCROLL_LAST_JS then leaves it alone)
  const moved = () => (window.__mgMovedAt = Date.now());  // the time, for a hold to compare
  for (const type of ['wheel', 'touchmove']) document.addEventListener(type, moved, {capture: true, passive: true});
  document.addEventListener('keydown', (e) => {
    if (!(e.target.closest && e.target.closest('textarea, input, [contenteditable]'))) moved();
  }, true);
  document.addEventListener('click', (e) => {
    const a = e.target.closest && e.target.closest('a[href^="#src-"]');
    if (a) { const t = moved(); setTimeout(() => show(a.getAttribute('href').slice(1), 10, t), 30); }
    const jump = e.target.closest && e.target.closest('a.mg-jump[data-target]');
    if (jump) {
      const t = moved();
      e.preventDefault();
      const id = jump.getAttribute('data-target').replace(/[^A-Za-z0-9_-]/g, '');
      window.location.hash = id;  // opens the card (CSS :target), then its sentence
      setTimeout(() => show(id, 10, t), 30);
    }
    const pv = e.target.closest && e.target.closest('button.mg-pageview[data-pv]');
    if (pv) {
      const key = pv.getAttribute('data-pv').replace(/[^A-Za-z0-9-]/g, '');
      const hidden = document.querySelector('.st-key-' + key + ' button');
      if (hidden) hidden.click();
    }
  }, true);
`)();
"""
# The last answer (or, while one is written, the last question) brought into view, and held
# there for HOLD_MS while the page is still being laid out (the margin's cards, which a phone
# stacks under the answer, arrive after it and Streamlit keeps a chat page at its bottom): a
# reload on a phone otherwise ended on the margin, the answer off-screen above. It leaves the
# page alone once the person moves it (a wheel, a swipe, a scrolling key, a mark or "Show the
# source" click: MARK_SCROLL_JS notes the time), also when that came just before this script
# ran (a busy machine loads it late: a mark clicked meanwhile must not be scrolled away from).
SCROLL_LAST_JS = """
const HOLD_MS = 2500, TICK_MS = 150, LATE_MS = 1500;
const begun = Date.now();
const moved = () => (w.__mgMovedAt || 0) > begun - LATE_MS;
let tries = 0;
const anchorOf = () => {
  const msgs = doc.querySelectorAll('[data-testid="stChatMessage"]');
  if (!msgs.length) return null;
  return msgs.length > 1 ? msgs[msgs.length - 2] : msgs[msgs.length - 1];
};
const place = (anchor) => {
  anchor.scrollIntoView({block: 'start'});
  // the margin (scrolling on its own beside the answer) shows the open card's cited sentence
  const m = doc.querySelector('.st-key-margin');
  const hl = m && m.querySelector('.mg-group.mg-default .mg-card.mg-open mark.mg-hl');
  if (hl && m.scrollHeight > m.clientHeight + 1) {
    const box = m.getBoundingClientRect(), at = hl.getBoundingClientRect();
    m.scrollTop += at.top - box.top - m.clientHeight / 3;
  }
  return anchor.getBoundingClientRect().top;
};
const step = () => {
  if (moved()) return;
  const anchor = anchorOf();
  if (!anchor) { if (++tries < 20) setTimeout(step, 100); return; }
  const want = place(anchor);
  const hold = () => {
    if (moved() || Date.now() - begun > HOLD_MS) return;
    const now = anchorOf();
    if (now && Math.abs(now.getBoundingClientRect().top - want) > 4) place(now);
    setTimeout(hold, TICK_MS);
  };
  setTimeout(hold, TICK_MS);
};
setTimeout(step, 50);
"""


# --------------------------------------------------------------------------- page

from_address()
question = st.chat_input("Ask a question about your documents", key="question")
question = (question or state.pop("queued_question", None) or "").strip() or None
if question:
    _submit(question)
    state["scroll_to_last"] = True

if state.pop("index_samples", False):
    with st.container(border=True):
        heading = st.empty()
        heading.markdown("**Adding the sample documents…**")
        results = index_samples(ws)
        added = sum(r.state == "indexed" for r in results)
        heading.markdown(
            f"**Added {fmt.plural(added, 'sample document')}.** Ask one of the questions "
            "below, or your own."
        )
    state["upload_results"] = results

cid = state.get("cid")
runs = desk.runs(cid) if cid else []
stored = ws.has_conversation(cid)
if cid and not stored and not runs:
    cid = state["cid"] = None  # deleted, or a new conversation whose only answer failed
to_address(cid)
messages = ws.messages(cid) if stored and cid else []
answers = [m for m in messages if m.role == "assistant"]
active = next((r for r in runs if r.state in (QUEUED, RUNNING)), None)

unknown = state.pop("unknown_address", None)
if unknown:
    st.warning(
        f"There is no conversation “{fmt.escape_inline(unknown, 40)}” in this library (it may "
        "have been deleted). This is a new conversation.",
        icon=":material/link_off:",
    )
if not messages and not runs:
    render_empty_state(ws.documents())
elif cid and messages:
    render_conversation_header(ws.conversation(cid), len(messages))

library = ws.documents()
scope = render_scope(cid if stored else None, library) if library else None
tuned = ws.tuned_settings()
if tuned and library:
    render_tuned_note(tuned)

left, right = st.columns([3, 2], gap="large")

with left:
    for i, message in enumerate(messages):
        with st.chat_message(message.role):
            if message.role == "user":
                st.markdown(fmt.escape_multiline(message.content))
            else:  # the last answer, when refused, offers to search all documents
                last = (i == len(messages) - 1 and not runs and i
                        and messages[i - 1].role == "user")
                render_answer_block(message, messages[i - 1].content if last else None)
    slot = None
    for run in runs:
        with st.chat_message("user"):
            st.markdown(fmt.escape_multiline(run.question))
            # always this placeholder, so the run that finds the question started replaces the
            # waiting note in place (a skipped element would leave it on screen, stale, for as
            # long as that run streams the answer)
            note = st.empty()
            if run.state == QUEUED:
                row = note.container(horizontal=True, vertical_alignment="center", gap="small")
                row.caption(":material/schedule: Waiting: asked when the answer above is "
                            "finished.")
                row.button("Remove", key=f"unqueue-{run.id}", type="tertiary",
                           icon=":material/close:", on_click=_stop, args=(run.id,))
        if run.state == RUNNING:
            with st.chat_message("assistant"):
                slot = st.empty()
                st.button("Stop", key=f"stop-{run.id}", icon=":material/stop_circle:",
                          on_click=_stop, args=(run.id,),
                          help="End the answer here. What was written so far is kept, "
                          "marked “stopped”.")
        elif run.state == FAILED:
            render_failed_run(run)

with right:
    margin_slot = None
    if active is not None:
        margin_slot = live_margin(scope)
    else:
        focus_id = state.get("focus")
        focused = next((m for m in answers if m.id == focus_id),
                       answers[-1] if answers else None)
        if focused is not None:
            render_margin(messages, focused.id, scope)

opened = state.pop("page_view", None)
if opened:
    mid, n = opened
    picked = next((m for m in answers if m.id == mid), None)
    source = next((x for x in picked.sources if int(x["n"]) == n), None) if picked else None
    if picked is not None and source is not None:
        page_view_dialog(source, fmt.cited_sentences(picked.content, None).get(n, []))
page_script("marks", MARK_SCROLL_JS)
if state.pop("scroll_to_last", False):
    page_script("scroll_last", SCROLL_LAST_JS)

if active is None:
    st.stop()

# ---- an answer is being written (or is about to be): follow it until it ends, then show the
# saved exchange. A rerun meanwhile (another question, a click) only stops this view of it.
watched = next((r for r in runs if r.state == RUNNING), None)
if watched is None or slot is None:  # queued, about to start: look again in a moment
    desk.wait(active, desk.snapshot(active), 0.5)
    st.rerun()
drawn_cited: list[int] | None = None
while True:
    seen = desk.snapshot(watched)
    if watched.state == RUNNING and slot is not None:
        draw_stream(watched, slot)
    if margin_slot is not None and watched.meta is not None and watched.cited != drawn_cited:
        drawn_cited = list(watched.cited)
        draw_live_cards(watched, margin_slot)
    if watched.finished:
        break
    desk.wait(watched, seen, STREAM_TICK_S)
if watched.state in ("done", "stopped") and watched.message_id:
    state["focus"] = watched.message_id
    state.pop("open_n", None)
    _bump_scope()
    state["scroll_to_last"] = True
st.rerun()
