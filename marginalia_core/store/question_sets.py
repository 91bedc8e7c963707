"""Question sets (questions with the passages or pages that answer them) and saved retrieval
configurations, in the library's own database (tables from migration ``m005_retrieval_lab``).

A judgment names a document (by file name) and optionally a page range or a character span of
the document's extracted text, never a chunk id: re-indexing with another chunking changes every
chunk id, and the judgments still say which new chunks are relevant.

Imports: BEIR (``queries.jsonl`` + a ``qrels/*.tsv``), a CSV of ``question,document,page`` and
this module's own JSON-lines export. Every import is one transaction: a bad row refuses the whole
file with the line number, and nothing is written.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from marginalia_core.errors import MarginaliaError
from marginalia_core.store.base import LibraryStore
from marginalia_core.store.rows import new_id, now_iso

# A chunk matches a span judgment when they share at least this share of the shorter of the two
SPAN_OVERLAP = 0.5
LABEL_WORDS = 6  # words of a span judgment's excerpt its label quotes
# library_settings rows that are not retrieval settings: "Apply to Chat" leaves them alone
_PAGES = re.compile(r"^\s*(\d+)\s*(?:[-–]\s*(\d+))?\s*$")


class QuestionSetError(MarginaliaError):
    reason = "question_set"


@dataclass(frozen=True)
class Judgment:
    """One relevant document, page range or text span for a question (``grade`` > 0)."""

    document: str
    page_start: int | None = None
    page_end: int | None = None
    span_start: int | None = None
    span_end: int | None = None
    grade: int = 1
    excerpt: str = ""
    # where the passage is, as its document names it, when that is not a page: "slide 2",
    # "sheet Budget, rows 12–40", "chapter 3" (page_start/page_end then count those units)
    location: str = ""

    @property
    def level(self) -> str:
        if self.span_start is not None:
            return "span"
        return "page" if self.page_start is not None else "document"

    @property
    def pages(self) -> str:
        """"p. 3" or "p. 3–5", or the location ("slide 2"); "" for a judgment with no pages
        (a text file, a whole document)."""
        if self.location:
            return self.location
        if self.page_start is None:
            return ""
        if self.page_end in (None, self.page_start):
            return f"p. {self.page_start}"
        return f"p. {self.page_start}–{self.page_end}"

    @property
    def label(self) -> str:
        """What a person reads: the document, its pages, and for a text span its first words
        (never character offsets)."""
        where = " ".join(p for p in (self.document, self.pages) if p)
        if self.level == "span":
            words = " ".join(self.excerpt.split()[:LABEL_WORDS])
            if words:
                more = "…" if len(self.excerpt.split()) > LABEL_WORDS else ""
                return f"{where} “{words}{more}”"
            return f"{where} (a passage)"
        return where

    def matches(self, chunk: dict[str, Any]) -> bool:
        """Does this chunk (a row with document name/id, pages and offsets) answer it?"""
        if self.document not in (chunk.get("document_name"), chunk.get("document_id")):
            return False
        if self.level == "span":
            start, end = int(chunk["start"]), int(chunk["end"])
            s = int(self.span_start or 0)
            e = int(self.span_end or s)
            shared = min(end, e) - max(start, s)
            shorter = max(1, min(end - start, e - s))
            return shared > 0 and shared >= SPAN_OVERLAP * shorter
        if self.level == "page":
            last = self.page_end if self.page_end is not None else self.page_start
            return chunk["page_start"] <= last and self.page_start <= chunk["page_end"]
        return True


@dataclass(frozen=True)
class Question:
    text: str
    judgments: tuple[Judgment, ...]
    id: str = ""  # the set's own id for the question (BEIR query id, "q3", ...)
    answer: str = ""  # the expected answer ("": none given), for the answer metrics

    @property
    def answerable(self) -> bool:
        """A question with no relevant passage is one the library cannot answer: a right
        answer refuses it, and retrieval metrics leave it out."""
        return any(j.grade > 0 for j in self.judgments)


@dataclass
class QuestionSet:
    name: str
    questions: list[Question] = field(default_factory=list)
    description: str = ""
    id: str = ""
    created: str = ""

    @property
    def judgment_count(self) -> int:
        return sum(len(q.judgments) for q in self.questions)


@dataclass(frozen=True)
class QuestionSetSummary:
    id: str
    name: str
    description: str
    questions: int
    judgments: int
    created: str


def parse_pages(value: str) -> tuple[int | None, int | None]:
    """'' -> whole document; '3' -> page 3; '3-5' -> pages 3 to 5."""
    if value is None or not str(value).strip():
        return None, None
    m = _PAGES.match(str(value))
    if not m:
        raise ValueError(f"page must be a number or a range like 3-5, got {value!r}")
    a, b = int(m.group(1)), int(m.group(2) or m.group(1))
    if a < 1 or b < a:
        raise ValueError(f"page range {value!r} is not valid")
    return a, b


class QuestionSets:
    """Question sets and saved configurations stored in one library's database."""

    def __init__(self, store: LibraryStore):
        self.store = store

    # -- sets --------------------------------------------------------------------------------

    def save(self, qset: QuestionSet, *, replace: bool = False) -> QuestionSetSummary:
        """Write a whole set in one transaction (``replace`` swaps out a set of that name)."""
        name = (qset.name or "").strip()
        if not name:
            raise QuestionSetError("A question set needs a name.")
        if not qset.questions:
            raise QuestionSetError(f"Question set {name!r} has no questions.")
        for n, q in enumerate(qset.questions, 1):
            if not q.text.strip():
                raise QuestionSetError(f"Question {n} of {name!r} is empty.")
        with self.store.write() as conn:
            old = conn.execute("SELECT id FROM question_sets WHERE name = ?", (name,)).fetchone()
            if old and not replace:
                raise QuestionSetError(
                    f"A question set named {name!r} already exists; choose another name "
                    "or replace it."
                )
            if old:
                conn.execute("DELETE FROM question_sets WHERE id = ?", (old[0],))
            set_id = new_id()
            created = now_iso()
            conn.execute(
                "INSERT INTO question_sets (id, name, description, created) VALUES (?, ?, ?, ?)",
                (set_id, name, qset.description or "", created),
            )
            seen: set[str] = set()
            for pos, q in enumerate(qset.questions):
                ext = q.id or f"q{pos + 1}"
                if ext in seen:
                    raise QuestionSetError(f"Question id {ext!r} appears twice in {name!r}.")
                seen.add(ext)
                qid = new_id()
                conn.execute(
                    "INSERT INTO questions (id, set_id, position, external_id, text, answer) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    (qid, set_id, pos, ext, q.text.strip(), (q.answer or "").strip()),
                )
                conn.executemany(
                    "INSERT INTO judgments (question_id, document, page_start, page_end, "
                    "span_start, span_end, grade, excerpt, location) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [
                        (qid, j.document, j.page_start, j.page_end, j.span_start, j.span_end,
                         int(j.grade), j.excerpt or "", j.location or "")
                        for j in q.judgments
                    ],
                )
        return self.summary(name)

    def list(self) -> list[QuestionSetSummary]:
        rows = self.store.conn.execute(
            "SELECT s.id, s.name, s.description, s.created, "
            "(SELECT count(*) FROM questions q WHERE q.set_id = s.id) AS nq, "
            "(SELECT count(*) FROM judgments j JOIN questions q ON q.id = j.question_id "
            " WHERE q.set_id = s.id) AS nj FROM question_sets s ORDER BY s.name"
        ).fetchall()
        return [
            QuestionSetSummary(r["id"], r["name"], r["description"], r["nq"], r["nj"], r["created"])
            for r in rows
        ]

    def summary(self, name: str) -> QuestionSetSummary:
        for s in self.list():
            if s.name == name:
                return s
        raise self._missing(name)

    def get(self, name: str) -> QuestionSet:
        conn = self.store.conn
        row = conn.execute("SELECT * FROM question_sets WHERE name = ?", (name,)).fetchone()
        if row is None:
            raise self._missing(name)
        judgments: dict[str, list[Judgment]] = {}
        for j in conn.execute(
            "SELECT j.* FROM judgments j JOIN questions q ON q.id = j.question_id "
            "WHERE q.set_id = ? ORDER BY j.id",
            (row["id"],),
        ):
            judgments.setdefault(j["question_id"], []).append(
                Judgment(j["document"], j["page_start"], j["page_end"], j["span_start"],
                         j["span_end"], j["grade"], j["excerpt"], j["location"])
            )
        questions = [
            Question(q["text"], tuple(judgments.get(q["id"], ())), q["external_id"],
                     q["answer"] or "")
            for q in conn.execute(
                "SELECT * FROM questions WHERE set_id = ? ORDER BY position", (row["id"],)
            )
        ]
        return QuestionSet(row["name"], questions, row["description"], row["id"], row["created"])

    def set_answers(self, name: str, answers: dict[str, str]) -> QuestionSetSummary:
        """Set the expected answers of questions of ``name`` (question id -> answer; "" clears
        one), in one transaction; an unknown id refuses the whole change."""
        with self.store.write() as conn:
            row = conn.execute("SELECT id FROM question_sets WHERE name = ?", (name,)).fetchone()
            if row is None:
                raise self._missing(name)
            known = {r["external_id"] for r in conn.execute(
                "SELECT external_id FROM questions WHERE set_id = ?", (row["id"],))}
            unknown = sorted(set(answers) - known)
            if unknown:
                raise QuestionSetError(f"No question {unknown[0]!r} in {name!r}; nothing was "
                                       "changed.")
            conn.executemany(
                "UPDATE questions SET answer = ? WHERE set_id = ? AND external_id = ?",
                [((a or "").strip(), row["id"], qid) for qid, a in answers.items()],
            )
        return self.summary(name)

    def delete(self, name: str) -> bool:
        with self.store.write() as conn:
            return conn.execute("DELETE FROM question_sets WHERE name = ?", (name,)).rowcount > 0

    def _missing(self, name: str) -> QuestionSetError:
        names = ", ".join(s.name for s in self.list()) or "none yet"
        return QuestionSetError(f"No question set named {name!r} (sets: {names}).")

    # -- saved configurations ----------------------------------------------------------------

    def save_config(self, name: str, config: dict[str, Any]) -> None:
        if not name.strip():
            raise QuestionSetError("A configuration needs a name.")
        with self.store.write() as conn:
            conn.execute(
                "INSERT INTO retrieval_configs (name, config, created) VALUES (?, ?, ?) "
                "ON CONFLICT(name) DO UPDATE SET config = excluded.config",
                (name.strip(), json.dumps(config, sort_keys=True), now_iso()),
            )

    def configs(self) -> dict[str, dict[str, Any]]:
        return {
            r["name"]: json.loads(r["config"])
            for r in self.store.conn.execute("SELECT * FROM retrieval_configs ORDER BY name")
        }

    def config(self, name: str) -> dict[str, Any]:
        found = self.configs()
        if name not in found:
            names = ", ".join(found) or "none yet"
            raise QuestionSetError(f"No saved configuration named {name!r} (saved: {names}).")
        return found[name]

    def delete_config(self, name: str) -> bool:
        with self.store.write() as conn:
            return conn.execute("DELETE FROM retrieval_configs WHERE name = ?", (name,)).rowcount > 0


# --- import / export -------------------------------------------------------------------------


def _refuse(source: str, line: int, why: str) -> QuestionSetError:
    return QuestionSetError(f"{source}, line {line}: {why}. Nothing was imported.")


def read_beir(queries: str | Path, qrels: str | Path, *, name: str) -> QuestionSet:
    """A set from BEIR files: every query with at least one judgment of grade > 0 in ``qrels``
    (tab-separated query-id, corpus-id, score; a header row is skipped), judged at document
    level (the corpus id is the document's name in the library)."""
    texts: dict[str, str] = {}
    with open(queries, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                d = json.loads(line)
                texts[str(d["_id"])] = str(d["text"])
            except (ValueError, KeyError, TypeError) as e:
                raise _refuse(Path(queries).name, n, f"not a BEIR query ({e})") from None
    rels: dict[str, list[Judgment]] = {}
    with open(qrels, encoding="utf-8", newline="") as f:
        for n, line in enumerate(f, 1):
            parts = line.strip().split("\t")
            if not line.strip():
                continue
            if n == 1 and not parts[-1].lstrip("-").isdigit():
                continue  # header
            if len(parts) < 3 or not parts[-1].lstrip("-").isdigit():
                raise _refuse(Path(qrels).name, n, "expected query-id, corpus-id, score")
            qid, doc, grade = parts[0], parts[-2], int(parts[-1])
            if qid not in texts:
                raise _refuse(Path(qrels).name, n, f"query {qid!r} is not in {Path(queries).name}")
            if grade > 0:
                rels.setdefault(qid, []).append(Judgment(doc, grade=grade))
    return QuestionSet(
        name,
        [Question(texts[q], tuple(js), q) for q, js in rels.items()],
        description=f"BEIR import: {Path(queries).name} + {Path(qrels).name}",
    )


def _cell(row: list[str], columns: dict[str, int], key: str) -> str:
    i = columns[key]
    return row[i].strip() if 0 <= i < len(row) else ""


def read_csv(text: str, *, name: str, source: str = "CSV") -> QuestionSet:
    """A set from CSV rows ``question,document,page[,answer]``; rows with the same question
    merge, an empty page means the whole document, ``3-5`` a page range, ``answer`` is the
    expected answer. A row with no document is a question the library cannot answer (a right
    answer refuses it). A header row is optional; with one, columns go by name."""
    order: dict[str, list[Judgment]] = {}
    answers: dict[str, str] = {}
    columns = {"question": 0, "document": 1, "page": 2, "answer": 3}
    reader = csv.reader(io.StringIO(text))
    for n, row in enumerate(reader, 1):
        if not row or not any(c.strip() for c in row):
            continue
        names = [c.strip().lower() for c in row]
        if n == 1 and names[:1] == ["question"] and ("document" in names or "answer" in names):
            columns = {c: names.index(c) if c in names else -1 for c in columns}
            continue

        question, document = _cell(row, columns, "question"), _cell(row, columns, "document")
        if not question or len(row) < 2:
            raise _refuse(source, n, "expected question,document[,page][,answer]")
        try:
            start, end = parse_pages(_cell(row, columns, "page"))
        except ValueError as e:
            raise _refuse(source, n, str(e)) from None
        if document:
            order.setdefault(question, []).append(Judgment(document, start, end))
        else:
            order.setdefault(question, [])
        if (answer := _cell(row, columns, "answer")) and question not in answers:
            answers[question] = answer
    return QuestionSet(name, [Question(q, tuple(js), answer=answers.get(q, ""))
                              for q, js in order.items()])


def read_jsonl(text: str, *, name: str, source: str = "JSON lines") -> QuestionSet:
    """A set from this module's export: one ``{"id", "question", "relevant": [{"document",
    "pages" | "page_start"/"page_end" | "span_start"/"span_end", "grade"}]}`` per line."""
    questions = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
            js = []
            for r in d["relevant"]:
                pages = r.get("pages")
                if pages:  # a list of single pages: one judgment each
                    js += [Judgment(r["document"], int(p), int(p), grade=int(r.get("grade", 1)))
                           for p in pages]
                else:
                    js.append(Judgment(
                        r["document"], r.get("page_start"), r.get("page_end"),
                        r.get("span_start"), r.get("span_end"), int(r.get("grade", 1)),
                        r.get("excerpt", ""), r.get("location", ""),
                    ))
            questions.append(Question(str(d["question"]), tuple(js), str(d.get("id") or ""),
                                      str(d.get("answer") or "")))
        except (ValueError, KeyError, TypeError) as e:
            raise _refuse(source, n, f"not a question line ({e})") from None
    return QuestionSet(name, questions)


def write_jsonl(qset: QuestionSet) -> Iterator[str]:
    for q in qset.questions:
        rel = []
        for j in q.judgments:
            d = {k: v for k, v in asdict(j).items() if v not in (None, "")}
            rel.append(d)
        line: dict[str, Any] = {"id": q.id, "question": q.text, "relevant": rel}
        if q.answer:
            line["answer"] = q.answer
        yield json.dumps(line, ensure_ascii=False)


def write_csv(qset: QuestionSet) -> str:
    """``question,document,page,answer`` rows (spans are exported as their pages-less
    document; a question with no judgment is one row with no document)."""
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    answers = any(q.answer or not q.judgments for q in qset.questions)
    w.writerow(["question", "document", "page", *(["answer"] if answers else [])])
    for q in qset.questions:
        tail = [q.answer] if answers else []
        if not q.judgments:
            w.writerow([q.text, "", "", *tail])
        for j in q.judgments:
            pages = ""
            if j.page_start is not None:
                end = j.page_end if j.page_end is not None else j.page_start
                pages = str(j.page_start) if end == j.page_start else f"{j.page_start}-{end}"
            w.writerow([q.text, j.document, pages, *tail])
    return out.getvalue()


def read_file(path: str | Path, *, name: str, qrels: str | Path | None = None) -> QuestionSet:
    """Import by file type: BEIR when ``qrels`` is given, else ``.csv`` or ``.jsonl``."""
    path = Path(path)
    if qrels is not None:
        return read_beir(path, qrels, name=name)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise QuestionSetError(f"Could not read {path.name}: {e}") from None
    if path.suffix.lower() == ".csv":
        return read_csv(text, name=name, source=path.name)
    if path.suffix.lower() in (".jsonl", ".ndjson", ".json"):
        return read_jsonl(text, name=name, source=path.name)
    raise QuestionSetError(
        f"{path.name}: use a .csv (question,document,page), a .jsonl export, "
        "or a BEIR queries.jsonl with --qrels."
    )


def unique_documents(qset: QuestionSet) -> Iterable[str]:
    return sorted({j.document for q in qset.questions for j in q.judgments})
