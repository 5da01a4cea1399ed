"""The control plane upgraded from 1.36 to 1.37 with GenericWorkload on, through feature_gates.yml's upgrade preflight.

A 1.36 apiserver with GenericWorkload on stores PodGroups and Workloads as scheduling.k8s.io/v1alpha2, a
version 1.37 does not register: after the upgrade they could not be read back. With
gpusplit_upgrade_target_version=1.37.2 the preflight lists those that exist and refuses, naming each, before
any change (in check mode too); gpusplit_upgrade_delete_unreadable=true deletes exactly those and says so. Then
the lab's control plane goes to 1.37.2's real binaries as `kubeadm upgrade apply` does it: each static-pod
manifest gets the release's image (the lab runs the binaries of the image's release) and the flags that release
accepts (GangScheduling merged into GenericWorkload, the v1alpha2 runtime-config replaced by v1beta1), the API
server first. A new gang job is then held by the 1.37 scheduler until all its pods fit, and bound together.

Runs on a 1.36 lab only (GPUSPLIT_KUBE_VERSION=1.36.3 with a lab folder of its own, docs/kubernetes-versions.md);
on the default release (make test) it is skipped. The lab goes back to its 1.36 manifests at the end.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid

import pytest
import yaml
from test_k8s_versions import (
    GANG_GATES,
    VENV_BIN,
    discovery,
    gang_waits_until_all_fit,
    release,
    server_version,
)

from ansible_collections.gpusplit.k8s.plugins.module_utils._control_plane.flag_values import flag_map
from ansible_collections.gpusplit.k8s.plugins.module_utils._control_plane.gate_preflight import (
    migrate_gates,
    migrate_runtime_config,
)
from ansible_collections.gpusplit.k8s.plugins.plugin_utils import gang_job_render
from lab import components as C
from lab import lab as labctl

FROM_MINOR, TARGET = "1.36", "1.37.2"
pytestmark = pytest.mark.skipif(
    not release().startswith(f"{FROM_MINOR}."),
    reason=f"upgrades a {FROM_MINOR} lab to {TARGET}: runs where the lab runs {FROM_MINOR} (GPUSPLIT_KUBE_VERSION=1.36.3)",
)
ROOT = C.ROOT
ORDER = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")  # kubeadm upgrade's order


def feature_gates(extra_vars: dict, *args: str) -> tuple[int, str]:
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
        "ANSIBLE_NOCOLOR": "1",
        "PATH": ":".join(
            [*map(str, C.kubectl_dirs(release())), str(VENV_BIN), str(C.BIN), os.environ["PATH"]]
        ),
    }
    done = subprocess.run(
        [str(VENV_BIN / "ansible-playbook"), "-i", "inventory/lab", "playbooks/feature_gates.yml"]
        + ["-e", json.dumps(extra_vars), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    return done.returncode, " ".join((done.stdout + done.stderr).split())


def upgraded_command(command: list[str], target: str) -> list[str]:
    """A component's command with the flags ``target`` accepts, as kubeadm upgrade writes them."""
    out = []
    gates = {}
    for arg in command:
        if arg.startswith("--feature-gates="):
            gates, _notes = migrate_gates(flag_map(arg.split("=", 1)[1]), target)
            arg = "--feature-gates=" + ",".join(f"{k}={str(v).lower()}" for k, v in gates.items())
        out.append(arg)
    for i, arg in enumerate(out):
        if arg.startswith("--runtime-config="):
            runtime, _notes = migrate_runtime_config(flag_map(arg.split("=", 1)[1]), target, gates)
            out[i] = "--runtime-config=" + ",".join(f"{k}={v}" for k, v in runtime.items())
    return out


def upgrade_manifest(name: str, target: str) -> None:
    path = C.MANIFESTS / f"{name}.yaml"
    doc = yaml.safe_load(path.read_text())
    container = doc["spec"]["containers"][0]
    container["image"] = container["image"].rsplit(":", 1)[0] + f":v{target}"
    container["command"] = upgraded_command(container["command"], target)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


def healthy(timeout: float = 240) -> None:
    health = labctl.wait_healthy(timeout)
    assert health and all(v["healthy"] for v in health.values()), labctl.report_unhealthy(health or {})


def podgroups(kubectl, ns: str) -> list[str]:
    done = kubectl("-n", ns, "get", "podgroups.v1alpha2.scheduling.k8s.io", "-o", "name", check=False)
    return done.stdout.split()


@pytest.fixture
def upgrade_lab(lab, kubectl):
    found = {p.name: p.read_bytes() for p in C.MANIFESTS.glob("*.yaml")}
    namespaces = []
    yield namespaces
    for ns in namespaces:  # while the release that wrote their objects serves them
        kubectl("delete", "namespace", ns, "--wait=true", "--timeout=90s", check=False)
    for name in ORDER:  # back to the 1.36 manifests, the API server first
        if (C.MANIFESTS / f"{name}.yaml").read_bytes() != found[f"{name}.yaml"]:
            (C.MANIFESTS / f"{name}.yaml").write_bytes(found[f"{name}.yaml"])
            healthy()


def test_upgrade_to_1_37_refuses_v1alpha2_podgroups_then_gangs_schedule_on_1_37(
    upgrade_lab, kubectl, core_api
):
    rc, out = feature_gates({"gpusplit_feature_gates": GANG_GATES[FROM_MINOR]})
    assert rc == 0, out[-4000:]
    served = discovery()
    assert "PodGroup" in served.get("scheduling.k8s.io/v1alpha2", {}), sorted(served)
    ns = f"gsup-{uuid.uuid4().hex[:6]}"
    upgrade_lab.append(ns)
    kubectl.namespace(ns)
    spec = {"name": "train", "namespace": ns, "replicas": 2, "gpus_per_pod": 1}
    info = {"apis": served, "version": {"server": {"kubernetes": {"gitVersion": server_version()}}}}
    group = gang_job_render.render_gang_job(spec, info)[0]
    assert (group["apiVersion"], group["kind"]) == ("scheduling.k8s.io/v1alpha2", "PodGroup")
    kubectl("apply", "-f", "-", stdin=json.dumps(group))
    label = f"PodGroup {ns}/train (scheduling.k8s.io/v1alpha2)"

    # refused before any change, naming the PodGroup: in check mode, and in a real run
    upgrade = {"gpusplit_feature_gates": {"GenericWorkload": True}, "gpusplit_upgrade_target_version": TARGET}
    manifests = {p.name: p.read_bytes() for p in C.MANIFESTS.glob("*.yaml")}
    for args in (("--check",), ()):
        rc, out = feature_gates(upgrade, *args)
        assert rc != 0, out[-4000:]
        assert "Kubernetes 1.37 does not register scheduling.k8s.io/v1alpha2" in out, out[-4000:]
        assert (
            label in out and "gpusplit_upgrade_delete_unreadable=true" in out and "Nothing was changed" in out
        )
        assert podgroups(kubectl, ns) == ["podgroup.scheduling.k8s.io/train"]
        assert {p.name: p.read_bytes() for p in C.MANIFESTS.glob("*.yaml")} == manifests

    # with the variable: exactly that PodGroup is deleted, and the run says so
    rc, out = feature_gates({**upgrade, "gpusplit_upgrade_delete_unreadable": True})
    assert rc == 0, out[-4000:]
    assert (
        f"deleted (gpusplit_upgrade_delete_unreadable, unreadable after the upgrade to {TARGET}): {label}"
        in out
    )
    assert podgroups(kubectl, ns) == []

    # the upgrade: 1.37.2's binaries, the API server first, each component healthy before the next
    for name in ORDER:
        upgrade_manifest(name, TARGET)
        healthy()
    assert server_version() == f"v{TARGET}"
    for name in ORDER:
        argv = C.command_from_manifest(C.MANIFESTS / f"{name}.yaml")
        assert argv[0] == str(C.kube_bin(TARGET) / name)
        assert "GangScheduling" not in " ".join(argv), name
    after = discovery()
    assert "scheduling.k8s.io/v1alpha2" not in after
    assert {"Workload", "PodGroup"} <= set(after.get("scheduling.k8s.io/v1beta1", {})), sorted(after)
    # a new gang job, rendered from 1.37's discovery (a v1beta1 PodGroup), is held until all fit, then bound
    gang_waits_until_all_fit(kubectl, core_api, after, server_version())
