"""The folder layout is the architecture: the core does not know the front-ends, nothing
imports the composition root, and no module imports itself through others."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).parents[1]
PACKAGES = ("gateway", "adapters")
# The composition root: the gateway process (`app`) and the command that starts it (`cli`,
# also run as `python -m gateway`).
# They are the only modules that import both the core and the front-ends.
COMPOSITION_ROOT = {"gateway.app", "gateway.cli", "gateway.__main__"}
PLATFORM_LIBRARIES = {"discord", "telegram", "aiohttp"}
MAX_LINES = 400


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_modules() -> dict[str, Path]:
    return {
        module_name(path): path
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        if "migrations" not in path.parts
    }


def imported_modules(path: Path, name: str) -> set[str]:
    """Every module `path` imports, anywhere in it (functions and TYPE_CHECKING included)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def project_graph() -> dict[str, set[str]]:
    modules = project_modules()
    return {
        name: {m for m in imported_modules(path, name) if m in modules and m != name}
        for name, path in modules.items()
    }


def test_core_does_not_import_adapters() -> None:
    offenders = [
        f"{name} -> {target}"
        for name, targets in project_graph().items()
        if name.startswith("gateway") and name not in COMPOSITION_ROOT
        for target in targets
        if target.startswith("adapters")
    ]
    assert offenders == []


def test_nothing_imports_the_composition_root() -> None:
    offenders = [
        f"{name} -> {target}"
        for name, targets in project_graph().items()
        if name not in COMPOSITION_ROOT
        for target in targets & COMPOSITION_ROOT
    ]
    assert offenders == []


def test_core_does_not_import_platform_libraries() -> None:
    offenders = []
    for name, path in project_modules().items():
        if not name.startswith("gateway"):
            continue
        # Agents (and the embedder, gateway.memory) talk HTTP to model providers, and knowledge
        # fetches an attached document's URL once; that is not a front-end.
        providers = ("gateway.agents", "gateway.memory.embedders", "gateway.knowledge.fetch")
        allowed = {"aiohttp"} if name.startswith(providers) else set()
        for module in imported_modules(path, name):
            if module.split(".")[0] in PLATFORM_LIBRARIES - allowed:
                offenders.append(f"{name}: {module}")
    assert offenders == []


def find_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import cycle of `graph`, as the modules along it; empty when there is none."""
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                return [*path[path.index(target) :], target]
            if target not in state and (cycle := visit(target)):
                return cycle
        path.pop()
        state[node] = 2
        return []

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return []


def test_no_import_cycles() -> None:
    assert find_cycle(project_graph()) == []


def test_the_cycle_finder_finds_cycles() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) == []


def test_modules_stay_small() -> None:
    """One concept per module: past ~400 lines a module usually holds two."""
    big = {
        name
        for name, path in project_modules().items()
        if len(path.read_text().splitlines()) > MAX_LINES
    }
    assert big == set()


def test_the_layout_page_lists_every_module() -> None:
    layout = (ROOT / "docs" / "layout.md").read_text()
    tree = layout[layout.index("```\ngateway/") :]
    tree = tree[: tree.index("```", 4)]
    # Each module on a line of its own, under its package: `name.py` or `package/name.py`.
    listed: set[str] = set()
    package: list[str] = []
    for line in tree.splitlines()[1:]:
        indent = (len(line) - len(line.lstrip())) // 2
        entry = line.strip().split()[0] if line.strip() else ""
        if entry.endswith("/"):
            package = [*package[:indent], entry.rstrip("/")]
        elif entry.endswith(".py"):
            listed.add("/".join([*package[:indent], entry]))
    modules = {
        path.relative_to(ROOT).as_posix()
        for name, path in project_modules().items()
        if path.name != "__init__.py"
    }
    assert modules - listed == set(), "modules docs/layout.md does not list"
    assert listed - modules == set(), "modules docs/layout.md lists that do not exist"
