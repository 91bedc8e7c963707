"""The NDJSON wire contract (docs/EVENTS.md): camelCase on the wire, snake_case in Python, and
the CLI's output has exactly the documented keys."""

from __future__ import annotations

import json
import re

from conftest import ROOT

from marginalia_core import events

DOC = (ROOT / "docs" / "EVENTS.md").read_text(encoding="utf-8")
CAMEL = re.compile(r"^[a-z][a-zA-Z0-9]*$")


def _keys(obj, out):
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.add(k)
            _keys(v, out)
    elif isinstance(obj, list):
        for v in obj:
            _keys(v, out)
    return out


def test_to_wire_camelcases_every_key_recursively():
    event = events.meta("c1", "t", [{"n": 1, "document_name": "a.md", "page_end": 2,
                                     "chunk_id": 7}], query="q")
    wire = json.loads(events.to_json(event))
    assert wire == {"type": "meta", "conversationId": "c1", "title": "t", "query": "q",
                    "documents": None, "sources": [{"n": 1, "documentName": "a.md", "pageEnd": 2, "chunkId": 7}]}
    assert event["conversation_id"] == "c1"  # Python keeps snake_case


def test_documented_source_and_event_keys_are_camelcase():
    documented = set(re.findall(r"`([a-zA-Z]+)`", DOC))
    for key in ("conversationId", "messageId", "invalidCitations", "documentName", "pageEnd",
                "chunkId", "documentId"):
        assert key in documented
    for key in events.Source.__annotations__:
        assert events.camel(key) in documented, key


def test_cli_ask_and_ingest_output_matches_the_contract(tmp_path):
    import subprocess
    import sys

    from conftest import offline_cli_env

    doc = tmp_path / "mill.txt"
    doc.write_bytes(MILL)

    def run(*args):
        proc = subprocess.run([sys.executable, "-m", "marginalia_core", *args, "--db",
                               str(tmp_path / "m.db")], capture_output=True, text=True,
                              env=offline_cli_env(), timeout=300)
        return [json.loads(line) for line in proc.stdout.splitlines()]

    _check_contract(run("ingest", str(doc)), run("ask", "When was the mill built?"))


def test_api_upload_and_chat_streams_match_the_contract(tmp_path):
    """``marginalia serve``: the same events, byte for byte the same keys, as the CLI's."""
    from api_server import ApiServer, ndjson, server_env

    with ApiServer(server_env(tmp_path / "api.db")) as server, server.client() as client:
        with client.stream("POST", "/api/documents", files={"file": ("mill.txt", MILL)}) as r:
            assert r.headers["content-type"].startswith("application/x-ndjson")
            ingest = ndjson(r)
        with client.stream("POST", "/api/chat",
                           json={"message": "When was the mill built?"}) as r:
            asked = ndjson(r)
        refused = client.post("/api/chat", json={"message": ""}).json()
    _check_contract(ingest, asked)
    assert set(refused) == {"type", "message", "reason"} and refused["type"] == "error"


MILL = (b"The old mill by the river was built in 1851 from local stone.\n\n"
        b"It ground wheat for the village until 1912.")


def _check_contract(ingest: list[dict], asked: list[dict]) -> None:
    assert {e["type"] for e in ingest} <= {"stage", "done"} and ingest[-1]["type"] == "done"
    assert set(ingest[-1]) >= {"type", "file", "document", "duplicate"}
    meta, *tokens, done = asked
    assert set(meta) == {"type", "conversationId", "title", "sources", "query", "documents"}
    assert set(meta["sources"][0]) == {"n", "chunkId", "documentId", "documentName", "idx",
                                       "page", "pageEnd", "score", "excerpt", "content", "ocr",
                                       "location"}
    assert tokens and all(set(t) in ({"type", "text"}, {"type", "text", "cited"})
                          for t in tokens)
    assert set(done) == {"type", "messageId", "conversationId", "citations", "invalidCitations",
                         "answer", "sources", "support", "status", "outcome"}
    assert done["support"] and set(done["support"][0]) == {"sentence", "marks", "score",
                                                           "supported"}
    assert "".join(t["text"] for t in tokens) == done["answer"]  # one numbering
    for event in ingest + asked:
        bad = {k for k in _keys(event, set()) if not CAMEL.match(k)}
        assert not bad, f"non-camelCase keys on the wire: {bad}"
