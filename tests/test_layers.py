"""The package layers of docs/architecture.md, checked on the imports themselves: nothing below the command line
imports it, and the domain model imports nothing of the project but itself."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROJECT = ("models", "lakehouse", "collectors", "pipelines", "engine", "services", "simulator", "kafkalab", "conf",
           "jobs", "zkledger", "benchmarks", "tests")

# package -> the project packages it may import (docs/architecture.md's table)
ALLOWED: dict[str, set[str]] = {
    "models": {"models"},
    "conf": {"conf"},
    "lakehouse": {"lakehouse", "models"},
    "services": {"services", "models", "lakehouse", "pipelines", "conf"},
    "collectors": {"collectors", "models", "lakehouse", "services", "conf"},
    "simulator": {"simulator", "models", "lakehouse", "services", "collectors", "conf"},
    "pipelines": {"pipelines", "models", "lakehouse"},
    "engine": {"engine", "models", "lakehouse", "pipelines", "services", "conf"},
    "kafkalab": {"kafkalab", "models", "lakehouse", "pipelines", "services", "collectors", "conf", "simulator"},
    "jobs": {"jobs", "zkledger"},
}


def _imported_packages(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names & set(PROJECT)


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_package_imports_only_the_layers_below(package: str) -> None:
    wrong = {str(path.relative_to(ROOT)): sorted(_imported_packages(path) - ALLOWED[package])
             for path in sorted((ROOT / package).rglob("*.py"))}
    assert {k: v for k, v in wrong.items() if v} == {}
