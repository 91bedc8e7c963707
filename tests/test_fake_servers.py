"""The fake model servers' shared base (tests/fake_server.py): the benchmarks can load the fakes
by file path, and a stream fault scheduled past the last text event happens at the end of the
stream on both fakes (the one place their old copies disagreed)."""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

LOAD_BY_PATH = """
import json, sys, urllib.request
import _common as C
fake_openai = C.test_helper("fake_openai")
fake_gemini = C.test_helper("fake_gemini")
with fake_openai.FakeOpenAIServer() as server:
    with urllib.request.urlopen(server.base_url + "/models") as r:
        models = [m["id"] for m in json.load(r)["data"]]
with fake_gemini.FakeGeminiServer() as server:
    port = server.port
print(json.dumps({"models": models, "port": port,
                  "tests_on_path": any(p.rstrip("/").endswith("tests") for p in sys.path),
                  "loaded": sorted(m for m in sys.modules if m.startswith("fake_"))}))
"""


def test_benchmarks_load_the_fakes_and_their_base_by_file_path(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "benchmarks"), str(ROOT)])}
    out = subprocess.run(
        [sys.executable, "-c", LOAD_BY_PATH], cwd=tmp_path, env=env,
        capture_output=True, text=True, check=True,
    )
    got = json.loads(out.stdout)
    assert got["tests_on_path"] is False
    assert got["loaded"] == ["fake_gemini", "fake_openai", "fake_server"]
    assert got["models"] == ["fake-chat", "fake-embed"] and got["port"] > 0


def _stream_body(port: int, path: str, body: dict, headers: dict) -> bytes:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json", **headers})
        resp = conn.getresponse()
        assert resp.status == 200
        return resp.read()
    finally:
        conn.close()


def test_gemini_error_scheduled_past_the_end_follows_the_last_event(fake_gemini):
    fake_gemini.stream_script(chunks=["only ", "two"], error_after=5, error_code=503)
    raw = _stream_body(
        fake_gemini.port, "/v1beta/models/m:streamGenerateContent?alt=sse",
        {"contents": [{"parts": [{"text": "q"}]}]}, {"x-goog-api-key": fake_gemini.api_key},
    )
    events = [json.loads(e) for e in raw.decode().replace("data: ", "").split("\r\n\r\n") if e]
    texts = [e["candidates"][0]["content"]["parts"][0]["text"] for e in events[:-1]]
    assert texts == ["only ", "two"]
    assert events[-1]["error"]["code"] == 503
    assert fake_gemini.stream_events_sent == 2


def test_openai_error_scheduled_past_the_end_replaces_the_finish(fake_openai):
    fake_openai.stream_script(["only ", "two"], error_after=5, error_message="boom")
    raw = _stream_body(
        fake_openai.port, "/v1/chat/completions",
        {"model": "fake-chat", "stream": True, "messages": [{"role": "user", "content": "q"}]}, {},
    )
    events = [e.removeprefix("data: ") for e in raw.decode().split("\n\n") if e]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    deltas = [c["choices"][0]["delta"].get("content") for c in chunks[:-1]]
    assert deltas == ["", "only ", "two"]  # the role chunk, then the text
    assert chunks[-1]["error"]["message"] == "boom"
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])
    assert fake_openai.chunks_sent == 2
