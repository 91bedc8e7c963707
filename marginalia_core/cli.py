"""``python -m marginalia_core``: ingest, search, ask, list and delete, printing the same events as
the app consumes, one JSON object per line (NDJSON), for scripting, debugging and benchmarks.

Expected failures print a message on stderr (never a traceback) and exit non-zero.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Iterable, Sequence
from typing import Any, TextIO

from marginalia_core import __version__, events
from marginalia_core.config import RETRIEVAL_MODES, load_settings
from marginalia_core.errors import MarginaliaError
from marginalia_core.workspace import Workspace

EXIT_OK = 0
EXIT_REFUSED = 1  # some input was refused (bad file, answer error)
EXIT_USAGE = 2
EXIT_INTERNAL = 3


def _common(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("settings (override environment variables)")
    g.add_argument("--db", help="SQLite file (MARGINALIA_DB, default data/marginalia.db)")
    g.add_argument("--embedder", help="local | gemini (MARGINALIA_EMBEDDER)")
    g.add_argument("--answerer", help="extractive | gemini (MARGINALIA_ANSWERER)")
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

    p = sub.add_parser("ingest", help="index files (PDF, TXT, MD); prints stage/done/error events")
    p.add_argument("files", nargs="+", metavar="FILE")
    p.add_argument("--password", help="password for encrypted PDFs")
    p.add_argument("--target", type=int, help="chunk size in characters (default 1400)")
    p.add_argument("--overlap", type=int, help="chunk overlap in characters (default 200)")
    _common(p)

    p = sub.add_parser("search", help="ranked passages for QUERY ('-' reads one query per line)")
    p.add_argument("query", metavar="QUERY")
    _common(p)

    p = sub.add_parser("ask", help="a cited answer, streamed as meta/token/done events")
    p.add_argument("question", metavar="QUESTION")
    p.add_argument("--conversation", metavar="ID", help="continue this conversation")
    _common(p)

    p = sub.add_parser("documents", help="list indexed documents")
    _common(p)
    p = sub.add_parser("delete", help="delete a document and its chunks")
    p.add_argument("id", metavar="ID")
    _common(p)
    p = sub.add_parser("reindex", help="re-chunk/re-embed documents with the active embedder")
    p.add_argument("ids", nargs="*", metavar="ID", help="documents (default: those not searchable)")
    p.add_argument("--all", action="store_true", help="every document")
    p.add_argument("--target", type=int)
    p.add_argument("--overlap", type=int)
    _common(p)

    p = sub.add_parser("conversations", help="list conversations, most recently updated first")
    _common(p)
    p = sub.add_parser("conversation", help="show a conversation's messages with their sources")
    p.add_argument("id", metavar="ID")
    _common(p)
    p = sub.add_parser("delete-conversation", help="delete a conversation and its messages")
    p.add_argument("id", metavar="ID")
    _common(p)
    return parser


def _emit(event: dict[str, Any], out: TextIO) -> None:
    out.write(events.to_json(event) + "\n")
    out.flush()


def _workspace(args: argparse.Namespace) -> Workspace:
    settings = load_settings().with_overrides(
        db_path=args.db,
        embedder=args.embedder,
        answerer=args.answerer,
        top_k=args.k,
        threshold=args.threshold,
        retrieval_mode=args.mode,
        chunk_target=getattr(args, "target", None),
        chunk_overlap=getattr(args, "overlap", None),
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


def cmd_ingest(ws: Workspace, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    status = EXIT_OK
    for path in args.files:
        status = max(status, _stream(ws.ingest_path(path, password=args.password), out, err,
                                     "refused"))
    return status


def _search_line(ws: Workspace, query: str) -> dict[str, Any]:
    return {
        "type": "hits",
        "query": query,
        "mode": ws.settings.retrieval_mode,
        "threshold": ws.retriever.threshold,
        "hits": ws.sources(ws.search(query)),
    }


def cmd_search(ws: Workspace, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    problem = ws.mismatch()
    if problem:
        err.write(f"warning: {problem.message}\n")
    queries: Iterable[str] = (
        (line.rstrip("\n") for line in sys.stdin) if args.query == "-" else [args.query]
    )
    for query in queries:
        if query.strip():
            _emit(_search_line(ws, query), out)
    return EXIT_OK


def cmd_ask(ws: Workspace, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    return _stream(ws.ask(args.question, conversation_id=args.conversation), out, err, "error")


def cmd_documents(ws: Workspace, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    for doc in ws.documents():
        _emit({"type": "document", **doc}, out)
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


def cmd_conversations(ws: Workspace, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    for conv in ws.conversations():
        _emit({"type": "conversation", **conv}, out)
    return EXIT_OK


def cmd_conversation(ws: Workspace, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    conv = ws.conversation(args.id)
    _emit({"type": "conversation", **conv}, out)
    for msg in ws.messages(args.id):
        _emit({"type": "message", **msg}, out)
    return EXIT_OK


def cmd_delete_conversation(
    ws: Workspace, args: argparse.Namespace, out: TextIO, err: TextIO
) -> int:
    if not ws.delete_conversation(args.id):
        raise MarginaliaError(f"No conversation with id {args.id!r}.")
    _emit(events.done(deleted=args.id), out)
    return EXIT_OK


COMMANDS = {
    "ingest": cmd_ingest,
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
    except ValueError as exc:
        err.write(f"error: {exc}\n")
        return EXIT_USAGE
    except KeyboardInterrupt:
        err.write("interrupted\n")
        return 130
    except BrokenPipeError:
        return EXIT_OK
    except Exception as exc:  # noqa: BLE001 - the user gets a line, the log the details
        logging.getLogger(__name__).debug("unexpected", exc_info=True)
        err.write(f"error: unexpected {type(exc).__name__}: {exc}\n")
        return EXIT_INTERNAL
    finally:
        if ws is not None:
            ws.close()
