"""The changelog fragments read like the changelogs users know from other collections.

- one line per change, under 200 characters; no "round" of work;
- a first release has no breaking changes or bugfixes against itself: no such section before a
  version is released;
- every role and playbook of the collection is announced (`add object.role`, `add object.playbook`);
- CHANGELOG.md is only what `make release` writes: no fragment text is kept in it by hand.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
FRAGMENTS = ROOT / "changelogs" / "fragments"
# written while their changes are under way; made to read like the others before the release
UNDER_WAY: set[str] = set()
ROUND = re.compile(r"\b(first|second|third|[a-z]+th|\d+(st|nd|rd|th))\s+round\b|\bround\s+\d+\b", re.I)


def fragments():
    return {p.name: yaml.safe_load(p.read_text()) for p in sorted(FRAGMENTS.glob("*.yml"))}


def released():
    return bool(yaml.safe_load((ROOT / "changelogs" / "changelog.yaml").read_text())["releases"])


def test_every_entry_is_one_short_line():
    for name, sections in fragments().items():
        if name in UNDER_WAY:
            continue
        for section, entries in sections.items():
            if section.startswith("add ") or section == "release_summary":
                continue
            for entry in entries:
                assert "\n" not in entry.strip() and len(entry) < 200, f"{name} {section}: {entry}"


def test_no_work_rounds_in_the_changelog():
    texts = {p.name: p.read_text() for p in FRAGMENTS.glob("*.yml")}
    texts["CHANGELOG.md"] = (ROOT / "CHANGELOG.md").read_text()
    texts["changelog.yaml"] = (ROOT / "changelogs" / "changelog.yaml").read_text()
    for name, text in texts.items():
        assert not ROUND.search(text), f"{name}: {ROUND.search(text).group(0)}"


def test_a_first_release_has_no_breaking_changes_or_bugfixes():
    if released():
        return
    for name, sections in fragments().items():
        assert not {"breaking_changes", "bugfixes"} & set(sections), name


def test_every_role_and_playbook_is_announced():
    announced = {"role": set(), "playbook": set()}
    for sections in fragments().values():
        for kind in announced:
            announced[kind] |= {entry["name"] for entry in sections.get(f"add object.{kind}", [])}
    if released():
        for release in yaml.safe_load((ROOT / "changelogs" / "changelog.yaml").read_text())[
            "releases"
        ].values():
            for kind in announced:
                announced[kind] |= {entry["name"] for entry in release.get("objects", {}).get(kind, [])}
    assert announced["role"] == {p.name for p in (ROOT / "roles").iterdir() if p.is_dir()}
    assert announced["playbook"] == {p.stem for p in (ROOT / "playbooks").glob("*.yml")}


def test_the_changelog_is_what_a_release_writes():
    text = (ROOT / "CHANGELOG.md").read_text()
    if released():
        assert text.startswith("# gpusplit\\.k8s Release Notes"), "CHANGELOG.md is written by make release"
    else:
        assert "No version has been released yet." in text and "make release" in text
        assert len(text.splitlines()) < 20


def test_the_round_pattern():
    assert ROUND.search("the tenth round") and ROUND.search("round 3") and ROUND.search("19th round")
    assert not ROUND.search("a round trip") and not ROUND.search("rounded down to one host")
