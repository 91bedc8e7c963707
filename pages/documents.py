"""Documents: upload several files with progress per file, see what is indexed, delete, and
re-index documents that another embedder indexed."""

from __future__ import annotations

from datetime import datetime, timedelta

import pandas as pd
import streamlit as st

from marginalia_app import presentation as fmt
from marginalia_app.ingest_view import (
    awaits_person,
    index_samples,
    job_queue,
    locked_jobs,
    own_jobs,
    render_results,
    watch,
)
from marginalia_app.passages import MAX_INLINE_PDF_BYTES, OPEN_PDF_JS, has_pages, original_link
from marginalia_app.samples import samples_in_library
from marginalia_app.shell import page, page_script
from marginalia_core.errors import NotFoundError
from marginalia_core.ingest import formats

RECENT_REFUSAL_H = 24  # a refusal no open tab saw (a reload, another browser) is shown this long

ws = page()
settings = ws.settings
state = st.session_state
state.setdefault("uploader_generation", 0)


def _ask_delete() -> None:
    state["confirm_delete_documents"] = list(state.get("delete_selection") or [])


def _cancel_delete() -> None:
    state.pop("confirm_delete_documents", None)


def _delete(ids: list[str]) -> None:
    deleted = sum(ws.delete_document(i) for i in ids)
    state.pop("confirm_delete_documents", None)
    state["delete_selection"] = []
    state["flash"] = f"Deleted {fmt.plural(deleted, 'document')}."


def _clear_results() -> None:
    """Dismiss the last upload's outcomes here and in the library's job list, so a reload
    does not bring them back (a refusal still holding its upload stays: it awaits a person)."""
    state.pop("upload_results", None)
    state.pop("upload_batch_when", None)
    if state.pop("upload_batch", None) and (batch_id := state.pop("upload_batch_id", None)):
        ws.clear_finished_jobs(batch_id)


def _adopt_unseen_refusal() -> None:
    """Once per browser session, with no upload of its own: show the library's newest upload
    batch if it ended with a refusal in the last day. Its tab showed that as it happened; a
    reload, or the tab closed while the files were indexed in the background, would otherwise
    never say which file was not added and why."""
    if state.get("upload_batch") or state.get("upload_results") or state.get("_looked_back"):
        return
    state["_looked_back"] = True
    jobs = ws.jobs()
    ended = [j for j in jobs if not j.active and not j.resumable]
    if not ended:
        return
    batch_id = ended[0].batch_id  # the newest ended job's batch
    if any(j.batch_id == batch_id and (j.active or j.resumable) for j in jobs):
        return  # still indexing: the queue shows it, and its outcomes once it ends
    batch = sorted((j for j in ended if j.batch_id == batch_id), key=lambda j: j.position)
    finished = fmt.parse_created(max(j.finished or j.created for j in batch))
    recent = finished is not None and datetime.now() - finished < timedelta(hours=RECENT_REFUSAL_H)
    # a refusal still holding its upload (a password to give) has its own card below already
    if recent and any(j.status == "refused" and not j.has_data for j in batch):
        state["upload_batch"] = [j.id for j in batch]
        state["upload_batch_id"] = batch_id
        state["upload_batch_when"] = fmt.format_created(batch[0].created)


def _batch_outcomes() -> tuple[list, dict[int, str]] | None:
    """Outcomes of this session's last upload batch (its ended jobs, in upload order), and the
    job of each refusal a person can act on (a password, a near-duplicate's choice)."""
    ids = state.get("upload_batch")
    if not ids:
        return None
    ended, locked = [], {}
    for job_id in ids:
        try:
            job = ws.job(job_id)
        except NotFoundError:  # cleared meanwhile
            continue
        if not job.active:
            outcome = job.outcome()
            if awaits_person(outcome) and (job.needs_password or job.offers_replace):
                locked[len(ended)] = job.id
            ended.append(outcome)
    return ended, locked


st.title("Documents", anchor=False)
st.caption(
    f"{formats.upload_help()}, up to {settings.max_upload_mb:g} MB each. "
    + ("Everything is kept in the shared PostgreSQL library."
       if settings.database_url else "Everything stays in one SQLite file on this computer.")
)
if flash := state.pop("flash", None):
    st.success(flash, icon=":material/check_circle:")

# ---- documents indexed by another embedder cannot be searched until re-indexed
mismatch = ws.mismatch()
if mismatch is not None:
    embedder = ws.embedder
    stale = ws.stale_documents()
    with st.container(border=True):
        st.warning(fmt.escape_inline(mismatch.message), icon=":material/sync_problem:")
        if st.button(
            f"Re-index {fmt.plural(len(stale), 'document')} with {embedder.model}",
            type="primary",
            icon=":material/sync:",
            key="reindex_stale",
        ):
            for doc in stale:
                watch(f"{doc.name} (re-indexing)", ws.reindex(doc.id), doc.name)
            st.rerun()

# ---- upload
files = st.file_uploader(
    "Add documents",
    # no ``type=``: Streamlit's own extension check raises on a name with a NUL byte before
    # this page runs; the format table refuses an unsupported file with its reason instead
    accept_multiple_files=True,
    key=f"uploader-{state['uploader_generation']}",
    help="Choose or drop several files at once. Each is indexed on its own: one bad file "
    "never stops the others.",
)
if files:
    # a background job per file: leaving the page or closing the tab never stops them
    jobs = ws.submit((f.name, f.getvalue(), f.type) for f in files)
    own_jobs(jobs)
    state["upload_batch"] = [j.id for j in jobs]
    state["upload_batch_id"] = jobs[0].batch_id if jobs else None
    state.pop("upload_batch_when", None)
    state.pop("upload_results", None)
    state["uploader_generation"] += 1  # a fresh, empty uploader for the next batch
    st.rerun()

# ---- a web page: fetched now, only because it was asked for
with st.form("add_web_page", clear_on_submit=True, border=False):
    row = st.columns([5, 1], vertical_alignment="bottom")
    address = row[0].text_input(
        "Add a web page",
        placeholder="https://…",
        key="web_address",
        help="Fetched once, now, from this address (besides the model service, the only time "
        "Marginalia goes online); its main text is indexed and cited with its address.",
    )
    add_page = row[1].form_submit_button("Add page", icon=":material/public:")
if add_page and address.strip():
    shown = address.strip()
    state["upload_results"] = [watch(shown, ws.ingest_url(shown), shown)]
    state.pop("upload_batch", None)
    st.rerun()

job_queue(ws)

documents = ws.documents()

if state.get("index_samples_docs"):
    state.pop("index_samples_docs")
    state["upload_results"] = index_samples(ws)
    st.rerun()

_adopt_unseen_refusal()
locked: dict[int, str] = {}
results = state.get("upload_results")
if not results and (batch := _batch_outcomes()):
    results, locked = batch
if results:
    indexed = sum(r.state == "indexed" for r in results)
    refused = sum(r.state == "refused" for r in results)
    duplicate = sum(r.state == "duplicate" for r in results)
    summary = [f"{indexed} indexed"]
    if duplicate:
        summary.append(f"{duplicate} already in your library")
    if refused:
        summary.append(f"{refused} refused")
    head = st.container(horizontal=True, vertical_alignment="center")
    when = state.get("upload_batch_when") if not state.get("upload_results") else None
    head.markdown(f"**{f'Upload of {when}' if when else 'Last upload'}:** {', '.join(summary)}")
    head.button("Clear", key="clear_results", type="tertiary", icon=":material/close:",
                on_click=_clear_results)
    render_results(results, ws, locked)
locked_jobs(ws, besides=state.get("upload_batch") or ())

# ---- the library
st.subheader("Your library", anchor=False)
if not documents:
    with st.container(border=True):
        st.markdown(
            "**No documents yet.** Upload your own above, or add three short sample documents "
            "to see how cited answers work."
        )
        st.button(
            "Try it with sample documents",
            type="primary",
            icon=":material/auto_stories:",
            key="try_samples_docs",
            on_click=lambda: state.__setitem__("index_samples_docs", True),
        )
    st.stop()

table = pd.DataFrame(
    [
        {
            "Document": d.name,
            "Size": fmt.format_size(d.size),
            "Passages": d.chunk_count,
            # blank (not a grey "None") for a text or Markdown file, which has no pages
            "Pages": formats.extent(d.mime, d.page_count, formats.decode_units(
                d.locations, d.page_count)),
            "Text": fmt.ocr_label(d) or ("text layer" if formats.by_mime(d.mime).renders
                                         == "pdf" else "text"),
            "Read": fmt.health_summary(d),
            "Added": fmt.parse_created(d.created),
            "Embedder": f"{d.embed_model} ({d.embed_dim} d)",
            "Searchable": ws.is_searchable(d),
        }
        for d in documents
    ]
)
total_chunks = int(table["Passages"].sum())
st.caption(
    f"{fmt.plural(len(documents), 'document')} · {fmt.plural(total_chunks, 'passage')}"
)
st.dataframe(
    table,
    hide_index=True,
    width="stretch",
    column_config={
        "Document": st.column_config.TextColumn(width="medium"),
        "Passages": st.column_config.NumberColumn(help="Chunks of about 1,400 characters"),
        "Pages": st.column_config.TextColumn(
            help="A PDF's pages; the slides, sheet rows, chapters or sections of other "
            "documents (text files have none)"),
        "Added": st.column_config.DatetimeColumn(format="YYYY-MM-DD HH:mm"),
        "Text": st.column_config.TextColumn(
            help="Read from the PDF's text layer, or recognised from scanned pages by OCR"
        ),
        "Read": st.column_config.TextColumn(
            help="What could not be read well: pages with no text, garbled pages (broken "
            "characters), pages read by OCR, and tables found (their cells are read as text)"
        ),
        "Searchable": st.column_config.CheckboxColumn(
            help="Indexed by the active embedder, so it takes part in search"
        ),
    },
)

# ---- parse health: what was not read, page by page, before anyone asks about it
troubled = [d for d in documents if fmt.has_health_problems(d)]
if troubled:
    with st.expander(
        f"What was not read well ({fmt.plural(len(troubled), 'document')})",
        icon=":material/report:",
    ):
        for d in troubled:
            lines = "\n".join(f"- {fmt.escape_inline(line)}" for line in fmt.health_details(d))
            st.markdown(f"**{fmt.escape_inline(d.name, 80)}**\n\n{lines}")

# ---- web pages: fetched again on request
web_pages = [d for d in documents if d.source_url]
if web_pages:
    with st.expander("Refresh web pages", icon=":material/refresh:"):
        for doc in web_pages:
            line = st.container(horizontal=True, vertical_alignment="center")
            line.markdown(f"{fmt.escape_inline(doc.source_url or '', 90)}  \n"
                          f":gray[fetched {fmt.format_created(doc.fetched_at)}]")
            if line.button("Refresh", key=f"refresh-{doc.id}", icon=":material/refresh:"):
                state["upload_results"] = [watch(doc.name, ws.refresh(doc.id),
                                                 doc.name)]
                st.rerun()

# ---- open or download a document's kept original
by_id = {d.id: d for d in documents}
with st.expander("Open or download a document", icon=":material/file_open:"):
    chosen = st.selectbox(
        "Document",
        options=list(by_id),
        format_func=lambda i: f"{by_id[i].name} ({fmt.format_size(by_id[i].size)})",
        index=None,
        placeholder="Choose a document",
        key="original_choice",
    )
    if chosen:
        doc = by_id[chosen]
        original = ws.original(chosen)
        if original is None:
            st.caption("No original file is kept for this document: it was indexed before "
                       "originals were kept. Upload it again to keep it.")
        else:
            row = st.container(horizontal=True, vertical_alignment="center", gap="medium")
            with row:
                if has_pages(doc.mime) and len(original) <= MAX_INLINE_PDF_BYTES:
                    st.html(original_link(original, 1, "Open the PDF ↗"))
                st.download_button(
                    "Download the original", data=original, file_name=doc.name,
                    mime=doc.mime or "application/octet-stream", on_click="ignore",
                    icon=":material/download:", key="download_original",
                )
            page_script("open_pdf", OPEN_PDF_JS)

# ---- delete, with a confirmation
pending = [i for i in state.get("confirm_delete_documents") or [] if i in by_id]
with st.expander("Delete documents", icon=":material/delete:", expanded=bool(pending)):
    st.multiselect(
        "Documents to delete",
        options=list(by_id),
        format_func=lambda i: (
            f"{by_id[i].name} ({fmt.format_size(by_id[i].size)}, "
            f"added {fmt.format_created(by_id[i].created)})"
        ),
        key="delete_selection",
        placeholder="Choose one or more documents",
    )
    if pending:
        passages = sum(by_id[i].chunk_count for i in pending)
        names = ", ".join(f"“{fmt.escape_inline(by_id[i].name, 60)}”" for i in pending)
        st.warning(
            f"Delete {names} and {passages} passages? Saved conversations keep the passages "
            "they cited. This cannot be undone.",
            icon=":material/warning:",
        )
        yes, no, _ = st.columns([1, 1, 3])
        yes.button("Yes, delete", type="primary", key="confirm_delete",
                   on_click=_delete, args=(pending,), width="stretch")
        no.button("Cancel", key="cancel_delete", on_click=_cancel_delete, width="stretch")
    else:
        st.button(
            "Delete selected…",
            key="delete_documents",
            icon=":material/delete:",
            disabled=not state.get("delete_selection"),
            on_click=_ask_delete,
        )

if not samples_in_library(documents):
    st.divider()
    st.caption("Want to see it in action? The sample documents are small and work offline.")
    st.button(
        "Add the sample documents",
        icon=":material/auto_stories:",
        key="add_samples",
        on_click=lambda: state.__setitem__("index_samples_docs", True),
    )
