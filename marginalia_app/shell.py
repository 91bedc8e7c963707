"""The app shell every page runs inside: page config, navigation, the sidebar (mode and
conversations) and the one Workspace per process.

``app.py`` calls :func:`run_app`. Each page script calls :func:`page` first: inside the shell it
just returns the Workspace; run directly (Streamlit runs a ``pages/`` script by itself when a
fresh process's first visitor opens its URL, e.g. ``/documents``), it runs the whole app
instead, which renders that same page inside the shell, and then stops. Public Streamlit API
only: ``st.navigation`` picks the page from the URL either way.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import streamlit as st

from marginalia_app import presentation as fmt
from marginalia_app.ingest_view import job_indicator
from marginalia_core.chat.desk import AnswerDesk
from marginalia_core.config import Settings, load_settings
from marginalia_core.errors import MarginaliaError
from marginalia_core.lab import RetrievalLab
from marginalia_core.providers.local_servers import normalize
from marginalia_core.store.records import ConversationSummary
from marginalia_core.workspace import Workspace

# Absolute, so the pages resolve whichever script Streamlit started from.
PAGES_DIR = Path(__file__).resolve().parents[1] / "pages"
CHAT_PAGE = PAGES_DIR / "chat.py"
DOCUMENTS_PAGE = PAGES_DIR / "documents.py"
INSPECTOR_PAGE = PAGES_DIR / "inspector.py"

# Our own static CSS (no document or model text ever goes through unsafe HTML): keep the margin
# in view while a long conversation scrolls, and give the cards a little air.
CSS = """
<style>
[data-testid="stLayoutWrapper"]:has(> .st-key-margin) { position: sticky; top: 3.75rem; }
.st-key-margin { max-height: calc(100vh - 11rem); overflow-y: auto; padding-right: 0.25rem; }
.st-key-hero h1 { margin-bottom: 0.25rem; }
/* our scripts' iframes: laid out (Streamlit renders only measured elements), unseen */
.st-key-sidebar_closer, [class*="st-key-script_"] { position: fixed; left: 0; bottom: 0;
  width: 2px; height: 2px; overflow: hidden; opacity: 0; pointer-events: none; }
/* sidebar conversations: title left-aligned, its delete control on the same row */
[class*="st-key-convrow-"] { flex-wrap: nowrap !important; gap: 0 !important; }
[class*="st-key-convrow-"] > div:first-child { flex: 1 1 auto; min-width: 0; }
[class*="st-key-conv-"] button { justify-content: flex-start; text-align: left; }
[class*="st-key-conv-"] button p { overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
/* inline citation marks: in-page links to margin cards, shown as badges */
[data-testid="stMarkdownContainer"] a[href^="#src-"] {
  text-decoration: none; font-size: 0.78em; font-weight: 600; padding: 0.05rem 0.35rem;
  border-radius: 0.5rem; background: rgba(28, 131, 225, 0.12); color: rgb(0, 84, 163);
  white-space: nowrap; vertical-align: 0.1em;
}
[data-testid="stMarkdownContainer"] a[href^="#src-"]:hover { background: rgba(28, 131, 225, 0.25); }
/* the margin: one group of cards per answer; a targeted card (a clicked mark) wins over the
   group shown by default and over the card open by default */
.mg-group { display: none; }
.mg-margin:not(:has(.mg-card:target)) .mg-group.mg-default,
.mg-group:has(.mg-card:target) { display: block; }
.mg-question, .mg-note { color: rgba(49, 51, 63, 0.65); font-size: 0.85rem; margin: 0.2rem 0 0.4rem; }
.mg-card { border: 1px solid rgba(49, 51, 63, 0.15); border-radius: 0.5rem; margin: 0 0 0.5rem;
  scroll-margin-top: 4.5rem; background: white; }
.mg-table { overflow-x: auto; margin: 0.3rem 0 0.6rem; }
.mg-table table { border-collapse: collapse; font-size: 0.82rem; }
.mg-table th, .mg-table td { border: 1px solid rgba(49, 51, 63, 0.2); padding: 0.15rem 0.4rem;
  vertical-align: top; }
.mg-table th { background: rgba(49, 51, 63, 0.05); }
.mg-head { display: block; padding: 0.45rem 0.75rem; font-size: 0.92rem; font-weight: 600;
  color: inherit !important; text-decoration: none !important; overflow-wrap: anywhere; }
.mg-head::before { content: "\\25B8  "; color: rgba(49, 51, 63, 0.5); }
.mg-body { display: none; padding: 0 0.75rem 0.5rem; }
.mg-group:not(:has(.mg-card:target)) .mg-card.mg-open .mg-body,
.mg-card:target .mg-body { display: block; }
.mg-group:not(:has(.mg-card:target)) .mg-card.mg-open .mg-head::before,
.mg-card:target .mg-head::before { content: "\\25BE  "; }
.mg-group:not(:has(.mg-card:target)) .mg-card.mg-open, .mg-card:target {
  border-color: rgba(255, 164, 33, 0.8); box-shadow: 0 0 0 1px rgba(255, 164, 33, 0.4); }
.mg-uncited .mg-head { font-weight: 400; }
.mg-passage { font-size: 0.92rem; line-height: 1.5; overflow-wrap: anywhere; }
.mg-passage p { margin: 0 0 0.5rem; }
.mg-passage .mg-h { margin: 0.4rem 0 0.3rem; padding: 0; font-weight: 600; }
.mg-passage pre { white-space: pre-wrap; background: rgba(49, 51, 63, 0.05); padding: 0.4rem;
  border-radius: 0.3rem; font-size: 0.85rem; }
.mg-passage .mg-link { text-decoration: underline dotted; }
.mg-passage .mg-img::before { content: "[image: "; }
.mg-passage .mg-img::after { content: "]"; }
.mg-passage .mg-img { color: rgba(49, 51, 63, 0.65); font-style: italic; }
mark.mg-hl { background: rgba(255, 164, 33, 0.35); font-weight: 600; padding: 0 0.1rem;
  border-radius: 0.15rem; color: inherit; }
.mg-page summary { cursor: pointer; font-size: 0.88rem; color: rgb(0, 84, 163); margin: 0.2rem 0; }
.st-key-pv_triggers { display: none; }
/* the Inspector's search method: its three choices wrap on a phone instead of running out */
.st-key-inspector_mode [data-testid="stButtonGroup"] > div { flex-wrap: wrap; }
/* suggested questions: whole labels, wrapped onto lines as needed, at any width */
.st-key-suggestions { flex-wrap: wrap; }
.st-key-suggestions [data-testid="stElementContainer"] { max-width: 100%; }
.st-key-suggestions button { height: auto; max-width: 100%; }
.st-key-suggestions button p { white-space: normal; overflow: visible; text-overflow: clip;
  text-align: left; }
button.mg-pageview { font: inherit; font-size: 0.88rem; color: rgb(0, 84, 163); background: none;
  border: 1px solid rgba(28, 131, 225, 0.35); border-radius: 0.4rem; padding: 0.15rem 0.5rem;
  margin: 0.2rem 0; cursor: pointer; }
button.mg-pageview:hover { background: rgba(28, 131, 225, 0.1); }
.mg-zoom { overflow: auto; max-height: 60vh; border: 1px solid rgba(49, 51, 63, 0.2);
  border-radius: 0.3rem; }
.mg-zoom img { display: block; max-width: none; }
.mg-zoom img.mg-z100 { width: 100%; } .mg-zoom img.mg-z150 { width: 150%; }
.mg-zoom img.mg-z200 { width: 200%; } .mg-zoom img.mg-z300 { width: 300%; }
a.mg-openpdf { font-size: 0.95rem; }
.mg-page-img { width: 100%; border: 1px solid rgba(49, 51, 63, 0.2); border-radius: 0.3rem; }
/* the Inspector: a ticked candidate's whole passage opens under its checkbox */
details.lab-whole { margin: -0.4rem 0 0.4rem 1.9rem; }
details.lab-whole summary { cursor: pointer; font-size: 0.85rem; color: rgb(0, 84, 163); }
details.lab-whole .mg-passage { padding: 0.3rem 0.6rem; border-left: 3px solid rgba(47, 125, 109, 0.5); }
.mg-gone { margin-left: 0.5rem; font-size: 0.75rem; font-weight: 600; padding: 0 0.35rem;
  border-radius: 0.4rem; background: rgba(255, 75, 75, 0.12); color: rgb(163, 28, 28); }
/* "Show the source" under an answer: only where the margin is below the answer (a phone) */
a.mg-jump { display: none; font-size: 0.85rem; }
/* phone width: the margin stacks under the answer and is not sticky */
@media (max-width: 640px) {
  a.mg-jump { display: inline-block; }
  [data-testid="stLayoutWrapper"]:has(> .st-key-margin) { position: static; }
  .st-key-margin { max-height: none; overflow-y: visible; }
}
</style>
"""

CHAT_MODEL_KEY = "chat_model_choice"  # session state: the model picked in the sidebar
MODEL_LIST_TTL_S = 30  # seconds the server's model list is reused before asking again
LOCAL_PROBE_TTL_S = 20  # seconds a probe for local model servers is reused
MAX_LOCAL_SERVERS = 3  # listed in the sidebar
# Streamlit's md breakpoint: narrower than this the sidebar is an overlay over the page.
PHONE_MAX_WIDTH_PX = 768

_run = threading.local()  # Streamlit runs each session's script on its own thread


# --------------------------------------------------------------------------- settings and workspace

def secrets_mapping() -> dict[str, Any]:
    """``st.secrets`` as a plain dict; {} when there is no (or an unreadable) secrets file,
    which is the normal offline case (``st.secrets`` raises then)."""
    try:
        return dict(st.secrets.to_dict())
    except Exception:
        return {}


def _settings_key(settings: Settings) -> str:
    # repr() leaves the keys out; a digest of them still makes a changed key a new workspace
    secrets = f"{settings.gemini_api_key or ''}|{settings.openai_api_key or ''}"
    digest = hashlib.sha256(secrets.encode()).hexdigest()[:16]
    return f"{settings!r}|{digest}"


@st.cache_resource(show_spinner=False)
def _embedder(key: str, _settings: Settings) -> Any:
    """One embedder per embedding setting: choosing another chat model reuses it."""
    return Workspace(_settings).embedder


def _release(ws: Workspace) -> None:
    ws.stop_worker()  # a job it was running is marked interrupted, resumable


@st.cache_resource(show_spinner=False, on_release=_release)
def _ingest_worker(key: str, _settings: Settings) -> Workspace:
    """The process's one ingestion worker per embedding setting, on its own Workspace: browser
    sessions and chat-model choices come and go, the worker (and its jobs) stay."""
    ws = Workspace(_settings, embedder=_embedder(key, _settings))
    ws.start_worker()
    return ws


@st.cache_resource(show_spinner=False)
def _workspace(key: str, _settings: Settings) -> Workspace:
    # load the embedding model once per process, not on the first question
    base = replace(_settings, chat_model=None, answerer=None)
    base_key = _settings_key(base)
    _ingest_worker(base_key, base)
    return Workspace(_settings, embedder=_embedder(base_key, base))


@st.cache_resource(show_spinner=False)
def _lab(key: str, _ws: Workspace) -> RetrievalLab:
    return RetrievalLab(_ws)


def retrieval_lab(ws: Workspace) -> RetrievalLab:
    """The lab over the process's Workspace, kept with it, so its cache of candidates (moving
    an Inspector control embeds nothing again) outlives a rerun."""
    return _lab(_settings_key(ws.defaults), ws)


@st.cache_resource(show_spinner=False)
def answer_desk() -> AnswerDesk:
    """The process's one AnswerDesk: answers run on its threads, outside any page run, so a
    rerun (a second question, a click, a reload) never cuts one off."""
    return AnswerDesk()


def page_script(name: str, body: str) -> None:
    """Run one of our own constant scripts (never document or model text) in the page, in a
    hidden iframe of the same origin; ``body`` sees ``w`` (the app's window) and ``doc``."""
    script = f"<script>(() => {{ const w = window.parent, doc = w.document; {body} }})();</script>"
    with st.container(key=f"script_{name}"):
        st.iframe(script, height=1)


def workspace() -> Workspace:
    """The process-wide Workspace for the current settings (environment, then secrets), with
    the chat model this session picked in the sidebar (model servers only)."""
    settings = load_settings(secrets=secrets_mapping())
    chosen = st.session_state.get(CHAT_MODEL_KEY)
    if chosen and settings.answerer_name == "openai":
        settings = settings.with_overrides(chat_model=str(chosen))
    return _workspace(_settings_key(settings), settings)


@st.cache_data(ttl=MODEL_LIST_TTL_S, show_spinner=False)
def _server_models(key: str, _ws: Workspace) -> tuple[list[str], str]:
    """(model ids, "") from the server's GET /v1/models, or ([], why not)."""
    try:
        return _ws.list_models(), ""
    except MarginaliaError as exc:
        return [], exc.message


# --------------------------------------------------------------------------- the shell

def run_app() -> None:
    """The whole app: page config, navigation, sidebar, then the page the URL names."""
    st.set_page_config(
        page_title="Marginalia",
        page_icon="📖",
        layout="wide",
        initial_sidebar_state="auto",  # open on a desktop, closed on a phone
    )
    chat_page = st.Page(CHAT_PAGE, title="Chat", icon=":material/forum:", default=True)
    documents_page = st.Page(DOCUMENTS_PAGE, title="Documents", icon=":material/library_books:")
    current = st.navigation([
        chat_page,
        documents_page,
        st.Page(INSPECTOR_PAGE, title="Retrieval Inspector", icon=":material/troubleshoot:"),
    ])
    st.html(CSS)
    try:
        ws = workspace()
    except Exception as exc:  # bad settings or a missing model: say so, never a traceback
        logging.getLogger("marginalia").exception("could not start the workspace")
        st.error(f"Marginalia could not start: {fmt.escape_inline(str(exc))}",
                 icon=":material/error:")
        st.stop()
    with st.sidebar:
        job_indicator(ws, documents_page)  # ingestion running in the background, on every page
    render_sidebar(ws)
    shown = st.session_state.get("page_shown")
    if shown is not None and shown != current.url_path:
        _chose()  # another page was picked in the sidebar
    st.session_state["page_shown"] = current.url_path
    close_sidebar_on_phone()
    if st.session_state.pop("switch_to_chat", False) and current.url_path != chat_page.url_path:
        st.switch_page(chat_page)
    _run.inside = True
    try:
        current.run()
    finally:
        _run.inside = False


def page() -> Workspace:
    """Call first in every page script: the Workspace, with the page inside the app shell."""
    if not getattr(_run, "inside", False):
        run_app()  # renders this very page through st.navigation
        st.stop()
    return workspace()


# --------------------------------------------------------------------------- mode

def mode_lines(ws: Workspace) -> tuple[str, str, str]:
    """(mode, embeddings line, answers line) for the sidebar."""
    summary = ws.mode_summary()
    server = summary["server"] or "no server set (OPENAI_BASE_URL)"
    if summary["embedder"] == "local":
        embed = f"{ws.embedder.model} · on this computer"
    elif summary["embedder"] == "openai":
        embed = f"{summary['embed_model']} · {server}"
    else:
        embed = f"{ws.embedder.model} · Gemini API"
    if summary["answerer"] == "extractive":
        answer = "extractive · quotes the best sentences"
    elif summary["answerer"] == "openai":
        answer = f"{summary['chat_model'] or 'no model set'} · {server}"
    else:
        answer = f"{getattr(ws.answerer, 'model', summary['chat_model'])} · Gemini API"
    return summary["mode"], embed, answer


def _pick_chat_model(choice: str) -> None:
    st.session_state[CHAT_MODEL_KEY] = (st.session_state.get(choice) or "").strip() or None


def render_model_picker(ws: Workspace) -> None:
    """The chat model, for a model server: a select from its GET /v1/models when it offers a
    list, a text box when it does not. The choice lasts for this browser session."""
    if ws.settings.answerer_name != "openai" or ws.local_model():
        return  # a local model server chosen below has its own model list
    current = ws.settings.chat_model or ""
    models, why_not = _server_models(_settings_key(replace(ws.settings, chat_model=None)), ws)
    if models:
        options = models if current in models or not current else [current, *models]
        st.selectbox(
            "Chat model",
            options,
            index=options.index(current) if current in options else None,
            placeholder="Choose a model",
            key="chat_model_select",
            on_change=_pick_chat_model,
            args=("chat_model_select",),
            help="Models the server lists (GET /v1/models). Sets MARGINALIA_CHAT_MODEL "
            "for this session.",
        )
    else:
        st.text_input(
            "Chat model",
            value=current,
            key="chat_model_text",
            on_change=_pick_chat_model,
            args=("chat_model_text",),
            placeholder="e.g. llama3.2",
            help="The server does not list its models; type the name it serves.",
        )
        if why_not:
            st.caption(fmt.escape_inline(why_not))



# --------------------------------------------------------------------------- local model server

@st.cache_data(ttl=LOCAL_PROBE_TTL_S, show_spinner=False)
def _local_servers(key: str, _ws: Workspace) -> list[tuple[str, str, tuple[str, ...]]]:
    """(label, address, models) of the model servers running on this machine; probed only
    while a sidebar renders, at most every ``LOCAL_PROBE_TTL_S`` seconds."""
    return [(s.label, s.base_url, s.models) for s in _ws.local_servers()]


def _use_local(ws: Workspace, label: str, server: str, models: tuple[str, ...], key: str) -> None:
    model = st.session_state.get(key) or models[0]
    try:
        ws.use_local_model(server, model, label)
    except MarginaliaError as exc:
        st.toast(fmt.escape_inline(exc.message), icon=":material/error:")
        return
    st.toast(f"Answers now come from {fmt.escape_inline(model, 40)} on "
             f"{fmt.escape_inline(label, 30)}.", icon=":material/computer:")


def _stop_local(ws: Workspace) -> None:
    ws.use_local_model(None)
    st.toast("Back to the configured answers.", icon=":material/undo:")


def _look_again() -> None:
    _local_servers.clear()


def render_local_model(ws: Workspace) -> None:
    """A model server already running on this machine (Ollama, llama.cpp, LM Studio, vLLM, or
    ``OPENAI_BASE_URL``): found by the sidebar, used for answers in one click, remembered for
    this library."""
    local = ws.local_model()
    servers = _local_servers(_settings_key(ws.defaults), ws)
    with st.expander("Local model", icon=":material/computer:", expanded=bool(servers or local)):
        if local:
            st.caption(f"Answering with **{fmt.escape_inline(local['model'], 40)}** on "
                       f"{fmt.escape_inline(local['label'] or local['server'], 40)}.")
            st.button("Back to the configured answers", key="local_model_stop",
                      icon=":material/undo:", on_click=_stop_local, args=(ws,), width="stretch")
        answering = ws.settings
        for i, (label, server, models) in enumerate(servers[:MAX_LOCAL_SERVERS]):
            if (answering.answerer_name == "openai" and models == (answering.chat_model,)
                    and normalize(answering.openai_base_url or "") == server):
                continue  # already answering with it
            key = f"local_model_pick_{i}"
            if len(models) > 1:
                st.selectbox(f"Model on {label}", models, key=key)
            chosen = st.session_state.get(key) or models[0]
            st.button(
                f"Answer with {fmt.escape_inline(chosen, 30)} · {fmt.escape_inline(label, 20)}",
                key=f"local_model_use_{i}",
                icon=":material/bolt:",
                on_click=_use_local,
                args=(ws, label, server, models, key),
                help=f"{server}: an OpenAI-compatible server on this computer. Answers come "
                "from it from the next question on; the documents stay searched here.",
                width="stretch",
            )
        if not servers:
            st.caption("No model server is running on this computer (looked for Ollama, "
                       "llama.cpp, LM Studio and vLLM on their usual ports).")
        st.button("Look again", key="local_model_refresh", icon=":material/refresh:",
                  type="tertiary", on_click=_look_again)


# --------------------------------------------------------------------------- sidebar

def _open_conversation(cid: str | None) -> None:
    _chose()
    st.session_state["cid"] = cid
    st.session_state.pop("focus", None)
    st.session_state.pop("open_n", None)
    st.session_state.pop("last_error", None)
    st.session_state.pop("confirm_delete_conversation", None)
    st.session_state["switch_to_chat"] = True
    st.session_state["scroll_to_last"] = True


def _ask_delete_conversation(cid: str) -> None:
    st.session_state["confirm_delete_conversation"] = cid


def _cancel_delete_conversation() -> None:
    st.session_state.pop("confirm_delete_conversation", None)


def _delete_conversation(ws: Workspace, cid: str) -> None:
    ws.delete_conversation(cid)
    st.session_state.pop("confirm_delete_conversation", None)
    if st.session_state.get("cid") == cid:
        st.session_state["cid"] = None
        st.session_state.pop("focus", None)
    st.toast("Conversation deleted.", icon=":material/delete:")


def close_sidebar_on_phone() -> None:
    """After a choice in the sidebar, close it if the screen is narrow (a phone), as Streamlit
    does itself for its page links. Streamlit has no API for that, so a hidden inline script
    of ours (a constant, never document text) presses the sidebar's own collapse button. Nothing is loaded; it runs only on the run after a choice."""
    nonce = st.session_state.pop("close_sidebar", None)
    if nonce is None:
        return
    # Below Streamlit's md breakpoint the sidebar covers the page; there its own collapse button
    # is pressed, once (looked for every 100 ms for a second while the page settles).
    script = (
        f"<script>/* choice {int(nonce)} */ (() => {{ let tries = 0;"
        " const step = () => {"
        " const w = window.parent, doc = w.document;"
        f" if (w.innerWidth >= {PHONE_MAX_WIDTH_PX}) return;"
        " const open = doc.querySelector('[data-testid=\"stSidebar\"][data-collapsed=\"false\"]');"
        " const button = doc.querySelector('[data-testid=\"stSidebarCollapseButton\"] button');"
        " if (open && button) { button.click(); return; }"
        " if (++tries < 10) setTimeout(step, 100); }; step(); })();</script>"
    )
    with st.container(key="sidebar_closer"):
        st.iframe(script, height=1)  # our own constant script, never document text


def _chose() -> None:
    st.session_state["close_sidebar"] = st.session_state.get("choices", 0) + 1
    st.session_state["choices"] = st.session_state["close_sidebar"]


def _day_groups(
    conversations: list[ConversationSummary],
) -> list[tuple[str, list[ConversationSummary]]]:
    groups: list[tuple[str, list[ConversationSummary]]] = []
    for conv in conversations:
        label = fmt.day_label(conv.updated)
        if groups and groups[-1][0] == label:
            groups[-1][1].append(conv)
        else:
            groups.append((label, [conv]))
    return groups


def render_sidebar(ws: Workspace) -> None:
    with st.sidebar:
        mode, embed, answer = mode_lines(ws)
        if mode == "Gemini":
            st.badge("Gemini mode", icon=":material/cloud:", color="violet")
        elif mode == "Model server":
            st.badge("Model server mode", icon=":material/dns:", color="blue")
        else:
            st.badge("Offline mode", icon=":material/wifi_off:", color="green")
        st.caption(
            f"**Embeddings** {fmt.escape_inline(embed)}  \n**Answers** {fmt.escape_inline(answer)}"
        )
        render_model_picker(ws)
        render_local_model(ws)
        st.button(
            "New conversation",
            icon=":material/add_comment:",
            on_click=_open_conversation,
            args=(None,),
            width="stretch",
            key="new_conversation",
        )
        if not ws.conversations():
            st.caption("Your conversations will appear here.")
            return
        query = st.text_input(
            "Search conversations",
            key="conversation_search",
            placeholder="Search titles and messages",
            icon=":material/search:",
            label_visibility="collapsed",
        )
        conversations = ws.search_conversations(query or "")
        if not conversations:
            st.caption(f"No conversation mentions “{fmt.escape_inline(query, 40)}”.")
            return
        current = st.session_state.get("cid")
        pending = st.session_state.get("confirm_delete_conversation")
        for day, convs in _day_groups(conversations):
            st.caption(fmt.escape_inline(day))
            for conv in convs:
                _conversation_row(ws, conv, current, pending, query)


def _conversation_row(
    ws: Workspace, conv: ConversationSummary, current: str | None, pending: str | None,
    query: str,
) -> None:
    cid = conv.id
    title = fmt.escape_inline(conv.title or "Untitled", 34)
    busy = cid in answer_desk().busy()
    row = st.container(horizontal=True, vertical_alignment="center", gap=None,
                       key=f"convrow-{cid}")
    row.button(
        f"**{title}**" if cid == current else title,
        key=f"conv-{cid}",
        type="tertiary",
        icon=(":material/progress_activity:" if busy else ":material/chat_bubble:"
              if cid == current else ":material/chat_bubble_outline:"),
        on_click=_open_conversation,
        args=(cid,),
        help=("Answering…" if busy else f"Last message {fmt.format_created(conv.updated)}"),
        width="stretch",
    )
    row.button(
        "",
        key=f"del-conv-{cid}",
        type="tertiary",
        icon=":material/delete:",
        help=f"Delete “{conv.title or 'Untitled'}”",
        on_click=_ask_delete_conversation,
        args=(cid,),
    )
    if query and conv.matched:
        st.caption(fmt.escape_inline(fmt.snippet(conv.matched, query), 90))
    if pending == cid:
        with st.container(border=True):
            st.caption(f"Delete “{title}” and its messages?")
            yes, no = st.columns(2)
            yes.button(
                "Delete",
                key=f"confirm-del-conv-{cid}",
                type="primary",
                on_click=_delete_conversation,
                args=(ws, cid),
                width="stretch",
            )
            no.button(
                "Cancel",
                key=f"cancel-del-conv-{cid}",
                on_click=_cancel_delete_conversation,
                width="stretch",
            )
