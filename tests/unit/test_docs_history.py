"""What the collection ships and what its users read speak of the current state.

Product files (plugins, roles, playbooks, templates) and user docs (docs/*.md outside docs/dev/,
README.md) name no work round, no seed and no DESIGN.md: a comment gives its reason, and the
measurement history lives in docs/dev/measurements.md. No test file is named after a seed: it is named
after what it tests. docs/performance.md stays a short user page, and the user pages together stay
under USER_DOCS_MAX_LINES.
"""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PRODUCT_DIRS = ("plugins", "roles", "playbooks", "templates")
PERFORMANCE_MAX_LINES = 200
USER_DOCS_MAX_LINES = 3000
SEED_NAME = re.compile(r"seed_?\d", re.IGNORECASE)

_ORDINALS = (
    "first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth|thirteenth|"
    "fourteenth|fifteenth|sixteenth|seventeenth|eighteenth|nineteenth|twentieth|"
    r"\d+(?:st|nd|rd|th)"
)
FORBIDDEN = {
    "a work round": re.compile(
        rf"\b(?:{_ORDINALS}|this|that|last|next|previous|earlier|later|each|every|\d+)\s+rounds?\b(?![- ]trips?\b)"
        r"|\brounds?\s+\d+\b",
        re.IGNORECASE,
    ),
    "DESIGN.md": re.compile(r"DESIGN\.md", re.IGNORECASE),
    "a seed": re.compile(r"\bseed(?:s|ed)?\b", re.IGNORECASE),
}


def _text_files(top):
    for path in sorted(top.rglob("*")):
        if not path.is_file() or "__pycache__" in path.parts or path.suffix in (".pyc", ".pyo"):
            continue
        try:
            yield path, path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue


def _checked_files():
    for name in PRODUCT_DIRS:
        top = ROOT / name
        if top.is_dir():
            yield from _text_files(top)
    for path in sorted((ROOT / "docs").glob("*.md")):
        yield path, path.read_text(encoding="utf-8")
    readme = ROOT / "README.md"
    yield readme, readme.read_text(encoding="utf-8")


def _findings(name, text):
    found = []
    for what, pattern in FORBIDDEN.items():
        for number, line in enumerate(text.splitlines(), 1):
            match = pattern.search(line)
            if match:
                found.append(f"{name}:{number}: {what} ({match.group(0)!r})")
    return found


def test_product_files_and_user_docs_name_no_round_seed_or_design_file():
    found = []
    for path, text in _checked_files():
        found.extend(_findings(path.relative_to(ROOT).as_posix(), text))
    assert not found, "give the reason or the current fact instead:\n" + "\n".join(found)


@pytest.mark.parametrize(
    "line",
    [
        "docs/performance.md, ninth round",
        "since the 13th round",
        "measured in round 4",
        "as this round showed",
        "pytest-benchmark, 3 rounds",
        "DESIGN.md section 3",
        "the user's seed 001",
        "a host seeded with the config",
    ],
)
def test_the_check_finds_history_wording(line):
    assert _findings("x", line)


@pytest.mark.parametrize(
    "line",
    [
        "one round trip to the apiserver",
        "would need a second round trip",
        "each round-trip",
        "the share rounds down to whole GPUs",
        "a background thread",
        "around 200 nodes",
        "docs/dev/measurements.md",
    ],
)
def test_the_check_lets_ordinary_words_through(line):
    assert not _findings("x", line)


def test_performance_page_is_short():
    lines = (ROOT / "docs" / "performance.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= PERFORMANCE_MAX_LINES, (
        f"docs/performance.md has {len(lines)} lines, at most {PERFORMANCE_MAX_LINES}: "
        "the measurement history goes to docs/dev/measurements.md"
    )


def test_no_test_file_is_named_after_a_seed():
    named = [
        p.relative_to(ROOT).as_posix()
        for p in sorted((ROOT / "tests").rglob("*.py"))
        if SEED_NAME.search(p.name)
    ]
    assert not named, f"name these after what they test: {named}"
    assert SEED_NAME.search("test_seed002_resource_gate.py") and not SEED_NAME.search(
        "test_extended_resource_gates.py"
    )


def test_the_user_pages_stay_short():
    pages = sorted((ROOT / "docs").glob("*.md"))
    total = sum(len(p.read_text(encoding="utf-8").splitlines()) for p in pages)
    assert total < USER_DOCS_MAX_LINES, (
        f"docs/*.md has {total} lines together, under {USER_DOCS_MAX_LINES} wanted: move developer material "
        "to docs/dev/, say once what is said twice, or link the page that holds it"
    )
