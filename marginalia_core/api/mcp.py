"""The library as an MCP server (the official ``mcp`` SDK): four tools over one
:class:`Workspace`, served over stdio (``marginalia mcp``) or streamable HTTP at ``/mcp``
(``marginalia serve --mcp``). Results are the events' wire form (camelCase keys)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from marginalia_core import __version__, events
from marginalia_core.errors import MarginaliaError
from marginalia_core.workspace import Workspace

MCP_PATH = "/mcp"
SERVER_NAME = "marginalia"
MAX_K = 50
INSTRUCTIONS = (
    "Marginalia is the user's own library of documents (PDF, text, Markdown). Use `search` to "
    "find passages, `ask` for an answer written only from the library with numbered citations "
    "[n] matching its `sources`, `list_documents` to see what is in it, and `get_passage` to "
    "read a passage in full. Quote the document name and page when you use a passage."
)


def _hit(source: dict[str, Any]) -> dict[str, Any]:
    """A search hit: where it is, how close, and an excerpt (the full text via get_passage)."""
    keep = ("n", "chunk_id", "document_id", "document_name", "page", "page_end", "location",
            "score", "excerpt", "ocr")
    return events.to_wire({k: source[k] for k in keep if k in source})


def build_mcp_server(ws: Workspace) -> MCPServer:
    server: MCPServer = MCPServer(
        SERVER_NAME, title="Marginalia", version=__version__, instructions=INSTRUCTIONS,
        description="Search and ask your own documents; answers cite their passages.",
    )

    @server.tool(description=(
        "Search the library for passages relevant to `query`. Returns {query, mode, threshold, "
        "hits}: the hits best first, each with n (rank), documentName, documentId, page and "
        "pageEnd (1-based; a text file is page 1), location (how to cite it: 'p. 3', "
        "'slide 2', 'sheet Budget, rows 12-40'), score (cosine similarity 0-1), excerpt, "
        "and chunkId (pass it to get_passage for the full text). `k`: how many (default the "
        "library's, 6); `mode`: hybrid (default), dense or lexical; `document_ids`: search "
        "only those documents (ids from list_documents)."
    ))
    def search(
        query: str,
        k: Annotated[int | None, Field(ge=1, le=MAX_K)] = None,
        mode: Literal["hybrid", "dense", "lexical"] | None = None,
        document_ids: list[str] | None = None,
    ) -> dict[str, Any]:
        if not query.strip():
            raise ToolError("The query is empty.")
        if k is not None and not 1 <= k <= MAX_K:
            raise ToolError(f"k must be between 1 and {MAX_K}.")
        try:
            result = ws.search_result(query, k=k, mode=mode, documents=document_ids)
        except MarginaliaError as exc:
            raise ToolError(exc.message) from None
        return {**events.to_wire({k_: v for k_, v in result.items() if k_ != "hits"}),
                "hits": [_hit(h) for h in result["hits"]]}

    @server.tool(description=(
        "Ask a question of the library. Returns {answer, sources, citations, invalidCitations, "
        "conversationId, messageId, and, when available, support}: `answer` is written only "
        "from the library's passages and cites them with marks [n]; `sources` are the cited "
        "passages numbered n from 1 in the order first cited, each with documentName, "
        "documentId, page, pageEnd, score, excerpt, content and chunkId; `support` (when "
        "present) says which source backs each sentence. Pass `conversation_id` to ask a "
        "follow-up in the same conversation, `document_ids` to search only those documents. "
        "The exchange is saved as a conversation the user sees in the app."
    ))
    def ask(
        question: str, conversation_id: str | None = None, document_ids: list[str] | None = None
    ) -> dict[str, Any]:
        if conversation_id and not ws.has_conversation(conversation_id):
            raise ToolError(f"No conversation with id {conversation_id!r}: leave "
                            "conversation_id out to start one.")
        end: dict[str, Any] | None = None
        for event in ws.ask(question, conversation_id or None, documents=document_ids):
            if event["type"] in ("done", "error"):
                end = dict(event)
        if end is None or end["type"] == "error":
            raise ToolError((end or {}).get("message") or "No answer.")
        return events.to_wire({k: v for k, v in end.items() if k != "type"})

    @server.tool(description=(
        "List the documents in the library, newest first. Returns {documents}: each with id, "
        "name, mime, size (bytes), pageCount, chunkCount (passages), created (ISO time) and "
        "searchable (false: indexed by another embedding model, left out of search until "
        "re-indexed)."
    ))
    def list_documents() -> dict[str, Any]:
        keep = ("id", "name", "mime", "size", "page_count", "chunk_count", "created")
        listed = []
        for d in ws.documents():
            row = d.to_dict()
            listed.append(events.to_wire({**{k: row[k] for k in keep},
                                          "searchable": ws.is_searchable(d)}))
        return {"documents": listed}

    @server.tool(description=(
        "Read one passage in full by its chunkId (from search or ask). Returns {chunkId, "
        "documentId, documentName, idx (its position in the document), page, pageEnd, "
        "content, ocr (true when read from a scan)}."
    ))
    def get_passage(chunk_id: int) -> dict[str, Any]:
        try:
            return events.to_wire(ws.passage(chunk_id))
        except MarginaliaError as exc:
            raise ToolError(exc.message) from None

    return server
