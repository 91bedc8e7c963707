"""The extractive answerer on our own questions over samples/ and ../shared/eval/pdfs.

    python benchmarks/own_answers.py                      # both strategies, results written
    python benchmarks/own_answers.py --strategies answer  # one

benchmarks/questions/answers_own.jsonl: each question with the documents that answer it and the
text an answer must contain (any one of ``expected``); ``after`` asks that question first in the
same conversation (a follow-up). ``split``: "tune" were looked at while building issue 11's
selector (the suggested sample questions and the light follow-up), "heldout" were not;
"absent" (issue 22, written before any run) ask what no document says: the right answer is
a refusal. Every
document is indexed with the app's own ingestion into a temporary SQLite file, and every
strategy answers every question through ``Workspace.ask`` on the same index in the same run.
Metrics per split: ``answer_rate`` (the answer contains the expected text), ``lead_rate`` (its
first sentence does), ``cited_doc_rate`` (its first cited source is from an expected document),
``refusal_rate`` (it says the documents do not answer, or cites nothing), mean answer characters.
Results: benchmarks/results/own_answers.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from marginalia_core.citations import find_marks
from marginalia_core.config import Settings
from marginalia_core.providers.answerers.extractive import STRATEGIES, ExtractiveAnswerer
from marginalia_core.workspace import Workspace

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

from squad_answers import first_sentence, strip_marks  # noqa: E402

QUESTIONS = REPO / "benchmarks" / "questions" / "answers_own.jsonl"
PDFS = (REPO / ".." / "shared" / "eval" / "pdfs").resolve()
SAMPLES = REPO / "samples"
RESULTS = REPO / "benchmarks" / "results" / "own_answers.json"


def load_questions() -> list[dict[str, Any]]:
    return [json.loads(line) for line in QUESTIONS.read_text(encoding="utf-8").splitlines()
            if line.strip()]


NOT_ANSWERED = "The passages I found don't seem to answer this directly."


def documents_needed(questions: list[dict[str, Any]]) -> list[Path]:
    names = sorted({d for q in questions for d in q["documents"]})
    paths = []
    for name in names:
        path = SAMPLES / name if (SAMPLES / name).exists() else PDFS / name
        if not path.exists():
            raise SystemExit(f"{name} is neither in samples/ nor in {PDFS}")
        paths.append(path)
    return paths


def answer_text(events: list[dict]) -> tuple[str, list[dict]]:
    end = events[-1]
    if end["type"] != "done":
        return "", []
    return end["answer"], end["sources"]


def ask_all(ws: Workspace, questions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for q in questions:
        conversation = None
        if q.get("after"):
            conversation = list(ws.ask(q["after"]))[0]["conversation_id"]
        answer, sources = answer_text(list(ws.ask(q["question"], conversation)))
        lowered = " ".join(answer.lower().split())
        plain = strip_marks(answer)
        lead = " ".join(first_sentence(plain).lower().split())
        rows.append({
            "id": q["id"],
            "split": q["split"],
            "hit": any(" ".join(e.lower().split()) in lowered for e in q["expected"]),
            "lead": any(" ".join(e.lower().split()) in lead for e in q["expected"]),
            "refused": not find_marks(answer) or answer.startswith(NOT_ANSWERED),
            "doc": bool(sources) and sources[0]["document_name"] in q["documents"],
            "chars": len(answer),
            "answer": answer,
        })
    return rows


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for split in ("tune", "heldout", "absent", "all"):
        part = [r for r in rows if split == "all" or r["split"] == split]
        if not part:
            continue
        if split == "absent":
            out[split] = {"questions": len(part),
                          "refusal_rate": round(sum(r["refused"] for r in part) / len(part), 4)}
            continue
        part = [r for r in part if r["split"] != "absent"]
        out[split] = {
            "questions": len(part),
            "answer_rate": round(sum(r["hit"] for r in part) / len(part), 4),
            "lead_rate": round(sum(r["lead"] for r in part) / len(part), 4),
            "refusal_rate": round(sum(r["refused"] for r in part) / len(part), 4),
            "cited_doc_rate": round(sum(r["doc"] for r in part) / len(part), 4),
            "mean_answer_chars": round(statistics.mean(r["chars"] for r in part)),
        }
    out["missed"] = [r["id"] for r in rows if not r["hit"] and r["split"] != "absent"]
    out["not_refused"] = [r["id"] for r in rows if r["split"] == "absent" and not r["refused"]]
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--strategies", nargs="+", default=list(STRATEGIES), choices=STRATEGIES)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    questions = load_questions()
    results: dict[str, Any] = {
        "command": " ".join(["python benchmarks/own_answers.py",
                             *(sys.argv[1:] if argv is None else argv)]),
        "strategies": {},
    }
    with tempfile.TemporaryDirectory(prefix="own-answers-") as tmp:
        settings = Settings(db_path=str(Path(tmp) / "own.db"), embedder="local",
                            answerer="extractive")
        ws = Workspace(settings)
        try:
            for path in documents_needed(questions):
                end = list(ws.ingest_path(path))[-1]
                if end["type"] != "done":
                    raise SystemExit(f"indexing {path.name} failed: {end.get('message')}")
            for strategy in args.strategies:
                ws.chat.answerer = ExtractiveAnswerer(
                    settings, embedder=ws.embedder, strategy=strategy
                )
                results["strategies"][strategy] = summarize(ask_all(ws, questions))
        finally:
            ws.close()
    print(json.dumps(results, indent=2))
    if not args.no_write:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n")
        print(f"wrote {RESULTS.relative_to(REPO)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
