"""PDF page cleanup (ingest/cleanup.py) and word gaps (ingest/word_gaps.py), before/after in
one run.

1. A book we make: SQuAD v1.1 dev articles laid out as a PDF (Helvetica, 38 lines a page) with
   what layout tools leave on real proofs: alternating running heads, a "4TH PASS PAGES" stamp,
   a ``.qxd`` file stamp with date and page, page numbers, margin line numbers every 5 lines,
   ornament rows between some paragraphs, and footnote numbers glued after words ("river.12").
   Every boilerplate string is known, so the share of chunk characters that are boilerplate
   is exact. Retrieval: each paragraph's first SQuAD question, judged relevant on the page
   where its answer is printed.
2. ../shared/eval/pdfs: characters the cleanup removes per document (with samples of the
   removed lines, to read), and retrieval on benchmarks/questions/pdfs_pages.jsonl.

Both libraries are extracted three times: neither repair (before), ``extraction.CLEAN_PAGES``
only (cleanup only), and that plus ``extraction.REJOIN_WORDS`` (after; the spaces it adds are
listed per document with samples, to read), chunked and embedded by the offline embedder (vectors cached by text), and evaluated
by the app's own evaluator (hybrid, top 6, no threshold).

3. Issue 26's cases, text only (no embedding; ``--text-only`` runs just these and writes
   results/pdf_cleanup_text.json): a made book with running heads that carry the page's margin
   line numbers ("12 FREE CULTURE 1 2 3 4 6 7 ... 32S 33R") and words hyphenated across page
   breaks ("nobil-" / "ity"), before and after; and on every eval PDF, the pages whose text is
   taken from pdfium instead of pypdf by word_gaps' measured rule (mathematics: "i2N" -> "i∈N"),
   with the mathematical symbols and the glued digit-letter tokens ("8s2I") before and after.

    python benchmarks/pdf_cleanup.py          # writes results/pdf_cleanup.json and .md
    python benchmarks/pdf_cleanup.py --text-only
"""

from __future__ import annotations

import argparse
import csv
import difflib
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

from _common import test_helper
from retrieval_lab import CachedEmbedder  # the offline embedder, vectors cached by text

from marginalia_core.config import Settings
from marginalia_core.ingest import extraction
from marginalia_core.ingest.chunking import chunk_text
from marginalia_core.ingest.formats import extract
from marginalia_core.ingest.pipeline import ingest_bytes
from marginalia_core.retrieval import evaluation as ev
from marginalia_core.retrieval.retriever import Retriever
from marginalia_core.store.question_sets import Judgment, Question, QuestionSet, read_jsonl
from marginalia_core.store.sqlite import Store

_pdf_maker = test_helper("pdf_maker")  # the tests' PDF writer, loaded by file path
lines_page, text_pdf = _pdf_maker.lines_page, _pdf_maker.text_pdf
BENCH = Path(__file__).resolve().parent
RESULTS = BENCH / "results"
CACHE = BENCH / ".cache"
SHARED = (BENCH / ".." / ".." / "shared" / "eval").resolve()
SQUAD = SHARED / "squad-v1.1-dev" / "dev-v1.1.json"
PDFS = SHARED / "pdfs"
PDF_QUESTIONS = BENCH / "questions" / "pdfs_pages.jsonl"
BOOK_ARTICLES = 3  # the first three dev articles: ~150 paragraphs, ~70 pages
LINES_PER_PAGE = 38
CHARS_PER_LINE = 88
TOP_K = 6
STAMP = "4TH PASS PAGES"
ORNAMENT = "* * * * *"


# --------------------------------------------------------------------------- the book


def _wrap(text: str) -> list[str]:
    """Lines of at most CHARS_PER_LINE, breaking long words with a hyphen as typesetters do."""
    lines, line = [], ""
    for word in text.split():
        if not line:
            line = word
        elif len(line) + 1 + len(word) <= CHARS_PER_LINE:
            line += " " + word
        elif len(word) >= 8 and word.isalpha() and len(line) + 5 <= CHARS_PER_LINE:
            room = CHARS_PER_LINE - len(line) - 2
            cut = max(3, min(room, len(word) - 3))
            lines.append(f"{line} {word[:cut]}-")
            line = word[cut:]
        else:
            lines.append(line)
            line = word
    if line:
        lines.append(line)
    return lines


def make_book() -> tuple[bytes, list[Question], list[str]]:
    """(PDF bytes, questions judged by page, the boilerplate strings printed)."""
    data = json.loads(SQUAD.read_text(encoding="utf-8"))["data"][:BOOK_ARTICLES]
    book_title = "A READER OF MANY THINGS"
    body: list[tuple[str, int | None]] = []  # (line, paragraph id whose answer starts on it)
    questions: dict[int, Question] = {}
    answer_line: dict[int, int] = {}
    para_id = 0
    for art_no, article in enumerate(data, start=1):
        body.append((f"Chapter {art_no}. {article['title'].replace('_', ' ')}", None))
        body.append(("", None))
        for p_no, para in enumerate(article["paragraphs"]):
            qa = para["qas"][0]
            answer = qa["answers"][0]
            context = para["context"]
            # a glued footnote number after the paragraph's first sentence, as in the proofs
            cut = context.find(". ")
            if cut > 20 and context[cut - 1].islower():
                context = context[:cut + 1] + str(p_no + 1) + context[cut + 1:]
            # the answer's line: wrap the text before it and count
            before = len(_wrap(para["context"][: answer["answer_start"]] + "X"))
            start = len(body)
            body.extend((line, None) for line in _wrap(context))
            answer_line[para_id] = start + before - 1
            questions[para_id] = Question(qa["question"], (), id=f"b{para_id}")
            para_id += 1
            body.append(("", None))
            if p_no % 7 == 6:
                body.append((ORNAMENT, None))
                body.append(("", None))
    pages: list[list] = []
    boiler: set[str] = {STAMP, ORNAMENT, book_title}
    page_of_line: list[int] = []
    chapter = ""
    for first in range(0, len(body), LINES_PER_PAGE):
        n = len(pages) + 1
        lines = body[first:first + LINES_PER_PAGE]
        for line, _ in lines:
            if line.startswith("Chapter "):
                chapter = line
        head = book_title if n % 2 == 0 else chapter.upper()
        qxd = f"reader_ch{n // 20 + 1:02d}.qxd 5/2/07 10:14 AM Page {n}"
        boiler |= {head, qxd, str(n)}
        items = [(72, 770, 8, STAMP), (72, 750, 9, head),
                 *lines_page([line for line, _ in lines]),
                 (300, 50, 9, str(n)), (72, 30, 6, qxd)]
        page_of_line.extend(n for _ in lines)
        # margin line numbers, drawn last (a separate layer in the proofs)
        items += [(40, 725 - 17 * (k - 1), 7, str(k)) for k in range(5, len(lines) + 1, 5)]
        pages.append(items)
    judged = [
        Question(q.text, (Judgment("book.pdf", page_of_line[answer_line[i]],
                                   page_of_line[answer_line[i]]),), id=q.id)
        for i, q in questions.items()
    ]
    return text_pdf(pages), judged, sorted(boiler, key=len, reverse=True)


# --------------------------------------------------------------------------- measuring


# (cleanup of printing leftovers, word gaps from the page geometry) per measured variant
VARIANTS = {"before": (False, False), "cleanup only": (True, False), "after": (True, True)}


def _switch(clean: bool, rejoin: bool = True) -> None:
    extraction.CLEAN_PAGES, extraction.REJOIN_WORDS = clean, rejoin


def _extract(name: str, data: bytes, clean: bool, password: str | None = None,
             rejoin: bool = True):
    _switch(clean, rejoin)
    try:
        return extract(name, data, password=password)
    finally:
        _switch(True)


_LINE_NUMBER = re.compile(r"(?:^|\n)(?:\d{1,2}\n){3,}")


def boilerplate_share(chunks: list[str], boiler: list[str]) -> float:
    """Share of chunk characters that are printed boilerplate: known strings on their own line
    and runs of margin line numbers."""
    total = sum(len(c) for c in chunks)
    junk = 0
    for chunk in chunks:
        lines = chunk.split("\n")
        known = set(boiler)
        junk += sum(len(line) + 1 for line in lines if line.strip() in known)
        junk += sum(len(m.group(0)) for m in _LINE_NUMBER.finditer(chunk + "\n"))
    return round(junk / total, 4) if total else 0.0


def _library(path: Path, emb: CachedEmbedder, docs: list[tuple[str, bytes, str | None]],
             clean: bool, rejoin: bool = True) -> Store:
    for suffix in ("", "-wal", "-shm"):
        Path(str(path) + suffix).unlink(missing_ok=True)
    store = Store(path)
    settings = Settings(db_path=str(path), ocr=False)
    _switch(clean, rejoin)
    try:
        for name, data, password in docs:
            list(ingest_bytes(store, emb, settings, name, data, password=password))
    finally:
        _switch(True)
    return store


def _retrieval(store: Store, emb: CachedEmbedder, qset: QuestionSet) -> dict[str, float]:
    retriever = Retriever(store, emb, Settings(db_path=store.path).with_overrides(threshold=-1.0))
    prepared = ev.prepare(retriever, qset)
    res = ev.evaluate_prepared(retriever, prepared, ev.EvalConfig("hybrid", top_k=TOP_K))
    return {k: round(v, 4) for k, v in res.metrics.items()}


def _passwords() -> dict[str, str]:
    out = {}
    with open(PDFS / "MANIFEST.tsv", encoding="utf-8") as f:
        for row in csv.DictReader(f, delimiter="\t"):
            m = re.search(r'(?:pw|password) ""?(\w+)', row["why_interesting"])
            if m:
                out[row["file"]] = m.group(1)
    return out


def _respaced(old: str, new: str) -> dict[str, Any]:
    """Spaces the word-gap repair added, with the first changed stretches (old -> new)."""
    a, b = old.split(), new.split()
    sample = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if op != "equal" and len(sample) < 6:
            sample.append(f"{' '.join(a[i1:i2])[:40]} -> {' '.join(b[j1:j2])[:48]}")
    return {"words_before": len(a), "words_after": len(b), "sample": sample}


def run() -> dict[str, Any]:
    emb = CachedEmbedder()
    out: dict[str, Any] = {}
    CACHE.mkdir(exist_ok=True)

    book, questions, boiler = make_book()
    book_out: dict[str, Any] = {"pages": None, "questions": len(questions)}
    for label, (clean, rejoin) in VARIANTS.items():
        got = _extract("book.pdf", book, clean, rejoin=rejoin)
        book_out["pages"] = got.page_count
        chunks = [c.text for c in chunk_text(got.text, page_starts=got.page_starts)]
        store = _library(CACHE / f"cleanup-book-{label}.sqlite", emb,
                         [("book.pdf", book, None)], clean, rejoin)
        book_out[label] = {
            "characters": len(got.text), "chunks": len(chunks),
            "boilerplate_share": boilerplate_share(chunks, boiler),
            "retrieval": _retrieval(store, emb, QuestionSet("book", questions)),
        }
        store.close()
        print(f"book {label}: {json.dumps(book_out[label])}", file=sys.stderr, flush=True)
    out["book"] = book_out

    passwords = _passwords()
    docs = [(p.name, p.read_bytes(), passwords.get(p.name)) for p in sorted(PDFS.glob("*.pdf"))]
    removed: dict[str, Any] = {}
    respaced: dict[str, Any] = {}
    for name, data, password in docs:
        try:
            raw = _extract(name, data, False, password, rejoin=False)
            kept = _extract(name, data, True, password, rejoin=False)
            spaced = _extract(name, data, True, password)
        except Exception:  # refused files (encrypted without password, scans, damaged)
            continue
        if spaced.text != kept.text:
            respaced[name] = _respaced(kept.text, spaced.text)
        gone = len(raw.text) - len(kept.text)
        if gone:
            kept_lines = set(kept.text.split("\n"))
            sample = [ln for ln in raw.text.split("\n") if ln not in kept_lines][:6]
            removed[name] = {"pages": raw.page_count, "characters_before": len(raw.text),
                             "removed": gone, "share": round(gone / len(raw.text), 4),
                             "sample_removed_lines": sample}
    pdf_out: dict[str, Any] = {"documents_changed": removed, "documents_respaced": respaced}
    qset = read_jsonl(PDF_QUESTIONS.read_text(encoding="utf-8"), name="pdf-pages")
    for label, (clean, rejoin) in VARIANTS.items():
        store = _library(CACHE / f"cleanup-pdfs-{label}.sqlite", emb, docs, clean, rejoin)
        pdf_out[label] = {"retrieval": _retrieval(store, emb, qset),
                          "chunks": int(store.conn.execute("SELECT count(*) FROM chunks")
                                        .fetchone()[0])}
        store.close()
        print(f"pdfs {label}: {json.dumps(pdf_out[label])}", file=sys.stderr, flush=True)
    pdf_out["questions"] = len(qset.questions)
    out["eval_pdfs"] = pdf_out
    return out


def markdown(res: dict[str, Any], command: str) -> str:
    b, p = res["book"], res["eval_pdfs"]
    keys = list(b["before"]["retrieval"])
    lines = [
        "# PDF cleanup: before / after (same run)", "", f"`{command}` — {res['recorded']}", "",
        f"## A made book ({b['pages']} pages, SQuAD dev articles, {b['questions']} page-judged "
        "questions)", "",
        "| | characters | passages | boilerplate share of passage characters | "
        + " | ".join(keys) + " |",
        "|---" * (4 + len(keys)) + "|",
    ]
    for label in VARIANTS:
        r = b[label]
        lines.append(f"| {label} | {r['characters']} | {r['chunks']} | "
                     f"{100 * r['boilerplate_share']:.1f} % | "
                     + " | ".join(f"{r['retrieval'][k]:.4f}" for k in keys) + " |")
    lines += ["", f"## ../shared/eval/pdfs ({p['questions']} questions of "
              "benchmarks/questions/pdfs_pages.jsonl)", "",
              "| | passages | " + " | ".join(keys) + " |", "|---" * (2 + len(keys)) + "|"]
    for label in VARIANTS:
        r = p[label]
        lines.append(f"| {label} | {r['chunks']} | "
                     + " | ".join(f"{r['retrieval'][k]:.4f}" for k in keys) + " |")
    lines += ["", "Variants: before = neither repair; cleanup only = printing leftovers removed "
              "(ingest/cleanup.py); after = that plus word gaps from the page geometry "
              "(ingest/word_gaps.py).", "",
              "Documents the word-gap repair changed (words before -> after, first changes):", ""]
    for name, d in p["documents_respaced"].items():
        sample = "; ".join(f"`{s}`" for s in d["sample"])
        lines.append(f"- {name}: {d['words_before']} -> {d['words_after']} words — {sample}")
    lines += ["", "Documents the cleanup changed (characters removed, first removed lines):", ""]
    for name, d in p["documents_changed"].items():
        sample = "; ".join(f"`{s[:60]}`" for s in d["sample_removed_lines"])
        lines.append(f"- {name}: {d['removed']} of {d['characters_before']} characters "
                     f"({100 * d['share']:.1f} %) — {sample}")
    return "\n".join(lines) + "\n"


HEAD_BOOK_PAGES = 40
_GLUED = re.compile(r"\b(?=\w*[^\W\d_])(?=\w*\d)\w*[^\W\d_]\d\w*\b|\b\w*\d[^\W\d_]\w*\d\w*\b")


def head_book() -> tuple[bytes, int]:
    """Pages of SQuAD text with a running head carrying margin line numbers (other numbers on
    each page) and, on every even page, a word hyphenated across the break; the breaks made."""
    data = json.loads(SQUAD.read_text(encoding="utf-8"))
    text = " ".join(p["context"] for a in data["data"][:3] for p in a["paragraphs"])
    words = text.split()
    pages, at, breaks = [], 0, 0
    for n in range(1, HEAD_BOOK_PAGES + 1):
        numbers = " ".join(str(k) for k in range(1, 34) if k % (n % 3 + 4)) + " 32S 33R"
        head = f"{n} FREE CULTURE {numbers}" if n % 2 == 0 else f"INTRODUCTION {n} {numbers}"
        body = _wrap(" ".join(words[at:at + 300]))
        at += 300
        if n % 2 == 0 and n < HEAD_BOOK_PAGES:
            last = body[-1].split()
            word = last[-1].strip(".,;:") if last else ""
            if len(word) >= 6 and word.isalpha() and word.islower():
                body[-1] = " ".join(last[:-1] + [word[:3] + "-"])
                words.insert(at, word[3:])
                breaks += 1
        pages.append("\n".join([head, "", *body]))
    return text_pdf(pages), breaks


def text_cases() -> dict[str, Any]:
    from marginalia_core.ingest.word_gaps import math_symbols, pdfium_reads_better

    book, breaks = head_book()
    out: dict[str, Any] = {"book": {"pages": HEAD_BOOK_PAGES, "page_break_hyphens": breaks}}
    for label, (clean, rejoin) in VARIANTS.items():
        got = _extract("heads.pdf", book, clean, rejoin=rejoin)
        out["book"][label] = {
            "running_head_lines_left": len(re.findall(r"FREE CULTURE|INTRODUCTION", got.text)),
            "margin_mark_tokens_left": len(re.findall(r"\b3[23][SR]\b", got.text)),
            "page_break_hyphens_left": len(re.findall(r"[a-z]-\n", got.text)),
        }
    import pypdfium2 as pdfium
    from pypdf import PdfReader

    from marginalia_core.ingest.extraction import normalize_pdf_text

    passwords = _passwords()
    pdfs: dict[str, Any] = {}
    for path in sorted(PDFS.glob("*.pdf")):
        data, password = path.read_bytes(), passwords.get(path.name)
        try:
            reader = PdfReader(path)
            if reader.is_encrypted:
                reader.decrypt(password or "")
            doc = pdfium.PdfDocument(data, password=password)
        except Exception:  # noqa: BLE001 - refused files are the other section's business
            continue
        picked, before, after = [], {"math": 0, "glued": 0}, {"math": 0, "glued": 0}
        for i in range(len(doc)):
            try:
                a = normalize_pdf_text(reader.pages[i].extract_text() or "")
            except Exception:  # noqa: BLE001
                continue
            textpage = doc[i].get_textpage()
            b = normalize_pdf_text(textpage.get_text_range())
            textpage.close()
            from_pdfium = pdfium_reads_better(a, b)
            chosen = b if from_pdfium else a
            if from_pdfium:
                picked.append(i + 1)
            before["math"] += math_symbols(a)
            before["glued"] += len(_GLUED.findall(a))
            after["math"] += math_symbols(chosen)
            after["glued"] += len(_GLUED.findall(chosen))
        doc.close()
        pdfs[path.name] = {"pages": len(reader.pages), "pages_from_pdfium": picked,
                           "pypdf": before, "chosen": after}
    out["eval_pdfs"] = pdfs
    out["eval_pages_from_pdfium"] = sum(len(v["pages_from_pdfium"]) for v in pdfs.values())
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--no-save", action="store_true")
    ap.add_argument("--text-only", action="store_true",
                    help="only issue 26's text cases (no embedding): results/pdf_cleanup_text.json")
    args = ap.parse_args(argv)
    command = "python benchmarks/pdf_cleanup.py " + " ".join(argv or sys.argv[1:])
    if args.text_only:
        res = text_cases()
        res["recorded"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        res["command"] = command.strip()
        if not args.no_save:
            (RESULTS / "pdf_cleanup_text.json").write_text(
                json.dumps(res, indent=1, ensure_ascii=False) + "\n")
        print(json.dumps({k: v for k, v in res.items() if k != "eval_pdfs"}, indent=1))
        print({k: v["pages_from_pdfium"] for k, v in res["eval_pdfs"].items()
               if v["pages_from_pdfium"]})
        return 0
    res = run()
    res["recorded"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    res["command"] = command.strip()
    md = markdown(res, command.strip())
    if not args.no_save:
        (RESULTS / "pdf_cleanup.json").write_text(json.dumps(res, indent=1) + "\n")
        (RESULTS / "pdf_cleanup.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
