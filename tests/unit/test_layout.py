"""The shape of plugins/ (docs/architecture.md): which part may import which, and file sizes."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PLUGINS = ROOT / "plugins"
PREFIX = "ansible_collections.gpusplit.k8s.plugins."

# part -> the parts it may import (besides itself); a part is module_utils/<subpackage or file>,
# plugin_utils (with its private subpackages such as _dra/), modules, filter, doc_fragments.
# plugin_utils may import module_utils, never the other way round. One file of a part may be
# allowed alone (module_utils/<subpackage>/<file>): the control plane reads and writes its files
# with the host's file layer (_host/files.py), and nothing else of _host.
MU = "module_utils/"
ALLOWED = {
    MU + "_errors": set(),
    MU + "_k8s": {MU + "_errors"},
    # the discovery's work (facts.py) reads who holds the GPUs and the host's record in the same call
    MU + "_gpu": {
        MU + "_errors",
        MU + "_kubelet",
        MU + "_host/host_state",
    },
    MU + "_host": {MU + "_errors"},
    # the kubelet's APIs on a node (pod-resources over gRPC on its unix socket)
    MU + "_kubelet": {MU + "_errors"},
    MU + "_split": {MU + "_errors", MU + "_gpu", MU + "_k8s"},
    MU + "_dra": {MU + "_errors", MU + "_k8s", MU + "_split"},
    MU + "_control_plane": {MU + "_errors", MU + "_k8s", MU + "_host/files"},
    MU + "_diagnose": {MU + "_errors", MU + "_k8s"},
    MU + "_out": {MU + "_errors"},
}
MODULE_UTILS_PARTS = set(ALLOWED)
ALLOWED["plugin_utils"] = MODULE_UTILS_PARTS
ALLOWED["modules"] = MODULE_UTILS_PARTS
# an action plugin does a module's work on the controller with the same module_utils function, or prepares the
# module's arguments there before ansible-core runs the module
ALLOWED["action"] = MODULE_UTILS_PARTS | {"plugin_utils"}
ALLOWED["filter"] = MODULE_UTILS_PARTS | {"plugin_utils"}
ALLOWED["doc_fragments"] = set()
# generated data may be longer
GENERATED = {PLUGINS / "module_utils" / "_control_plane" / "gate_data.py"}
MAX_LINES = 650


def part_of(path: Path) -> str:
    rel = path.relative_to(PLUGINS).parts
    if rel[0] == "module_utils":
        return MU + rel[1].removesuffix(".py")
    return rel[0]


def imported(path: Path) -> set[str]:
    """Every module name the file imports, at any depth (function-level imports count too)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
    return names


def collection_part(name: str) -> str | None:
    if not name.startswith(PREFIX):
        return None
    rest = name[len(PREFIX) :].split(".")
    if rest[0] == "module_utils" and len(rest) > 1:
        return MU + rest[1]
    return rest[0]


def collection_file(name: str) -> str | None:
    """``module_utils/<subpackage>/<file>`` for a name inside a module_utils subpackage, else None."""
    rest = name[len(PREFIX) :].split(".") if name.startswith(PREFIX) else []
    return MU + "/".join(rest[1:3]) if rest[:1] == ["module_utils"] and len(rest) > 2 else None


FILES = sorted(p for p in PLUGINS.rglob("*.py") if p.name != "__init__.py")


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(PLUGINS)))
def test_imports_follow_the_layers(path):
    part = part_of(path)
    assert part in ALLOWED, f"{part}: a new part of plugins/ must be placed in docs/architecture.md and here"
    wrong = sorted(
        name
        for name in imported(path)
        if (target := collection_part(name))
        and target != part
        and target not in ALLOWED[part]
        and collection_file(name) not in ALLOWED[part]
    )
    assert not wrong, f"{path.relative_to(ROOT)} imports {wrong}, against docs/architecture.md"


@pytest.mark.parametrize(
    "path", [p for p in FILES if part_of(p) in MODULE_UTILS_PARTS], ids=lambda p: str(p.relative_to(PLUGINS))
)
def test_module_utils_needs_no_controller_library(path):
    # what AnsiballZ ships to a host: ansible.module_utils, never the controller's ansible or Jinja2
    controller = sorted(
        name
        for name in imported(path)
        if name.split(".")[0] == "jinja2"
        or (name.split(".")[0] == "ansible" and not name.startswith("ansible.module_utils"))
    )
    assert not controller, f"{path.relative_to(ROOT)} imports {controller}"


def test_no_file_is_too_long():
    long = {
        str(p.relative_to(ROOT)): n
        for p in FILES
        if p not in GENERATED and (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert not long, f"split these by concern (docs/architecture.md): {long}"


def test_private_subpackages_say_so():
    for path in FILES:
        private = part_of(path).startswith(MU + "_") or path.parent.name.startswith("_")
        if private and path.name != "_errors.py":
            head = path.read_text()[:2000]
            assert "Private to the collection" in head, (
                f"{path.relative_to(ROOT)}: docstring must say it is private"
            )


def module_file(name: str) -> Path | None:
    if not name.startswith(PREFIX):
        return None
    path = PLUGINS.joinpath(*name[len(PREFIX) :].split("."))
    if path.with_suffix(".py").is_file():
        return path.with_suffix(".py")
    return path / "__init__.py" if (path / "__init__.py").is_file() else None


def reached_from_modules() -> set[Path]:
    """Every file the modules import, directly or through other files."""
    todo = sorted((PLUGINS / "modules").glob("*.py"))
    reached = set()
    while todo:
        path = todo.pop()
        if path in reached:
            continue
        reached.add(path)
        todo.extend(f for f in map(module_file, imported(path)) if f is not None and f not in reached)
    return reached


MODULES_REACH = reached_from_modules()


@pytest.mark.parametrize(
    "path", [p for p in FILES if part_of(p) in MODULE_UTILS_PARTS], ids=lambda p: str(p.relative_to(PLUGINS))
)
def test_module_utils_holds_only_what_modules_use(path):
    # AnsiballZ ships module_utils to managed hosts: code that only filters or other controller
    # code use belongs in plugin_utils/ (docs/architecture.md)
    assert path in MODULES_REACH, (
        f"{path.relative_to(ROOT)}: no module imports it, directly or through module_utils; "
        "move it to plugins/plugin_utils/"
    )


def test_test_file_names_are_unique():
    """pytest imports test files by basename (the test folders are not packages): two files of one
    name make the second fail to collect, so a unit test must not share its name with another."""
    seen: dict[str, list[str]] = {}
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        seen.setdefault(path.name, []).append(str(path.relative_to(ROOT)))
    assert {name: paths for name, paths in seen.items() if len(paths) > 1} == {}
