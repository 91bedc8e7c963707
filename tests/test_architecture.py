"""The layout docs/ARCHITECTURE.md describes: layers whose imports only point down, a core that
never imports Streamlit, and no Streamlit internals anywhere."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

from conftest import ROOT

CORE = ROOT / "marginalia_core"
BASE = {"config", "errors", "events", "citations", "markdown", "registry", "__init__"}
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


def surface_files() -> list[Path]:
    """Everything that runs in the app or the CLI: the core, the app's shared modules, the page
    scripts and app.py."""
    return [*core_modules(), *sorted((ROOT / "marginalia_app").rglob("*.py")),
            *sorted((ROOT / "pages").glob("*.py")), ROOT / "app.py"]


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking_lines(tree: ast.AST) -> set[int]:
    """Line numbers inside ``if TYPE_CHECKING:`` blocks (imports for the type checker only)."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def runtime_imports(path: Path, known: set[str], *, typing_too: bool = False) -> set[str]:
    """The project modules ``path`` imports when it runs, at the top or inside a function
    (``if TYPE_CHECKING:`` blocks excluded). ``from package import submodule`` counts as the
    submodule; an imported module's parent packages are not counted as edges."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = set() if typing_too else _type_checking_lines(tree)
    me = module_name(path)
    found: set[str] = set()
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in skip:
            continue
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name in known)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = me.split(".") if path.name == "__init__.py" else me.split(".")[:-1]
                package = package[: len(package) - node.level + 1]
                base = ".".join([*package, *([base] if base else [])])
            for alias in node.names:
                if f"{base}.{alias.name}" in known:
                    found.add(f"{base}.{alias.name}")
                elif base in known:
                    found.add(base)
    found.discard(me)
    return found


def import_graph() -> dict[str, set[str]]:
    files = [p for p in surface_files() if p.parent != ROOT / "pages" and p.name != "app.py"]
    known = {module_name(p) for p in files}
    return {module_name(p): runtime_imports(p, known) for p in files}


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                group.append(top)
                if top == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return groups


def test_the_cycle_finder_finds_a_cycle():
    """The check below can fail: a two-module and a three-module loop are both reported."""
    graph = {"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"e"}, "e": {"c", "a"}, "f": {"a"}}
    assert sorted(find_cycles(graph)) == [["a", "b"], ["c", "d", "e"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles():
    """No exemptions: lazy imports inside functions count; only TYPE_CHECKING ones do not."""
    graph = import_graph()
    assert "marginalia_core.workspace" in graph and graph["marginalia_core.workspace"]
    assert find_cycles(graph) == []


BACKENDS = ("marginalia_core.store.sqlite", "marginalia_core.store.postgres")


def test_only_the_store_names_a_backend_or_runs_sql():
    """Nothing outside store/ imports store.sqlite / store.postgres or touches ``.conn``
    (the portable SQL connection): the layers above use store methods."""
    store_dir = CORE / "store"
    known = {module_name(p) for p in surface_files()} | set(BACKENDS)
    wrong = []
    for path in surface_files():
        if store_dir in path.parents:
            continue
        rel = path.relative_to(ROOT)
        wrong += [f"{rel} imports {m}" for m in runtime_imports(path, known, typing_too=True)
                  & set(BACKENDS)]
        tree = ast.parse(path.read_text(encoding="utf-8"))
        wrong += [f"{rel}:{n.lineno} uses .conn" for n in ast.walk(tree)
                  if isinstance(n, ast.Attribute) and n.attr == "conn"]
    assert wrong == []


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


def core_names_used(path: Path) -> list[tuple[str, str, int]]:
    """(module, name, line) for every core name a script takes: ``from marginalia_core.m import
    n`` anywhere (also inside functions) and ``alias.n`` where ``alias`` is a core module."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    modules: dict[str, str] = {}  # local alias -> core module
    used = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("marginalia_core"):
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                if _is_module(submodule):
                    modules[alias.asname or alias.name] = submodule
                else:
                    used.append((node.module, alias.name, node.lineno))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("marginalia_core.") and alias.asname:
                    modules[alias.asname] = alias.name
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id in modules):
            used.append((modules[node.value.id], node.attr, node.lineno))
    return used


def _is_module(dotted: str) -> bool:
    try:
        return importlib.util.find_spec(dotted) is not None
    except ModuleNotFoundError:
        return False


def test_every_core_name_a_benchmark_uses_exists():
    """Benchmarks are scripts nothing imports at test time: a core function renamed or moved
    broke them unseen (retrieval_lab called evaluation._units, the book benchmark imported
    extract from its old module). Every core name they take must exist."""
    missing, checked = [], 0
    for path in sorted((ROOT / "benchmarks").glob("*.py")):
        for module, name, line in core_names_used(path):
            checked += 1
            if not hasattr(importlib.import_module(module), name):
                missing.append(f"benchmarks/{path.name}:{line}: {module}.{name}")
    assert checked > 100 and not missing, (checked, missing)


def test_the_benchmark_name_check_sees_a_missing_name(tmp_path):
    script = tmp_path / "bench.py"
    script.write_text("from marginalia_core.retrieval import evaluation as ev\n"
                      "def f():\n    from marginalia_core.ingest.extraction import extract\n"
                      "    return ev._units, ev.rank_units\n")
    used = core_names_used(script)
    assert ("marginalia_core.ingest.extraction", "extract", 3) in used
    assert ("marginalia_core.retrieval.evaluation", "_units", 4) in used
    assert not hasattr(importlib.import_module("marginalia_core.ingest.extraction"), "extract")
