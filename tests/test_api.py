"""The HTTP API (``marginalia serve``) as a real subprocess on a random port, driven with httpx:
the README's curl commands, NDJSON streams, multipart uploads and their refusals, a client that
disconnects mid-answer (a slow-streaming fake OpenAI-compatible server), concurrent chats, the
token and CORS, and the same library written by the API and another process at once."""

from __future__ import annotations

import contextlib
import json
import re
import shlex
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from api_server import ApiServer, ndjson, server_env
from conftest import ROOT, SAMPLES

from marginalia_core.api.access import BindRefused, check_bind, is_loopback, token_matches

README = (ROOT / "README.md").read_text(encoding="utf-8")
FERMAT = "What did Fermat write in the margin?"
TOKEN = "s3cret-token-for-tests-9f2c1b"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """One offline server for the module's read-mostly tests (its own library)."""
    db = tmp_path_factory.mktemp("api") / "api.db"
    with ApiServer(server_env(db)) as server:
        yield server


@contextlib.contextmanager
def _curl(command: str, client: httpx.Client) -> Iterator[httpx.Response]:
    """A README curl command (the flags it uses: -N -X -d -F -H) sent through httpx, as curl
    sends it: ``-d`` as application/x-www-form-urlencoded, ``-F`` as multipart."""
    words = shlex.split(command)
    assert words[0] == "curl", command
    method, data, files, headers, url = None, None, [], {}, None
    it = iter(words[1:])
    for word in it:
        if word == "-N":
            continue
        if word == "-X":
            method = next(it)
        elif word == "-d":
            data = next(it).encode("utf-8")
            headers.setdefault("Content-Type", "application/x-www-form-urlencoded")
        elif word == "-F":
            field, _, value = next(it).partition("=")
            assert value.startswith("@"), command
            path = ROOT / value[1:]
            files.append((field, (path.name, path.read_bytes())))
        elif word == "-H":
            name, _, value = next(it).partition(":")
            headers[name.strip()] = value.strip()
        else:
            url = word
    assert url is not None, command
    path = "/" + url.split("/", 1)[1] if "/" in url else "/"
    method = method or ("POST" if data is not None or files else "GET")
    request = client.build_request(method, path, content=data, files=files or None,
                                   headers=headers)
    response = client.send(request, stream=True)
    try:
        yield response
    finally:
        response.close()


def _readme_curls() -> list[str]:
    return [line.strip() for line in README.splitlines()
            if line.strip().startswith("curl ") and "localhost:8502" in line]


# ------------------------------------------------------------------------- the README, as written
def test_the_readme_curl_commands_stream_meta_tokens_done_and_index(served):
    curls = _readme_curls()
    upload = next(c for c in curls if " -F file=@samples/" in c)
    chat = next(c for c in curls if "/api/chat" in c)
    assert chat == ("curl -N -X POST localhost:8502/api/chat -d "
                    f"'{{\"message\":\"{FERMAT}\"}}'")
    assert "marginalia serve" in README
    with served.client() as client:
        # `curl -F file=@samples/...` indexes: stage events, then done
        with _curl(upload, client) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("application/x-ndjson")
            lines = ndjson(response)
        assert [e["type"] for e in lines[:-1]] == ["stage"] * (len(lines) - 1)
        assert lines[-1]["type"] == "done" and lines[-1]["document"]["chunkCount"] > 0
        # the chat: meta -> token x N -> done, citing the Fermat passage
        with _curl(chat, client) as response:
            assert response.status_code == 200
            events = ndjson(response)
        meta, *tokens, done = events
        assert meta["type"] == "meta" and meta["sources"]
        assert tokens and {t["type"] for t in tokens} == {"token"}
        assert done["type"] == "done" and done["citations"]
        assert "Fermat" in done["answer"] and re.search(r"\[\d+\]", done["answer"])
        assert {s["documentName"] for s in done["sources"]} == {"a-short-history-of-marginalia.md"}
        # the other README commands answer too
        for command in curls:
            if command not in (upload, chat):
                with _curl(command, client) as response:
                    response.read()
                    assert response.status_code == 200, (command, response.text)


# ------------------------------------------------------------------------- routes
def test_documents_conversations_search_and_deletes(served):
    with served.client() as client:
        files = [("file", (p.name, p.read_bytes())) for p in sorted(SAMPLES.glob("*.md"))]
        with client.stream("POST", "/api/documents", files=files) as response:
            lines = ndjson(response)
        ends = [e for e in lines if e["type"] != "stage"]
        assert len(ends) == 2 and {e["type"] for e in ends} == {"done"}
        assert {e["file"] for e in ends} == {p.name for p in SAMPLES.glob("*.md")}

        docs = client.get("/api/documents").json()
        by_name = {d["name"]: d for d in docs}
        assert {"a-short-history-of-marginalia.md", "how-marginalia-works.md"} <= set(by_name)
        assert {"id", "name", "size", "chunkCount", "created", "pageCount", "embedModel",
                "searchable"} <= set(docs[0])

        hits = client.get("/api/search", params={"q": "Fermat margin note", "k": 2}).json()
        assert hits["type"] == "hits" and hits["mode"] == "hybrid" and len(hits["hits"]) == 2
        assert hits["hits"][0]["documentName"] == "a-short-history-of-marginalia.md"
        assert client.get("/api/search", params={"q": "x", "mode": "psychic"}).status_code == 422
        other = by_name["how-marginalia-works.md"]["id"]
        scoped = client.get("/api/search", params={"q": "Fermat margin note",
                                                   "documentId": other}).json()
        assert {h["documentId"] for h in scoped["hits"]} <= {other}
        assert client.get("/api/search", params={"q": "x", "documentId": "nope"}).status_code \
            == 404

        # a conversation limited to one document, then a follow-up in it
        only = by_name["how-marginalia-works.md"]["id"]
        with client.stream("POST", "/api/chat", json={"message": "How are passages cited?",
                                                      "documentIds": [only]}) as response:
            first = ndjson(response)
        assert first[0]["documents"] == [only]
        assert {s["documentId"] for s in first[0]["sources"]} <= {only}
        conv = first[-1]["conversationId"]
        with client.stream("POST", "/api/chat", json={"message": "and what about the margin?",
                                                      "conversationId": conv}) as response:
            second = ndjson(response)
        assert second[-1]["type"] == "done" and second[0]["conversationId"] == conv
        assert second[0]["documents"] == [only]  # kept on the conversation

        listed = client.get("/api/conversations").json()
        assert listed[0]["id"] == conv  # most recently updated first
        full = client.get(f"/api/conversations/{conv}").json()
        assert [m["role"] for m in full["messages"]] == ["user", "assistant"] * 2
        assert full["messages"][1]["sources"] and "documentName" in full["messages"][1]["sources"][0]
        assert not any(s["documentDeleted"] for s in full["messages"][1]["sources"])
        assert "support" in full["messages"][1]  # saved with the answer (the answers issue)

        assert client.delete(f"/api/conversations/{conv}").json() == {"type": "done",
                                                                      "deleted": conv}
        gone = client.get(f"/api/conversations/{conv}")
        assert gone.status_code == 404 and gone.json()["reason"] == "not_found"
        assert client.delete(f"/api/conversations/{conv}").status_code == 404

        with client.stream("POST", "/api/chat", json={"message": "How are passages cited?",
                                                      "documentIds": [only]}) as response:
            kept = ndjson(response)[-1]["conversationId"]
        assert client.delete(f"/api/documents/{only}").status_code == 200
        assert only not in {d["id"] for d in client.get("/api/documents").json()}
        # its answer keeps the passages as cited, each saying its document is gone
        cited = [s for m in client.get(f"/api/conversations/{kept}").json()["messages"]
                 for s in m["sources"]]
        assert cited and all(s["documentDeleted"] for s in cited)
        assert client.delete(f"/api/documents/{only}").status_code == 404
        with client.stream("POST", "/api/chat", json={"message": "cited?",
                                                      "documentIds": [only]}) as response:
            response.read()
        assert response.status_code == 404 and only in response.json()["message"]


def test_chat_refusals_are_4xx_with_the_engines_message(served):
    with served.client() as client:
        empty = client.post("/api/chat", json={"message": "   "})
        assert empty.status_code == 422
        assert empty.json() == {"type": "error", "reason": "empty",
                                "message": "Ask a question first: the message is empty."}
        long = client.post("/api/chat", json={"message": "why " * 3000})
        assert long.status_code == 422 and long.json()["reason"] == "too_long"
        for body in (b"not json", b"[1, 2]", b'{"message": 3}', b'{"message": "x", '
                     b'"documentIds": "abc"}'):
            bad = client.post("/api/chat", content=body)
            assert bad.status_code == 422 and bad.json()["reason"] == "invalid_input", body
        assert client.get("/api/nowhere").status_code == 404


def test_odd_requests_get_a_clear_refusal_or_an_answer_never_a_crash(served):
    with served.client() as client:
        sample = SAMPLES / "a-short-history-of-marginalia.md"
        client.post("/api/documents", files={"file": (sample.name, sample.read_bytes())})
        # nested past the JSON parser's depth: the body is refused like any other non-object
        deep = client.post("/api/chat", content=b"[" * 100_000)
        assert deep.status_code == 422 and deep.json()["reason"] == "invalid_input"
        # a lone surrogate (JSON's "\\ud800", which cannot be UTF-8) is replaced and answered
        with client.stream("POST", "/api/chat", content=b'{"message": "\\ud800 ' +
                           FERMAT.encode() + b'"}') as response:
            odd = ndjson(response)
        assert response.status_code == 200 and odd[-1]["type"] == "done", odd[-1]
        assert odd[0]["query"].startswith("\ufffd") and "Fermat" in odd[-1]["answer"]
        found = client.get("/api/search", params={"q": "Fermat margin", "k": 500})
        assert found.status_code == 422
        assert found.json()["message"] == \
            "Invalid request: k: input should be less than or equal to 100."
        # an unknown conversation is refused, not silently started under that id
        stray = client.post("/api/chat", json={"message": FERMAT, "conversationId": "nope-42"})
        assert stray.status_code == 404 and stray.json()["reason"] == "not_found"
        assert "nope-42" in stray.json()["message"]
        assert "nope-42" not in {c["id"] for c in client.get("/api/conversations").json()}
        # lexical mode has no cosine floor, so it reports none
        lexical = client.get("/api/search", params={"q": "Fermat margin", "mode": "lexical"})
        assert lexical.json()["hits"] and lexical.json()["threshold"] is None
        # a document's locations are a JSON list, not JSON text inside the JSON
        assert all(isinstance(d["locations"], list) for d in client.get("/api/documents").json())


def test_an_unexpected_failure_is_answered_and_the_connection_kept(workspace):
    """Starlette's catch-all answered a 500 and re-raised, so uvicorn closed the connection and
    the client's next request on it failed. A fault injected into the workspace stands in for
    any bug; two requests go over one kept-alive connection."""
    import http.client

    import uvicorn
    from api_server import free_port

    from marginalia_core.api.app import create_app

    def broken() -> None:
        raise RuntimeError("injected fault")

    workspace.conversations = broken
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(workspace), host="127.0.0.1", port=port,
                                           log_level="critical"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        while not server.started:
            assert thread.is_alive(), "the server did not start"
            time.sleep(0.05)
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        connection.request("GET", "/api/conversations")
        failed = connection.getresponse()
        assert failed.status == 500
        assert json.loads(failed.read()) == {"type": "error", "reason": "internal",
                                             "message": "Unexpected RuntimeError."}
        kept = connection.sock
        connection.request("GET", "/api/documents")
        listed = connection.getresponse()
        assert listed.status == 200 and json.loads(listed.read()) == []
        assert connection.sock is kept  # the same connection answered both
        connection.close()
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def test_openapi_docs_list_every_route(served):
    with served.client() as client:
        spec = client.get("/openapi.json").json()
        assert client.get("/docs").status_code == 200
    routes = {(path, method) for path, item in spec["paths"].items() for method in item}
    # the documented refusal is the body the API sends: the error event, not FastAPI's default
    refusal = spec["paths"]["/api/search"]["get"]["responses"]["422"]["content"]
    ref = refusal["application/json"]["schema"]["$ref"].rsplit("/", 1)[-1]
    assert set(spec["components"]["schemas"][ref]["properties"]) == {"type", "message", "reason"}
    assert "HTTPValidationError" not in spec["components"]["schemas"]
    assert routes >= {
        ("/api/documents", "get"), ("/api/documents", "post"),
        ("/api/documents/{document_id}", "delete"), ("/api/conversations", "get"),
        ("/api/conversations/{conversation_id}", "get"),
        ("/api/conversations/{conversation_id}", "delete"), ("/api/chat", "post"),
        ("/api/search", "get"), ("/api/health", "get"),
    }


# ------------------------------------------------------------------------- uploads refused
def test_upload_refusals_carry_the_apps_status_and_message(served, workspace):
    with served.client() as client:
        big = client.post("/api/documents",
                          files={"file": ("big.txt", b"a" * (60 * 1024 * 1024))})
        assert big.status_code == 413
        assert big.json() == {
            "type": "error", "reason": "too_large", "file": "big.txt",
            "message": "big.txt is larger than the 50 MB limit (MARGINALIA_MAX_UPLOAD_MB).",
        }
        # refusals found by the pipeline: the same message as the app and the CLI get
        for name, data, status in (
            ("empty.txt", b"", 422),
            ("tool.exe", b"MZ\x90\x00" + bytes(range(256)) * 4, 415),
            ("scan.pdf", b"%PDF-1.4\nthis is not really a pdf", 422),
        ):
            refused = client.post("/api/documents", files={"file": (name, data)})
            expected = list(workspace.ingest(name, data))[-1]
            assert expected["type"] == "error"
            assert refused.status_code == status, (name, refused.text)
            assert refused.json()["message"] == expected["message"]
            assert refused.json()["reason"] == expected["reason"]
        assert client.post("/api/documents", data={"x": "1"}).status_code == 422
        assert client.post("/api/documents", content=b"{}",
                           headers={"Content-Type": "application/json"}).status_code == 422
        # in a batch, a bad file is one error event and the others are indexed
        with client.stream("POST", "/api/documents", files=[
            ("file", ("ok.txt", b"Vellum is calf skin prepared for writing.")),
            ("file", ("empty.md", b"")),
        ]) as response:
            assert response.status_code == 200
            ends = [e for e in ndjson(response) if e["type"] != "stage"]
        assert [(e["type"], e["file"]) for e in ends] == [("done", "ok.txt"),
                                                          ("error", "empty.md")]
        # a duplicate is a done event that says so
        with client.stream("POST", "/api/documents", files={
            "file": ("again.txt", b"Vellum is calf skin prepared for writing.")}) as response:
            again = ndjson(response)[-1]
        assert again["type"] == "done" and again["duplicate"] is True
        # other bytes, the same text: a near-duplicate, a conflict that names the original
        near = client.post("/api/documents", files={
            "file": ("copy.txt", b"Vellum is calf skin prepared for writing.\n\n")})
        assert near.status_code == 409, near.text
        assert near.json()["reason"] == "near_duplicate" and "ok.txt" in near.json()["message"]
        # each upload went through the ingestion jobs (the Documents page's queue shows them)
        jobs = sqlite3.connect(served.env["MARGINALIA_DB"]).execute(
            "SELECT name, status FROM ingest_jobs").fetchall()
        assert ("ok.txt", "done") in jobs and ("empty.md", "refused") in jobs


# ------------------------------------------------------------------------- a client that leaves
def test_a_client_that_disconnects_mid_answer_stops_it_and_nothing_is_saved(
    fake_openai, tmp_path
):
    chunks = [f"Vellum word {i} [1]. " for i in range(40)]
    env = server_env(tmp_path / "leave.db", **fake_openai.env())
    with ApiServer(env) as server, server.client() as client:
        with client.stream("POST", "/api/documents", files={"file": (
                "vellum.txt", b"Vellum is calf skin prepared for writing.")}) as response:
            assert ndjson(response)[-1]["type"] == "done"
        fake_openai.stream_script(chunks, chunk_delay=0.25)
        with client.stream("POST", "/api/chat", json={"message": "What is vellum?"}) as response:
            lines = response.iter_lines()
            assert json.loads(next(lines))["type"] == "meta"
            assert json.loads(next(lines))["type"] == "token"
        # the client is gone: the model's stream is closed long before its 40 pieces
        sent = _settled(fake_openai._events_sent)
        assert sent < len(chunks)
        assert client.get("/api/conversations").json() == []
        messages = sqlite3.connect(tmp_path / "leave.db").execute(
            "SELECT COUNT(*) FROM messages").fetchone()[0]
        assert messages == 0

        # the server is fine, and a complete answer is saved
        fake_openai.stream_script(["Vellum is calf skin [1]."])
        with client.stream("POST", "/api/chat", json={"message": "What is vellum?"}) as response:
            done = ndjson(response)[-1]
        assert done["type"] == "done" and done["answer"] == "Vellum is calf skin [1]."
        assert len(client.get("/api/conversations").json()) == 1


def _settled(read: Any, quiet_s: float = 2.0, limit_s: float = 60.0) -> int:
    """A counter's value once it has stopped moving for ``quiet_s``."""
    value, since, start = read(), time.monotonic(), time.monotonic()
    while time.monotonic() - since < quiet_s and time.monotonic() - start < limit_s:
        time.sleep(0.1)
        now = read()
        if now != value:
            value, since = now, time.monotonic()
    return value


# ------------------------------------------------------------------------- concurrency
def test_concurrent_chats_each_get_their_own_complete_answer(served):
    questions = ["What did Fermat write?", "What is a gloss?", "Who wrote in margins?",
                 "How are sources cited?", "When was Fermat's theorem proved?", "What is vellum?"]
    with served.client() as client, client.stream("POST", "/api/documents", files={"file": (
            "a-short-history-of-marginalia.md",
            (SAMPLES / "a-short-history-of-marginalia.md").read_bytes())}) as response:
        response.read()
    results: dict[str, list[dict]] = {}
    errors: list[BaseException] = []

    def ask(question: str) -> None:
        try:
            with served.client() as client, client.stream(
                    "POST", "/api/chat", json={"message": question}) as response:
                assert response.status_code == 200
                results[question] = ndjson(response)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=ask, args=(q,)) for q in questions]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors, errors
    assert len(results) == len(questions)
    for question, events in results.items():
        assert events[0]["type"] == "meta" and events[-1]["type"] == "done", question
        assert events[0]["title"] == question
    ids = {events[-1]["conversationId"] for events in results.values()}
    assert len(ids) == len(questions)
    with served.client() as client:
        stored = {c["id"] for c in client.get("/api/conversations").json()}
    assert ids <= stored


def test_the_api_and_another_process_write_the_same_library_at_once(tmp_path, workspace):
    """The Streamlit app's Workspace (here: this process) and the API share one SQLite file."""
    db = Path(workspace.settings.db_path)
    errors: list[BaseException] = []
    with ApiServer(server_env(db)) as server:
        def api_side() -> None:
            try:
                with server.client() as client:
                    for i in range(6):
                        with client.stream("POST", "/api/documents", files={"file": (
                                f"api-{i}.txt", f"API note {i}: the binder used oak boards."
                                .encode())}) as r:
                            assert ndjson(r)[-1]["type"] == "done"
                        with client.stream("POST", "/api/chat",
                                           json={"message": f"What boards, note {i}?"}) as r:
                            assert ndjson(r)[-1]["type"] == "done"
            except BaseException as exc:
                errors.append(exc)

        thread = threading.Thread(target=api_side)
        thread.start()
        for i in range(6):
            end = list(workspace.ingest(f"app-{i}.txt",
                                        f"App note {i}: the scribe ruled lines.".encode()))[-1]
            assert end["type"] == "done", end
            assert list(workspace.ask(f"What did the scribe do, note {i}?"))[-1]["type"] == "done"
        thread.join(timeout=600)
        assert not errors, errors
        with server.client() as client:
            names = {d["name"] for d in client.get("/api/documents").json()}
            conversations = client.get("/api/conversations").json()
    assert names == {f"api-{i}.txt" for i in range(6)} | {f"app-{i}.txt" for i in range(6)}
    assert len(conversations) == 12
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


# ------------------------------------------------------------------------- access
def test_with_a_token_every_request_needs_it_and_it_never_shows(tmp_path):
    env = server_env(tmp_path / "t.db", MARGINALIA_API_CORS="http://notes.example")
    with ApiServer(env, "--mcp", token=TOKEN) as server:
        for path in ("/api/health", "/api/documents", "/api/conversations", "/docs",
                     "/openapi.json", "/mcp"):
            bare = httpx.get(server.url + path)
            assert bare.status_code == 401, path
            assert bare.headers["www-authenticate"].startswith("Bearer")
            assert bare.json()["reason"] == "unauthorized" and TOKEN not in bare.text
        wrong = httpx.post(server.url + "/api/chat", json={"message": "hi"},
                           headers={"Authorization": "Bearer " + TOKEN[:-1] + "x"})
        assert wrong.status_code == 401
        assert httpx.get(server.url + "/api/health",
                         headers={"Authorization": TOKEN}).status_code == 401  # no scheme
        with server.client() as client:
            assert client.get("/api/health").status_code == 200
            with client.stream("POST", "/api/chat", json={"message": "anything?"}) as r:
                last = ndjson(r)[-1]  # the engine ran: an empty library's notice, not a 401
                assert r.status_code == 200 and last["reason"] == "no_documents", last
            # CORS: the listed origin may call, with a preflight that needs no token
            pre = httpx.options(server.url + "/api/chat", headers={
                "Origin": "http://notes.example", "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "authorization,content-type"})
            assert pre.status_code == 200
            assert pre.headers["access-control-allow-origin"] == "http://notes.example"
            other = client.get("/api/health", headers={"Origin": "http://evil.example"})
            assert "access-control-allow-origin" not in other.headers
        # an OPTIONS that is not a listed origin's preflight is one more request: it needs it
        bare = httpx.options(server.url + "/api/documents")
        assert bare.status_code == 401 and bare.json()["reason"] == "unauthorized"
        # and an unlisted origin's preflight is turned away by the CORS layer before any route
        evil = httpx.options(server.url + "/api/documents", headers={
            "Origin": "http://evil.example", "Access-Control-Request-Method": "POST"})
        assert evil.status_code == 400 and "access-control-allow-origin" not in evil.headers
        log = server.log()
    assert TOKEN not in log


def test_without_cors_origins_no_browser_origin_is_allowed(served):
    with served.client() as client:
        r = client.get("/api/health", headers={"Origin": "http://localhost:3000"})
    assert r.status_code == 200 and "access-control-allow-origin" not in r.headers


def test_binding_past_loopback_without_a_token_is_refused(tmp_path):
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "marginalia_core", "serve", "--host", "0.0.0.0", "--port", "1"],
        env=server_env(tmp_path / "b.db"), capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert "Refusing to listen on 0.0.0.0 without an API token" in proc.stderr
    assert "MARGINALIA_API_TOKEN" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "::1", "127.0.0.2", "[::1]"])
def test_loopback_addresses_need_no_token(host):
    assert is_loopback(host)
    check_bind(host, None)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.5", "example.org", ""])
def test_other_addresses_need_a_token(host):
    assert not is_loopback(host)
    with pytest.raises(BindRefused, match="MARGINALIA_API_TOKEN"):
        check_bind(host, None)
    check_bind(host, TOKEN)


def test_token_comparison():
    assert token_matches(f"Bearer {TOKEN}", TOKEN)
    assert token_matches(f"bearer  {TOKEN} ", TOKEN)
    for header in (None, "", TOKEN, f"Basic {TOKEN}", f"Bearer {TOKEN}x", "Bearer "):
        assert not token_matches(header, TOKEN), header


def test_model_service_failures_end_the_stream_and_never_show_the_key(fake_openai, tmp_path):
    from fake_openai import EMBED_MODEL

    secret = "sk-api-test-very-secret-0042"
    env = server_env(tmp_path / "key.db", **fake_openai.env(OPENAI_API_KEY=secret))
    with ApiServer(env) as server, server.client() as client:
        with client.stream("POST", "/api/documents", files={"file": (
                "vellum.txt", b"Vellum is calf skin prepared for writing.")}) as response:
            assert ndjson(response)[-1]["type"] == "done"
        fake_openai.set_models([EMBED_MODEL])  # the chat model is gone
        with client.stream("POST", "/api/chat", json={"message": "What is vellum?"}) as r:
            body = r.read().decode()
        lines = [json.loads(x) for x in body.splitlines()]
        assert lines[0]["type"] == "meta" and lines[-1]["type"] == "error"
        assert "not available" in lines[-1]["message"]
        fake_openai.set_models(None)
        fake_openai.require_key("another-key")  # the server rejects ours
        with client.stream("POST", "/api/chat", json={"message": "What is vellum?"}) as r:
            rejected = r.read().decode()
        health = client.get("/api/health").text
        log = server.log()
        assert client.get("/api/conversations").json() == []  # nothing saved
    assert "error" in rejected
    for text in (body, rejected, health, log):
        assert secret not in text


def test_the_api_serves_a_postgresql_library_too(pg_database, tmp_path):
    env = server_env(tmp_path / "unused.db", MARGINALIA_DATABASE_URL=pg_database)
    with ApiServer(env) as server, server.client() as client:
        health = client.get("/api/health").json()
        assert health["db"].startswith("postgresql://")
        with client.stream("POST", "/api/documents", files={"file": (
                "a-short-history-of-marginalia.md",
                (SAMPLES / "a-short-history-of-marginalia.md").read_bytes())}) as r:
            assert ndjson(r)[-1]["type"] == "done"
        with client.stream("POST", "/api/chat", json={"message": FERMAT}) as r:
            events = ndjson(r)
        assert events[0]["type"] == "meta" and events[-1]["type"] == "done"
        assert "Fermat" in events[-1]["answer"]
        conv = events[-1]["conversationId"]
        assert client.get(f"/api/conversations/{conv}").json()["messages"][1]["id"] == \
            events[-1]["messageId"]
    assert not (tmp_path / "unused.db").exists()  # the URL, not the file, held the library


def test_an_encrypted_pdf_is_refused_then_indexed_with_its_password(served):
    from conftest import PDFS

    path = PDFS / "sf__libreoffice-writer-password.pdf"  # password in ../shared/eval MANIFEST
    if not path.exists():
        pytest.skip(f"{path} is not present (../shared/eval is read-only shared data)")
    with served.client() as client:
        files = {"file": (path.name, path.read_bytes(), "application/pdf")}
        locked = client.post("/api/documents", files=files)
        assert locked.status_code == 422 and locked.json()["reason"] == "encrypted"
        wrong = client.post("/api/documents", files=files, data={"password": "not-it-4471"})
        assert wrong.status_code == 422 and wrong.json()["reason"] == "wrong_password"
        with client.stream("POST", "/api/documents", files=files,
                           data={"password": "openpassword"}) as response:
            end = ndjson(response)[-1]
        assert end["type"] == "done" and end["document"]["pageCount"] >= 1
    assert "openpassword" not in served.log() and "not-it-4471" not in served.log()


# ------------------------------------------------------------------------- the stream pump
def test_the_pump_runs_in_step_with_the_client_and_closes_the_stream_when_it_leaves():
    import asyncio

    from marginalia_core.api.streams import EventPump

    produced: list[int] = []
    closed = threading.Event()
    threads: set[str] = set()

    def make():
        try:
            for i in range(100):
                produced.append(i)
                threads.add(threading.current_thread().name)
                yield {"type": "token", "text": str(i)}
        finally:
            threads.add(threading.current_thread().name)
            closed.set()  # GeneratorExit on the worker: the engine's save is never reached

    async def client_reads(n: int) -> list[bytes]:
        pump = EventPump(make)
        body = pump.ndjson([])
        lines = [await body.__anext__() for _ in range(n)]
        await asyncio.sleep(0.3)  # time for a runaway producer to show itself
        await body.aclose()  # the client left
        return lines

    lines = asyncio.run(client_reads(3))
    assert [json.loads(x)["text"] for x in lines] == ["0", "1", "2"]
    assert closed.wait(30)
    # the next event is computed only once the client asks for it: never ahead of what it got
    assert produced == [0, 1, 2]
    assert threads and all(t.startswith("marginalia-stream") for t in threads)


def test_the_pump_reports_a_failure_as_an_error_event_and_ends():
    import asyncio

    from marginalia_core.api.streams import EventPump

    def make():
        yield {"type": "meta"}
        raise RuntimeError("secret detail sk-should-not-show")

    async def read_all() -> list[dict]:
        pump = EventPump(make)
        return [json.loads(x) async for x in pump.ndjson([])]

    events = asyncio.run(read_all())
    assert [e["type"] for e in events] == ["meta", "error"]
    assert events[1]["reason"] == "internal" and "sk-should" not in events[1]["message"]
