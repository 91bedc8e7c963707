"""Does the per-sentence support check (marginalia_core/chat/support.py) catch a wrong citation?
ALCE citation precision and recall of model answers played by the fake servers, cited right and
cited wrong, on SQuAD held-out articles.

    PYTHONPATH=. python benchmarks/citation_support.py --heldout    # 60 held-out questions
    PYTHONPATH=. python benchmarks/citation_support.py --questions 20   # tune articles

The articles (``--heldout``: ``squad_answers.HELDOUT_ARTICLES``; else five of the selector's tune
articles, where the check was developed) are indexed with the local embedder;
each sampled question is retrieved once, and the extractive answerer (the default, "learned")
writes a correctly cited answer from those passages. That text is then played as the *model's*
answer by the fake Gemini server (the real google-genai SDK) and the fake OpenAI-compatible
server (the real openai SDK), once as written and once with every mark moved to another
retrieved passage (``[n]`` -> the next source number, wrapping): a model citing the wrong passage.
The chat engine checks each final answer; from ``done`` we take its ``support`` (the share of
marked sentences flagged unsupported) and ALCE citation precision / recall
(``support.citation_quality``). A check that works flags few right sentences and most wrong ones.
Results: benchmarks/results/citation_support.json.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

import _common as C  # noqa: E402
import squad_answers as sa  # noqa: E402

from marginalia_core.chat.support import citation_quality  # noqa: E402
from marginalia_core.citations import MARK_RE  # noqa: E402
from marginalia_core.config import Settings  # noqa: E402
from marginalia_core.workspace import Workspace  # noqa: E402

RESULTS = REPO / "benchmarks" / "results" / "citation_support.json"
QUESTIONS = 60
SEED = 2222
# five of benchmarks/train_answer_selector.py's tune articles (never the held-out ones)
TUNE_ARTICLES = ("1973_oil_crisis", "Chloroplast", "Doctor_Who", "French_and_Indian_War",
                 "Imperialism")


def remap(answer: str, number: Callable[[int], int]) -> str:
    """The answer with every number of every mark passed through ``number``."""
    return MARK_RE.sub(lambda m: "[" + ", ".join(
        str(number(int(x))) for x in re.findall(r"\d+", m.group(1))) + "]", answer)


def shifted(answer: str, k: int) -> str:
    """Every mark moved to the next retrieved passage: the same claims, the wrong citations."""
    return remap(answer, lambda n: n % k + 1)


def as_retrieved(answer: str, cited: Sequence[dict], retrieved: Sequence[dict]) -> str:
    """The answer with its marks numbered as the retrieved sources are (``meta``), not as the
    saved answer is (the engine renumbers the cited ones from [1] as it streams): the number a
    model sees in its prompt, so the played answer cites the very passages the offline one did."""
    to_chunk = {int(s["n"]): s["chunk_id"] for s in cited}
    to_n = {s["chunk_id"]: int(s["n"]) for s in retrieved}
    return remap(answer, lambda n: to_n[to_chunk[n]])


def in_passages(item: dict[str, Any], by_n: dict[int, str]) -> bool:
    """Ground truth for a quoted sentence: it is verbatim in one of the passages it cites (the
    extractive answer only quotes; a mark moved to an overlapping chunk can still be right)."""
    text = sa.norm(re.sub(r"^\*\*[^*]+\*\* — ", "", strip(item["sentence"])))
    return any(text in sa.norm(by_n.get(n, "")) for n in item["marks"])


def strip(sentence: str) -> str:
    return sa.strip_marks(sentence).rstrip(".!?…").strip()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=QUESTIONS)
    parser.add_argument("--heldout", action="store_true", help="the held-out SQuAD articles")
    args = parser.parse_args(argv)
    names = sa.HELDOUT_ARTICLES if args.heldout else TUNE_ARTICLES
    fake_gemini = C.test_helper("fake_gemini")
    fake_openai = C.test_helper("fake_openai")
    articles = sa.load_articles(names)
    questions = sa.sample_questions(sa.load_questions(names), args.questions, SEED)
    t0 = time.perf_counter()
    gemini = fake_gemini.FakeGeminiServer().start()
    openai = fake_openai.FakeOpenAIServer().start()
    rows: dict[str, list[dict[str, Any]]] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="citation-support-") as tmp:
            db = str(Path(tmp) / "c.db")
            offline = Workspace(Settings(db_path=db, embedder="local", answerer="extractive"))
            sa.index_articles(offline, articles)
            players = {
                "extractive": offline,
                "gemini": Workspace(gemini.settings(db_path=db, embedder="local",
                                                    answerer="gemini"), embedder=offline.embedder),
                "openai": Workspace(openai.settings(db_path=db, embedder="local",
                                                    answerer="openai"), embedder=offline.embedder),
            }
            for q in questions:
                # the offline answer, its marks numbered as the retrieved sources (the prompt's)
                asked = list(offline.ask(q["question"]))
                k = len(asked[0].get("sources") or [])
                if asked[-1]["type"] != "done" or k < 2 or not MARK_RE.search(
                        asked[-1]["answer"]):
                    continue
                streamed = as_retrieved(asked[-1]["answer"], asked[-1]["sources"],
                                        asked[0]["sources"])
                for name, ws in players.items():
                    for cited in ("right", "wrong"):
                        if name == "extractive" and cited == "wrong":
                            continue
                        text = streamed if cited == "right" else shifted(streamed, k)
                        if name == "extractive":
                            done = asked[-1]
                        else:
                            (gemini if name == "gemini" else openai).set_answer(text)
                            done = list(ws.ask(q["question"]))[-1]
                        if done["type"] != "done":
                            continue
                        quality = citation_quality(done["answer"], done["sources"])
                        support = done["support"]
                        by_n = {s["n"]: s["content"] for s in done["sources"]}
                        truth = [in_passages(s, by_n) for s in support]
                        rows.setdefault(f"{name}:{cited}", []).append({
                            "precision": quality.precision, "recall": quality.recall,
                            "flagged": sum(not s["supported"] for s in support),
                            "marked": len(support),
                            "truly_wrong": sum(not t for t in truth),
                            "caught": sum(not t and not s["supported"]
                                          for s, t in zip(support, truth, strict=True)),
                            "false_flags": sum(t and not s["supported"]
                                               for s, t in zip(support, truth, strict=True)),
                            "scores_wrong": [s["score"] for s, t in
                                             zip(support, truth, strict=True) if not t],
                        })
            for ws in players.values():
                ws.close()
    finally:
        gemini.stop()
        openai.stop()
    summary: dict[str, Any] = {}
    for key, rs in rows.items():
        marked = sum(r["marked"] for r in rs)
        summary[key] = {
            "answers": len(rs),
            "citation_precision_alce": round(sum(r["precision"] for r in rs) / len(rs), 4),
            "citation_recall_alce": round(sum(r["recall"] for r in rs) / len(rs), 4),
            "marked_sentences": marked,
            "flagged_unsupported": round(sum(r["flagged"] for r in rs) / marked, 4) if marked
            else 0.0,
            "truly_unsupported": sum(r["truly_wrong"] for r in rs),
            "caught_of_truly_unsupported": round(
                sum(r["caught"] for r in rs) / max(1, sum(r["truly_wrong"] for r in rs)), 4),
            "false_flags_of_supported": round(
                sum(r["false_flags"] for r in rs)
                / max(1, marked - sum(r["truly_wrong"] for r in rs)), 4),
            "scores_of_truly_unsupported": sorted(round(s, 2) for r in rs
                                                  for s in r["scores_wrong"]),
        }
    out = {
        "command": " ".join(["PYTHONPATH=. python benchmarks/citation_support.py",
                             *(sys.argv[1:] if argv is None else argv)]),
        "articles": list(names),
        "questions": len(questions),
        "seconds": round(time.perf_counter() - t0, 1),
        "results": summary,
    }
    print(json.dumps(out, indent=2))
    saved = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    saved = saved if "results" not in saved else {}
    saved["heldout" if args.heldout else "tune"] = out
    RESULTS.write_text(json.dumps(saved, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
