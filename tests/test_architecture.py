"""The layout docs/ARCHITECTURE.md describes: layers whose imports only point down, a core that
never imports Streamlit, and no Streamlit internals anywhere."""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import ROOT

CORE = ROOT / "marginalia_core"
BASE = {"config", "errors", "events", "citations", "registry", "__init__"}
# lower number = lower layer; a module may import its own layer and those below
LAYERS = {"base": 0, "store": 1, "providers": 2, "retrieval": 3, "ingest": 3, "chat": 4,
          "top": 5}
# api/: the HTTP API and the MCP server, surfaces beside the CLI
TOP = {"workspace", "cli", "lab", "__main__", "api"}


def layer_of(dotted: str) -> str:
    parts = dotted.split(".")[1:]  # drop "marginalia_core"
    if not parts:
        return "base"
    head = parts[0]
    if head in BASE:
        return "base"
    if head in TOP:
        return "top"
    return head


def imports(path: Path) -> list[tuple[str, int]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.module, node.lineno))
        elif isinstance(node, ast.Import):
            found.extend((alias.name, node.lineno) for alias in node.names)
    return found


def core_modules() -> list[Path]:
    return sorted(CORE.rglob("*.py"))


def test_core_imports_only_point_down():
    wrong = []
    for path in core_modules():
        me = layer_of(".".join(("marginalia_core", *path.relative_to(CORE).with_suffix("").parts)))
        for module, line in imports(path):
            if not module.startswith("marginalia_core"):
                continue
            them = layer_of(module)
            if LAYERS[them] > LAYERS[me] or (them != me and LAYERS[them] == LAYERS[me]
                                              and me != "top"):
                wrong.append(f"{path.relative_to(ROOT)}:{line} ({me}) imports {module} ({them})")
    assert wrong == []


def test_the_core_never_imports_streamlit_or_the_app():
    for path in core_modules():
        for module, line in imports(path):
            assert not module.startswith(("streamlit", "marginalia_app", "pages")), (
                f"{path.relative_to(ROOT)}:{line} imports {module}"
            )


def test_no_streamlit_internals_anywhere():
    files = [ROOT / "app.py", *(ROOT / "pages").glob("*.py"),
             *(ROOT / "marginalia_app").glob("*.py"), *core_modules()]
    for path in files:
        for module, line in imports(path):
            assert not module.startswith("streamlit.runtime"), f"{path}:{line} {module}"


def test_every_core_package_is_in_the_architecture_table():
    doc = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    for path in core_modules():
        rel = path.relative_to(CORE)
        if rel.name == "__init__.py" or rel.name == "__main__.py":
            continue
        named = str(rel) if len(rel.parts) == 1 else f"{rel.parts[0]}/"
        assert named in doc, f"docs/ARCHITECTURE.md does not mention {named}"


def _doc_table_rows(doc: str) -> list[list[str]]:
    return [[c.strip() for c in line.strip().strip("|").split("|")]
            for line in doc.splitlines() if line.startswith("| ") and "---" not in line]


def test_every_module_the_architecture_table_names_exists():
    """The reverse check: the table once listed an ``ingest_file`` that did not exist."""
    import re

    doc = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    missing = []
    for row in _doc_table_rows(doc):
        # a row about a folder may name its modules relative to it
        folders = [f for f in re.findall(r"`([^`]+/)`", row[0])]
        for cell in row[:2]:
            for name in re.findall(r"`([^`]+)`", cell):
                if not name.endswith((".py", "/")):
                    continue
                candidates = [CORE / name, ROOT / name, *(ROOT / f / name for f in folders)]
                if not any(p.exists() for p in candidates):
                    missing.append(name)
    assert missing == []


def test_the_workspace_offers_every_operation_the_table_lists():
    import re

    from marginalia_core.workspace import Workspace

    doc = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    (top,) = [r for r in _doc_table_rows(doc) if r[0] == "top"]
    listed = re.search(r"`Workspace`: [^(]*\(([^)]*)\)", top[2]).group(1)
    names = [n.strip() for n in listed.split(",")]
    assert len(names) >= 8
    assert [n for n in names if not hasattr(Workspace, n)] == []
