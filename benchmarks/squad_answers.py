"""The offline (extractive) answerer on real text: SQuAD v1.1 dev articles, end to end.

    python benchmarks/squad_answers.py            # 5 articles (~190k chars), 300 questions
    python benchmarks/squad_answers.py --quick    # 1 article, 40 questions (< 60 s warm)
    python benchmarks/squad_answers.py --articles Amazon_rainforest Geology --questions 100

Each article (``articles_derived.jsonl``: its paragraphs joined into one text) is indexed as one
document into a temporary SQLite file with the project's own ingestion (``ingest_bytes``:
chunking, the real local MiniLM embedder, ``Store.add_document``); chunk vectors are cached by
content in benchmarks/.cache so re-runs skip the slow part. A fixed-seed sample of the articles'
SQuAD questions (``dev-v1.1.json``) is then asked through ``ChatEngine.ask`` exactly as the app
and the CLI ask them (hybrid retrieval, the extractive answerer embedding candidate sentences
with the same local embedder, the exchange saved to SQLite).

Metrics (an answer span "is in" a text when any gold answer occurs in it, case-insensitive,
whitespace-normalized):

- ``recall_at_k``: some retrieved source contains an answer span (the ceiling for the rest);
  ``recall_at_1``: source [1] does (what always citing [1] would score as ``cite_rate``);
- ``cite_rate``: the answer cites at least one source that contains an answer span;
- ``cited_precision``: mean share of the cited sources that contain an answer span (citing
  everything would raise ``cite_rate`` and sink this);
- ``answer_rate``: the answer text itself (citation marks removed) contains an answer span;
- ``lead_rate``: its first sentence does (what a reader sees first);
- ``cite_rate_given_recall`` / ``answer_rate_given_recall``: the same, over the questions
  whose sources contain the answer (how well the answerer picks among retrieved passages);
- ``baseline_first_sentence_answer_rate``: answering with the first full sentence of source [1];
- ``nothing_found_rate``: the answer says the passages don't answer it (it still quotes and
  cites the closest sentence) or cites nothing;
- ``invalid_citations``, answer length (characters, words), latency (ask -> done, ms).

``--strategies answer v1`` asks every question once per extractive strategy on the same index in
the same run (``v1``: the sentence selector before issue 11, the baseline); each strategy's
summary is stored under ``strategies``. Tuning split: the ``full`` articles (train); held out:
``HELDOUT_ARTICLES`` (``--heldout``), never looked at while tuning.

Data is read from ../shared/eval/squad-v1.1-dev (never copied). Results are written to
benchmarks/results/squad_answers.json (keyed by run name: "full", "quick" or "custom").
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from _cache import EmbeddingCache  # noqa: E402

from marginalia_core.chat.support import citation_quality  # noqa: E402
from marginalia_core.citations import find_marks  # noqa: E402
from marginalia_core.config import Settings  # noqa: E402
from marginalia_core.ingest.pipeline import ingest_bytes  # noqa: E402
from marginalia_core.providers.answerers.extractive import (  # noqa: E402
    ExtractiveAnswerer,
    split_sentences,
)
from marginalia_core.workspace import Workspace  # noqa: E402

DATA = (REPO / ".." / "shared" / "eval" / "squad-v1.1-dev").resolve()
RESULTS = REPO / "benchmarks" / "results" / "squad_answers.json"
# History, science, geography, engineering, biography: ~190k characters in all.
FULL_ARTICLES = ("Normans", "Oxygen", "Kenya", "Apollo_program", "Nikola_Tesla")
FULL_QUESTIONS = 300
QUICK_ARTICLES = ("Normans",)
# issue 11's held-out articles: not used by any earlier tuning either
HELDOUT_ARTICLES = ("Geology", "Black_Death", "Steam_engine", "Immune_system", "Rhine")
QUICK_QUESTIONS = 40
SEED = 1234
# how the answerer says the passages don't answer the question (it still quotes the closest)
NOT_ANSWERED = "The passages I found don't seem to answer this directly."


# --- data --------------------------------------------------------------------------------------


def load_articles(ids: Sequence[str]) -> dict[str, str]:
    wanted = set(ids)
    out: dict[str, str] = {}
    with open(DATA / "articles_derived.jsonl", encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            if row["_id"] in wanted:
                out[row["_id"]] = row["text"]
    missing = wanted - set(out)
    if missing:
        raise SystemExit(f"unknown article id(s): {', '.join(sorted(missing))}")
    return out


def load_questions(ids: Sequence[str]) -> list[dict[str, Any]]:
    """Every question of these articles: {article, id, question, answers}, in file order."""
    with open(DATA / "dev-v1.1.json", encoding="utf-8") as f:
        data = json.load(f)["data"]
    wanted = set(ids)
    out = []
    for article in data:
        if article["title"] not in wanted:
            continue
        for para in article["paragraphs"]:
            for qa in para["qas"]:
                answers = sorted({a["text"] for a in qa["answers"] if a["text"].strip()})
                out.append(
                    {
                        "article": article["title"],
                        "id": qa["id"],
                        "question": qa["question"],
                        "answers": answers,
                    }
                )
    return out


def sample_questions(questions: list[dict[str, Any]], n: int, seed: int = SEED) -> list[dict]:
    if n >= len(questions):
        return list(questions)
    return random.Random(seed).sample(questions, n)


# --- matching ----------------------------------------------------------------------------------


def norm(text: str) -> str:
    return " ".join(text.lower().split())


def contains_answer(text: str, answers: Sequence[str]) -> bool:
    hay = norm(text)
    return any(norm(a) in hay for a in answers)


def strip_marks(text: str) -> str:
    out, pos = [], 0
    for mark in find_marks(text):
        out.append(text[pos : mark.start])
        pos = mark.end
    out.append(text[pos:])
    return re.sub(r"\s+([.,;:!?])", r"\1", "".join(out))


def first_sentence(text: str) -> str:
    parts = split_sentences(text)
    return parts[0] if parts else text


# --- the run -----------------------------------------------------------------------------------


class CachedEmbedder:
    """The local embedder with chunk vectors cached by content (ingestion only)."""

    def __init__(self, base: Any):
        self.base = base
        self.cache = EmbeddingCache(base.key, base.dimension)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.base, name)

    def embed_documents(self, texts: Sequence[str], progress: Any = None) -> np.ndarray:
        vectors = self.cache.get(list(texts), self.base.embed_documents)
        if progress:
            progress(len(texts), len(texts))
        return vectors


def index_articles(
    ws: Workspace, articles: dict[str, str], ids: dict[str, str] | None = None
) -> dict[str, Any]:
    """Index every article; ``ids`` (when given) receives each article's document id."""
    embedder = CachedEmbedder(ws.embedder)
    t0 = time.perf_counter()
    chunks = 0
    for article_id, text in articles.items():
        for event in ingest_bytes(
            ws.store, embedder, ws.settings, f"{article_id}.txt", text.encode("utf-8")
        ):
            if event["type"] == "error":
                raise SystemExit(f"indexing {article_id} failed: {event['message']}")
            if event["type"] == "done":
                chunks += event["document"]["chunk_count"]
                if ids is not None:
                    ids[article_id] = event["document"]["id"]
    return {"chunks": chunks, "index_seconds": round(time.perf_counter() - t0, 2)}


def ask_all(
    ws: Workspace,
    questions: list[dict[str, Any]],
    verbose: bool = False,
    elsewhere: dict[str, str] | None = None,
) -> list[dict]:
    """Ask every question; with ``elsewhere`` (question id -> document id) each is limited to
    that document, another article than its own (the answer is not there)."""
    rows = []
    for q in questions:
        t0 = time.perf_counter()
        first_token = None
        sources: list[dict] = []
        parts: list[str] = []
        end: dict[str, Any] = {}
        scope = None if elsewhere is None else [elsewhere[q["id"]]]
        for event in ws.chat.ask(q["question"], documents=scope):
            if event["type"] == "meta":
                sources = event["sources"]
            elif event["type"] == "token":
                if first_token is None:
                    first_token = time.perf_counter() - t0
                parts.append(event["text"])
            else:
                end = event
        elapsed = time.perf_counter() - t0
        answer = "".join(parts)
        by_n = {s["n"]: s for s in sources}
        cited = end.get("citations", [])
        plain = strip_marks(answer)
        row = {
            "id": q["id"],
            "article": q["article"],
            "question": q["question"],
            "answers": q["answers"],
            "answer": answer,
            "ok": end.get("type") == "done",
            "k": len(sources),
            "recall": any(contains_answer(s["content"], q["answers"]) for s in sources),
            "recall1": bool(sources) and contains_answer(sources[0]["content"], q["answers"]),
            "cite": any(
                contains_answer(by_n[n]["content"], q["answers"]) for n in cited if n in by_n
            ),
            "precision": (
                sum(contains_answer(by_n[n]["content"], q["answers"]) for n in cited if n in by_n)
                / len(cited)
                if cited
                else 0.0
            ),
            "answer_hit": contains_answer(plain, q["answers"]),
            "lead_hit": contains_answer(first_sentence(plain), q["answers"]),
            "baseline_hit": bool(sources)
            and contains_answer(first_sentence(sources[0]["content"]), q["answers"]),
            "nothing_found": not cited or answer.startswith(NOT_ANSWERED),
            "invalid": len(end.get("invalidCitations", [])),
            "chars": len(plain),
            "words": len(plain.split()),
            "sentences": len(find_marks(answer)),
            "ms": elapsed * 1000,
            "first_token_ms": (first_token or elapsed) * 1000,
        }
        quality = citation_quality(end.get("answer", ""), end.get("sources", []))
        row["alce_precision"], row["alce_recall"] = quality.precision, quality.recall
        rows.append(row)
        if verbose:
            flag = "+" if row["cite"] else ("-" if row["recall"] else " ")
            print(f"{flag} {q['question']}\n    {answer[:300]}", file=sys.stderr)
    return rows


def summarize(rows: list[dict]) -> dict[str, Any]:
    n = len(rows)

    def rate(key: str, subset: list[dict] | None = None) -> float:
        subset = rows if subset is None else subset
        return round(sum(bool(r[key]) for r in subset) / len(subset), 4) if subset else 0.0

    found = [r for r in rows if r["recall"]]
    ms = sorted(r["ms"] for r in rows)
    return {
        "questions": n,
        "recall_at_k": rate("recall"),
        "recall_at_1": rate("recall1"),
        "cite_rate": rate("cite"),
        "cited_precision": round(statistics.mean(r["precision"] for r in rows), 4) if rows else 0,
        "answer_rate": rate("answer_hit"),
        "lead_rate": rate("lead_hit"),
        "cite_rate_given_recall": rate("cite", found),
        "answer_rate_given_recall": rate("answer_hit", found),
        "baseline_first_sentence_answer_rate": rate("baseline_hit"),
        "nothing_found_rate": rate("nothing_found"),
        "errors": sum(not r["ok"] for r in rows),
        "invalid_citations": sum(r["invalid"] for r in rows),
        "mean_sources": round(statistics.mean(r["k"] for r in rows), 2) if rows else 0,
        "mean_answer_chars": round(statistics.mean(r["chars"] for r in rows)) if rows else 0,
        "mean_answer_words": round(statistics.mean(r["words"] for r in rows), 1) if rows else 0,
        "mean_answer_sentences": round(statistics.mean(r["sentences"] for r in rows), 2)
        if rows
        else 0,
        "citation_precision_alce": round(statistics.mean(r["alce_precision"] for r in rows), 4)
        if rows else 0,
        "citation_recall_alce": round(statistics.mean(r["alce_recall"] for r in rows), 4)
        if rows else 0,
        "first_token_ms_p50": round(sorted(r["first_token_ms"] for r in rows)[n // 2])
        if rows else 0,
        "latency_ms_p50": round(ms[n // 2]) if rows else 0,
        "latency_ms_p95": round(ms[min(n - 1, int(n * 0.95))]) if rows else 0,
    }


def run(
    article_ids: Sequence[str],
    n_questions: int,
    *,
    embedder: Any = None,
    k: int | None = None,
    seed: int = SEED,
    verbose: bool = False,
    strategies: Sequence[str] = (),
    unanswerable: bool = False,
) -> tuple[dict[str, Any], list[dict]]:
    """Index ``article_ids`` into a temporary database and ask a sample of their questions.
    Returns (summary, per-question rows). ``embedder``: reuse an already loaded one.
    ``strategies``: ask them all once per extractive strategy (the first one's rows are
    returned and summarized at the top level; each strategy's summary under ``strategies``).
    ``unanswerable``: each question is also asked limited to another of the articles (in turn),
    which cannot answer it; ``refusal_rate_unanswerable`` is the share refused."""
    articles = load_articles(article_ids)
    questions = sample_questions(load_questions(article_ids), n_questions, seed)
    with tempfile.TemporaryDirectory(prefix="squad-answers-") as tmp:
        settings = Settings(db_path=str(Path(tmp) / "squad.db"), embedder="local",
                            answerer="extractive")
        if k is not None:
            settings = settings.with_overrides(top_k=k)
        ws = Workspace(settings)
        if embedder is not None:
            ws.__dict__["embedder"] = embedder
        try:
            ids: dict[str, str] = {}
            indexed = index_articles(ws, articles, ids)
            order = list(article_ids)
            elsewhere = {}
            for i, q in enumerate(questions):
                others = [a for a in order if a != q["article"]]
                if others:
                    elsewhere[q["id"]] = ids[others[i % len(others)]]
            per_strategy: dict[str, Any] = {}
            rows: list[dict] = []
            refused_first: dict[str, Any] = {}
            ask_seconds = 0.0
            for strategy in strategies or [None]:
                if strategy is not None:
                    ws.chat.answerer = ExtractiveAnswerer(
                        settings, embedder=ws.embedder, strategy=strategy
                    )
                t0 = time.perf_counter()
                got = ask_all(ws, questions, verbose=verbose)
                seconds = time.perf_counter() - t0
                if not rows:
                    rows, ask_seconds = got, seconds
                refused: dict[str, Any] = {}
                if unanswerable and elsewhere:
                    other = ask_all(ws, [q for q in questions if q["id"] in elsewhere],
                                    elsewhere=elsewhere)
                    refused = {
                        "unanswerable_questions": len(other),
                        "refusal_rate_unanswerable": round(
                            sum(r["nothing_found"] for r in other) / len(other), 4),
                        "unanswerable_examples": [
                            {k: r[k] for k in ("question", "answer")} for r in other[:3]],
                    }
                if not rows:
                    refused_first = refused
                if strategy is not None:
                    per_strategy[strategy] = {**summarize(got), **refused,
                                              "ask_seconds": round(seconds, 1)}
        finally:
            ws.close()
    summary = {
        "articles": list(article_ids),
        "characters": sum(len(t) for t in articles.values()),
        **indexed,
        "top_k": settings.retrieval.top_k,
        "retrieval": settings.retrieval.mode,
        "seed": seed,
        **summarize(rows),
        **refused_first,
        "ask_seconds": round(ask_seconds, 1),
    }
    if per_strategy:
        summary["strategies"] = per_strategy
    return summary, rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="1 article, 40 questions")
    parser.add_argument("--articles", nargs="+", metavar="ID", help="article ids (_id)")
    parser.add_argument("--questions", type=int, help="questions to sample")
    parser.add_argument("--k", type=int, help="passages retrieved per question (default 6)")
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--name", help="results key (default: full / quick / custom)")
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument("-v", "--verbose", action="store_true", help="every question and answer")
    parser.add_argument("--heldout", action="store_true", help="issue 11's held-out articles")
    parser.add_argument("--strategies", nargs="+", metavar="NAME",
                        help="extractive strategies to compare in this run (e.g. answer v1)")
    parser.add_argument("--unanswerable", action="store_true",
                        help="also ask each question limited to another article (refusals)")
    args = parser.parse_args(argv)

    if args.articles:
        ids, n, name = args.articles, args.questions or FULL_QUESTIONS, "custom"
    elif args.heldout:
        ids, n, name = HELDOUT_ARTICLES, args.questions or FULL_QUESTIONS, "heldout11"
    elif args.quick:
        ids, n, name = QUICK_ARTICLES, args.questions or QUICK_QUESTIONS, "quick"
    else:
        ids, n, name = FULL_ARTICLES, args.questions or FULL_QUESTIONS, "full"
    name = args.name or name
    t0 = time.perf_counter()
    summary, rows = run(ids, n, k=args.k, seed=args.seed, verbose=args.verbose,
                        strategies=args.strategies or (), unanswerable=args.unanswerable)
    summary["seconds"] = round(time.perf_counter() - t0, 1)
    summary["command"] = " ".join(
        ["python benchmarks/squad_answers.py", *(sys.argv[1:] if argv is None else argv)]
    )
    summary["examples"] = [
        {key: r[key] for key in ("question", "answers", "answer", "cite")} for r in rows[:5]
    ]
    print(json.dumps({k: v for k, v in summary.items() if k != "examples"}, indent=2))
    if not args.no_write:
        results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
        results[name] = summary
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n")
        print(f"wrote {RESULTS.relative_to(REPO)} [{name}]", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
