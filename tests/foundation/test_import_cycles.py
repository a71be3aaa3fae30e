"""No import cycles in ``awa/``: every module can be read, tested and moved without the ones
that import it (docs/architecture.md §2).

The graph is built from the source with ``ast``, so it sees what a run may import: module-level
imports and imports inside functions alike (a lazy import only hides a cycle until the function
runs).  Imports under ``if TYPE_CHECKING:`` never run, but a cycle through them is still two
modules that cannot be read or moved apart (the runtime's parts once typed themselves with the
``Runtime`` that builds them): the first check leaves them out, the second counts them.
``from pkg import name`` is an edge to ``pkg.name`` when that is a module, else to ``pkg``
itself; importing ``a.b.c`` is not counted as importing the packages ``a`` and ``a.b`` (every
module would then depend on ``awa/__init__.py``, which re-exports the public API).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "awa"

def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _type_checking_only(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imported(tree: ast.AST, name: str, is_package: bool, modules: set[str],
             type_checking: bool = False) -> set[str]:
    """The modules of ``modules`` that module ``name`` imports, at any depth of its code
    (under ``if TYPE_CHECKING:`` too when ``type_checking``)."""
    found: set[str] = set()
    package = name if is_package else name.rpartition(".")[0]

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _type_checking_only(node) and not type_checking:
            for branch in node.orelse:
                visit(branch)
            return
        if isinstance(node, ast.Import):
            for alias in node.names:
                found.add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in modules else base)
        for inner in ast.iter_child_nodes(node):
            visit(inner)

    visit(tree)
    return {m for m in found if m in modules and m != name}


def import_graph(type_checking: bool = False,
                 packages: tuple[str, ...] = (PACKAGE,)) -> dict[str, set[str]]:
    files = {module_name(p): p for package in packages for p in (ROOT / package).rglob("*.py")}
    modules = set(files)
    return {name: imported(ast.parse(path.read_text(), str(path)), name,
                           path.name == "__init__.py", modules, type_checking)
            for name, path in files.items()}


def strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    """Tarjan's algorithm: the components of more than one module (each holds a cycle)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(component)

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return found


def a_cycle(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """One concrete cycle through ``component``, for the failure message."""
    start = min(component)
    path, seen = [start], {start}
    while True:
        nxt = min((w for w in graph[path[-1]] if w in component), key=lambda w: (w in seen, w))
        path.append(nxt)
        if nxt in seen:
            return path[path.index(nxt):]
        seen.add(nxt)


def test_awa_has_no_import_cycles():
    graph = import_graph()
    components = strongly_connected(graph)
    assert not components, "import cycles:\n" + "\n".join(
        " -> ".join(a_cycle(graph, c)) for c in components)


def test_awa_has_no_import_cycles_through_type_checking_imports_either():
    """Typing-only imports count too: a part that names the whole that builds it (the runtime's
    parts and ``Runtime``, the client's mixins and ``AsyncClient``) is given what it uses
    instead (docs/architecture.md §9)."""
    graph = import_graph(type_checking=True)
    components = strongly_connected(graph)
    assert not components, "import cycles through TYPE_CHECKING imports:\n" + "\n".join(
        " -> ".join(a_cycle(graph, c)) for c in components)


def test_the_graph_sees_lazy_imports_and_skips_type_checking_ones():
    """The detector itself: a function-level import is an edge, a TYPE_CHECKING one is not."""
    source = ("from typing import TYPE_CHECKING\n"
              "if TYPE_CHECKING:\n    from awa.b import B\n"
              "def f():\n    from awa import c\n    import awa.d\n")
    modules = {"awa", "awa.a", "awa.b", "awa.c", "awa.d"}
    assert imported(ast.parse(source), "awa.a", False, modules) == {"awa.c", "awa.d"}
    assert imported(ast.parse(source), "awa.a", False, modules, type_checking=True) == {
        "awa.b", "awa.c", "awa.d"}
    cyclic = {"awa.a": {"awa.c"}, "awa.c": {"awa.d"}, "awa.d": {"awa.a"}, "awa.b": {"awa.a"}}
    assert strongly_connected(cyclic) == [{"awa.a", "awa.c", "awa.d"}]
    assert a_cycle(cyclic, {"awa.a", "awa.c", "awa.d"}) == ["awa.a", "awa.c", "awa.d", "awa.a"]


def test_the_engine_neutral_core_imports_no_engine():
    """``awa.storage.common`` is what engines share: it never reaches into one of them."""
    engines = ("awa.storage.canonical", "awa.storage.queue_storage", "awa.storage.rust_core")
    graph = import_graph()
    reaching = {m: sorted(t for t in targets if t.startswith(engines))
                for m, targets in graph.items() if m.startswith("awa.storage.common")}
    assert len(reaching) >= 4, reaching  # the package and its modules were all read
    assert {m: t for m, t in reaching.items() if t} == {}


def test_the_two_engines_import_each_other_nowhere():
    """Canonical and queue storage each stand on ``awa.storage.common``, never on each other."""
    canonical, queue_storage = "awa.storage.canonical", "awa.storage.queue_storage"
    graph = import_graph()

    def reaching(prefix: str, target: str) -> dict[str, list[str]]:
        return {m: sorted(t for t in ts if t.startswith(target))
                for m, ts in graph.items() if m.startswith(prefix)
                and any(t.startswith(target) for t in ts)}

    assert reaching(canonical, queue_storage) == {}
    assert reaching(queue_storage, canonical) == {}


def test_only_awa_storage_reaches_into_an_engine():
    """``awa``, ``awa_ops`` and ``awa_tui`` get an engine from ``awa.storage`` (``open_engine``,
    ``read_engine_for``, ``rust_core_engine``; ``awa adopt`` through ``awa.storage.adopt``):
    outside ``awa/storage/`` no module imports an engine's package (docs/architecture.md §2)."""
    engines = ("awa.storage.canonical", "awa.storage.queue_storage", "awa.storage.rust_core")
    graph = import_graph(packages=("awa", "awa_ops", "awa_tui"))
    assert {"awa_ops.storage", "awa_tui.app", "awa.adopt"} <= set(graph)  # all three were read
    outside = {m: sorted(t for t in ts if t.startswith(engines)) for m, ts in graph.items()
               if m != "awa.storage" and not m.startswith("awa.storage.")}
    assert {m: t for m, t in outside.items() if t} == {}
