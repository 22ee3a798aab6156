"""The folder layout is the architecture: the core does not know the front-ends."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).parents[1]
# The composition root and the command line wire the core to the adapters; nothing else may.
WIRING = {"gateway/app.py", "gateway/cli.py"}


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def test_core_does_not_import_adapters() -> None:
    offenders = []
    for path in sorted((ROOT / "gateway").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel in WIRING:
            continue
        if any(m == "adapters" or m.startswith("adapters.") for m in imported_modules(path)):
            offenders.append(rel)
    assert offenders == []


def test_core_does_not_import_platform_libraries() -> None:
    platform_libs = ("discord", "telegram", "aiohttp")
    offenders = []
    for path in sorted((ROOT / "gateway").rglob("*.py")):
        # Agents talk HTTP to model providers; that is not a front-end.
        allowed = {"aiohttp"} if path.parent.name == "agents" else set()
        for module in imported_modules(path):
            if module.split(".")[0] in set(platform_libs) - allowed:
                offenders.append(f"{path.relative_to(ROOT)}: {module}")
    assert offenders == []
