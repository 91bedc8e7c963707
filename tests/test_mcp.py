"""The MCP server through the official SDK's own client, over stdio (``marginalia mcp`` as the
subprocess an MCP host starts) and over streamable HTTP (``marginalia serve --mcp``, also behind
the token): the four tools listed with their descriptions, search, a cited answer from ask,
list_documents, get_passage, and refusals as tool errors."""

from __future__ import annotations

import asyncio
import json
import re
import sys
from typing import Any

import httpx2
import pytest
from api_server import ROOT, ApiServer, server_env
from conftest import SAMPLES
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from marginalia_core.config import Settings
from marginalia_core.workspace import Workspace

TOOLS = {"search", "ask", "list_documents", "get_passage"}
FERMAT = "What did Fermat write in the margin?"
TOKEN = "mcp-test-token-4c1d7e"


@pytest.fixture(scope="module")
def library(tmp_path_factory, local_embedder) -> str:
    """A library with the three sample documents, indexed offline."""
    db = tmp_path_factory.mktemp("mcp") / "mcp.db"
    ws = Workspace(Settings(db_path=str(db), embedder="local", answerer="extractive"))
    ws.__dict__["embedder"] = local_embedder
    for path in sorted(SAMPLES.glob("*.md")) + sorted(SAMPLES.glob("*.pdf")):
        end = list(ws.ingest(path.name, path.read_bytes()))[-1]
        assert end["type"] == "done", end
    ws.close()
    return str(db)


def _data(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content
    if result.structured_content is not None:
        return result.structured_content
    return json.loads(result.content[0].text)


async def _exercise(client: Client) -> dict[str, Any]:
    """List the tools and call each one; the results for the test's own checks."""
    listed = await client.list_tools()
    tools = {t.name: t for t in listed.tools}
    assert set(tools) == TOOLS
    for tool in tools.values():
        assert "Returns" in (tool.description or ""), tool.name

    found = _data(await client.call_tool("search", {"query": "Fermat margin note", "k": 3}))
    assert found["mode"] == "hybrid" and 1 <= len(found["hits"]) <= 3
    top = found["hits"][0]
    assert top["documentName"] == "a-short-history-of-marginalia.md"
    assert {"n", "chunkId", "documentId", "page", "pageEnd", "score", "excerpt"} <= set(top)

    answer = _data(await client.call_tool("ask", {"question": FERMAT}))
    assert "Fermat" in answer["answer"]
    marks = {int(n) for n in re.findall(r"\[(\d+)\]", answer["answer"])}
    assert marks and marks == set(answer["citations"])
    assert {s["n"] for s in answer["sources"]} >= marks
    assert all(s["documentName"] == "a-short-history-of-marginalia.md"
               for s in answer["sources"])
    assert answer["conversationId"] and answer["messageId"]
    # per-sentence support (the answers issue) passes through: each marked sentence, its marks
    assert answer["support"] and all(set(s["marks"]) <= marks for s in answer["support"])

    follow = _data(await client.call_tool("ask", {
        "question": "and when was it proved?", "conversation_id": answer["conversationId"]}))
    assert follow["conversationId"] == answer["conversationId"]

    other = _data(await client.call_tool("search", {
        "query": "Fermat margin note", "document_ids": [answer["sources"][0]["documentId"]]}))
    assert {h["documentId"] for h in other["hits"]} == {answer["sources"][0]["documentId"]}

    passage = _data(await client.call_tool("get_passage", {"chunk_id": top["chunkId"]}))
    assert passage["documentName"] == top["documentName"] and "Fermat" in passage["content"]

    docs = _data(await client.call_tool("list_documents", {}))["documents"]
    assert {d["name"] for d in docs} == {p.name for p in SAMPLES.iterdir()
                                         if p.suffix in (".md", ".pdf")}
    assert all(d["searchable"] and d["chunkCount"] > 0 for d in docs)

    # refusals come back as tool errors with the plain message, not a crash
    empty = await client.call_tool("ask", {"question": "  "})
    assert empty.is_error and "message is empty" in empty.content[0].text
    missing = await client.call_tool("get_passage", {"chunk_id": 987654})
    assert missing.is_error and "No passage with chunk id 987654" in missing.content[0].text
    bad = await client.call_tool("search", {"query": "x", "mode": "psychic"})
    assert bad.is_error and "psychic" in bad.content[0].text
    # the schema says what k and mode take, so a client can get them right the first time
    schema = tools["search"].input_schema["properties"]
    k_schema = next(s for s in schema["k"].get("anyOf", [schema["k"]]) if s.get("type") == "integer")
    assert (k_schema["minimum"], k_schema["maximum"]) == (1, 50)
    assert "dense" in json.dumps(schema["mode"])
    too_many = await client.call_tool("search", {"query": "x", "k": 500})
    assert too_many.is_error
    huge = await client.call_tool("get_passage", {"chunk_id": 2**70})  # past any row id
    assert huge.is_error and "No passage with chunk id" in huge.content[0].text
    # an unknown conversation is refused, not silently started afresh
    unknown = await client.call_tool("search", {"query": "x", "document_ids": ["gone"]})
    assert unknown.is_error and "list_documents" in unknown.content[0].text
    stray = await client.call_tool("ask", {"question": FERMAT, "conversation_id": "no-such-id"})
    assert stray.is_error and "No conversation with id 'no-such-id'" in stray.content[0].text
    return {"answer": answer}


def test_over_stdio_the_sdk_client_lists_the_tools_and_gets_a_cited_answer(library):
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "marginalia_core", "mcp", "--db", library],
        env=server_env(library), cwd=str(ROOT),
    )

    async def run() -> dict[str, Any]:
        async with Client(params, read_timeout_seconds=120) as client:
            return await _exercise(client)

    asyncio.run(run())


def test_over_http_the_sdk_client_lists_the_tools_and_gets_a_cited_answer(library):
    with ApiServer(server_env(library), "--mcp") as server:
        async def run() -> dict[str, Any]:
            async with Client(f"{server.url}/mcp", read_timeout_seconds=120) as client:
                return await _exercise(client)

        asyncio.run(run())
        # the answer MCP asked for is a conversation the API (and the app) show
        with server.client() as http:
            titles = {c["title"] for c in http.get("/api/conversations").json()}
    assert FERMAT in titles


def test_over_http_behind_the_token_the_client_must_send_it(library):
    with ApiServer(server_env(library), "--mcp", token=TOKEN) as server:
        statuses: list[int] = []

        async def record(response: Any) -> None:
            statuses.append(response.status_code)

        async def run(headers: dict[str, str]) -> set[str]:
            http = httpx2.AsyncClient(headers=headers, timeout=120,
                                      event_hooks={"response": [record]})
            async with http, Client(streamable_http_client(f"{server.url}/mcp",
                                                           http_client=http)) as client:
                return {t.name for t in (await client.list_tools()).tools}

        assert asyncio.run(run({"Authorization": f"Bearer {TOKEN}"})) == TOOLS
        assert 401 not in statuses
        with pytest.raises(BaseException, match="unhandled errors|401|nauthorized"):
            asyncio.run(run({}))
        assert statuses[-1] == 401
        assert TOKEN not in server.log()
