"""Loading the filter files imports none of their libraries (plugins/plugin_utils/lazy.py).

Ansible imports every file of plugins/filter/ to find one collection filter, in every worker process
that templates one, compiling collection code from source: a library imported at the top of a filter
file was paid by every task that named any gpusplit filter (docs/performance.md). Each check runs in
a fresh interpreter, where nothing of the collection is imported yet.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ansible_collections.gpusplit.k8s.plugins.plugin_utils import lazy as lazy_module

# the folder that holds ansible_collections/ (as the collection was imported: the checkout's link, or
# the collection layout)
COLLECTIONS = Path(lazy_module.__file__).parents[5]

PREFIX = "ansible_collections.gpusplit.k8s.plugins."

# what a fresh interpreter runs: load the filter files the way Ansible's loader does (each file's
# FilterModule().filters()), optionally call one filter, and print the collection modules imported
SCRIPT = textwrap.dedent(
    """
    import importlib, json, pkgutil, sys
    from ansible.utils.collection_loader._collection_finder import _AnsibleCollectionFinder
    _AnsibleCollectionFinder(paths=[sys.argv[1]])._install()
    package = importlib.import_module("ansible_collections.gpusplit.k8s.plugins.filter")
    found = {}
    for _, name, _ in pkgutil.iter_modules(package.__path__):
        module = importlib.import_module(package.__name__ + "." + name)
        found.update(module.FilterModule().filters())
    call = json.loads(sys.argv[2])
    if call:
        try:
            found[call[0]](*call[1:])
        except Exception as exc:
            print(json.dumps({"error": str(exc)}))
    print(json.dumps(sorted(m for m in sys.modules if m.startswith("ansible_collections.gpusplit"))))
    """
)


def imported_after(call=None):
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(COLLECTIONS), json.dumps(call or [])],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    return [json.loads(line) for line in out]


# the libraries behind the filters; none may be imported just because the filter files were loaded
LIBRARIES = (
    "module_utils._control_plane.gate_data",
    "module_utils._control_plane.health",
    "module_utils._split.planner",
    "module_utils._dra.names",
    "plugin_utils.admission_guard",
    "plugin_utils.guard_report",
    "plugin_utils.split_render",
    "plugin_utils.gpu_operator",
    "plugin_utils.fleet_drawing",
    "plugin_utils.fleet_outputs",
    "plugin_utils.host_files_render",
    "plugin_utils.resplit",
    "plugin_utils.workload_checks",
    "plugin_utils._dra.render",
)


def test_loading_the_filter_files_imports_no_library():
    (modules,) = imported_after()
    assert any(m.startswith(PREFIX + "filter.") for m in modules)
    assert [lib for lib in LIBRARIES if PREFIX + lib in modules] == []


def test_a_filter_imports_its_library_at_first_use():
    (modules,) = imported_after(["out_dir", "/srv/out"])
    assert PREFIX + "plugin_utils.output_dir" in modules
    assert PREFIX + "module_utils._control_plane.gate_data" not in modules


@pytest.mark.parametrize(
    ("call", "title"),
    [
        # a refusal type of a library not imported before the filter failed is still titled
        (["host_files", {"mode": "bogus"}], "gpusplit host share refused:"),
        (["gang_job", {"name": "x", "replicas": 0}], "gpusplit gang job refused:"),
    ],
)
def test_a_refusal_from_a_lazily_imported_library_is_titled(call, title):
    error, _ = imported_after(call)
    assert error["error"].startswith(title)
