"""The decisions' folder stays a register a reader can trust: every decision is listed in the
index under its area, its number is its own, and it says its status first."""

from __future__ import annotations

import re
from pathlib import Path

DECISIONS = Path(__file__).resolve().parent.parent / "docs" / "decisions"
FILES = sorted(p for p in DECISIONS.glob("[0-9][0-9][0-9]-*.md"))


def test_every_decision_is_in_the_index() -> None:
    index = (DECISIONS / "README.md").read_text()
    links = re.findall(r"\]\(([0-9]{3}-[^)]+\.md)\)", index)
    listed = set(links)
    assert len(links) == len(listed), "the index lists a decision twice"
    missing = [p.name for p in FILES if p.name not in listed]
    assert missing == [], f"list these in docs/decisions/README.md: {missing}"
    assert listed <= {p.name for p in FILES}, "the index names a decision that has no file"


def test_each_decision_has_its_own_number_and_says_its_status_first() -> None:
    numbers = [p.name[:3] for p in FILES]
    assert len(numbers) == len(set(numbers)), "two decisions share a number"
    for path in FILES:
        lines = [line for line in path.read_text().splitlines() if line.strip()]
        assert lines[0].startswith(f"# {int(path.name[:3]):03d}. "), path.name
        assert lines[1].startswith("Status: "), path.name
