"""Ingestion as a person watches it: a visible progress bar per file driven by the ingestion
events, the background jobs (a compact indicator on every page, the queue with cancel and
resume on Documents) and the outcome of each file (indexed, already in the library, or refused
and why)."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from typing import Any

import streamlit as st

from marginalia_app import presentation as fmt
from marginalia_app.samples import sample_files
from marginalia_core import events
from marginalia_core.errors import NotFoundError
from marginalia_core.ingest import formats
from marginalia_core.ingest.jobs import Job, Upload
from marginalia_core.ingest.pipeline import IngestOutcome, follow
from marginalia_core.workspace import Workspace

# How often the job indicator and the queue refresh themselves (a fragment rerun, not the page)
# while a job is queued or running; with none, a slow poll only notices a job another tab or
# the CLI submitted (an idle app makes no work every 1.5 s for each open tab).
JOB_POLL_S = 1.5
JOB_IDLE_POLL_S = 10.0
# A job that ended while a tab was not looking (submitted by another tab or the CLI, and short
# enough to start and end between two idle polls) is announced in that tab's indicator for
# this long after the tab first sees it, so an idle tab notices every job, however short.
ENDED_NOTICE_S = 30.0
NOTICED_KEY = "jobs_noticed"  # session state: job id -> when this tab first saw it (monotonic)
FIRST_LOOK = ""  # its key for the tab's first look
OWN_UNTIL = "own"  # its key for when this tab last submitted jobs itself (epoch seconds)

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
    "cancelled": "cancelled",
    "interrupted": "interrupted",
    "near_duplicate": "the same text is already indexed",
}


# Refusals a password can lift: the card asks for it (and says when a given one was wrong).
PASSWORD_REASONS = frozenset({"encrypted", "wrong_password"})
UNLOCK_ATTEMPTS_KEY = "unlock_attempts"


def needs_password(outcome: IngestOutcome) -> bool:
    return outcome.state == "refused" and outcome.reason in PASSWORD_REASONS


def offers_replace(outcome: IngestOutcome) -> bool:
    """Refused as a near-duplicate of an indexed document: the card offers to replace it."""
    return outcome.state == "refused" and outcome.reason == "near_duplicate"


def awaits_person(outcome: IngestOutcome) -> bool:
    """A refusal a person can act on (its job kept the bytes): a password, or a choice."""
    return needs_password(outcome) or offers_replace(outcome)


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


def own_jobs(jobs: Iterable[Job] = ()) -> None:
    """Jobs this tab submitted (or runs inline) are not news to it: the indicator will not
    announce them as having ended elsewhere."""
    noticed = st.session_state.setdefault(NOTICED_KEY, {})
    noticed[OWN_UNTIL] = time.time()
    for job in jobs:
        noticed[job.id] = time.monotonic() - ENDED_NOTICE_S


def index_samples(ws: Workspace) -> list[IngestOutcome]:
    """Index the bundled sample documents now (they are small), as recorded jobs like any
    upload; already indexed ones are noted as duplicates."""
    outcomes = [
        watch(path.name, ws.job_queue.run_inline([Upload(path.name, path.read_bytes())]),
              path.name)
        for path in sample_files()
    ]
    own_jobs()  # after: the jobs just run are older than this mark
    return outcomes


def _status_state(outcome: IngestOutcome) -> str:
    return "error" if outcome.state == "refused" else "complete"


def outcome_label(outcome: IngestOutcome) -> str:
    name = fmt.escape_inline(outcome.name, 80)
    if outcome.state == "indexed":
        label = f"{name} — indexed: {fmt.plural(outcome.chunks, 'passage')}"
        extent = formats.extent(outcome.mime, outcome.pages or 1)
        if not extent:  # a text or markdown file is not "1 page"
            return label
        if extent.isdigit():
            return f"{label}, {extent} page{'s' * (extent != '1')}"
        return f"{label}, {extent}"
    if outcome.state == "duplicate":
        same = outcome.existing or outcome.name
        if same == outcome.name:
            return f"{name} — already in your library"
        return f"{name} — already in your library (as {fmt.escape_inline(same, 60)})"
    if outcome.reason in ("cancelled", "interrupted"):
        return f"{name} — {outcome.reason}"
    return f"{name} — refused: {refusal_title(outcome.reason)}"


def render_results(
    outcomes: list[IngestOutcome],
    ws: Workspace | None = None,
    locked: dict[int, str] | None = None,
) -> None:
    """Outcomes of the last batch, as finished status boxes (refusals open, with the reason).

    ``locked`` maps an outcome's position to the job of a refusal a person can act on: a
    password-protected file's card offers a password field, a near-duplicate's the choice to
    replace the document it matches; the job then runs again."""
    locked = locked if locked is not None else {}
    for i, outcome in enumerate(outcomes):
        with st.status(outcome_label(outcome), state=_status_state(outcome),
                       expanded=outcome.state == "refused"):
            if outcome.state == "refused":
                st.markdown(fmt.escape_inline(outcome.message))
                if ws is not None and i in locked and needs_password(outcome):
                    password_form(ws, outcome.name, locked[i])
                elif ws is not None and i in locked and offers_replace(outcome):
                    replace_choice(ws, locked[i], outcome.document_id)
            elif outcome.state == "duplicate":
                st.markdown(fmt.escape_inline(outcome.message or f"{outcome.name} is already "
                            "indexed.") + " It was not indexed a second time.")
            else:
                st.markdown("Ready to be asked about.")


def password_form(ws: Workspace, name: str, job_id: str) -> None:
    """A password field for one locked file (its refused job kept the bytes). The password
    lives only in the run that uses it: each attempt gets a fresh field (a new widget key), so
    Streamlit drops the old value from the session; the job gets it in memory, never stored."""
    attempt = st.session_state.setdefault(UNLOCK_ATTEMPTS_KEY, 0)
    with st.form(key=f"unlock-{job_id}-{attempt}", clear_on_submit=True, border=False):
        password = st.text_input(
            f"Password for {name}", type="password", key=f"unlock-password-{job_id}-{attempt}",
            placeholder="The password that opens this PDF", autocomplete="off",
        )
        submitted = st.form_submit_button("Unlock and index", icon=":material/lock_open:")
    if not submitted:
        return
    if not password:
        st.warning("Type the PDF's password first.", icon=":material/key:")
        return
    st.session_state[UNLOCK_ATTEMPTS_KEY] = attempt + 1
    ws.resume(job_id, password=password)  # the job runs again in the background
    del password
    st.rerun()


def replace_choice(ws: Workspace, job_id: str, existing_id: str | None) -> None:
    """A near-duplicate's choice: replace the indexed document it matches (same id, so
    conversations limited to it keep it), or keep that one and forget this upload."""
    try:
        existing = ws.document(existing_id).name if existing_id else None
    except NotFoundError:
        existing = None
    if existing is None:  # deleted meanwhile: nothing to replace, index it as it is
        label = "Index it anyway"
    else:
        label = f"Replace “{fmt.escape_inline(existing, 50)}”"
    row = st.container(horizontal=True)
    if row.button(label, key=f"replace-{job_id}", type="primary", icon=":material/swap_horiz:",
                  help="Index this file in place of the document it matches"):
        ws.resume(job_id, replace=True)
        st.rerun()
    row.button("Keep the one I have", key=f"keep-{job_id}", icon=":material/close:",
               on_click=_cancel, args=(ws, job_id),
               help="Forget this upload (its bytes are deleted)")


def locked_jobs(ws: Workspace, *, besides: Iterable[str] = ()) -> None:
    """Refusals a person can act on that this session's last upload does not show (PDFs
    waiting for their password, near-duplicates waiting for a choice): uploaded in another
    tab or before a reload, they keep their card until someone acts or discards them, so a
    refusal never becomes a dead end."""
    skip = set(besides)
    waiting = [j for j in ws.jobs()
               if (j.needs_password or j.offers_replace) and j.id not in skip]
    if not waiting:
        return
    st.subheader("Waiting for you", anchor=False)
    for job in waiting:
        label = f"{job_title(job)} — {refusal_title(job.reason)}"
        with st.status(label, state="error", expanded=True):
            st.markdown(fmt.escape_inline(job.message))
            if job.offers_replace:
                replace_choice(ws, job.id, job.document_id)
                continue
            password_form(ws, job.name, job.id)
            st.button("Discard", key=f"discard-locked-{job.id}", type="tertiary",
                      icon=":material/close:", on_click=_cancel, args=(ws, job.id),
                      help="Forget this upload (its bytes are deleted); upload it again later.")


# --------------------------------------------------------------------------- background jobs


def job_title(job: Job) -> str:
    return fmt.escape_inline(job.name, 70)


def poll_interval(jobs: Iterable[Job]) -> float:
    """Seconds between refreshes of a job view: fast while any job is queued or running."""
    return JOB_POLL_S if any(j.active for j in jobs) else JOB_IDLE_POLL_S


def _polled(view: Any) -> tuple[Any, Any]:
    """``view(ws, jobs, *args)`` as two fragments, one refreshing every JOB_POLL_S and one
    every JOB_IDLE_POLL_S. Each reruns the whole app when what it sees no longer matches its
    rate (a job appeared, or the last one ended), so the next run picks the other."""

    def run(ws: Workspace, *args: Any, busy: bool) -> None:
        jobs = ws.jobs()
        view(ws, jobs, *args)
        if (poll_interval(jobs) == JOB_POLL_S) != busy:
            st.rerun(scope="app")

    def fast(ws: Workspace, *args: Any) -> None:
        run(ws, *args, busy=True)

    def idle(ws: Workspace, *args: Any) -> None:
        run(ws, *args, busy=False)

    # distinct names: Streamlit tells fragments apart by qualified name (and place on the page)
    fast.__qualname__ = f"{view.__name__}_fast"
    idle.__qualname__ = f"{view.__name__}_idle"
    return st.fragment(fast, run_every=JOB_POLL_S), st.fragment(idle, run_every=JOB_IDLE_POLL_S)


def unseen_ended(jobs: list[Job], noticed: dict[str, float], now: float) -> tuple[list[Job], bool]:
    """(jobs that ended without this tab having seen them run, still to be announced; whether
    one of them is news now). A tab's first look only records what is there: old jobs are
    not news."""
    first_look = FIRST_LOOK not in noticed
    noticed.setdefault(FIRST_LOOK, now)
    out, news = [], False
    own_until = noticed.get(OWN_UNTIL, 0.0)
    for job in jobs:
        if job.id not in noticed:
            created = fmt.parse_created(job.created)
            own = created is not None and created.timestamp() <= own_until
            seen_running = first_look or own or job.active or job.resumable
            noticed[job.id] = now - ENDED_NOTICE_S if seen_running else now
            news = news or not seen_running
        if not job.active and not job.resumable and now - noticed[job.id] < ENDED_NOTICE_S:
            out.append(job)
    return out, news


def _show_indicator(ws: Workspace, jobs: list[Job], documents_page: Any) -> None:
    active = [j for j in jobs if j.active]
    interrupted = [j for j in jobs if j.resumable]
    noticed = st.session_state.setdefault(NOTICED_KEY, {})
    ended, news = unseen_ended(jobs, noticed, time.monotonic())
    if news:
        st.rerun(scope="app")  # the library changed under this page: show it
    if not active and not interrupted and not ended:
        return
    with st.container(border=True, key="job_indicator"):
        for job in ended[:3]:
            st.caption(f":material/check_circle: {job_title(job)} — "
                       f"{outcome_label(job.outcome()).split(' — ', 1)[-1]}")
        if active:
            running = [j for j in active if j.status == "running"]
            waiting = len(active) - len(running)
            head = f"**Indexing {fmt.plural(len(active), 'file')}**"
            if waiting:
                head += f" · {waiting} waiting"
            st.markdown(head)
            for job in running[:2]:
                share, line = fmt.job_progress(job)
                st.progress(min(1.0, share), text=f"{job_title(job)} — {line}")
        if interrupted:
            st.caption(f"{len(interrupted)} upload{'s were' if len(interrupted) != 1 else ' was'}"
                       " interrupted and can be resumed.")
        st.page_link(documents_page, label="Open the queue", icon=":material/list:")


_indicator_fast, _indicator_idle = _polled(_show_indicator)


def job_indicator(ws: Workspace, documents_page: Any) -> None:
    """Every page's sidebar: the jobs running in the background, compactly, refreshed in
    place; interrupted uploads point to the Documents page."""
    busy = poll_interval(ws.jobs()) == JOB_POLL_S
    (_indicator_fast if busy else _indicator_idle)(ws, documents_page)


def _cancel(ws: Workspace, job_id: str) -> None:
    ws.cancel(job_id)


def _resume(ws: Workspace, job_id: str | None) -> None:
    ws.resume(job_id)


def _show_queue(ws: Workspace, jobs: list[Job]) -> None:
    shown = [j for j in jobs if j.active or j.resumable]
    seen = set(st.session_state.get("jobs_seen_active", ()))
    now_active = {j.id for j in jobs if j.active}
    st.session_state["jobs_seen_active"] = sorted(now_active)
    if seen - now_active:
        st.rerun(scope="app")
    if not shown:
        return
    st.subheader("Indexing", anchor=False)
    interrupted = [j for j in shown if j.resumable]
    if len(interrupted) > 1:
        st.button(f"Resume all {len(interrupted)} interrupted uploads", icon=":material/replay:",
                  key="resume_all_jobs", on_click=_resume, args=(ws, None))
    for job in shown:
        with st.container(border=True, key=f"job-{job.id}"):
            row = st.columns([5, 1], vertical_alignment="center")
            with row[0]:
                if job.resumable:
                    st.markdown(f"**{job_title(job)}** — interrupted")
                    st.caption(fmt.escape_inline(job.message))
                else:
                    share, line = fmt.job_progress(job)
                    st.markdown(f"**{job_title(job)}**")
                    st.progress(min(1.0, share), text=line)
            with row[1]:
                if job.resumable:
                    st.button("Resume", key=f"resume-{job.id}", icon=":material/replay:",
                              on_click=_resume, args=(ws, job.id), width="stretch")
                    st.button("Discard", key=f"discard-{job.id}", type="tertiary",
                              on_click=_cancel, args=(ws, job.id), width="stretch")
                else:
                    st.button("Cancel", key=f"cancel-{job.id}", icon=":material/cancel:",
                              on_click=_cancel, args=(ws, job.id), width="stretch",
                              disabled=job.cancel_requested)


_queue_fast, _queue_idle = _polled(_show_queue)


def job_queue(ws: Workspace) -> None:
    """The Documents page's queue: running and waiting jobs with cancel, interrupted ones with
    resume or discard. When a job this view saw running ends, the whole page reruns so the
    library and the results show it."""
    busy = poll_interval(ws.jobs()) == JOB_POLL_S
    (_queue_fast if busy else _queue_idle)(ws)
