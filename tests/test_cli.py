"""``python -m marginalia_core``: ask / conversations / conversation / delete-conversation print
the SPEC's NDJSON events. In-process through ``cli.main(argv, out=, err=)``, and once as a real
subprocess."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

from marginalia_core import cli
from marginalia_core.providers.answerers.prompting import NO_DOCUMENTS_ANSWER

MILL = (
    "The mill was built in 1851 by the Carter family on the banks of the Mill River. "
    "It ground wheat for the whole valley for more than sixty years.\n\n"
    "In 1912 a flood destroyed the mill's great wheel and the building was abandoned. "
    "The town bought the ruin in 1990 and restored it as a museum of milling."
)


@pytest.fixture
def cli_run(db_path, local_embedder):
    """Run the CLI in-process on the test database (offline mode); returns (code, lines, err)."""

    def go(*argv: str) -> tuple[int, list[dict], str]:
        out, err = io.StringIO(), io.StringIO()
        code = cli.main(
            [*argv, "--db", str(db_path), "--embedder", "local", "--answerer", "extractive"],
            out=out,
            err=err,
        )
        text = out.getvalue()
        assert text == "" or text.endswith("\n")
        lines = [json.loads(line) for line in text.splitlines()]  # every line is one JSON object
        return code, lines, err.getvalue()

    return go


@pytest.fixture
def mill_file(tmp_path) -> Path:
    path = tmp_path / "mill.txt"
    path.write_text(MILL, encoding="utf-8")
    return path


@pytest.fixture
def indexed(cli_run, mill_file):
    code, lines, err = cli_run("ingest", str(mill_file))
    assert code == 0 and lines[-1]["type"] == "done", (lines, err)
    return cli_run


def test_ask_prints_meta_tokens_done_as_ndjson(indexed):
    code, lines, err = indexed("ask", "When was the mill built?")
    assert code == 0 and err == ""
    meta, *tokens, done = lines
    assert set(meta) == {"type", "conversationId", "title", "sources", "query", "documents"}
    assert meta["documents"] is None  # every document
    assert meta["query"] == "When was the mill built?"
    assert meta["type"] == "meta" and meta["title"] == "When was the mill built?"
    source = meta["sources"][0]
    assert source["n"] == 1 and source["documentName"] == "mill.txt"
    assert {"excerpt", "score", "page"} <= set(source)
    assert tokens and all(set(t) <= {"type", "text", "cited"} and t["type"] == "token"
                          for t in tokens)
    assert [t["cited"] for t in tokens if "cited" in t] == [[1]]  # meta's source 1 is [1]
    answer = "".join(t["text"] for t in tokens)
    assert "1851" in answer and answer.endswith("[1].")
    assert done["type"] == "done" and done["messageId"] and done["status"] == "complete"
    assert answer == done["answer"]  # the tokens carry done's numbering
    assert done["conversationId"] == meta["conversationId"]


def test_ask_continues_a_conversation_and_the_listing_commands(indexed):
    first = indexed("ask", "When was the mill built?")[1]
    conv = first[0]["conversationId"]
    other = indexed("ask", "Who restored the ruin?")[1][0]["conversationId"]
    code, lines, _ = indexed("ask", "What happened to the mill in 1912?", "--conversation", conv)
    assert code == 0 and lines[0]["conversationId"] == conv
    assert lines[0]["title"] == "When was the mill built?"

    code, lines, _ = indexed("conversations")
    assert code == 0
    assert [(c["type"], c["id"]) for c in lines] == [("conversation", conv), ("conversation", other)]
    assert lines[0]["title"] == "When was the mill built?" and lines[0]["messageCount"] == 4

    code, lines, _ = indexed("conversation", conv)
    assert code == 0
    head, *messages = lines
    assert head["type"] == "conversation" and head["id"] == conv
    assert [(m["type"], m["role"]) for m in messages] == [
        ("message", "user"),
        ("message", "assistant"),
    ] * 2
    assert messages[0]["content"] == "When was the mill built?"
    cited_sources = messages[1]["sources"]  # parsed, not a JSON string
    assert isinstance(cited_sources, list) and cited_sources[0]["n"] == 1
    assert cited_sources[0]["documentName"] == "mill.txt" and cited_sources[0]["content"]

    code, lines, _ = indexed("delete-conversation", conv)
    assert code == 0 and lines == [{"type": "done", "deleted": conv}]
    assert [c["id"] for c in indexed("conversations")[1]] == [other]
    code, lines, err = indexed("conversation", conv)
    assert code == cli.EXIT_REFUSED and lines == [] and "No conversation" in err
    code, _, err = indexed("delete-conversation", conv)
    assert code == cli.EXIT_REFUSED and "No conversation" in err


BEES = (
    "Honey bees live in colonies with a single queen. Worker bees collect nectar from flowers "
    "and turn it into honey, which they store in wax combs. A strong colony can hold sixty "
    "thousand bees in summer, and the mill's old orchard was full of their hives."
)


def test_ask_document_limits_the_search_and_the_conversation_keeps_it(indexed, tmp_path):
    bees = tmp_path / "bees.txt"
    bees.write_text(BEES, encoding="utf-8")
    assert indexed("ingest", str(bees))[0] == 0
    ids = {d["name"]: d["id"] for d in indexed("documents")[1]}

    # the mill question, limited to the bees: the mill's own document is never searched
    code, lines, err = indexed("ask", "When was the mill built?", "--document", ids["bees.txt"])
    assert code == 0, err
    meta, done = lines[0], lines[-1]
    assert meta["documents"] == [ids["bees.txt"]]
    assert {s["documentName"] for s in meta["sources"]} <= {"bees.txt"}
    assert "1851" not in "".join(e.get("text", "") for e in lines)
    conv = meta["conversationId"]

    # the next question of the conversation keeps the choice without repeating it
    code, lines, _ = indexed("ask", "How many bees can a colony hold?", "--conversation", conv)
    assert code == 0 and lines[0]["documents"] == [ids["bees.txt"]]
    assert {s["documentName"] for s in lines[0]["sources"]} == {"bees.txt"}
    head = indexed("conversation", conv)[1][0]
    assert head["documents"] == [ids["bees.txt"]]

    # repeatable; --all-documents clears it
    code, lines, _ = indexed("ask", "When was the mill built?", "--conversation", conv,
                             "--document", ids["mill.txt"], "--document", ids["bees.txt"])
    assert code == 0 and lines[0]["documents"] == [ids["mill.txt"], ids["bees.txt"]]
    assert lines[0]["sources"][0]["documentName"] == "mill.txt"
    code, lines, _ = indexed("ask", "When was the mill built?", "--conversation", conv,
                             "--all-documents")
    assert code == 0 and lines[0]["documents"] is None
    assert indexed("conversation", conv)[1][0]["documents"] is None
    assert done["type"] == "done"


def test_ask_with_an_unknown_document_is_refused_and_saves_nothing(indexed):
    code, lines, err = indexed("ask", "When was the mill built?", "--document", "nope")
    assert code == cli.EXIT_REFUSED
    assert [e["type"] for e in lines] == ["error"] and "nope" in err
    assert indexed("conversations")[1] == []


def test_ask_with_no_documents(cli_run):
    code, lines, err = cli_run("ask", "Anything?")
    assert code == cli.EXIT_REFUSED  # nothing to search: said, and no conversation kept
    assert [e["type"] for e in lines] == ["meta", "error"]
    assert lines[0]["sources"] == [] and lines[1]["message"] == NO_DOCUMENTS_ANSWER
    assert lines[1]["reason"] == "no_documents" and NO_DOCUMENTS_ANSWER in err
    assert cli_run("conversations")[1] == []


def test_ask_errors_exit_non_zero_with_a_message(indexed):
    code, lines, err = indexed("ask", "   ")
    assert code == cli.EXIT_REFUSED
    assert [e["type"] for e in lines] == ["error"] and err.startswith("error: ")
    code, lines, err = indexed("ask", "When?", "--conversation", "bogus")
    assert code == cli.EXIT_REFUSED and lines[0]["type"] == "error" and "bogus" in err
    assert indexed("conversations")[1] == []  # nothing was created


def test_real_subprocess_ingest_ask_and_a_refused_file(tmp_path, mill_file):
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("GEMINI_API_KEY", "GOOGLE_API_KEY", "GOOGLE_GEMINI_BASE_URL")
    }
    env.update(
        HF_HUB_OFFLINE="1",
        MARGINALIA_DB=str(tmp_path / "cli.db"),
        MARGINALIA_EMBEDDER="local",
        MARGINALIA_ANSWERER="extractive",
        PYTHONPATH=str(ROOT),
    )

    def call(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "marginalia_core", *argv],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    ingest = call("ingest", str(mill_file))
    assert ingest.returncode == 0, ingest.stderr
    assert json.loads(ingest.stdout.splitlines()[-1])["type"] == "done"

    ask = call("ask", "When was the mill built?")
    assert ask.returncode == 0, ask.stderr
    events = [json.loads(line) for line in ask.stdout.splitlines()]
    assert events[0]["type"] == "meta" and events[-1]["type"] == "done"
    assert "Traceback" not in ask.stderr

    binary = tmp_path / "photo.txt"
    binary.write_bytes(bytes(range(256)) * 8)
    refused = call("ingest", str(binary))
    assert refused.returncode != 0
    assert json.loads(refused.stdout.splitlines()[-1])["type"] == "error"
    assert "refused" in refused.stderr and "Traceback" not in refused.stderr


def test_the_marginalia_console_script_is_the_cli():
    """``pip install .`` installs a ``marginalia`` command: the same entry point as
    ``python -m marginalia_core``."""
    import importlib
    import tomllib

    from conftest import ROOT

    from marginalia_core import cli

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    module, _, attr = project["project"]["scripts"]["marginalia"].partition(":")
    assert getattr(importlib.import_module(module), attr) is cli.main
    assert project["build-system"]["build-backend"] == "setuptools.build_meta"


def test_ask_text_prints_a_readable_answer_then_its_sources(cli_run, db_path):
    """`ask --text` for a person: the answer as plain text (no JSON), its marks numbered as
    the sources listed after it, each with its document (and page for a PDF)."""
    from marginalia_app.samples import sample_files

    for path in sample_files():
        assert cli_run("ingest", str(path))[0] == 0
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(["ask", "--text", "What did Fermat write in the margin?", "--db",
                     str(db_path), "--embedder", "local", "--answerer", "extractive"],
                    out=out, err=err)
    text = out.getvalue()
    assert code == 0 and err.getvalue() == "", err.getvalue()
    answer, _, rest = text.partition("\n\nSources\n")
    assert "{" not in answer and "Fermat" in answer and "margin" in answer
    sources = [line.strip() for line in rest.splitlines() if line.startswith("  [")]
    marks = sorted({int(n) for n in re.findall(r"\[(\d+)\]", answer)})
    assert marks == list(range(1, len(sources) + 1))  # [1], [2]... as listed below
    assert all(re.match(r"\[\d+\] \S+\.(md|txt|pdf)", s) for s in sources), sources
    assert "a-short-history-of-marginalia.md" in rest
    assert re.search(r"Conversation [0-9a-f]{32}", rest)
    # --json is today's NDJSON, the same answer
    code, lines, _ = cli_run("ask", "--json", "What did Fermat write in the margin?")
    assert code == 0 and lines[-1]["type"] == "done"
    assert lines[-1]["answer"].strip() == answer.strip()
