"""Our modules import each other one way: no cycle among the imports that run at import time."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("bot", "channels")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(node: ast.stmt, module: str, is_package: bool) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom):
        if node.level:
            base = module.split(".")
            base = base[: len(base) - node.level + (1 if is_package else 0)]
            prefix = ".".join(base + ([node.module] if node.module else []))
        else:
            prefix = node.module or ""
        return [prefix] + [f"{prefix}.{alias.name}" for alias in node.names]
    return []


def _top_level_statements(body: list[ast.stmt]) -> list[ast.stmt]:
    """The statements that run when the module is imported (not `if TYPE_CHECKING:` blocks)."""
    found: list[ast.stmt] = []
    for node in body:
        if isinstance(node, ast.If):
            test = ast.unparse(node.test)
            if test.endswith("TYPE_CHECKING"):
                found.extend(_top_level_statements(node.orelse))
                continue
            found.extend(_top_level_statements(node.body + node.orelse))
        elif isinstance(node, ast.Try):
            found.extend(_top_level_statements(node.body + node.orelse + node.finalbody))
            for handler in node.handlers:
                found.extend(_top_level_statements(handler.body))
        else:
            found.append(node)
    return found


def _graph(*, everywhere: bool = False) -> dict[str, set[str]]:
    files = [path for package in PACKAGES for path in (ROOT / package).rglob("*.py")]
    modules = {_module_name(path): path for path in files}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        nodes = list(ast.walk(tree)) if everywhere else _top_level_statements(tree.body)
        targets: set[str] = set()
        for node in nodes:
            if isinstance(node, ast.stmt):
                for imported in _imported(node, name, path.name == "__init__.py"):
                    if imported in modules and imported != name:
                        targets.add(imported)
        graph[name] = targets
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == 1:
                return [*stack[stack.index(target):], target]
            if target not in state and (found := visit(target)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_no_import_cycle_between_our_modules() -> None:
    """No chain of import-time imports in bot/ and channels/ leads back to where it started."""
    assert _cycle(_graph()) is None


def test_the_packages_import_down_the_pipeline_only() -> None:
    """The import contract in pyproject.toml (core < config < … < daemon < cli) holds for every import,
    inside functions and under TYPE_CHECKING too: `make lint` runs the same check."""
    lint = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run([str(lint), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]


def test_no_module_of_ours_is_over_400_lines() -> None:
    """Every module in bot/ and channels/ stays under ~400 lines (one concept each). The migration
    histories (SQLite's and PostgreSQL's) are SQL kept append-only: one concept however long they
    grow, so they are not counted."""
    root = Path(__file__).resolve().parents[1]
    histories = {root / "bot" / "store" / "migrations.py", root / "bot" / "store" / "pg_migrations.py"}
    modules = [p for p in (*root.glob("bot/**/*.py"), *root.glob("channels/**/*.py")) if p not in histories]
    long = {str(path.relative_to(root)): n for path in modules
            if (n := len(path.read_text(encoding="utf-8").splitlines())) > 400}
    assert long == {}
