"""Answer latency: question -> ``meta`` event, -> first ``token``, -> ``done``, through ChatEngine.ask.

    python benchmarks/bench_latency.py            # 20 questions per mode over one SQuAD article
    python benchmarks/bench_latency.py --quick    # 5 questions, the smallest article (CI smoke)
    python benchmarks/bench_latency.py --article Geology --questions 30

Two assemblies, both built by ``Workspace`` exactly as the app and the CLI build them, default
settings (hybrid retrieval, TOP_K 6, the embedder's threshold):

- ``offline``: the local MiniLM embedder + the extractive answerer;
- ``offline_rerank`` (``--modes offline,offline_rerank``): offline with the sentence-window
  rerank (``RetrievalConfig.reranker = "sentences"``, issue 23), on the same questions, so what
  the rerank adds to question -> meta and -> first token is read beside ``offline``;
- ``gemini``: the Gemini embedder + the Gemini answerer against the fake Gemini server
  (tests/fake_gemini.py as it ships, no injected latency: this is the client-side cost — SDK,
  HTTP on loopback, JSON — that a real network round trip adds to), at threshold 0.05 because
  the fake's vectors are not semantic. The fake's handler now sets TCP_NODELAY
  (``disable_nagle_algorithm``), so the ~40 ms delayed-ACK stall the earlier fake added to each
  question is gone; the value is recorded with the results.

The article (``articles_derived.jsonl``, default Geology; ``--quick``: Amazon_rainforest) is
indexed once per mode with ``ingest_bytes`` into a temporary Store; then one warm-up question,
then N fixed-seed SQuAD questions of that article, each in a new conversation. ``meta`` carries
the sources, so question -> meta is retrieval (query embedding + ranking + BM25 + fusion + the
chunk fetch); meta -> first token is the answerer's time before it streams.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _common as C

from marginalia_core.config import Settings
from marginalia_core.ingest.pipeline import ingest_bytes
from marginalia_core.workspace import Workspace

SEED = 7
RERANKER = "sentences"  # the offline_rerank mode's RetrievalConfig.reranker
FAKE_THRESHOLD = 0.05


def ask_timed(ws: Workspace, question: str) -> dict[str, Any]:
    t0 = time.perf_counter()
    marks: dict[str, float] = {}
    n_sources = 0
    for ev in ws.chat.ask(question):
        now = time.perf_counter() - t0
        kind = ev["type"]
        if kind == "meta":
            n_sources = len(ev.get("sources", []))
        if kind == "token":
            marks.setdefault("first_token", now)
        else:
            marks.setdefault(kind, now)
    if "error" in marks:
        raise RuntimeError(f"ask failed for {question!r}")
    marks["sources"] = n_sources
    return marks


def run_strategies(settings: Settings, article: dict[str, Any], questions: list[str],
                   strategies: list[str], *, cold: bool = False) -> dict[str, Any]:
    """The offline assembly with each extractive strategy on one index, the strategies taking
    turns question by question (so a load spike on the shared machine hits them alike).
    ``cold``: each answerer forgets the sentence vectors of earlier questions before each one
    (a conversation's first question); otherwise they are remembered, as in a conversation."""
    from marginalia_core.providers.answerers.extractive import ExtractiveAnswerer

    ws = Workspace(settings)
    try:
        for _ in ingest_bytes(ws.store, ws.embedder, ws.settings, f"{article['_id']}.txt",
                              article["text"].encode()):
            pass
        answerers = {s: ExtractiveAnswerer(settings, embedder=ws.embedder, strategy=s)
                     for s in strategies}
        rows: dict[str, list[dict[str, Any]]] = {s: [] for s in strategies}
        for s in strategies:  # warm-up
            ws.chat.answerer = answerers[s]
            ask_timed(ws, "What is this article about?")
        for q in questions:
            for s in strategies:
                ws.chat.answerer = answerers[s]
                if cold:
                    answerers[s]._vectors.clear()
                rows[s].append(ask_timed(ws, q))
    finally:
        ws.close()
    return {s: {"questions": len(r),
                "to_first_token": C.summary_ms([x["first_token"] for x in r if "first_token" in x]),
                "meta_to_first_token": C.summary_ms([x["first_token"] - x["meta"] for x in r
                                                     if "first_token" in x]),
                "to_done": C.summary_ms([x["done"] for x in r if "done" in x])}
            for s, r in rows.items()}


def run_mode(name: str, settings: Settings, article: dict[str, Any], questions: list[str]) -> dict[str, Any]:
    ws = Workspace(settings)
    try:
        t0 = time.perf_counter()
        ws.embedder  # noqa: B018  (load the model / client outside the indexing time)
        load_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        last: dict[str, Any] = {}
        for ev in ingest_bytes(ws.store, ws.embedder, ws.settings, f"{article['_id']}.txt", article["text"].encode()):
            last = ev
        index_s = time.perf_counter() - t0
        if last.get("type") != "done":
            raise RuntimeError(f"indexing failed: {last}")
        warm = ask_timed(ws, "What is this article about?")
        rows = [ask_timed(ws, q) for q in questions]
    finally:
        ws.close()
    out: dict[str, Any] = {
        "embedder": settings.embedder_name,
        "answerer": settings.answerer_name,
        "retrieval_mode": settings.retrieval.mode,
        "chunks_indexed": last["document"]["chunk_count"],
        "embedder_load_s": round(load_s, 2),
        "index_s": round(index_s, 2),
        "questions": len(rows),
        "first_question_ms": {k: round(v * 1000, 1) for k, v in warm.items() if k != "sources"},
        "mean_sources": round(sum(r["sources"] for r in rows) / len(rows), 2),
    }
    for key in ("meta", "first_token", "done"):
        out[f"to_{key}"] = C.summary_ms([r[key] for r in rows if key in r])
    out["meta_to_first_token"] = C.summary_ms([r["first_token"] - r["meta"] for r in rows if "first_token" in r])
    answered = [r for r in rows if r["sources"]]
    out["questions_with_sources"] = len(answered)
    if len(answered) < len(rows):  # a question with no sources gets a canned reply, no answerer
        out["to_first_token_with_sources"] = C.summary_ms([r["first_token"] for r in answered])
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--article", help="article id in articles_derived.jsonl")
    ap.add_argument("--questions", type=int)
    ap.add_argument("--modes", default="offline,gemini")
    ap.add_argument("--strategies", nargs="+", metavar="NAME",
                    help="offline only: these extractive strategies side by side, in turns")
    ap.add_argument("--cold", action="store_true",
                    help="with --strategies: no sentence vector remembered between questions")
    args = ap.parse_args()
    custom = bool(args.article or args.questions or args.modes != "offline,gemini")
    if args.strategies:
        run = "strategies" if not (args.article or args.questions) else "custom_strategies"
        run += "_cold" if args.cold else ""
    if not args.strategies:
        run = "custom" if custom else ("quick" if args.quick else "full")
    article_id = args.article or ("Amazon_rainforest" if args.quick else "Geology")
    count = args.questions or (5 if args.quick else 20)
    articles, questions = C.load_squad()
    article = articles[article_id]
    qs = [q["question"] for q in random.Random(SEED).sample(questions[article_id], count)]
    res: dict[str, Any] = {"article": article_id, "article_chars": len(article["text"]), "modes": {}}
    t_start = time.perf_counter()
    modes = [m for m in args.modes.split(",") if m]
    tmp = Path(tempfile.mkdtemp(prefix="bench-latency-"))
    try:
        if args.strategies:
            s = Settings(db_path=str(tmp / "strategies.db"), embedder="local",
                         answerer="extractive")
            res["strategies"] = run_strategies(s, article, qs, args.strategies, cold=args.cold)
            res["command"] = "PYTHONPATH=. python benchmarks/bench_latency.py " + " ".join(
                sys.argv[1:])
            modes = []
            for name, r in res["strategies"].items():
                C.log(f"[latency] {name}: first token p50 {r['to_first_token']['p50_ms']} ms")
        if "offline" in modes:
            s = Settings(db_path=str(tmp / "offline.db"), embedder="local", answerer="extractive")
            res["modes"]["offline"] = run_mode("offline", s, article, qs)
            C.log(f"[latency] offline: meta p50 {res['modes']['offline']['to_meta']['p50_ms']} ms, "
                  f"first token p50 {res['modes']['offline']['to_first_token']['p50_ms']} ms")
        if "offline_rerank" in modes:  # issue 23: the same, with the sentence-window rerank
            s = Settings(db_path=str(tmp / "offline-rerank.db"), embedder="local",
                         answerer="extractive").with_overrides(reranker=RERANKER)
            res["modes"]["offline_rerank"] = r = run_mode("offline", s, article, qs)
            r["reranker"] = RERANKER
            C.log(f"[latency] offline_rerank: meta p50 {r['to_meta']['p50_ms']} ms, "
                  f"first token p50 {r['to_first_token']['p50_ms']} ms")
        if "gemini" in modes:
            fake_gemini = C.test_helper("fake_gemini")

            # The fake's hashed bag-of-words vectors are not semantic: at Gemini's 0.35 default
            # threshold most SQuAD questions retrieve nothing and get the canned reply without
            # calling the answerer, so the threshold is lowered to put every question through it.
            label = "gemini_fake_server"
            server = fake_gemini.FakeGeminiServer().start()
            try:
                s = server.settings(db_path=str(tmp / f"{label}.db"), gemini_timeout_s=30.0,
                                    threshold=FAKE_THRESHOLD)
                res["modes"][label] = r = run_mode("gemini", s, article, qs)
                r["threshold"] = FAKE_THRESHOLD
                r["fake_server_latency_s"] = 0.0
                r["tcp_nodelay_on_fake_server"] = bool(fake_gemini._Handler.disable_nagle_algorithm)
                r["requests"] = {
                    "embed": len(server.requests_for("embed")),
                    "stream": len(server.requests_for("stream")),
                }
            finally:
                server.stop()
            C.log(f"[latency] {label}: meta p50 {r['to_meta']['p50_ms']} ms, "
                  f"first token p50 {r['to_first_token']['p50_ms']} ms")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    res["seconds_total"] = round(time.perf_counter() - t_start, 1)
    path = C.write_result("latency", run, res)
    print(json.dumps({"written": str(path.relative_to(C.REPO)), "run": run, "seconds": res["seconds_total"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
