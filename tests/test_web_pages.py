"""Web pages added on request: fetched from a local HTTP server (redirects, 404, a 30 MB page, a
non-HTML response, a slow server), stored with their final URL and fetch time, refreshed, and
cited by URL. Nothing here reaches past 127.0.0.1."""

from __future__ import annotations

import io
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from marginalia_core import cli
from marginalia_core.ingest import web

ARTICLE = """<!doctype html><html><head><title>Quince harvest notes</title>
<script>var tracking = "SCRIPT-TEXT-NEVER-INDEXED";</script></head><body>
<nav><a href="/">Home</a> <a href="/shop">MENU-TEXT-NEVER-INDEXED</a></nav>
<main><article><h1>Quince harvest notes</h1>
<p>Quinces are ready to pick when their skin turns from green to a deep golden yellow and the
fuzz rubs off easily. {version}</p>
<h2>Storing the fruit</h2>
<p>Keep quinces apart from other fruit: their strong perfume spreads to apples and pears stored
near them. A cool dark shelf keeps them for about two months.</p>
<table><tr><th>Variety</th><th>Harvest</th></tr><tr><td>Vranja</td><td>October</td></tr></table>
</article></main>
<footer>FOOTER-TEXT-NEVER-INDEXED · Copyright</footer></body></html>"""

HUGE_BYTES = 30 * 1024 * 1024
SLOW_SECONDS = 3.0


class PageServer:
    """A local HTTP server with one route per case; ``version`` changes the article's text."""

    def __init__(self) -> None:
        self.version = "First edition."
        self.requests: list[str] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _send(self, status: int, body: bytes, mime: str = "text/html; charset=utf-8",
                      length: bool = True) -> None:
                self.send_response(status)
                self.send_header("Content-Type", mime)
                if length:
                    self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                owner.requests.append(self.path)
                path = self.path
                if path == "/article.html":
                    self._send(200, ARTICLE.format(version=owner.version).encode())
                elif path == "/old-address":
                    self.send_response(301)
                    self.send_header("Location", "/moved")
                    self.end_headers()
                elif path == "/moved":
                    self.send_response(302)
                    self.send_header("Location", "/article.html")
                    self.end_headers()
                elif path == "/loop":
                    self.send_response(302)
                    self.send_header("Location", "/loop")
                    self.end_headers()
                elif path == "/huge":  # no Content-Length: the limit must hold while reading
                    self.send_response(200)
                    self.send_header("Content-Type", "text/html")
                    self.end_headers()
                    chunk = b"<p>" + b"filler text " * 8000 + b"</p>\n"
                    sent = 0
                    try:
                        while sent < HUGE_BYTES:
                            self.wfile.write(chunk)
                            sent += len(chunk)
                    except (BrokenPipeError, ConnectionResetError):
                        pass
                elif path == "/huge-declared":
                    self.send_response(200)
                    self.send_header("Content-Type", "text/html")
                    self.send_header("Content-Length", str(HUGE_BYTES))
                    self.end_headers()
                elif path == "/data.json":
                    self._send(200, b'{"quince": true}', "application/json")
                elif path == "/slow":
                    time.sleep(SLOW_SECONDS)
                    self._send(200, ARTICLE.format(version="late").encode())
                else:
                    self._send(404, b"<h1>Not Found</h1>")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> PageServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def pages() -> Iterator[PageServer]:
    with PageServer() as server:
        yield server


def last(events: list[dict]) -> dict:
    return events[-1]


def test_a_page_is_indexed_with_its_final_url_and_fetch_time(workspace, pages):
    events = list(workspace.ingest_url(pages.base + "/old-address"))
    assert events[0]["stage"] == "fetching"
    end = last(events)
    assert end["type"] == "done", end
    doc = end["document"]
    assert doc["source_url"] == pages.base + "/article.html"  # after two redirects
    assert doc["name"] == pages.base + "/article.html"
    assert doc["fetched_at"] and doc["fetched_at"].startswith("20")
    assert doc["mime"] == "text/html"
    stored = workspace.store.get_document(doc["id"])
    assert stored.source_url == doc["source_url"] and stored.fetched_at == doc["fetched_at"]

    hits = workspace.search("How long do quinces keep on a cool shelf?")
    assert hits and hits[0].document_name == pages.base + "/article.html"
    assert "\u2018Storing the fruit\u2019" in hits[0].location  # "sections ‘…’ – ‘…’"
    text = " ".join(c.content for c in workspace.store.document_chunks(doc["id"]))
    for chrome in ("SCRIPT-TEXT", "MENU-TEXT", "FOOTER-TEXT"):
        assert chrome not in text
    assert "| Vranja | October |" in text  # the table stays a table


@pytest.mark.parametrize(
    "path,reason,words",
    [
        ("/missing", "fetch", "404"),
        ("/data.json", "fetch", "not a web page"),
        ("/huge", "too_large", "10 MB"),
        ("/huge-declared", "too_large", "30 MB"),
        ("/loop", "fetch", "redirects more than"),
    ],
    ids=["404", "not-html", "30MB-streamed", "30MB-declared", "redirect-loop"],
)
def test_a_page_that_cannot_be_added_is_refused_with_a_reason(workspace, pages, path, reason,
                                                              words):
    end = last(list(workspace.ingest_url(pages.base + path)))
    assert end["type"] == "error" and end["reason"] == reason, end
    assert words in end["message"] and "Traceback" not in end["message"]
    assert workspace.documents() == []  # nothing half-written


def test_a_slow_server_is_given_up_on(workspace, pages, monkeypatch):
    monkeypatch.setattr(web, "FETCH_TIMEOUT_S", 0.5)
    started = time.monotonic()
    end = last(list(workspace.ingest_url(pages.base + "/slow")))
    assert end["type"] == "error" and end["reason"] == "fetch"
    assert "did not answer within 0.5 s" in end["message"]
    assert time.monotonic() - started < SLOW_SECONDS + 30  # it did not wait for the page forever
    assert workspace.documents() == []


@pytest.mark.parametrize("address", ["file:///etc/passwd", "ftp://example.org/x",
                                     "javascript:alert(1)", "http://"])
def test_only_web_addresses_are_fetched(workspace, address):
    end = last(list(workspace.ingest_url(address)))
    assert end["type"] == "error" and end["reason"] == "fetch"
    assert "not a web address" in end["message"]


def test_a_password_in_the_address_is_never_shown_or_stored(workspace, pages):
    secret = pages.base.replace("http://", "http://reader:hunter2@") + "/article.html"
    end = last(list(workspace.ingest_url(secret)))
    assert end["type"] == "done"
    assert "hunter2" not in json.dumps(end)
    missing = last(list(workspace.ingest_url(secret.replace("article", "nothing"))))
    assert missing["type"] == "error" and "hunter2" not in json.dumps(missing)


def test_refresh_replaces_a_changed_page_and_keeps_an_unchanged_one(workspace, pages):
    doc = last(list(workspace.ingest_url(pages.base + "/article.html")))["document"]
    same = last(list(workspace.refresh(doc["id"])))
    assert same["type"] == "done" and same["duplicate"] and "not changed" in same["message"]

    pages.version = "Second edition: quince paste sets best with the cores cooked in."
    changed = last(list(workspace.refresh(doc["id"])))
    assert changed["type"] == "done" and not changed["duplicate"]
    assert changed["document"]["id"] == doc["id"]  # same document, new text
    assert [d.id for d in workspace.documents()] == [doc["id"]]
    hits = workspace.search("quince paste cores")
    assert hits and "Second edition" in hits[0].content

    not_web = last(list(workspace.ingest("plain.txt", b"Just some notes about quinces.")))
    refused = last(list(workspace.refresh(not_web["document"]["id"])))
    assert refused["type"] == "error" and refused["reason"] == "invalid_input"


def test_the_cli_ingests_a_web_address_and_files_in_one_call(db_path, local_embedder, pages,
                                                             tmp_path):
    note = tmp_path / "note.md"
    note.write_text("# Quince jelly\n\nStrain the pulp overnight through muslin.")

    def run(*argv: str) -> tuple[int, list[dict]]:
        out, err = io.StringIO(), io.StringIO()
        code = cli.main([*argv, "--db", str(db_path), "--embedder", "local", "--answerer",
                         "extractive"], out=out, err=err)
        return code, [json.loads(line) for line in out.getvalue().splitlines()]

    code, lines = run("ingest", pages.base + "/article.html", str(note), pages.base + "/missing")
    assert code == 1  # one refused
    ends = [x for x in lines if x["type"] in ("done", "error")]
    assert [x["type"] for x in ends] == ["done", "done", "error"]
    assert ends[0]["document"]["sourceUrl"] == pages.base + "/article.html"
    code, lines = run("refresh", ends[0]["document"]["id"])
    assert code == 0 and lines[-1]["type"] == "done" and lines[-1]["duplicate"]
