"""The shape of plugins/ (docs/dev/architecture.md): which part may import which, and file sizes."""

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
        MU + "_host/host_files_record",
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
    assert part in ALLOWED, (
        f"{part}: a new part of plugins/ must be placed in docs/dev/architecture.md and here"
    )
    wrong = sorted(
        name
        for name in imported(path)
        if (target := collection_part(name))
        and target != part
        and target not in ALLOWED[part]
        and collection_file(name) not in ALLOWED[part]
    )
    assert not wrong, f"{path.relative_to(ROOT)} imports {wrong}, against docs/dev/architecture.md"


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
    assert not long, f"split these by concern (docs/dev/architecture.md): {long}"


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
    # code use belongs in plugin_utils/ (docs/dev/architecture.md)
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


# Files of one basename that may stand in more than one place under plugins/: the same role in parallel
# capability subpackages (each the names, the health or the report of its own capability), and the files a
# package needs. An action plugin and its module share a name because Ansible pairs them by it.
PARALLEL_BASENAMES = {
    "__init__.py": None,
    "names.py": {"module_utils/_dra", "module_utils/_k8s"},
    "health.py": {"module_utils/_control_plane", "module_utils/_gpu"},
    "report.py": {"module_utils/_diagnose", "module_utils/_dra"},
}


def test_no_two_plugin_files_share_a_basename():
    seen: dict[str, set[str]] = {}
    for path in PLUGINS.rglob("*"):
        if path.is_file() and path.suffix in (".py", ".yml", ".yaml") and "__pycache__" not in path.parts:
            seen.setdefault(path.name, set()).add(str(path.parent.relative_to(PLUGINS)))
    clashes = {}
    for name, folders in seen.items():
        if len(folders) < 2:
            continue
        allowed = PARALLEL_BASENAMES.get(name, set())
        if allowed is None or folders <= allowed:
            continue
        if folders == {"action", "modules"} and (PLUGINS / "modules" / name).with_suffix(".py").exists():
            continue
        clashes[name] = sorted(folders)
    assert clashes == {}, (
        f"plugins/ holds files of one name in several folders: {clashes}; name each after what it does "
        "(an action plugin and its module, and PARALLEL_BASENAMES, are the exceptions)"
    )


def test_the_host_unchanged_shortcut_lives_in_one_module():
    """The record gpu_host_files leaves on a host, its reading back and the comparison that skips an unchanged
    host are one module of module_utils; everything else calls it."""
    record = PLUGINS / "module_utils" / "_host" / "host_files_record.py"
    names = {n.name for n in ast.parse(record.read_text()).body if isinstance(n, ast.FunctionDef)}
    assert {"record", "read_state", "run_digest", "unchanged"} <= names
    for path in FILES:
        if path == record:
            continue
        text = path.read_text()
        assert "hashlib.sha256(json.dumps" not in text or "host" not in path.name, path
        assert '.get("intact")' not in text, f"{path.relative_to(ROOT)}: compares the host record itself"


# tests of a whole folder of plugins/ (every filter's docs, every module's API errors, ...), not of one file
FOLDER_WIDE_TESTS = {
    "filter": {"test_filter_docs.py", "test_lazy_imports.py", "test_refusals.py"},
    "modules": {"test_api_errors.py", "test_managed_host_pythons.py"},
    "module_utils/_control_plane": {"test_bad_input.py"},
}


def test_unit_tests_mirror_plugins():
    """tests/unit/plugins/<folder>/test_<file>[_<aspect>].py tests plugins/<folder>/<file>.py; a subpackage's
    tests may carry its name first (test_dra_names.py for _dra/names.py: pytest wants unique test file names)."""
    tests = ROOT / "tests" / "unit" / "plugins"
    strays = []
    for path in sorted(tests.rglob("test_*.py")):
        folder = path.parent.relative_to(tests)
        if path.name in FOLDER_WIDE_TESTS.get(folder.as_posix(), ()):
            continue
        stems = {p.stem.lstrip("_") for p in (PLUGINS / folder).glob("*.py") if p.name != "__init__.py"}
        prefix = folder.name.lstrip("_") + "_"
        name = path.stem[len("test_") :]
        names = {name, name[len(prefix) :] if name.startswith(prefix) else name}
        if not any(n == stem or n.startswith(stem + "_") for n in names for stem in stems):
            strays.append(str(path.relative_to(ROOT)))
    assert strays == [], f"unit tests that name no file of the plugins/ folder they mirror: {strays}"
