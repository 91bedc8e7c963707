"""Ingestion as a person watches it: a visible progress bar per file driven by the ingestion
events, and the outcome of each file (indexed, already in the library, or refused and why)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import streamlit as st

from marginalia_app import presentation as fmt
from marginalia_app.passages import has_pages
from marginalia_app.samples import sample_files
from marginalia_core import events
from marginalia_core.ingest.pipeline import IngestOutcome, follow
from marginalia_core.workspace import Workspace

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


# Refusals a password can lift: the card asks for it (and says when a given one was wrong).
PASSWORD_REASONS = frozenset({"encrypted", "wrong_password"})
UNLOCK_ATTEMPTS_KEY = "unlock_attempts"


def needs_password(outcome: IngestOutcome) -> bool:
    return outcome.state == "refused" and outcome.reason in PASSWORD_REASONS


def refusal_title(reason: str | None) -> str:
    return REFUSAL_TITLES.get(reason or "", "refused")


def follow_progress(stream: Iterable[events.IngestEvent], bar: Any) -> events.IngestEvent | None:
    """Drive a progress bar from ingestion ``stage`` events; the final done/error event."""

    def show(event: events.StageEvent) -> None:
        share, text = fmt.stage_progress(event)
        bar.progress(min(1.0, share), text=text)

    return follow(stream, show)


def watch(label: str, stream: Iterator[events.IngestEvent], name: str) -> IngestOutcome:
    """Run one ingestion or re-index stream inside an open status box with its progress bar."""
    with st.status(f"{fmt.escape_inline(label, 80)} — working…", expanded=True) as status:
        bar = st.progress(0.0, text="Starting…")
        outcome = IngestOutcome.from_event(follow_progress(stream, bar), name)
        bar.progress(1.0, text="Done" if outcome.state != "refused" else "Stopped")
        status.update(label=outcome_label(outcome), state=_status_state(outcome),
                      expanded=outcome.state == "refused")
        if outcome.state == "refused":
            st.markdown(fmt.escape_inline(outcome.message))
    return outcome


def ingest_one(ws: Workspace, name: str, data: bytes, mime: str | None = None) -> IngestOutcome:
    return watch(name, ws.ingest(name, data, mime=mime), name)


def index_samples(ws: Workspace) -> list[IngestOutcome]:
    """Index the bundled sample documents (already indexed ones are noted as duplicates)."""
    return [ingest_one(ws, path.name, path.read_bytes()) for path in sample_files()]


def _status_state(outcome: IngestOutcome) -> str:
    return "error" if outcome.state == "refused" else "complete"


def outcome_label(outcome: IngestOutcome) -> str:
    name = fmt.escape_inline(outcome.name, 80)
    if outcome.state == "indexed":
        label = f"{name} — indexed: {outcome.chunks} passage{'s' * (outcome.chunks != 1)}"
        if not has_pages(outcome.mime):  # a text or markdown file is not "1 page"
            return label
        pages = outcome.pages or 1
        return f"{label}, {pages} page{'s' * (pages != 1)}"
    if outcome.state == "duplicate":
        same = outcome.existing or outcome.name
        if same == outcome.name:
            return f"{name} — already in your library"
        return f"{name} — already in your library (as {fmt.escape_inline(same, 60)})"
    return f"{name} — refused: {refusal_title(outcome.reason)}"


def render_results(
    outcomes: list[IngestOutcome],
    ws: Workspace | None = None,
    locked: dict[int, tuple[bytes, str | None]] | None = None,
) -> None:
    """Outcomes of the last batch, as finished status boxes (refusals open, with the reason).

    ``locked`` maps an outcome's position to the bytes (and MIME type) of a password-protected
    file: its card then offers a password field, and a right password indexes it in place."""
    locked = locked if locked is not None else {}
    for i, outcome in enumerate(outcomes):
        with st.status(outcome_label(outcome), state=_status_state(outcome),
                       expanded=outcome.state == "refused"):
            if outcome.state == "refused":
                st.markdown(fmt.escape_inline(outcome.message))
                if ws is not None and i in locked and needs_password(outcome):
                    _password_form(ws, outcomes, locked, i)
            elif outcome.state == "duplicate":
                st.markdown(fmt.escape_inline(outcome.message or f"{outcome.name} is already "
                            "indexed.") + " It was not indexed a second time.")
            else:
                st.markdown("Ready to be asked about.")


def _password_form(
    ws: Workspace,
    outcomes: list[IngestOutcome],
    locked: dict[int, tuple[bytes, str | None]],
    i: int,
) -> None:
    """A password field for one locked file. The password lives only in the run that uses it:
    each attempt gets a fresh field (a new widget key), so Streamlit drops the old value from
    the session, and nothing stores or logs it."""
    name = outcomes[i].name
    attempt = st.session_state.setdefault(UNLOCK_ATTEMPTS_KEY, 0)
    with st.form(key=f"unlock-{i}-{attempt}", clear_on_submit=True, border=False):
        password = st.text_input(
            f"Password for {name}", type="password", key=f"unlock-password-{i}-{attempt}",
            placeholder="The password that opens this PDF", autocomplete="off",
        )
        submitted = st.form_submit_button("Unlock and index", icon=":material/lock_open:")
    if not submitted:
        return
    if not password:
        st.warning("Type the PDF's password first.", icon=":material/key:")
        return
    st.session_state[UNLOCK_ATTEMPTS_KEY] = attempt + 1
    data, mime = locked[i]
    outcome = watch(name, ws.ingest(name, data, mime=mime, password=password), name)
    del password
    outcomes[i] = outcome
    if not needs_password(outcome):
        locked.pop(i, None)  # indexed (or refused for another reason): the bytes can go
    st.rerun()
