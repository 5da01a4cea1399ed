"""Every filter of the collection is documented: `ansible-doc -t filter gpusplit.k8s.<name>` renders it.

The filters are the names the FilterModules of plugins/filter/*.py expose. Each has a sidecar
plugins/filter/<name>.yml (DOCUMENTATION, EXAMPLES, RETURN) whose options are the filter's
arguments, and no name carries the old ``gpusplit_`` prefix (the namespace already says gpusplit).
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[4]
FILTER_DIR = ROOT / "plugins" / "filter"
BIN = Path(sys.executable).parent
NAMESPACE = "gpusplit.k8s"


def exposed_filters() -> dict:
    """{filter name: function} over every FilterModule of plugins/filter/."""
    found = {}
    for path in sorted(FILTER_DIR.glob("*.py")):
        module = importlib.import_module(f"ansible_collections.gpusplit.k8s.plugins.filter.{path.stem}")
        for name, func in module.FilterModule().filters().items():
            assert name not in found, f"filter {name} is exposed by two files"
            found[name] = func
    return found


FILTERS = exposed_filters()


@pytest.fixture(scope="module")
def rendered() -> dict:
    """`ansible-doc -t filter --json` for every filter at once: {fully qualified name: doc}."""
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    done = subprocess.run(
        [str(BIN / "ansible-doc"), "-t", "filter", "--json", *(f"{NAMESPACE}.{n}" for n in sorted(FILTERS))],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def test_the_collection_exposes_filters():
    # the public filters are those a user calls in a playbook of their own: at most 20 (issue 47); what the roles
    # compute besides is private controller code behind the action role_step
    assert 15 <= len(FILTERS) <= 20
    assert "node_plan" in FILTERS and "gpu_table" in FILTERS


def test_no_filter_name_carries_the_old_prefix():
    assert sorted(n for n in FILTERS if n.startswith("gpusplit_")) == []


def test_every_filter_has_a_sidecar_and_every_sidecar_a_filter():
    sidecars = {p.stem for p in FILTER_DIR.glob("*.yml")}
    assert sorted(set(FILTERS) - sidecars) == [], "filters without plugins/filter/<name>.yml"
    assert sorted(sidecars - set(FILTERS)) == [], "plugins/filter/<name>.yml without a filter"


def test_ansible_doc_renders_every_filter(rendered):
    missing = sorted(n for n in FILTERS if f"{NAMESPACE}.{n}" not in rendered)
    assert missing == [], "ansible-doc found no documentation"
    for name in sorted(FILTERS):
        entry = rendered[f"{NAMESPACE}.{name}"]
        doc = entry.get("doc") or {}
        assert doc.get("name") == name, name
        assert doc.get("short_description"), name
        assert doc.get("description"), name
        assert doc.get("version_added") == "0.1.0", name
        assert "_input" in (doc.get("options") or {}), name
        assert (entry.get("examples") or "").strip(), f"{name}: no EXAMPLES"
        assert f"{NAMESPACE}.{name}" in entry["examples"], f"{name}: EXAMPLES do not use the filter"
        value = (entry.get("return") or {}).get("_value") or {}
        assert value.get("type") and value.get("description"), (
            f"{name}: RETURN _value needs type and description"
        )


def test_every_filter_the_project_uses_exists():
    """Roles, playbooks, molecule, templates, docs and module EXAMPLES call only filters that exist."""
    used = {}
    for top in ("roles", "playbooks", "molecule", "templates", "docs", "inventory", "plugins"):
        for path in (ROOT / top).rglob("*"):
            if path.suffix not in (".yml", ".yaml", ".j2", ".md", ".py") or not path.is_file():
                continue
            for name in re.findall(r"\|\s*gpusplit\.k8s\.(\w+)", path.read_text()):
                used.setdefault(name, path.relative_to(ROOT).as_posix())
    for path in (ROOT / "README.md",):
        for name in re.findall(r"\|\s*gpusplit\.k8s\.(\w+)", path.read_text()):
            used.setdefault(name, "README.md")
    assert len(used) > 10
    assert {n: f for n, f in used.items() if n not in FILTERS} == {}


@pytest.mark.parametrize("name", sorted(FILTERS))
def test_documented_options_are_the_filter_arguments(name):
    """_input is the first argument; every other argument is an option of that name, and nothing else."""
    doc = yaml.safe_load((FILTER_DIR / f"{name}.yml").read_text())
    params = list(inspect.signature(FILTERS[name]).parameters)
    assert set(doc["DOCUMENTATION"]["options"]) == {"_input", *params[1:]}
    yaml.safe_load(doc["EXAMPLES"])
