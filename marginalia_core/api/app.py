"""The HTTP API (``marginalia serve``): the original design's routes and their NDJSON streams
(docs/EVENTS.md), plus search and health, thin over one :class:`Workspace`.

Every body is the events' wire form (camelCase keys, :func:`events.to_wire`). A refusal known
before a stream starts is an HTTP 4xx whose JSON body is the ``error`` event itself; once a
stream has started (200), a later refusal is its ``error`` event.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Annotated, Any

from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, Field
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from marginalia_core import __version__, events
from marginalia_core.api.access import BearerTokenMiddleware
from marginalia_core.api.streams import NDJSON, EventPump
from marginalia_core.config import RETRIEVAL_MODES, mask_url
from marginalia_core.errors import InvalidInputError, MarginaliaError, NotFoundError
from marginalia_core.ingest.jobs import Upload
from marginalia_core.ingest.pipeline import safe_name, too_large_message
from marginalia_core.workspace import Workspace

log = logging.getLogger(__name__)

DEFAULT_PORT = 8502
# files one upload request may carry; the whole body is refused unread above this many limits
MAX_FILES_PER_UPLOAD = 20
# multipart framing and headers on top of the files' bytes
MULTIPART_SLACK_BYTES = 64 * 1024
MAX_SEARCH_K = 100

# HTTP status of a refusal reason (docs/EVENTS.md); anything else is 400
STATUS_OF_REASON = {
    "not_found": 404,
    "too_large": 413,
    "unsupported": 415, "mislabelled": 415, "binary": 415, "encoding": 415,
    "invalid_input": 422, "empty": 422, "too_long": 422, "encrypted": 422,
    "wrong_password": 422, "no_text": 422, "corrupt": 422, "unreadable": 422,
    "embedder_mismatch": 409, "near_duplicate": 409,
    "macros": 415,
    "fetch": 502,
    "embedding": 502, "auth": 502, "answer": 502, "model_server": 502,
    "internal": 500, "storage": 500,
}


class ChatRequest(BaseModel):
    """The body of ``POST /api/chat`` (documentation: the route reads any JSON body, whatever
    its content type, so ``curl -d`` works)."""

    message: str = Field(description="the question")
    conversationId: str | None = Field(  # the wire form: camelCase
        None, description="continue this conversation (its history and document choice)")
    documentIds: list[str] | None = Field(
        None, description="search only these documents, kept on the conversation; [] = all "
        "again; omitted = the conversation's own choice")


class ErrorBody(BaseModel):
    """Every refusal's body (documentation): the ``error`` event, as a stream ends with it."""

    type: str = Field("error", description="always 'error'")
    message: str = Field(description="what went wrong and what to do, for a person")
    reason: str = Field(description="machine-readable: not_found, invalid_input, too_large, "
                        "unsupported, near_duplicate, internal, ... (docs/EVENTS.md)")


# the refusals any route may answer, documented with their real body
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody, "description": what} for status, what in (
        (401, "a token is required (MARGINALIA_API_TOKEN) and was missing or wrong"),
        (404, "an unknown document, conversation or route"),
        (422, "invalid input: an empty or too long question, a bad parameter or body"),
        (500, "an unexpected failure; nothing was saved"),
    )
}


def error_response(event: dict[str, Any], status: int | None = None) -> JSONResponse:
    """A refusal as HTTP: the ``error`` event's wire form with the reason's status."""
    code = status or STATUS_OF_REASON.get(str(event.get("reason")), 400)
    return JSONResponse(events.to_wire(event), status_code=code)


def refuse(message: str, reason: str, status: int | None = None, **fields: Any) -> JSONResponse:
    return error_response(dict(events.error(message, reason, **fields)), status)


async def _first(pump: EventPump, *, through_progress: bool) -> list[Any]:
    """Events read before the response starts, so a refusal gets its HTTP status: the first one
    (chat), or (one upload) up to the first that is not the opening ``extracting`` stage."""
    read: list[Any] = []
    while (event := await pump.next()) is not None:
        read.append(event)
        opening = event["type"] == "stage" and event["stage"] == "extracting" and "done" not in event
        if not (through_progress and opening):
            break
        pump.sent()
    return read


async def _stream(pump: EventPump, *, through_progress: bool = False) -> Any:
    read = await _first(pump, through_progress=through_progress)
    if read and read[-1]["type"] == "error" and all(e["type"] != "done" for e in read):
        pump.stop()
        pump.sent()
        return error_response(read[-1])
    return StreamingResponse(pump.ndjson(read), media_type=NDJSON,
                             headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})


class AnswerUnexpected:
    """An unexpected failure before the response starts is answered with the ``internal``
    error event (500), and the connection kept. Starlette's catch-all handler answers and then
    re-raises, so uvicorn closed the connection and the client's next request on it failed."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def sending(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except Exception as exc:
            if started:  # a stream already under way: nothing can be answered on it
                raise
            log.error("unexpected %s in the API", type(exc).__name__, exc_info=exc)
            await refuse(f"Unexpected {type(exc).__name__}.", "internal")(scope, receive, send)


def create_app(
    workspace: Workspace,
    *,
    token: str | None = None,
    cors: Sequence[str] = (),
    mcp: bool = False,
    host: str = "127.0.0.1",
) -> FastAPI:
    """The API over ``workspace``; ``token`` makes every request need it; ``cors`` lists the
    browser origins allowed; ``mcp`` adds the MCP server (streamable HTTP) at ``/mcp``."""
    ws = workspace
    mcp_server = None
    if mcp:
        from marginalia_core.api.mcp import build_mcp_server

        mcp_server = build_mcp_server(ws)

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if mcp_server is None:
            yield
            return
        async with mcp_server.session_manager.run():
            yield

    app = FastAPI(
        title="Marginalia",
        version=__version__,
        summary="Chat with your documents; every answer cites the passages it came from.",
        description="Streams are NDJSON (one JSON object per line, camelCase keys), the events "
        "of docs/EVENTS.md. With MARGINALIA_API_TOKEN set, send `Authorization: Bearer <token>`.",
        lifespan=lifespan,
        responses=ERROR_RESPONSES,
    )

    @app.exception_handler(MarginaliaError)
    async def _refused(_: Request, exc: MarginaliaError) -> JSONResponse:
        return refuse(exc.message, exc.reason)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        return refuse(str(exc.detail), "not_found" if exc.status_code == 404 else "http",
                      exc.status_code)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        what = "; ".join(f"{'.'.join(str(p) for p in e.get('loc', ())[1:]) or 'body'}: "
                         f"{str(e.get('msg', 'invalid')).rstrip('.').lower()}"
                         for e in exc.errors())
        return refuse(f"Invalid request: {what}.", "invalid_input", 422)

    # ------------------------------------------------------------------ health and search

    @app.get("/api/health", tags=["service"])
    def health() -> dict[str, Any]:
        """Alive, with the active mode (never a key) and the library's size."""
        summary = ws.mode_summary()
        summary["db"] = mask_url(summary["db"])
        return events.to_wire({
            "status": "ok", "version": __version__, "documents": len(ws.documents()),
            "mcp": mcp_server is not None, **summary,
        })

    @app.get("/api/search", tags=["retrieval"])
    def search(
        q: str = Query(..., min_length=1, description="the query"),
        k: int | None = Query(None, ge=1, le=MAX_SEARCH_K, description="passages to return"),
        mode: str | None = Query(None, description=f"one of {', '.join(RETRIEVAL_MODES)}"),
        documentId: Annotated[list[str] | None, Query(  # the wire form: camelCase
            description="search only these documents (repeatable)")] = None,
    ) -> dict[str, Any]:
        """Ranked passages for ``q``: the CLI's ``hits`` line (query, mode, threshold, hits as
        Sources)."""
        if not q.strip():
            raise InvalidInputError("The query is empty.")
        return events.to_wire(ws.search_result(q, k=k, mode=mode, documents=documentId))

    # ------------------------------------------------------------------ documents

    @app.get("/api/documents", tags=["documents"])
    def list_documents() -> list[dict[str, Any]]:
        """Indexed documents, newest first: id, name, size, chunkCount, created, pageCount,
        embedModel, and whether the active embedder can search them."""
        return [events.to_wire({**d.to_dict(), "searchable": ws.is_searchable(d)})
                for d in ws.documents()]

    @app.post(
        "/api/documents", tags=["documents"], response_class=StreamingResponse,
        responses={200: {"content": {NDJSON: {}},
                         "description": "stage / done / error events, per file"}},
        openapi_extra={"requestBody": {"required": True, "content": {"multipart/form-data": {
            "schema": {"type": "object", "required": ["file"], "properties": {
                "file": {"type": "array", "items": {"type": "string", "format": "binary"}},
                "password": {"type": "string", "description": "for encrypted PDFs"},
            }}}}}},
    )
    async def upload(request: Request) -> Any:
        """Index files (multipart field ``file``, repeatable; ``password`` for encrypted PDFs)
        through the ingestion jobs: NDJSON ``stage`` / ``done`` / ``error`` per file."""
        limit = ws.settings.max_upload_bytes
        length = request.headers.get("content-length", "")
        if length.isdigit() and int(length) > limit * MAX_FILES_PER_UPLOAD + MULTIPART_SLACK_BYTES:
            return refuse(f"The upload is larger than {MAX_FILES_PER_UPLOAD} files of the "
                          f"{ws.settings.max_upload_mb:g} MB limit (MARGINALIA_MAX_UPLOAD_MB).",
                          "too_large")
        if not request.headers.get("content-type", "").startswith("multipart/form-data"):
            return refuse("Send the files as multipart/form-data in the field 'file' "
                          "(curl -F file=@notes.pdf).", "invalid_input")
        form = await request.form(max_files=MAX_FILES_PER_UPLOAD, max_fields=10)
        files = [v for key, v in form.multi_items() if key == "file" and isinstance(v, UploadFile)]
        password = form.get("password")
        if not files:
            await form.close()
            return refuse("No file: send the files in the multipart field 'file' "
                          "(curl -F file=@notes.pdf).", "invalid_input")
        too_large = [events.error(too_large_message(safe_name(f.filename or "upload"),
                                                    ws.settings), "too_large",
                                  file=safe_name(f.filename or "upload"))
                     for f in files if (f.size or 0) > limit]
        if len(too_large) == len(files):
            await form.close()
            return error_response({**too_large[0], "errors": too_large[1:]} if len(too_large) > 1
                                  else dict(too_large[0]))

        secret = password if isinstance(password, str) and password else None

        def ingest() -> Iterator[events.IngestEvent]:
            """Each file read when its turn comes, on the stream's thread."""
            try:
                for f in files:
                    name = safe_name(f.filename or "upload")
                    if (f.size or 0) > limit:  # refused unread, as the CLI does
                        yield events.error(too_large_message(name, ws.settings), "too_large",
                                           file=name)
                        continue
                    f.file.seek(0)
                    yield from ws.ingest_uploads([Upload(name, f.file.read(), f.content_type)],
                                                 password=secret)
            finally:
                for f in files:
                    f.file.close()

        return await _stream(EventPump(ingest), through_progress=len(files) == 1)

    @app.delete("/api/documents/{document_id}", tags=["documents"])
    def delete_document(document_id: str) -> dict[str, Any]:
        """Remove the document and its chunks."""
        if not ws.delete_document(document_id):
            raise NotFoundError(f"No document with id {document_id!r}.")
        return events.to_wire(events.done(deleted=document_id))

    # ------------------------------------------------------------------ conversations

    @app.get("/api/conversations", tags=["conversations"])
    def list_conversations() -> list[dict[str, Any]]:
        """Conversations, most recently updated first."""
        return [events.to_wire(c.to_dict()) for c in ws.conversations()]

    @app.get("/api/conversations/{conversation_id}", tags=["conversations"])
    def get_conversation(conversation_id: str) -> dict[str, Any]:
        """The conversation with its messages, oldest first, each answer with its Sources (each
        saying ``documentDeleted`` when its document was deleted since: the passage as cited)."""
        conversation = ws.conversation(conversation_id)
        messages = ws.messages(conversation_id)
        gone = ws.missing_documents(str(s.get("document_id", "")) for m in messages
                                    for s in m.sources)
        return events.to_wire({**conversation.to_dict(), "messages": [
            {**m.to_dict(), "sources": [{**s, "document_deleted": s.get("document_id") in gone}
                                        for s in m.sources]}
            for m in messages]})

    @app.delete("/api/conversations/{conversation_id}", tags=["conversations"])
    def delete_conversation(conversation_id: str) -> dict[str, Any]:
        """Delete the conversation and its messages."""
        if not ws.delete_conversation(conversation_id):
            raise NotFoundError(f"No conversation with id {conversation_id!r}.")
        return events.to_wire(events.done(deleted=conversation_id))

    # ------------------------------------------------------------------ chat

    @app.post(
        "/api/chat", tags=["chat"], response_class=StreamingResponse,
        responses={200: {"content": {NDJSON: {}},
                         "description": "meta, token x N, then done or error"}},
        openapi_extra={"requestBody": {"required": True, "content": {
            "application/json": {"schema": ChatRequest.model_json_schema()}}}},
    )
    async def chat(request: Request) -> Any:
        """A cited answer as NDJSON: ``meta`` (every retrieved source), ``token`` x N, then
        ``done`` (saved, renumbered) or ``error`` (nothing saved). A client that disconnects
        stops the answer; nothing half-written is saved."""
        raw = await request.body()
        try:
            body = json.loads(raw or b"null")
        except (ValueError, RecursionError):  # not JSON, or nested past the parser's depth
            body = None
        if not isinstance(body, dict):
            return refuse('The body must be a JSON object: {"message": "your question"}.',
                          "invalid_input")
        message, conversation_id = body.get("message"), body.get("conversationId")
        documents = body.get("documentIds")
        if not isinstance(message, str):
            return refuse("'message' must be the question, a string.", "invalid_input")
        if conversation_id is not None and not isinstance(conversation_id, str):
            return refuse("'conversationId' must be a string.", "invalid_input")
        if conversation_id and not ws.has_conversation(conversation_id):
            return refuse(f"No conversation with id {conversation_id!r}: omit conversationId "
                          "to start one.", "not_found")
        if documents is not None and not (
            isinstance(documents, list) and all(isinstance(d, str) for d in documents)
        ):
            return refuse("'documentIds' must be a list of document ids.", "invalid_input")
        pump = EventPump(lambda: ws.ask(message, conversation_id or None, documents=documents))
        return await _stream(pump)

    if mcp_server is not None:
        from marginalia_core.api.mcp import MCP_PATH

        sub = mcp_server.streamable_http_app(streamable_http_path=MCP_PATH, host=host)
        app.router.routes.extend(sub.routes)

    app.add_middleware(AnswerUnexpected)  # innermost: inside the token check and CORS
    if token:
        app.add_middleware(BearerTokenMiddleware, token=token)
    if cors:
        app.add_middleware(
            CORSMiddleware, allow_origins=list(cors), allow_methods=["GET", "POST", "DELETE"],
            allow_headers=["Authorization", "Content-Type", "Mcp-Session-Id",
                           "Mcp-Protocol-Version"],
            expose_headers=["Mcp-Session-Id"],
        )
    return app

