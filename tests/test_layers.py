"""The import graph of the project's packages keeps one direction.

routines_app, messaging_app → agent → knowledge_app → tools_app → memory_app → notify_app → voice_app → sessions_app →
jobs_app → navi_project (settings, shared helpers): a
package imports only those to its right. The one arrow running back up is the wiring
(navi_project's urls, asgi and serve import the apps they serve). No circle of files — counting
type-only (TYPE_CHECKING) and function-level imports too — and no import placed inside a function
except where Django requires it (AppConfig.ready).

Inside agent/ the rooms keep the same rule among themselves (AGENT_ROOMS, top to bottom); Django's
files (admin, apps, management) are agent's wiring and may import any room.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ORDER = ["routines_app", "messaging_app", "agent", "knowledge_app", "tools_app", "memory_app", "notify_app", "voice_app",
         "sessions_app", "jobs_app", "navi_project"]
WIRING = {"navi_project.urls", "navi_project.asgi", "navi_project.wsgi", "navi_project.serve"}
# agent/'s rooms, top to bottom: a room imports only the rooms after it. Every module of agent/
# belongs to one; registry (the composition root) and agent_tools are the two left directly in agent/.
AGENT_ROOMS = ["agent.web", "agent.memory", "agent.runs", "agent.registry", "agent.agent_tools", "agent.turn",
               "agent.toolcalling", "agent.trust", "agent.context", "agent.frames", "agent.llm", "agent.models"]
AGENT_WIRING = ["agent.admin", "agent.apps", "agent.management"]
# Function-level imports of project modules that are not about circles, with the reason.
LATE_IMPORTS_ALLOWED = {
    ("sessions_app.bodylimit", "sessions_app.auth"): "navi_project.serve imports bodylimit before apps are ready",
}


def _modules() -> dict[str, Path]:
    found = {}
    for package in ORDER:
        for path in (ROOT / package).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


MODULES = _modules()


def _resolve(name: str) -> str | None:
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _targets(module: str, path: Path, node: ast.Import | ast.ImportFrom) -> list[str]:
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:
            package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
            package = package[: len(package) - node.level + 1]
            base = ".".join(package + ([base] if base else []))
        names = [f"{base}.{alias.name}" if _resolve(f"{base}.{alias.name}") == f"{base}.{alias.name}" else base
                 for alias in node.names]
    return [r for r in map(_resolve, names) if r and r != module and r.split(".")[0] in ORDER]


def _imports() -> list[tuple[str, str, str]]:
    """(importer, imported, where) for every project import; where = "module", "ready",
    "type-checking" or "function"."""
    out = []

    def walk(module: str, path: Path, node: ast.AST, where: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = where
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) and where == "module":
                inner = "ready" if child.name == "ready" and module.endswith(".apps") else "function"
            elif isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                inner = "type-checking"
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                out.extend((module, target, inner) for target in _targets(module, path, child))
            walk(module, path, child, inner)

    for module, path in MODULES.items():
        walk(module, path, ast.parse(path.read_text(encoding="utf-8")), "module")
    return out


IMPORTS = _imports()


def _rank(module: str) -> int:
    return ORDER.index(module.split(".")[0])


def test_packages_only_import_the_packages_below_them():
    upward = sorted(
        (a, b) for a, b, where in IMPORTS if where != "type-checking" and _rank(b) < _rank(a) and a not in WIRING
    )
    assert upward == []


def test_the_wiring_is_the_one_arrow_back_up():
    arrows = {(a.split(".")[0], b.split(".")[0]) for a, b, _ in IMPORTS if _rank(b) < _rank(a)}
    assert {a for a, _ in arrows} <= {"navi_project"}


def _room(module: str) -> str | None:
    for room in AGENT_ROOMS + AGENT_WIRING:
        if module == room or module.startswith(room + "."):
            return room
    return None


def test_every_module_of_agent_is_in_a_room():
    homeless = sorted(m for m in MODULES if m.startswith("agent.") and _room(m) is None)
    assert homeless == []
    # agent/ holds rooms: beside Django's own files, only the two modules that were there before the
    # rooms (the composition root and the agent's own tools); a new module goes into a room.
    loose = {p.stem for p in (ROOT / "agent").glob("*.py")}
    assert loose <= {"__init__", "models", "admin", "apps", "registry", "agent_tools"}


def test_rooms_of_agent_only_import_the_rooms_below_them():
    upward = sorted(
        (a, b) for a, b, where in IMPORTS
        if where != "type-checking" and a.startswith("agent") and b.startswith("agent.")
        and _room(a) in AGENT_ROOMS and _room(b) in AGENT_ROOMS
        and AGENT_ROOMS.index(_room(b)) < AGENT_ROOMS.index(_room(a))
    )
    assert upward == []


def test_no_room_of_agent_imports_its_wiring():
    assert sorted((a, b) for a, b, _ in IMPORTS if _room(a) in AGENT_ROOMS and _room(b) in AGENT_WIRING) == []


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The groups of files that import each other, directly or round a circle (Tarjan's strongly
    connected components of more than one file, or a file that imports itself)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while (top := stack.pop()) != node:
                group.append(top)
            group.append(node)
            if len(group) > 1 or node in graph.get(node, ()):
                found.append(sorted(group))

    for start in sorted(graph):
        if start not in index:
            visit(start)
    return found


def test_no_circle_of_files():
    """Every import counts, wherever it is placed: a type-only (TYPE_CHECKING) import or one inside a
    function still ties the two files together; placing it there only hides the circle from Python."""
    graph: dict[str, set[str]] = {}
    for a, b, _ in IMPORTS:
        graph.setdefault(a, set()).add(b)
    assert _circles(graph) == []


def test_the_circle_finder_finds_a_circle_round_three_files():
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _circles({"a": {"b"}, "b": set()}) == []


def test_imports_inside_functions_are_only_where_django_needs_them():
    late = sorted({(a, b) for a, b, where in IMPORTS if where == "function"} - set(LATE_IMPORTS_ALLOWED))
    assert late == []
