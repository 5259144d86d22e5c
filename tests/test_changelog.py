"""CHANGELOG.md keeps the Keep a Changelog shape: `[Unreleased]` first, then released versions newest first, each
with only the standard subsections, and the newest release is the version pyproject.toml declares."""

from __future__ import annotations

import itertools
import re
import tomllib
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHANGELOG = ROOT / "CHANGELOG.md"
ALLOWED_SUBSECTIONS = {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}
RELEASE = re.compile(r"^## \[(\d+)\.(\d+)\.(\d+)\] - (\d{4}-\d{2}-\d{2})$")


def _sections() -> list[tuple[str, list[str]]]:
    """Each `## ` heading with the `### ` headings under it, in file order."""
    sections: list[tuple[str, list[str]]] = []
    for line in CHANGELOG.read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            sections.append((line, []))
        elif line.startswith("### "):
            assert sections, f"subsection before any version heading: {line!r}"
            sections[-1][1].append(line[4:].strip())
    return sections


def _releases() -> list[tuple[tuple[int, int, int], date]]:
    releases = []
    for heading, _ in _sections()[1:]:
        m = RELEASE.match(heading)
        assert m, f"not a release heading `## [x.y.z] - YYYY-MM-DD`: {heading!r}"
        releases.append(((int(m[1]), int(m[2]), int(m[3])), date.fromisoformat(m[4])))
    return releases


def test_unreleased_comes_first_then_at_least_one_release() -> None:
    sections = _sections()
    assert sections[0][0] == "## [Unreleased]"
    assert len(sections) >= 2


def test_newest_release_is_the_package_version() -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
    newest, _ = _releases()[0]
    assert ".".join(map(str, newest)) == version


def test_every_section_has_only_the_standard_subsections() -> None:
    for heading, subsections in _sections():
        unknown = [s for s in subsections if s not in ALLOWED_SUBSECTIONS]
        assert not unknown, f"{heading}: subsections {unknown} (allowed: {sorted(ALLOWED_SUBSECTIONS)})"
        assert len(subsections) == len(set(subsections)), f"{heading}: a subsection repeats: {subsections}"


def test_releases_are_newest_first() -> None:
    releases = _releases()
    for (newer, newer_date), (older, older_date) in itertools.pairwise(releases):
        assert newer > older, f"{newer} listed above {older}"
        assert newer_date >= older_date, f"{newer} dated {newer_date}, before {older} ({older_date})"
