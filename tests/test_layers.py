"""The layering of DESIGN.md, read from the code's own imports (every `import`, lazy ones included):

    api ──> db ──> catalog ──> templates          kvtune (worker, CLI, demo) ──> db, tuner
    tuner ──> catalog, templates

`catalog`, `db` and `api` never import torch, triton or the tuner (the API is a JSON server);
nothing in `tuner` imports `db`, `api` or the app layer. And the size rules of the house: no module
over 500 lines, no function over 80 (templates' rendered kernels and tests excepted).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("catalog", "templates", "tuner", "db", "api", "kvtune")
# What each package may import of the others and of the GPU stack.
FORBIDDEN = {
    "catalog": {"torch", "triton", "numpy", "optuna", "tuner", "db", "api", "kvtune"},
    "templates": {"torch", "triton", "numpy", "optuna", "tuner", "db", "api", "kvtune", "catalog"},
    "db": {"torch", "triton", "numpy", "optuna", "tuner", "api", "kvtune"},
    "api": {"torch", "triton", "numpy", "optuna", "tuner", "kvtune"},
    "tuner": {"db", "api", "kvtune"},
}
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 80


def _modules(package: str) -> list[Path]:
    return sorted(p for p in (REPO / package).rglob("*.py") if "migrations" not in p.parts)


def _imported_roots(path: Path) -> set[str]:
    roots: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            roots |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            roots.add(node.module.split(".")[0])
    return roots


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_imports_run_one_way(package: str) -> None:
    bad = {str(p.relative_to(REPO)): sorted(_imported_roots(p) & FORBIDDEN[package]) for p in _modules(package)}
    assert {k: v for k, v in bad.items() if v} == {}


def test_no_module_over_500_lines_and_no_function_over_80() -> None:
    long_modules, long_functions = [], []
    for package in PACKAGES:
        for p in _modules(package):
            text = p.read_text()
            if text.count("\n") > MAX_MODULE_LINES:
                long_modules.append(f"{p.relative_to(REPO)}: {text.count(chr(10))}")
            for node in ast.walk(ast.parse(text)):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    n = node.end_lineno - node.lineno + 1
                    if n > MAX_FUNCTION_LINES:
                        long_functions.append(f"{p.relative_to(REPO)}:{node.name}: {n}")
    assert long_modules == [] and long_functions == []
