"""A MIG geometry change on a busy Kubernetes GPU of the lab, mode device_plugin (docs/sharing.md).

lab-a100-01 (a100-mig: GPUs 0 and 1 with MIG, 2 and 3 without) keeps GPUs 0 and 1 for the host and gives 2 and
3 to Kubernetes as whole GPUs (mig_strategy mixed); a pod on each. gpusplit_mig_geometry then gives GPU 3 two
3g.40gb: under refuse the run stops naming the pod on GPU 3, under evict exactly that pod goes, the lab's
nvidia-mig-parted stand-in applies the node's config to the node's own copy of the fixture (the fake NVML's
state, which the lab's device plugin reads), and the node advertises the new MIG devices; the host's GPUs are
as they were. resplit.yml's --check --diff of a second GPU's change shows the config's diff and changes nothing
on the host or in the cluster; a reboot of the lab host (every MIG device lost, then the boot service's apply of
what its drop-ins select) brings the geometry back and verify.yml finds the node as planned; unsplit.yml (to host)
removes gpusplit's MIG config and drop-in (check mode only shows it) and leaves the package's drop-in and the GPUs'
MIG devices.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from ansible_output import ansible_playbook, changed_tasks, inventory_copy, recap

from ansible_collections.gpusplit.k8s.plugins.plugin_utils.mig_apply import environment_assignments
from lab import components as C
from lab.deviceplugin import NODE_FIXTURES

ROOT = Path(__file__).resolve().parents[2]
INVENTORY = ROOT / "inventory" / "lab"
NODE = "lab-a100-01"
FIXTURE = ROOT / "tests" / "fixtures" / "gpus" / "a100-mig.json"
LIMIT = ("-e", f"gpusplit_hosts={NODE}")
MIG = "nvidia.com/mig-3g.40gb"

pytestmark = pytest.mark.integration


def run(playbook, inventory, *extra):
    proc = ansible_playbook(playbook, inventory, *extra)
    if proc.returncode != 0:
        raise AssertionError(f"{playbook} failed:\n{proc.stdout[-6000:]}\n{proc.stderr[-2000:]}")
    return proc


def gpus_of(path: Path) -> list[dict]:
    return sorted(json.loads(path.read_text())["gpus"], key=lambda g: g["index"])


UUIDS = [g["uuid"] for g in gpus_of(FIXTURE)]


def mig_inventory(tmp_path: Path, copy: Path, geometry=None) -> Path:
    # the fixture's python on host GPU 1 is a container's in tests/fixtures/proc; here it is the host's own (a
    # login session's cgroup), as on a host that keeps GPUs 0 and 1 for its own processes
    proc = tmp_path / "proc"
    (proc / "51077").mkdir(parents=True)
    (proc / "51077" / "cgroup").write_text("0::/user.slice/user-1000.slice/session-3.scope\n")

    def edit(hosts):
        hosts[NODE].update(
            gpusplit_mode="device_plugin",
            gpusplit_split={"host_count": 2},
            gpusplit_mig_strategy="mixed",
            gpusplit_discovery_proc_root=str(proc),
            # the node's own fixture copy, read by the fake NVML and written by the nvidia-mig-parted stand-in
            gpusplit_discovery_environment={
                "PYTHONPATH": str(ROOT / "tests" / "fakes"),
                "GPUSPLIT_FAKE_NVML_FIXTURE": str(copy),
                "PATH": f"{ROOT / 'tests' / 'fakes' / 'bin'}:{os.environ['PATH']}",
            },
        )
        if geometry:
            hosts[NODE]["gpusplit_mig_geometry"] = geometry

    return inventory_copy(tmp_path, edit)


def gpu_pod(ns: str, name: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": NODE},
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [{"name": "c", "image": "cuda", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
        },
    }


@pytest.fixture(scope="module")
def busy_node(lab, kubectl, tmp_path_factory):
    """The node split with a pod on each of its two Kubernetes GPUs."""
    NODE_FIXTURES.mkdir(parents=True, exist_ok=True)
    copy = NODE_FIXTURES / f"{NODE}.json"
    shutil.copyfile(FIXTURE, copy)
    tmp = tmp_path_factory.mktemp("mig")
    ns = None
    try:
        run("site.yml", mig_inventory(tmp / "split", copy), *LIMIT)
        ns = kubectl.namespace(f"mig-{uuid.uuid4().hex[:6]}")
        for i in range(2):
            kubectl("apply", "-f", "-", stdin=json.dumps(gpu_pod(ns, f"p{i}")))
        kubectl.wait_running(ns, 2, what="a pod on each Kubernetes GPU")
        yield {"copy": copy, "ns": ns, "tmp": tmp}
    finally:
        if ns:
            kubectl("delete", "namespace", ns, "--wait=true", "--timeout=180s", check=False)
        run("site.yml", INVENTORY, *LIMIT, "-e", "gpusplit_resplit_policy=evict")  # back to mode none
        copy.unlink(missing_ok=True)


GEOMETRY = {UUIDS[3]: ["3g.40gb", "3g.40gb"]}


def holder_of_gpu3() -> str:
    diff = json.loads((C.OUT / "resplit-diff.json").read_text())
    [node] = diff["nodes"]
    assert node["mig"] == [{"uuid": UUIDS[3], "index": 3, "now": None, "want": ["3g.40gb", "3g.40gb"]}]
    [holder] = node["holders"]
    assert holder["gpu"] == UUIDS[3]
    return holder["pod"]


def test_refuse_stops_before_any_change_naming_the_pod_on_the_gpu(busy_node, kubectl):
    before = busy_node["copy"].read_text()
    allocatable = kubectl.json("get", "node", NODE)["status"]["allocatable"]
    assert allocatable["nvidia.com/gpu"] == "2" and allocatable.get(MIG, "0") == "0"
    proc = ansible_playbook(
        "site.yml", mig_inventory(busy_node["tmp"] / "refuse", busy_node["copy"], GEOMETRY), *LIMIT
    )
    assert proc.returncode != 0, proc.stdout[-3000:]
    pod = holder_of_gpu3()
    assert f"{busy_node['ns']}/{pod} holds GPU 3 ({UUIDS[3]}). The MIG geometry changes (GPU 3" in proc.stdout
    assert "Nothing was changed" in proc.stdout
    assert busy_node["copy"].read_text() == before
    assert kubectl.json("get", "node", NODE)["status"]["allocatable"] == allocatable
    busy_node["holder"] = pod


def test_evict_takes_exactly_that_pod_and_the_node_advertises_the_new_mig_devices(busy_node, kubectl):
    inventory = mig_inventory(busy_node["tmp"] / "evict", busy_node["copy"], GEOMETRY)
    proc = run("site.yml", inventory, *LIMIT, "-e", "gpusplit_resplit_policy=evict")
    holder = busy_node.get("holder") or holder_of_gpu3()
    left = {p["metadata"]["name"] for p in kubectl.json("-n", busy_node["ns"], "get", "pods")["items"]}
    assert left == {"p0", "p1"} - {holder}, left  # exactly the pod on GPU 3
    assert f"GPU 3 ({UUIDS[3]}): MIG disabled -> [3g.40gb, 3g.40gb]" in " ".join(proc.stdout.split())
    report = json.loads((C.OUT / "fleet-report.json").read_text())
    [entry] = [n for n in report["nodes"] if n["name"] == NODE]
    assert entry["verdict"] == "OK", entry
    allocatable = kubectl.json("get", "node", NODE)["status"]["allocatable"]
    assert (allocatable[MIG], allocatable["nvidia.com/gpu"]) == ("2", "1")
    # the fake NVML's state: GPU 3 has its two MIG devices, the host's GPUs 0 and 1 (and GPU 2) are untouched
    original, now = gpus_of(FIXTURE), gpus_of(busy_node["copy"])
    assert now[:3] == original[:3]
    assert now[3]["mig_mode"]["current"] == "enabled"
    assert sorted(m["profile"] for m in now[3]["mig_devices"]) == ["3g.40gb", "3g.40gb"]
    # kept on the host for the next boot: the config lists GPU 3 alone, the drop-in selects it
    root = C.HOSTS_ROOT / NODE
    config = json.loads((root / "etc" / "gpusplit" / "mig-parted.yaml").read_text())
    assert config["mig-configs"] == {
        f"gpusplit-{NODE}": [{"devices": [3], "mig-enabled": True, "mig-devices": {"3g.40gb": 2}}]
    }
    dropin = (
        root / "etc" / "systemd" / "system" / "nvidia-mig-manager.service.d" / "zz-gpusplit.conf"
    ).read_text()
    assert f"MIG_PARTED_SELECTED_CONFIG=gpusplit-{NODE}" in dropin
    # a second run changes nothing on the host or in the cluster; the controller's records (gpus.json, the plan,
    # the report) change once, since the first run wrote them from the GPUs read before the apply
    again = run("site.yml", inventory, *LIMIT)
    records = ("Write gpus.json", "Write the fleet plan", "Write the plan diff", "Write the fleet report")
    assert [t for t in changed_tasks(again.stdout) if not any(r in t for r in records)] == []
    assert "PLAY [Apply the MIG geometry of the Kubernetes share]" in again.stdout
    third = run("site.yml", inventory, *LIMIT)
    assert all(r["changed"] == 0 for r in recap(third.stdout).values()), changed_tasks(third.stdout)


ROOT_ETC = C.HOSTS_ROOT / NODE / "etc"
CONFIG = ROOT_ETC / "gpusplit" / "mig-parted.yaml"
DROPIN_DIR = ROOT_ETC / "systemd" / "system" / "nvidia-mig-manager.service.d"
# the package's own drop-in (NVIDIA/mig-parted deployments/systemd): every GPU without MIG at boot
PACKAGE_DROPIN = '[Service]\nEnvironment="MIG_PARTED_SELECTED_CONFIG=all-disabled"\n'


def state(busy_node, kubectl) -> dict:
    """What a run may change: the fake NVML's state, gpusplit's MIG files, the pods, the node's allocatable."""
    return {
        "gpus": busy_node["copy"].read_text(),
        "files": {
            p.relative_to(ROOT_ETC).as_posix(): p.read_text()
            for p in (CONFIG, *DROPIN_DIR.glob("*"))
            if p.exists()
        },
        "pods": sorted(
            p["metadata"]["name"] for p in kubectl.json("-n", busy_node["ns"], "get", "pods")["items"]
        ),
        "allocatable": kubectl.json("get", "node", NODE)["status"]["allocatable"],
    }


def test_resplit_yml_applies_a_geometry_change_in_its_batch(busy_node, kubectl):
    geometry = {**GEOMETRY, UUIDS[2]: ["3g.40gb", "3g.40gb"]}
    inventory = mig_inventory(busy_node["tmp"] / "resplit", busy_node["copy"], geometry)
    # with the package's all-disabled beside it the apply goes on: gpusplit's drop-in sorts after it
    (DROPIN_DIR / "override.conf").write_text(PACKAGE_DROPIN)
    before = state(busy_node, kubectl)
    # the verify compares the cluster with the plan, which a check run does not apply: it reports, nothing more
    no_verify = json.dumps({"gpusplit_verify_fail_on": [], "gpusplit_verify_wait_seconds": 0})
    check = run(
        "resplit.yml",
        inventory,
        *LIMIT,
        "-e",
        "gpusplit_resplit_policy=evict",
        "-e",
        no_verify,
        "--check",
        "--diff",
    )
    assert state(busy_node, kubectl) == before  # nothing on the host or in the cluster
    assert f"GPU 2 ({UUIDS[2]}): MIG disabled -> [3g.40gb, 3g.40gb]" in " ".join(check.stdout.split())
    run("resplit.yml", inventory, *LIMIT, "-e", "gpusplit_resplit_policy=evict")
    # the check run showed the config's diff: every line the real run added
    added = set(CONFIG.read_text().splitlines()) - set(
        before["files"]["gpusplit/mig-parted.yaml"].splitlines()
    )
    assert added and all(f"+{line}" in check.stdout for line in added), check.stdout[-3000:]
    assert kubectl.json("-n", busy_node["ns"], "get", "pods")["items"] == []  # the pod on GPU 2 went too
    report = json.loads((C.OUT / "fleet-report.json").read_text())
    [entry] = [n for n in report["nodes"] if n["name"] == NODE]
    assert entry["verdict"] == "OK", entry
    allocatable = kubectl.json("get", "node", NODE)["status"]["allocatable"]
    assert (allocatable[MIG], allocatable.get("nvidia.com/gpu", "0")) == ("4", "0")
    original, now = gpus_of(FIXTURE), gpus_of(busy_node["copy"])
    assert now[:2] == original[:2]  # the host's GPUs
    assert sorted(m["profile"] for m in now[2]["mig_devices"]) == ["3g.40gb", "3g.40gb"]


PLUGIN_SELECTOR = "app.kubernetes.io/managed-by=gpusplit,app.kubernetes.io/name=gpusplit-device-plugin"
FAKE_MIG_PARTED = ROOT / "tests" / "fakes" / "bin" / "nvidia-mig-parted"


def boot_environment() -> dict:
    """What nvidia-mig-manager.service's drop-ins set, read as systemd reads them: in name order, the last
    assignment of a variable winning (the package's override.conf, then gpusplit's zz-gpusplit.conf)."""
    env = {}
    for path in sorted(DROPIN_DIR.glob("*.conf")):
        for name, value in environment_assignments(path.read_text()):
            if name is None:
                env.clear()
            else:
                env[name] = value
    return env


def test_the_geometry_comes_back_at_boot_and_the_node_verifies(busy_node, kubectl):
    """A reboot of the lab host: every GPU loses its MIG devices (GPU and compute instances are not kept across a
    reboot), then the boot's nvidia-mig-manager.service applies the config its drop-ins select, with the lab's
    nvidia-mig-parted stand-in; the split plugin starts again and verify.yml finds the node as planned."""
    geometry = {**GEOMETRY, UUIDS[2]: ["3g.40gb", "3g.40gb"]}
    before = gpus_of(busy_node["copy"])
    assert [len(g["mig_devices"] or []) for g in before[2:]] == [2, 2]
    doc = json.loads(busy_node["copy"].read_text())
    for gpu in doc["gpus"]:
        gpu["mig_devices"] = [] if gpu["mig_devices"] is not None else None
    busy_node["copy"].write_text(json.dumps(doc, indent=2) + "\n")
    rebooted = gpus_of(busy_node["copy"])
    env = boot_environment()
    assert env["MIG_PARTED_SELECTED_CONFIG"] == f"gpusplit-{NODE}", env  # gpusplit's, over the package's
    assert env["MIG_PARTED_CONFIG_FILE"] == "/etc/gpusplit/mig-parted.yaml", env
    boot = subprocess.run(
        [sys.executable, str(FAKE_MIG_PARTED), "apply"],
        env={
            **os.environ,
            "MIG_PARTED_CONFIG_FILE": str(CONFIG),
            "MIG_PARTED_SELECTED_CONFIG": env["MIG_PARTED_SELECTED_CONFIG"],
            "GPUSPLIT_FAKE_NVML_FIXTURE": str(busy_node["copy"]),
        },
        capture_output=True,
        text=True,
        check=False,
    )
    assert boot.returncode == 0, boot.stdout + boot.stderr
    now = gpus_of(busy_node["copy"])
    assert now[:2] == rebooted[:2]  # the host's GPUs: in no entry of gpusplit's config, not touched at boot
    assert [sorted(m["profile"] for m in g["mig_devices"]) for g in now[2:]] == [["3g.40gb", "3g.40gb"]] * 2
    kubectl(
        "delete",
        "pods",
        "-A",
        "-l",
        PLUGIN_SELECTOR,
        "--field-selector",
        f"spec.nodeName={NODE}",
        "--wait=true",
    )
    proc = run("verify.yml", mig_inventory(busy_node["tmp"] / "boot", busy_node["copy"], geometry), *LIMIT)
    report = json.loads((C.OUT / "fleet-report.json").read_text())
    [entry] = [n for n in report["nodes"] if n["name"] == NODE]
    assert entry["verdict"] == "OK", (entry, proc.stdout[-3000:])
    allocatable = kubectl.json("get", "node", NODE)["status"]["allocatable"]
    assert allocatable[MIG] == "4", allocatable


def test_unsplit_removes_the_mig_files_and_leaves_the_geometry(busy_node, kubectl):
    inventory = mig_inventory(busy_node["tmp"] / "unsplit", busy_node["copy"], GEOMETRY)
    unsplit = (*LIMIT, "-e", "gpusplit_unsplit_to=host", "-e", "gpusplit_resplit_policy=evict")
    before = state(busy_node, kubectl)
    assert set(before["files"]) == {
        "gpusplit/mig-parted.yaml",
        "systemd/system/nvidia-mig-manager.service.d/override.conf",
        "systemd/system/nvidia-mig-manager.service.d/zz-gpusplit.conf",
    }
    check = run("unsplit.yml", inventory, *unsplit, "--check", "--diff")
    assert state(busy_node, kubectl) == before
    shown = " ".join(check.stdout.split())
    for path in (CONFIG, DROPIN_DIR / "zz-gpusplit.conf"):
        assert f"{path}: remove: " in shown, check.stdout[-3000:]
    proc = run("unsplit.yml", inventory, *unsplit)
    assert not CONFIG.exists() and not (DROPIN_DIR / "zz-gpusplit.conf").exists(), proc.stdout[-3000:]
    # the package's drop-in and its folder stay; the GPUs keep their MIG devices (docs/undo.md)
    assert (DROPIN_DIR / "override.conf").read_text() == PACKAGE_DROPIN
    assert busy_node["copy"].read_text() == before["gpus"]
    assert kubectl.json("get", "node", NODE)["status"]["allocatable"].get(MIG, "0") == "0"
