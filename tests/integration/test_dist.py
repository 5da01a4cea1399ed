"""The built tarball, installed the way users install it, run against the lab from outside the checkout.

`make dist` builds the tarball; `ansible-galaxy collection install` puts it into an empty
collections path; from a folder outside the checkout, with no ansible.cfg, the demo's playbooks
run by their collection names (`ansible-playbook gpusplit.k8s.site ...`) against the lab
inventory, and ansible-doc renders every module, role and filter of that install.

Then job slicing by --limit (docs/awx.md): two slices of the lab inventory, one after the other,
each planning only its hosts; the second keeps the first's DaemonSets and verify.yml ends with
every node OK. And AWX's slicing (each slice's inventory holds only its hosts) with
gpusplit_prune_scope=plan: a slice leaves the other slice's DaemonSets and labels alone.

The lab inventory derives gpusplit_lab_root from playbook_dir, which for an installed collection's
playbook is the install, so the run passes the checkout as gpusplit_lab_root (the fakes, fixtures
and lab state live there) and a scratch gpusplit_out_dir.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
INVENTORY = ROOT / "inventory" / "lab"
PLUGIN_SELECTOR = "app.kubernetes.io/managed-by=gpusplit,app.kubernetes.io/name=gpusplit-device-plugin"
SLICES = (["lab-dgx-01", "lab-ws-01", "lab-ssh-01"], ["lab-h200-01", "lab-hgx-lost-01", "lab-a100-01"])


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict:
    """The tarball built and installed into an empty collections path; a working folder outside the checkout."""
    dist = tmp_path_factory.mktemp("dist")
    build = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "dist.py"), str(dist)], capture_output=True, text=True
    )
    assert build.returncode == 0, build.stdout + build.stderr
    tarball = Path(build.stdout.strip().splitlines()[-1])
    collections = tmp_path_factory.mktemp("collections")
    assert not any(collections.iterdir())
    work = tmp_path_factory.mktemp("work")
    assert ROOT not in work.parents
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(
        ANSIBLE_COLLECTIONS_PATH=str(collections),
        ANSIBLE_NOCOLOR="1",
        PATH=f"{BIN}{os.pathsep}{ROOT / '.lab' / 'bin'}{os.pathsep}{env.get('PATH', '')}",
    )
    # kubernetes.core comes with the ansible package in the virtual environment (--no-deps: no Galaxy here)
    install = subprocess.run(
        [
            str(BIN / "ansible-galaxy"),
            "collection",
            "install",
            "--no-deps",
            "-p",
            str(collections),
            str(tarball),
        ],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
    )
    assert install.returncode == 0, install.stdout + install.stderr
    listing = subprocess.run(
        [str(BIN / "ansible-galaxy"), "collection", "list", "gpusplit.k8s", "--format", "json"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
    )
    assert listing.returncode == 0, listing.stdout + listing.stderr
    found = json.loads(listing.stdout)
    # the only gpusplit.k8s ansible sees is the install (not the checkout, not its .collections link)
    assert list(found) == [str(collections / "ansible_collections")], found
    version = yaml.safe_load((ROOT / "galaxy.yml").read_text())["version"]
    assert found[str(collections / "ansible_collections")]["gpusplit.k8s"]["version"] == version
    out = tmp_path_factory.mktemp("out")
    return {
        "env": env,
        "work": work,
        "out": out,
        "install": collections / "ansible_collections" / "gpusplit" / "k8s",
    }


def playbook(installed, name: str, *extra: str, inventory: Path = INVENTORY) -> subprocess.CompletedProcess:
    """gpusplit.k8s.<name> from the install, run from the folder outside the checkout."""
    run = subprocess.run(
        [
            str(BIN / "ansible-playbook"),
            f"gpusplit.k8s.{name}",
            "-i",
            str(inventory),
            "-e",
            json.dumps({"gpusplit_lab_root": str(ROOT), "gpusplit_out_dir": str(installed["out"])}),
            *extra,
        ],
        cwd=installed["work"],
        env=installed["env"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.returncode == 0, f"gpusplit.k8s.{name} failed:\n{run.stdout[-6000:]}\n{run.stderr[-3000:]}"
    return run


def report(installed) -> dict:
    return json.loads((installed["out"] / "fleet-report.json").read_text())


def test_ansible_doc_renders_every_module_role_and_filter_of_the_install(installed):
    env, work = installed["env"], installed["work"]
    expected = {
        "module": sorted(p.stem for p in (ROOT / "plugins" / "modules").glob("*.py") if p.stem != "__init__"),
        "role": sorted(p.parent.parent.name for p in (ROOT / "roles").glob("*/meta/argument_specs.yml")),
        "filter": sorted(p.stem for p in (ROOT / "plugins" / "filter").glob("*.yml")),
    }
    assert sorted(p.name for p in (ROOT / "roles").iterdir() if p.is_dir()) == expected["role"]
    for kind, names in expected.items():
        listed = subprocess.run(
            [str(BIN / "ansible-doc"), "-t", kind, "--list", "--json", "gpusplit.k8s"],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
        )
        assert listed.returncode == 0, listed.stdout + listed.stderr
        assert sorted(n.split(".")[-1] for n in json.loads(listed.stdout)) == names, kind
        docs = subprocess.run(
            [str(BIN / "ansible-doc"), "-t", kind, "--json", *(f"gpusplit.k8s.{n}" for n in names)],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
        )
        # (ansible-core 2.21's ansible-doc -t role warns about a collection of its own, which has no version)
        warnings = [
            line
            for line in docs.stderr.splitlines()
            if "WARNING" in line and "/ansible/_internal/ansible_collections/" not in line
        ]
        assert docs.returncode == 0 and warnings == [], docs.stderr[-3000:]
        rendered = json.loads(docs.stdout)
        assert sorted(n.split(".")[-1] for n in rendered) == names, kind
        for name, doc in rendered.items():
            if kind == "role":
                assert doc["entry_points"]["main"]["short_description"], name
                source = Path(doc["path"])
            else:
                assert doc["doc"]["short_description"] and doc["doc"]["description"], name
                source = Path(doc["doc"]["filename"])
            assert source.is_relative_to(installed["install"]), source


def test_site_verify_and_diagnose_run_by_collection_name(lab, kubectl, installed):
    site = playbook(installed, "site")
    assert report(installed)["counts"] == {"OK": 6, "DRIFT": 0, "FAIL": 0}, report(installed)
    (installed["out"] / "fleet-report.json").unlink()
    playbook(installed, "verify")
    assert report(installed)["counts"] == {"OK": 6, "DRIFT": 0, "FAIL": 0}, report(installed)
    playbook(installed, "diagnose")
    json.loads((installed["out"] / "pending.json").read_text())
    svg = ElementTree.parse(installed["out"] / "fleet.svg").getroot()
    assert svg.tag == "{http://www.w3.org/2000/svg}svg"
    # the picture is drawn from this run's report: every node of the lab is on it
    text = " ".join(t.text or "" for t in svg.iter("{http://www.w3.org/2000/svg}text"))
    for node in report(installed)["nodes"]:
        assert node["host"] in text, node["host"]
    assert "PLAY RECAP" in site.stdout


def _daemonset_versions(kubectl) -> dict[str, str]:
    items = kubectl.json("get", "daemonsets", "-A", "-l", PLUGIN_SELECTOR)["items"]
    return {d["metadata"]["name"]: d["metadata"]["resourceVersion"] for d in items}


def test_two_limit_slices_one_after_the_other_leave_every_node_ok(lab, kubectl, installed):
    """Each slice plans only its own hosts; the second keeps what the first applied (docs/awx.md)."""
    first = playbook(installed, "split", "--limit", ",".join([*SLICES[0], "localhost"]))
    text = " ".join(first.stdout.split())
    assert "inventory host(s) not planned in this run" in text
    after_first = _daemonset_versions(kubectl)
    # the first slice's split plugins exist (the nodes of its hosts that have a Kubernetes share)
    assert {"gpusplit-dp-lab-dgx-01", "gpusplit-dp-lab-ws-01"} <= set(after_first), after_first

    second = playbook(installed, "split", "--limit", ",".join([*SLICES[1], "localhost"]))
    assert "inventory host(s) not planned in this run" in " ".join(second.stdout.split())
    after_second = _daemonset_versions(kubectl)
    for name in ("gpusplit-dp-lab-dgx-01", "gpusplit-dp-lab-ws-01"):
        assert after_second.get(name) == after_first[name], f"the second slice touched {name}"

    (installed["out"] / "fleet-report.json").unlink(missing_ok=True)
    playbook(installed, "verify")
    assert report(installed)["counts"] == {"OK": 6, "DRIFT": 0, "FAIL": 0}, report(installed)


def _slice_inventory(tmp_path: Path, hosts: list[str]) -> Path:
    """The lab inventory as AWX hands it to one slice of a sliced job: only that slice's GPU hosts."""
    dest = tmp_path / "slice"
    shutil.copytree(INVENTORY, dest)
    doc = yaml.safe_load((dest / "hosts.yml").read_text())
    gpu_nodes = doc["all"]["children"]["gpu_nodes"]["hosts"]
    doc["all"]["children"]["gpu_nodes"]["hosts"] = {h: gpu_nodes[h] for h in hosts}
    (dest / "hosts.yml").write_text(yaml.safe_dump(doc))
    return dest


def _split_labels(kubectl, nodes) -> dict[str, str | None]:
    items = kubectl.json("get", "nodes")["items"]
    return {
        n["metadata"]["name"]: n["metadata"]["labels"].get("gpusplit.io/split")
        for n in items
        if n["metadata"]["name"] in nodes
    }


def test_awx_style_slices_keep_each_others_objects(lab, kubectl, installed, tmp_path):
    """AWX's job slicing: each slice job gets an inventory of its own hosts only; the job template
    sets gpusplit_prune_scope=plan, so a slice touches only the nodes it planned (docs/awx.md)."""
    playbook(installed, "split")  # every node as the full inventory says
    before = _daemonset_versions(kubectl)
    others = [n for n in before if not any(n.endswith(h) for h in SLICES[0])]
    other_nodes = list(SLICES[1])
    labels = _split_labels(kubectl, other_nodes)
    assert others and any(v == "true" for v in labels.values()), (before, labels)
    try:
        run = playbook(
            installed,
            "split",
            "-e",
            "gpusplit_prune_scope=plan",
            inventory=_slice_inventory(tmp_path / "a", SLICES[0]),
        )
        after = _daemonset_versions(kubectl)
        # the other slice's split plugins and labels are as they were: not pruned, not released
        assert all(after.get(n) == before[n] for n in others), (before, after)
        assert _split_labels(kubectl, other_nodes) == labels
        # and the slice's own plugins are still applied
        assert {"gpusplit-dp-lab-dgx-01", "gpusplit-dp-lab-ws-01"} <= set(after), after
        assert "inventory host(s) not planned" not in " ".join(
            run.stdout.split()
        )  # its inventory is its plan
    except AssertionError:
        playbook(installed, "split")  # the lab as the full inventory says, for the tests after this one
        raise
