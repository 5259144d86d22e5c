"""Docs that say what is: the README's performance table is the one `benchmarks.readme_table` generates from
the results files, and every results file records how its figures were made."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks import readme_table

ROOT = Path(__file__).resolve().parents[1]


def test_readme_performance_table_is_the_generated_one() -> None:
    readme = (ROOT / "README.md").read_text()
    assert readme_table.current_table(readme) == readme_table.table(), (
        "README.md's performance table differs from benchmarks/results: run `python -m benchmarks.readme_table "
        "--write`")


def test_every_results_file_records_command_machine_and_date() -> None:
    for path in sorted((ROOT / "benchmarks" / "results").glob("*.json")):
        result = json.loads(path.read_text())
        machine = result.get("machine", {})
        assert str(result.get("command", "")).startswith("python -m benchmarks."), path.name
        assert str(result.get("date", ""))[:4].isdigit(), path.name
        assert {"nproc", "memory_gib", "load_avg_1m"} <= machine.keys(), path.name


def test_write_replaces_only_the_table_between_the_markers() -> None:
    text = f"intro\n{readme_table.BEGIN}\nold | table\n{readme_table.END}\nafter\n"
    replaced = readme_table.replace_table(text, "| new |")
    assert replaced == f"intro\n{readme_table.BEGIN}\n| new |\n{readme_table.END}\nafter\n"
    assert readme_table.current_table(replaced) == "| new |"
