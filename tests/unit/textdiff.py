"""What the text-editing tests compare: the lines an edit removed and added."""

from __future__ import annotations

import difflib


def changed_lines(before: str, after: str) -> tuple[list[str], list[str]]:
    """(removed lines, added lines) between two texts."""
    removed, added = [], []
    for line in difflib.ndiff(before.splitlines(keepends=True), after.splitlines(keepends=True)):
        if line.startswith("- "):
            removed.append(line[2:])
        elif line.startswith("+ "):
            added.append(line[2:])
    return removed, added
