"""What the pages share: the one Workspace per process, the sidebar, ingestion with progress and
the sample documents. Layout only; the work happens in ``marginalia_core``."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import streamlit as st

from marginalia_app import presentation as fmt
from marginalia_core.config import Settings, load_settings
from marginalia_core.ingest.pipeline import ingest_bytes
from marginalia_core.workspace import Workspace

ROOT = Path(__file__).resolve().parents[1]
SAMPLES_DIR = ROOT / "samples"
SAMPLE_SUFFIXES = (".md", ".txt", ".pdf")
SAMPLE_QUESTIONS = (
    "What did Fermat write in the margin?",
    "Does Marginalia work offline?",
    "What temperature and humidity are best for old books?",
)
CHAT_PAGE = "pages/chat.py"
DOCUMENTS_PAGE = "pages/documents.py"
INSPECTOR_PAGE = "pages/inspector.py"

REFUSAL_TITLES = {
    "unsupported": "not a supported file type",
    "binary": "not a text file",
    "encoding": "unreadable text encoding",
    "encrypted": "password-protected",
    "wrong_password": "wrong password",
    "no_text": "no text layer (a scan?)",
    "corrupt": "damaged file",
    "mislabelled": "its content does not match its name",
    "empty": "empty file",
    "too_large": "too large",
    "unreadable": "unreadable",
    "embedding": "embedding failed",
    "auth": "the API key was refused",
    "internal": "unexpected error",
}

# Our own static CSS (no document or model text ever goes through unsafe HTML): keep the margin
# in view while a long conversation scrolls, and give the cards a little air.
CSS = """
<style>
[data-testid="stLayoutWrapper"]:has(> .st-key-margin) { position: sticky; top: 3.75rem; }
.st-key-margin { max-height: calc(100vh - 11rem); overflow-y: auto; padding-right: 0.25rem; }
.st-key-margin [data-testid="stExpander"] details summary p { font-size: 0.92rem; }
.st-key-hero h1 { margin-bottom: 0.25rem; }
</style>
"""


# --------------------------------------------------------------------------- settings and workspace

def secrets_mapping() -> dict[str, Any]:
    """``st.secrets`` as a plain dict; {} when there is no (or an unreadable) secrets file,
    which is the normal offline case (``st.secrets`` raises then)."""
    try:
        return dict(st.secrets.to_dict())
    except Exception:
        return {}


def _settings_key(settings: Settings) -> str:
    # repr() leaves the key out; a digest of it still makes a changed key a new workspace
    digest = hashlib.sha256((settings.gemini_api_key or "").encode()).hexdigest()[:16]
    return f"{settings!r}|{digest}"


@st.cache_resource(show_spinner=False)
def _workspace(key: str, _settings: Settings) -> Workspace:
    ws = Workspace(_settings)
    _ = ws.embedder  # load the model once per process, not on the first question
    return ws


def workspace() -> Workspace:
    """The process-wide Workspace for the current settings (environment, then secrets)."""
    settings = load_settings(secrets=secrets_mapping())
    return _workspace(_settings_key(settings), settings)


def inject_css() -> None:
    st.html(CSS)


# --------------------------------------------------------------------------- the app shell

_SHELL_TOKEN = "_marginalia_shell_run"
_PAGE_TOKEN = "_marginalia_page_run"
_SHELL_RETRIES = "_marginalia_shell_retries"


def mark_shell_run() -> None:
    """app.py calls this on every run, before the page."""
    st.session_state[_SHELL_TOKEN] = uuid.uuid4().hex


def require_shell() -> None:
    """Pages call this first. Because the page files live in ``pages/``, Streamlit's legacy
    multipage mode runs a page file *directly* (without app.py: no navigation, no sidebar, no
    wide layout) on the first run of a process when the browser's first URL is a page's (e.g.
    /documents). st.navigation switches that mode off, so switch it off and run again through
    app.py. Only that first run of a new session is affected: no widget input is lost."""
    token = st.session_state.get(_SHELL_TOKEN)
    if token is not None and token != st.session_state.get(_PAGE_TOKEN):
        st.session_state[_PAGE_TOKEN] = token
        return
    retries = st.session_state.get(_SHELL_RETRIES, 0)
    if retries >= 1:  # never loop; render the page without the shell instead
        return
    st.session_state[_SHELL_RETRIES] = retries + 1
    try:  # a Streamlit internal (checked on 1.67): degrade to the bare page if it moves
        from streamlit.runtime.pages_manager import PagesManager

        PagesManager.uses_pages_directory = False  # what st.navigation itself sets
    except (ImportError, AttributeError):
        return
    st.rerun()


# --------------------------------------------------------------------------- mode

def mode_lines(ws: Workspace) -> tuple[str, str, str]:
    """(mode, embeddings line, answers line) for the sidebar."""
    summary = ws.mode_summary()
    embedder = ws.embedder
    if summary["embedder"] == "local":
        embed = f"{embedder.model} · on this computer"
    else:
        embed = f"{embedder.model} · Gemini API"
    answerer = ws.answerer
    if summary["answerer"] == "extractive":
        answer = "extractive · quotes the best sentences"
    else:
        answer = f"{getattr(answerer, 'model', summary['chat_model'])} · Gemini API"
    return summary["mode"], embed, answer


# --------------------------------------------------------------------------- sidebar

def _open_conversation(cid: str | None) -> None:
    st.session_state["cid"] = cid
    st.session_state.pop("focus", None)
    st.session_state.pop("last_error", None)
    st.session_state.pop("confirm_delete_conversation", None)
    st.session_state["switch_to_chat"] = True


def _ask_delete_conversation(cid: str) -> None:
    st.session_state["confirm_delete_conversation"] = cid


def _cancel_delete_conversation() -> None:
    st.session_state.pop("confirm_delete_conversation", None)


def _delete_conversation(ws: Workspace, cid: str) -> None:
    ws.store.delete_conversation(cid)
    st.session_state.pop("confirm_delete_conversation", None)
    if st.session_state.get("cid") == cid:
        st.session_state["cid"] = None
        st.session_state.pop("focus", None)
    st.toast("Conversation deleted.", icon=":material/delete:")


def render_sidebar(ws: Workspace) -> None:
    with st.sidebar:
        mode, embed, answer = mode_lines(ws)
        if mode == "Gemini":
            st.badge("Gemini mode", icon=":material/cloud:", color="violet")
        else:
            st.badge("Offline mode", icon=":material/wifi_off:", color="green")
        st.caption(
            f"**Embeddings** {fmt.escape_inline(embed)}  \n**Answers** {fmt.escape_inline(answer)}"
        )
        st.button(
            "New conversation",
            icon=":material/add_comment:",
            on_click=_open_conversation,
            args=(None,),
            width="stretch",
            key="new_conversation",
        )
        conversations = ws.store.list_conversations()
        if not conversations:
            st.caption("Your conversations will appear here.")
            return
        st.caption("Conversations")
        current = st.session_state.get("cid")
        pending = st.session_state.get("confirm_delete_conversation")
        for conv in conversations:
            cid = conv["id"]
            title = fmt.escape_inline(conv["title"] or "Untitled", 34)
            row = st.columns([6, 1], gap=None, vertical_alignment="center")
            row[0].button(
                f"**{title}**" if cid == current else title,
                key=f"conv-{cid}",
                type="tertiary",
                icon=":material/chat_bubble:" if cid == current else ":material/chat_bubble_outline:",
                on_click=_open_conversation,
                args=(cid,),
                help=fmt.format_created(conv["updated"]),
                width="stretch",
            )
            row[1].button(
                "",
                key=f"del-conv-{cid}",
                type="tertiary",
                icon=":material/delete:",
                help="Delete this conversation",
                on_click=_ask_delete_conversation,
                args=(cid,),
            )
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


# --------------------------------------------------------------------------- ingestion

def refusal_title(reason: str | None) -> str:
    return REFUSAL_TITLES.get(reason or "", "refused")


def follow_progress(events: Iterable[dict[str, Any]], bar: Any) -> dict[str, Any] | None:
    """Drive a progress bar from ingestion ``stage`` events; return the final done/error event."""
    end: dict[str, Any] | None = None
    for event in events:
        if event["type"] == "stage":
            share, text = fmt.stage_progress(event)
            bar.progress(min(1.0, share), text=text)
        else:
            end = event
    return end


def ingest_one(ws: Workspace, name: str, data: bytes, mime: str | None = None) -> dict[str, Any]:
    """Index one file inside an ``st.status`` with a progress bar driven by the ingestion events;
    returns a result record for ``render_results``."""
    label = fmt.escape_inline(name, 80)
    with st.status(f"{label} — indexing…", expanded=False) as status:
        bar = st.progress(0.0, text="Starting…")
        end = follow_progress(
            ingest_bytes(ws.store, ws.embedder, ws.settings, name, data, mime=mime), bar
        )
        result = _result(name, end)
        bar.progress(1.0, text="Done" if result["state"] != "error" else "Stopped")
        status.update(label=result_label(result), state=_status_state(result), expanded=False)
    return result


def _result(name: str, end: dict[str, Any] | None) -> dict[str, Any]:
    if end is None:  # cannot happen: ingestion always ends with done or error
        return {"name": name, "state": "error", "reason": "internal", "message": "No result."}
    if end["type"] == "error":
        return {
            "name": end.get("file", name),
            "state": "error",
            "reason": end.get("reason"),
            "message": end.get("message", ""),
        }
    doc = end.get("document") or {}
    if end.get("duplicate"):
        return {
            "name": end.get("file", name),
            "state": "duplicate",
            "existing": doc.get("name", ""),
            "message": end.get("message") or f"{name} is already indexed.",
        }
    return {
        "name": doc.get("name", name),
        "state": "indexed",
        "chunks": doc.get("chunk_count", 0),
        "pages": doc.get("page_count", 1),
        "message": "",
    }


def _status_state(result: dict[str, Any]) -> str:
    return "error" if result["state"] == "error" else "complete"


def result_label(result: dict[str, Any]) -> str:
    name = fmt.escape_inline(result["name"], 80)
    if result["state"] == "indexed":
        pages = result.get("pages") or 1
        return (
            f"{name} — indexed: {result['chunks']} passage{'s' * (result['chunks'] != 1)}, "
            f"{pages} page{'s' * (pages != 1)}"
        )
    if result["state"] == "duplicate":
        same = result.get("existing") or result["name"]
        if same == result["name"]:
            return f"{name} — already in your library"
        return f"{name} — already in your library (as {fmt.escape_inline(same, 60)})"
    return f"{name} — refused: {refusal_title(result.get('reason'))}"


def render_results(results: Iterable[dict[str, Any]]) -> None:
    """Outcomes of the last batch, as finished status boxes (refusals open, with the reason)."""
    for result in results:
        with st.status(
            result_label(result), state=_status_state(result), expanded=result["state"] == "error"
        ):
            if result["state"] == "error":
                st.markdown(fmt.escape_inline(result["message"]))
            elif result["state"] == "duplicate":
                st.markdown(
                    fmt.escape_inline(result["message"]) + " It was not indexed a second time."
                )
            else:
                st.markdown("Ready to be asked about.")


def sample_files() -> list[Path]:
    if not SAMPLES_DIR.is_dir():
        return []
    return sorted(p for p in SAMPLES_DIR.iterdir() if p.suffix.lower() in SAMPLE_SUFFIXES)


def samples_in_library(documents: Iterable[dict[str, Any]]) -> bool:
    """Whether every sample document is in the library (by name)."""
    names = {d["name"] for d in documents}
    files = sample_files()
    return bool(files) and all(p.name in names for p in files)


def index_samples(ws: Workspace) -> list[dict[str, Any]]:
    """Index the bundled sample documents (already indexed ones are noted as duplicates)."""
    results = []
    for path in sample_files():
        results.append(ingest_one(ws, path.name, path.read_bytes()))
    return results
