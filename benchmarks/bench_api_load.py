"""The HTTP API under load: 8 concurrent chat streams and 2 uploads against one ``marginalia
serve`` for 60 s, beside the same questions asked one at a time (API idle) and through the CLI,
in the same run.

    nice -n 10 python benchmarks/bench_api_load.py              # 60 s, 8 chats + 2 uploads
    nice -n 10 python benchmarks/bench_api_load.py --quick      # 10 s, 2 chats + 1 upload

Offline default (local MiniLM embedder, extractive answerer), a fresh library of the three
sample documents in a temporary folder, the server a subprocess on a random loopback port (the
test suite's tests/api_server.py). Bounded: fixed duration, fixed workers, 127.0.0.1 only.

Measured per chat, from the request being sent: time to the ``meta`` line (retrieval done,
sources known) and to the first ``token`` line, and to ``done``. The CLI's figure is from
starting ``python -m marginalia_core ask`` to the same lines on its stdout (process start and
model load included: what a script pays per question). Checked: every stream ends in ``done``
with no ``error``, every upload ends in ``done``, and every answer a client saw is stored
(each ``done``'s messageId is in its conversation, fetched back through the API afterwards).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import _common as C

api_server = C.test_helper("api_server")

QUESTIONS = [
    "What did Fermat write in the margin?",
    "What is a gloss?",
    "How should old books be stored?",
    "What humidity is good for old books?",
    "How does Marginalia cite its sources?",
    "Who wrote notes in the margins of manuscripts?",
    "What is vellum?",
    "When was Fermat's Last Theorem proved?",
    "How are passages shown in the margin?",
    "What damages paper over time?",
]
SEED = 11


def timed_chat(client: Any, question: str) -> dict[str, Any]:
    """One streamed chat: seconds to meta, first token and done; the events' types."""
    t0 = time.perf_counter()
    marks: dict[str, float] = {}
    types: list[str] = []
    last: dict[str, Any] = {}
    with client.stream("POST", "/api/chat", json={"message": question}) as response:
        status = response.status_code
        for line in response.iter_lines():
            if not line.strip():
                continue
            event = json.loads(line)
            types.append(event["type"])
            marks.setdefault(event["type"], time.perf_counter() - t0)
            last = event
    return {"status": status, "types": types, "meta_s": marks.get("meta"),
            "token_s": marks.get("token"), "done_s": marks.get("done"), "end": last}


def cli_chat(env: dict[str, str], question: str) -> dict[str, Any]:
    t0 = time.perf_counter()
    marks: dict[str, float] = {}
    proc = subprocess.Popen([sys.executable, "-m", "marginalia_core", "ask", question],
                            cwd=C.REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    types = []
    for line in proc.stdout:
        event = json.loads(line)
        types.append(event["type"])
        marks.setdefault(event["type"], time.perf_counter() - t0)
    proc.wait(timeout=300)
    return {"types": types, "meta_s": marks.get("meta"), "token_s": marks.get("token"),
            "done_s": marks.get("done"), "rc": proc.returncode}


def upload_doc(n: int, rng: random.Random) -> tuple[str, bytes]:
    """A unique ~20 KB text built from the samples' paragraphs (never a duplicate)."""
    paragraphs = [p for path in sorted((C.REPO / "samples").glob("*.md"))
                  for p in path.read_text(encoding="utf-8").split("\n\n") if len(p) > 80]
    body = "\n\n".join(rng.choice(paragraphs) for _ in range(12))
    return f"load-{n:04d}.md", f"# Load document {n} ({rng.random():.12f})\n\n{body}".encode()


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "to_meta": C.summary_ms(r["meta_s"] for r in runs if r["meta_s"] is not None),
        "to_first_token": C.summary_ms(r["token_s"] for r in runs if r["token_s"] is not None),
        "to_done": C.summary_ms(r["done_s"] for r in runs if r["done_s"] is not None),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--seconds", type=float)
    parser.add_argument("--chats", type=int)
    parser.add_argument("--uploads", type=int)
    parser.add_argument("--baseline", type=int, help="questions asked one at a time (API, CLI)")
    args = parser.parse_args()
    seconds = args.seconds or (10.0 if args.quick else 60.0)
    chats = args.chats or (2 if args.quick else 8)
    uploads = args.uploads if args.uploads is not None else (1 if args.quick else 2)
    baseline = args.baseline or (3 if args.quick else 10)

    load_before = os.getloadavg()[0]  # other jobs on this machine share its 2 cores
    with tempfile.TemporaryDirectory(prefix="marginalia-load-") as tmp:
        db = Path(tmp) / "load.db"
        env = api_server.server_env(db)
        with api_server.ApiServer(env) as server, server.client() as client:
            for path in sorted((C.REPO / "samples").glob("*.md")) + sorted(
                    (C.REPO / "samples").glob("*.pdf")):
                with client.stream("POST", "/api/documents",
                                   files={"file": (path.name, path.read_bytes())}) as r:
                    end = [json.loads(x) for x in r.iter_lines() if x.strip()][-1]
                assert end["type"] == "done", end
            timed_chat(client, QUESTIONS[0])  # warm-up: the embedder is loaded

            # 1. the API idle: one question at a time
            idle = [timed_chat(client, QUESTIONS[i % len(QUESTIONS)]) for i in range(baseline)]

            # 2. the load: N chat streams + M uploads for `seconds`
            stop = time.monotonic() + seconds
            chat_runs: list[dict[str, Any]] = []
            upload_runs: list[dict[str, Any]] = []
            failures: list[str] = []
            lock = threading.Lock()

            def chatter(worker: int) -> None:
                local = random.Random(SEED * 100 + worker)
                with server.client() as c:
                    while time.monotonic() < stop:
                        try:
                            run = timed_chat(c, local.choice(QUESTIONS))
                        except Exception as exc:  # counted, never hidden
                            with lock:
                                failures.append(f"chat {worker}: {type(exc).__name__}: {exc}")
                            continue
                        with lock:
                            chat_runs.append(run)

            def uploader(worker: int) -> None:
                local = random.Random(SEED * 1000 + worker)
                n = 0
                with server.client() as c:
                    while time.monotonic() < stop:
                        name, data = upload_doc(worker * 10_000 + n, local)
                        n += 1
                        t0 = time.perf_counter()
                        try:
                            with c.stream("POST", "/api/documents",
                                          files={"file": (name, data)}) as r:
                                events = [json.loads(x) for x in r.iter_lines() if x.strip()]
                        except Exception as exc:
                            with lock:
                                failures.append(f"upload {worker}: {type(exc).__name__}: {exc}")
                            continue
                        with lock:
                            upload_runs.append({"name": name, "s": time.perf_counter() - t0,
                                                "end": events[-1] if events else {}})

            threads = [threading.Thread(target=chatter, args=(i,)) for i in range(chats)]
            threads += [threading.Thread(target=uploader, args=(i,)) for i in range(uploads)]
            t_load = time.perf_counter()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            load_wall = time.perf_counter() - t_load

            # 3. every answer a client saw is stored; every upload is listed
            bad_chats = [r for r in chat_runs if r["status"] != 200 or not r["types"]
                         or r["types"][0] != "meta" or r["types"][-1] != "done"
                         or "error" in r["types"]]
            lost = 0
            for r in chat_runs:
                end = r["end"]
                if end.get("type") != "done":
                    continue
                conv = client.get(f"/api/conversations/{end['conversationId']}")
                ids = {m["id"] for m in conv.json().get("messages", [])} if conv.is_success else set()
                lost += end["messageId"] not in ids
            listed = {d["name"] for d in client.get("/api/documents").json()}
            bad_uploads = [u for u in upload_runs if u["end"].get("type") != "done"]
            lost_uploads = [u for u in upload_runs if u["name"] not in listed]

        # 4. the CLI, same questions, one at a time, on the same library
        cli_env = api_server.server_env(db)
        cli = [cli_chat(cli_env, QUESTIONS[i % len(QUESTIONS)]) for i in range(baseline)]
        cli_bad = [r for r in cli if r["rc"] != 0 or not r["types"] or r["types"][-1] != "done"]

    payload = {
        "setup": {"seconds": seconds, "chat_streams": chats, "upload_workers": uploads,
                  "baseline_questions": baseline, "mode": "offline (local + extractive)",
                  "library": "samples/ (3 documents) + the load's uploads",
                  "load_wall_s": round(load_wall, 2),
                  "loadavg_1m_before_after": [round(load_before, 2),
                                              round(os.getloadavg()[0], 2)]},
        "load": {
            "chats": len(chat_runs), "chats_per_s": round(len(chat_runs) / load_wall, 2),
            "uploads": len(upload_runs), "errors": len(failures) + len(bad_chats),
            "upload_errors": len(bad_uploads), "lost_messages": lost,
            "lost_uploads": len(lost_uploads), "failures": failures[:10],
            **summarise(chat_runs),
            "upload": C.summary_ms(u["s"] for u in upload_runs),
        },
        "api_idle": summarise(idle),
        "cli": {**summarise(cli), "errors": len(cli_bad)},
    }
    run = "quick" if args.quick else "full"
    path = C.write_result("api_load", run, payload)
    print(json.dumps(payload, indent=2))
    print(f"written {path.relative_to(C.REPO)} ({run})")
    ok = not (failures or bad_chats or lost or bad_uploads or lost_uploads or cli_bad)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
