"""``python -m marginalia_core``: ingest, search, ask, list and delete, printing the same events as
the app consumes, one JSON object per line (NDJSON), for scripting, debugging and benchmarks.

Expected failures print a message on stderr (never a traceback) and exit non-zero.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, TextIO

from marginalia_core import __version__, events
from marginalia_core.config import ON_DUPLICATE_CHOICES, RETRIEVAL_MODES, load_settings, mask_url
from marginalia_core.errors import MarginaliaError
from marginalia_core.ingest.web import is_web_address
from marginalia_core.lab import RetrievalLab
from marginalia_core.store import copy_to_postgres
from marginalia_core.store.base import is_postgres_url
from marginalia_core.workspace import Workspace

EXIT_OK = 0
EXIT_REFUSED = 1  # some input was refused (bad file, answer error)
EXIT_USAGE = 2
EXIT_INTERNAL = 3


def _common(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("settings (override environment variables)")
    g.add_argument("--db", help="SQLite file (MARGINALIA_DB, default data/marginalia.db), or a "
                   "postgresql:// URL (MARGINALIA_DATABASE_URL; prefer the variable for passwords)")
    g.add_argument("--embedder", help="local | gemini | openai (MARGINALIA_EMBEDDER)")
    g.add_argument("--answerer", help="extractive | gemini | openai (MARGINALIA_ANSWERER)")
    g.add_argument("--k", type=int, help="passages to retrieve (MARGINALIA_TOP_K)")
    g.add_argument("--threshold", type=float, help="minimum cosine score (embedder default)")
    g.add_argument("--mode", choices=RETRIEVAL_MODES, help="retrieval mode (default hybrid)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m marginalia_core",
        description="Marginalia: chat with your documents, with cited passages.",
    )
    parser.add_argument("--version", action="version", version=f"marginalia {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("ingest", help="index files (PDF, Word, PowerPoint, Excel, CSV, ODT, EPUB, "
                       "HTML, TXT, MD) or web pages (https://...); prints stage/done/error events")
    p.add_argument("files", nargs="+", metavar="FILE_OR_URL")
    pw = p.add_mutually_exclusive_group()
    pw.add_argument("--password", help="password for encrypted PDFs (visible to other users "
                    "of this machine in the process list: prefer --password-file)")
    pw.add_argument("--password-file", metavar="PATH",
                    help="read the password from the first line of PATH ('-': standard input)")
    p.add_argument("--target", type=int, help="chunk size in characters (default 1400)")
    p.add_argument("--overlap", type=int, help="chunk overlap in characters (default 200)")
    p.add_argument("--on-duplicate", choices=ON_DUPLICATE_CHOICES,
                   help="a file whose text matches a document already indexed: refuse it "
                   "(default; the error names that document) or replace that document with it "
                   "(MARGINALIA_ON_DUPLICATE)")
    _common(p)

    p = sub.add_parser("search", help="ranked passages for QUERY ('-' reads one query per line)")
    p.add_argument("query", metavar="QUERY")
    _common(p)

    p = sub.add_parser("ask", help="a cited answer, streamed as meta/token/done events")
    p.add_argument("question", metavar="QUESTION")
    p.add_argument("--conversation", metavar="ID", help="continue this conversation")
    scope = p.add_mutually_exclusive_group()
    scope.add_argument(
        "--document", action="append", metavar="ID", dest="documents",
        help="search only this document (repeatable); kept on the conversation",
    )
    scope.add_argument(
        "--all-documents", action="store_true",
        help="search every document again (clears the conversation's --document choice)",
    )
    output = p.add_mutually_exclusive_group()
    output.add_argument(
        "--text", dest="output", action="store_const", const="text",
        help="plain text for a person: the answer as it is written, then its sources "
        "(the default at a terminal)",
    )
    output.add_argument(
        "--json", dest="output", action="store_const", const="json",
        help="NDJSON events, meta/token.../done (the default when piped)",
    )
    _common(p)

    p = sub.add_parser("eval", help="retrieval metrics for a question set (see qsets)")
    p.add_argument("set", metavar="SET", help="question set name")
    p.add_argument("--alpha", type=float, help="hybrid: weight of the dense score (0-1)")
    p.add_argument("--config", help="use a saved configuration")
    p.add_argument("--save-config", metavar="NAME", help="save this configuration under NAME")
    p.add_argument("--compare", metavar="CONFIG", help="A/B against a saved configuration")
    p.add_argument("--sweep", choices=["threshold", "weight", "chunks"], help="run a sweep")
    p.add_argument("--target", type=int, help="passage size in characters (scratch index)")
    p.add_argument("--overlap", type=int, help="passage overlap in characters (scratch index)")
    p.add_argument("--answers", action="store_true",
                   help="also answer every question and measure the answers (containment, "
                   "refusals, citation precision/recall) against the set's expected answers")
    p.add_argument("--format", choices=["ndjson", "table"], default="ndjson")
    _common(p)

    p = sub.add_parser("qsets", help="question sets: list, import, export, delete")
    qsub = p.add_subparsers(dest="qsets_command", required=True, metavar="ACTION")
    q = qsub.add_parser("list", help="list question sets")
    _common(q)
    q = qsub.add_parser("import", help="import a CSV, a JSON-lines export or BEIR files")
    q.add_argument("file", metavar="FILE", help="question,document,page CSV; .jsonl; BEIR queries.jsonl")
    q.add_argument("--name", required=True, help="name of the new set")
    q.add_argument("--qrels", help="BEIR qrels .tsv (FILE is then queries.jsonl)")
    q.add_argument("--replace", action="store_true", help="replace a set of that name")
    _common(q)
    q = qsub.add_parser("export", help="print a set as JSON lines or CSV")
    q.add_argument("name", metavar="NAME")
    q.add_argument("--format", choices=["jsonl", "csv"], default="jsonl")
    _common(q)
    q = qsub.add_parser("delete", help="delete a question set")
    q.add_argument("name", metavar="NAME")
    _common(q)

    p = sub.add_parser("documents", help="list indexed documents")
    _common(p)
    p = sub.add_parser("delete", help="delete a document and its chunks")
    p.add_argument("id", metavar="ID")
    _common(p)
    p = sub.add_parser("refresh", help="fetch a web page document again; replaced if changed")
    p.add_argument("id", metavar="ID")
    _common(p)
    p = sub.add_parser("reindex", help="re-chunk/re-embed documents with the active embedder")
    p.add_argument("ids", nargs="*", metavar="ID", help="documents (default: those not searchable)")
    p.add_argument("--all", action="store_true", help="every document")
    p.add_argument("--target", type=int)
    p.add_argument("--overlap", type=int)
    _common(p)

    p = sub.add_parser(
        "conversations",
        help="list conversations (most recently updated first); search, rename or export one",
        description="conversations | conversations search TEXT | conversations rename ID TITLE"
        " | conversations export ID (Markdown with the cited passages, on stdout)",
    )
    p.add_argument("action", nargs="?", default="list",
                   choices=("list", "search", "rename", "export"))
    p.add_argument("args", nargs="*", metavar="ARG")
    _common(p)
    p = sub.add_parser("conversation", help="show a conversation's messages with their sources")
    p.add_argument("id", metavar="ID")
    _common(p)
    p = sub.add_parser("delete-conversation", help="delete a conversation and its messages")
    p.add_argument("id", metavar="ID")
    _common(p)
    p = sub.add_parser(
        "serve",
        help="the HTTP API (NDJSON streams, OpenAPI at /docs); --mcp adds the MCP server at /mcp",
        description="Serve the library over HTTP. Without MARGINALIA_API_TOKEN only this "
        "machine (127.0.0.1) may listen; with it every request needs 'Authorization: Bearer "
        "<token>'. MARGINALIA_API_CORS lists browser origins allowed (comma separated).",
    )
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1; another needs a token)")
    p.add_argument("--port", type=int, default=8502, help="port (default 8502)")
    p.add_argument("--mcp", action="store_true", help="also serve MCP (streamable HTTP) at /mcp")
    p.add_argument("--log-level", default="info",
                   choices=("critical", "error", "warning", "info", "debug"))
    _common(p)
    p = sub.add_parser("mcp", help="the MCP server on stdio, for an MCP host (Claude Desktop, ...)")
    _common(p)
    p = sub.add_parser(
        "migrate-store",
        help="copy the SQLite library (--db) into an empty PostgreSQL database, then verify it",
    )
    p.add_argument("--to", required=True, metavar="URL",
                   help="postgresql://user:password@host/dbname (must hold no library yet)")
    _common(p)
    return parser


def _emit(event: Mapping[str, Any], out: TextIO) -> None:
    out.write(events.to_json(event) + "\n")
    out.flush()


def _workspace(args: argparse.Namespace) -> Workspace:
    db = args.db
    if db and is_postgres_url(db):
        where: dict[str, Any] = {"database_url": db}
    elif db or args.command == "migrate-store":  # an explicit file wins over the URL variable
        where = {"db_path": db, "database_url": ""}
    else:
        where = {}
    settings = load_settings().with_overrides(
        **where,
        embedder=args.embedder,
        answerer=args.answerer,
        top_k=args.k,
        threshold=args.threshold,
        mode=args.mode,
        chunk_target=getattr(args, "target", None),
        chunk_overlap=getattr(args, "overlap", None),
        on_duplicate=getattr(args, "on_duplicate", None),
    )
    return Workspace(settings)


def _stream(events_: Iterable[events.Event], out: TextIO, err: TextIO, label: str) -> int:
    """Print a stream of events; EXIT_REFUSED if any was an error (said on stderr too)."""
    status = EXIT_OK
    for event in events_:
        _emit(event, out)
        if event["type"] == "error":
            status = EXIT_REFUSED
            err.write(f"{label}: {event['message']}\n")
    return status


def _password(args: argparse.Namespace) -> str | None:
    """The ingest password: ``--password``, or the first line of ``--password-file`` (``-`` for
    stdin), so scripts need neither a prompt nor an environment variable."""
    if not args.password_file:
        return args.password
    try:
        if args.password_file == "-":
            line = sys.stdin.readline()
        else:
            with open(args.password_file, encoding="utf-8") as fh:
                line = fh.readline()
    except OSError as exc:
        raise ValueError(f"cannot read the password file: {exc.strerror or exc}") from None
    password = line.rstrip("\r\n")
    if not password:
        raise ValueError("the password file is empty")
    return password


def cmd_ingest(ws: Workspace, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    password = _password(args)

    def each() -> Iterator[events.Event]:
        for item in args.files:  # in the order given; a web address is fetched, only here
            if is_web_address(item):
                yield from ws.ingest_url(item)
            else:
                yield from ws.ingest_files([item], password=password)

    return _stream(each(), out, err, "refused")


def cmd_refresh(ws: Workspace, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    return _stream(ws.refresh(args.id), out, err, "refresh failed")


def cmd_search(ws: Workspace, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    problem = ws.mismatch()
    if problem:
        err.write(f"warning: {problem.message}\n")
    queries: Iterable[str] = (
        (line.rstrip("\n") for line in sys.stdin) if args.query == "-" else [args.query]
    )
    for query in queries:
        if query.strip():
            _emit(ws.search_result(query), out)
    return EXIT_OK


def cmd_ask(ws: Workspace, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    documents = [] if args.all_documents else args.documents  # None: the conversation's own
    stream = ws.ask(args.question, conversation_id=args.conversation, documents=documents)
    output = args.output or ("text" if out.isatty() else "json")
    if output == "text":
        return _stream_text(stream, out, err, ws)
    return _stream(stream, out, err, "error")


def source_line(source: Mapping[str, Any], mime: str | None = None) -> str:
    """``[1] report.pdf, p. 3 (82 %)``: a source as a person reads it (pages only for PDFs,
    guessed from the name once the document is gone)."""
    name = " ".join(str(source.get("document_name", "")).split())
    line = f"[{source.get('n')}] {name}"
    from marginalia_core.ingest import formats

    row = formats.by_mime(mime) if mime else formats.by_name(name)
    paged = row is not None and row.renders == "pdf"
    if source.get("location"):
        line += f", {' '.join(str(source['location']).split())}"
    elif paged and source.get("page"):
        first, last = int(source["page"]), int(source.get("page_end") or source["page"])
        line += f", p. {first}" if last == first else f", pp. {first}-{last}"
    if source.get("score") is not None:
        line += f" ({round(float(source['score']) * 100)} %)"
    return line


def _stream_text(
    stream: Iterable[events.ChatEvent], out: TextIO, err: TextIO, ws: Workspace
) -> int:
    """The answer as plain text while it is written (its marks already in the final
    numbering), then the sources it cites with document and page."""
    ended_line = True
    for event in stream:
        if event["type"] == "token":
            out.write(event["text"])
            out.flush()
            ended_line = event["text"].endswith("\n")
        elif event["type"] == "error":
            if not ended_line:
                out.write("\n")
            err.write(f"error: {event['message']}\n")
            return EXIT_REFUSED
        elif event["type"] == "done":
            out.write("\n" if ended_line else "\n\n")
            if event.get("status") == "stopped":
                out.write("(stopped: the answer ends here)\n\n")
            sources = event.get("sources") or []
            if sources:
                mimes = {d.id: d.mime for d in ws.documents()}
                out.write("Sources\n")
                for source in sources:
                    out.write(f"  {source_line(source, mimes.get(source.get('document_id', '')))}\n")
                    excerpt = " ".join(str(source.get("excerpt") or "").split())
                    if excerpt:
                        short = excerpt if len(excerpt) <= 100 else excerpt[:99].rstrip() + "…"
                        out.write(f"      {short}\n")
            invalid = event.get("invalid_citations") or []
            if invalid:
                marks = ", ".join(f"[{n}]" for n in invalid)
                out.write(f"Not found in the sources: {marks}\n")
            out.write(f"Conversation {event.get('conversation_id')} "
                      "(continue it with --conversation ID)\n")
            out.flush()
    return EXIT_OK


def cmd_documents(ws: Workspace, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    for doc in ws.documents():
        _emit({"type": "document", **doc.to_dict()}, out)
    return EXIT_OK


def cmd_delete(ws: Workspace, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    if not ws.delete_document(args.id):
        raise MarginaliaError(f"No document with id {args.id!r}.")
    _emit(events.done(deleted=args.id), out)
    return EXIT_OK


def cmd_reindex(ws: Workspace, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    which: Any = list(args.ids) if args.ids else (
        "all" if args.all or args.target or args.overlap is not None else "stale"
    )
    return _stream(ws.reindex_many(which, target=args.target, overlap=args.overlap), out, err,
                   "error")


_CONVERSATIONS_ARGS = {"list": 0, "search": 1, "rename": 2, "export": 1}


def cmd_conversations(ws: Workspace, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    action, rest = args.action, list(args.args)
    if action == "rename" and len(rest) > 2:
        rest = [rest[0], " ".join(rest[1:])]  # an unquoted title of several words
    if action == "search" and len(rest) > 1:
        rest = [" ".join(rest)]
    if len(rest) != _CONVERSATIONS_ARGS[action]:
        raise ValueError(f"conversations {action} takes {_CONVERSATIONS_ARGS[action]} argument(s)")
    if action == "export":
        _, markdown = ws.export_conversation(rest[0])
        out.write(markdown)
        return EXIT_OK
    if action == "rename":
        _emit({"type": "conversation", **ws.rename_conversation(rest[0], rest[1]).to_dict()}, out)
        return EXIT_OK
    found = ws.search_conversations(rest[0]) if action == "search" else ws.conversations()
    for listed in found:
        _emit({"type": "conversation", **listed.to_dict()}, out)
    return EXIT_OK


def cmd_conversation(ws: Workspace, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    _emit({"type": "conversation", **ws.conversation(args.id).to_dict()}, out)
    for msg in ws.messages(args.id):
        _emit({"type": "message", **msg.to_dict()}, out)
    return EXIT_OK


def cmd_delete_conversation(
    ws: Workspace, args: argparse.Namespace, out: TextIO, err: TextIO
) -> int:
    if not ws.delete_conversation(args.id):
        raise MarginaliaError(f"No conversation with id {args.id!r}.")
    _emit(events.done(deleted=args.id), out)
    return EXIT_OK


def _eval_config(lab: RetrievalLab, args: argparse.Namespace):
    from dataclasses import replace

    cfg = lab.config(args.config) if args.config else lab.default_config()
    overrides = {
        "mode": args.mode, "threshold": args.threshold, "top_k": args.k, "alpha": args.alpha,
        "chunk_target": args.target, "chunk_overlap": args.overlap,
    }
    return replace(cfg, **{k: v for k, v in overrides.items() if v is not None})


def _table(rows: list[list[Any]], head: list[str]) -> str:
    cells = [head] + [["" if c is None else (f"{c:.4f}" if isinstance(c, float) else str(c))
                       for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines) + "\n"


def cmd_eval(ws: Workspace, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from dataclasses import asdict

    lab = RetrievalLab(ws)
    cfg = _eval_config(lab, args)
    if args.save_config:
        lab.save_config(args.save_config, cfg)
    table = args.format == "table"
    if args.sweep == "threshold":
        sw = lab.threshold_sweep(args.set, mode=cfg.mode, top_k=cfg.top_k, alpha=cfg.alpha)
        if table:
            out.write(_table([[p.threshold, p.precision, p.recall, p.f1, p.returned, p.answered]
                              for p in sw.points],
                             ["threshold", "precision", "recall", "F1", "returned", "answered"]))
            out.write(f"current {sw.current}  suggested {sw.suggested}\n")
        else:
            _emit({"type": "threshold_sweep", **asdict(sw)}, out)
        return EXIT_OK
    if args.sweep == "weight":
        wsw = lab.weight_sweep(args.set, cfg)
        if table:
            keys = list(wsw.points[0].metrics)
            out.write(_table([["default" if p.alpha is None else p.alpha,
                               *[p.metrics[k] for k in keys]] for p in wsw.points],
                             ["alpha", *keys]))
        else:
            _emit({"type": "weight_sweep", **asdict(wsw)}, out)
        return EXIT_OK
    if args.sweep == "chunks":
        csw = lab.chunk_sweep(args.set, config=cfg,
                                progress=None if table else (lambda e: _emit(e, out)))
        if table:
            keys = list(csw.points[0].result.metrics)
            out.write(_table([[p.target, p.overlap, p.chunks, p.embedded_now,
                               *[p.result.metrics[k] for k in keys]] for p in csw.points],
                             ["target", "overlap", "passages", "embedded", *keys]))
        else:
            for p in csw.points:
                _emit({"type": "chunk_point", "target": p.target, "overlap": p.overlap,
                       "chunks": p.chunks, "embedded_now": p.embedded_now,
                       "metrics": p.result.metrics}, out)
        return EXIT_OK
    if args.answers:
        return _eval_answers(lab, args, cfg, out)
    if args.compare:
        cmp = lab.compare(args.set, cfg, args.compare)
        if table:
            keys = list(cmp.a.metrics)
            out.write(_table([[k, cmp.a.metrics[k], cmp.b.metrics[k]] for k in keys],
                             ["metric", "A (this)", f"B ({args.compare})"]))
            out.write(_table([[d.question_id, d.rank_a, d.rank_b, d.shift, "; ".join(d.gained),
                               "; ".join(d.lost)] for d in cmp.deltas],
                             ["question", "rank A", "rank B", "shift", "gained", "lost"]))
        else:
            _emit({"type": "comparison", "a": cmp.a.metrics, "b": cmp.b.metrics,
                   "better": cmp.better, "worse": cmp.worse,
                   "deltas": [asdict(d) for d in cmp.deltas]}, out)
        return EXIT_OK
    result = lab.evaluate(args.set, cfg)
    if table:
        out.write(_table([[q.question_id, q.first_relevant_rank, q.recall, q.reciprocal_rank,
                           q.ndcg, q.question[:60]] for q in result.questions],
                         ["question", "first relevant", "recall", "RR", "nDCG@10", "text"]))
        out.write(_table([[k, v] for k, v in result.metrics.items()], ["metric", "value"]))
    else:
        for q in result.questions:
            _emit({"type": "question", **asdict(q)}, out)
        _emit({"type": "metrics", "set": result.set_name, "config": result.config.to_dict(),
               "threshold": result.threshold, "metrics": result.metrics}, out)
    return EXIT_OK


def answer_figures(result: Any) -> list[tuple[str, float | None]]:
    """The figures of an answer evaluation, as the lab page shows them: the answer metrics,
    then the retrieval metrics of the same run."""
    from marginalia_core.chat.answer_metrics import ANSWER_METRICS

    return ([(k, result.metrics[k]) for k in ANSWER_METRICS]
            + [(k, v) for k, v in result.retrieval.metrics.items() if k != "questions"])


def _eval_answers(lab: RetrievalLab, args: argparse.Namespace, cfg: Any, out: TextIO) -> int:
    runs = [("A (this)", lab.evaluate_answers(args.set, cfg))]
    if args.compare:
        runs.append((f"B ({args.compare})",
                     lab.evaluate_answers(args.set, lab.config(args.compare))))
    if args.format == "table":
        for name, result in runs:
            out.write(f"{name}: answered by {result.answerer}\n")
            out.write(_table([[a.question_id, a.expected[:30], a.refused, a.contains,
                               a.first_contains, a.citation_precision, a.citation_recall]
                              for a in result.answers],
                             ["question", "expected", "refused", "contains", "first sentence",
                              "cit. precision", "cit. recall"]))
        figures = [answer_figures(r) for _, r in runs]
        out.write(_table([[k, *[dict(f)[k] for f in figures]] for k, _ in figures[0]],
                         ["metric", *[n for n, _ in runs]]))
        return EXIT_OK
    for name, result in runs:
        for a in result.answers:
            _emit({"type": "answer", "run": name, **a.to_dict()}, out)
        _emit({"type": "answer_metrics", "run": name, "set": result.set_name,
               "config": result.config.to_dict(), "answerer": result.answerer,
               "metrics": dict(answer_figures(result))}, out)
    return EXIT_OK


def cmd_qsets(ws: Workspace, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from dataclasses import asdict

    lab = RetrievalLab(ws)
    action = args.qsets_command
    if action == "list":
        for s in lab.list_sets():
            _emit({"type": "question_set", **asdict(s)}, out)
    elif action == "import":
        s = lab.import_set(args.file, name=args.name, qrels=args.qrels, replace=args.replace)
        _emit({"type": "done", "imported": asdict(s)}, out)
    elif action == "export":
        out.write(lab.export_set(args.name, args.format))
    elif action == "delete":
        if not lab.delete_set(args.name):
            raise MarginaliaError(f"No question set named {args.name!r}.")
        _emit(events.done(deleted=args.name), out)
    return EXIT_OK


def cmd_migrate_store(ws: Workspace, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """SQLite -> PostgreSQL with nothing lost: one transaction, then counts and vectors compared."""
    if not is_postgres_url(args.to):
        raise ValueError("--to must be a postgresql:// URL")
    if ws.store.backend != "sqlite":
        raise ValueError("migrate-store copies a SQLite library: give its file with --db")
    report = copy_to_postgres(ws.store, args.to)
    counts = {t: {"sqlite": a, "postgresql": b} for t, (a, b) in report["counts"].items()}
    _emit({"type": "done" if report["ok"] else "error", "from": ws.store.location,
           "to": mask_url(args.to), "counts": counts,
           "vectors_compared": report["vectors_compared"],
           "vectors_equal": report["vectors_equal"]}, out)
    if not report["ok"]:
        err.write("error: the copy does not match the source (see the counts above)\n")
        return EXIT_INTERNAL
    return EXIT_OK


def cmd_serve(ws: Workspace, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from marginalia_core.api.server import serve

    serve(ws, host=args.host, port=args.port, mcp=args.mcp, log_level=args.log_level, err=err)
    return EXIT_OK


def cmd_mcp(ws: Workspace, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from marginalia_core.api.server import serve_mcp_stdio

    serve_mcp_stdio(ws)
    return EXIT_OK


COMMANDS = {
    "serve": cmd_serve,
    "mcp": cmd_mcp,
    "migrate-store": cmd_migrate_store,
    "eval": cmd_eval,
    "qsets": cmd_qsets,
    "ingest": cmd_ingest,
    "refresh": cmd_refresh,
    "search": cmd_search,
    "ask": cmd_ask,
    "documents": cmd_documents,
    "delete": cmd_delete,
    "reindex": cmd_reindex,
    "conversations": cmd_conversations,
    "conversation": cmd_conversation,
    "delete-conversation": cmd_delete_conversation,
}


def main(
    argv: Sequence[str] | None = None, out: TextIO | None = None, err: TextIO | None = None
) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    handler = logging.StreamHandler(err)  # per call, so in-process callers get their own stream
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    handler.setLevel(logging.WARNING)
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        return _run(argv, out, err)
    finally:
        root.removeHandler(handler)


def _run(argv: Sequence[str] | None, out: TextIO, err: TextIO) -> int:
    args = build_parser().parse_args(argv)
    ws = None
    try:
        ws = _workspace(args)
        return COMMANDS[args.command](ws, args, out, err)
    except MarginaliaError as exc:
        err.write(f"error: {exc.message}\n")
        return EXIT_REFUSED
    except (ValueError, ConnectionError) as exc:
        err.write(f"error: {mask_url(str(exc))}\n")
        return EXIT_USAGE
    except KeyboardInterrupt:
        err.write("interrupted\n")
        return 130
    except BrokenPipeError:
        return EXIT_OK
    except Exception as exc:  # noqa: BLE001 - the user gets a line, the log the details
        logging.getLogger(__name__).debug("unexpected", exc_info=True)
        err.write(f"error: unexpected {type(exc).__name__}: {mask_url(str(exc))}\n")
        return EXIT_INTERNAL
    finally:
        if ws is not None:
            ws.close()
