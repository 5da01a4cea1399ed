"""The lab at each Kubernetes release (lab/versions.env KUBE_VERSIONS), and what gpusplit picks on it.

These tests run on the release of the session's lab: the default (1.37.2) in `make test`, another with
GPUSPLIT_KUBE_VERSION=<release> and a lab folder of its own (docs/lab.md, "Kubernetes releases"). What
each release serves is asked of its real kube-apiserver; the expectations per minor come from the
Kubernetes sources (plugins/module_utils/_control_plane/api_versions.py names them).

* the control plane runs the release's own binaries, the nodes report it, and kubectl is within the
  one minor version of skew kubectl supports;
* the group/version gpusplit picks for each versioned API, from the real discovery answer, or the
  refusal (naming the version it needs and the gates) where the release does not serve it;
* playbooks/feature_gates.yml turns GenericWorkload on (and GangScheduling on 1.35 and 1.36) on the
  release's kubeadm-shaped manifests, and the Workload API of that release is served afterwards;
  the manifests are put back at the end.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_collections.gpusplit.k8s.plugins.module_utils._control_plane.api_versions import (
    ApiVersionError,
    pick,
)
from lab import components as C
from lab import lab as labctl

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent

# per minor: the group/version picked out of the box (None: refused), from the sources
OUT_OF_THE_BOX = {
    "1.35": {"dra": "resource.k8s.io/v1", "device_taint_rule": None, "podgroup": None, "workload": None},
    "1.36": {"dra": "resource.k8s.io/v1", "device_taint_rule": None, "podgroup": None, "workload": None},
    "1.37": {
        "dra": "resource.k8s.io/v1",
        "device_taint_rule": "resource.k8s.io/v1",
        "podgroup": None,
        "workload": None,
    },
}
# per minor: what the release serves of the Workload API with GenericWorkload on (through feature_gates.yml)
GENERIC_WORKLOAD = {
    "1.35": {"scheduling.k8s.io/v1alpha1": {"Workload"}},
    "1.36": {"scheduling.k8s.io/v1alpha2": {"Workload", "PodGroup"}},
    "1.37": {"scheduling.k8s.io/v1beta1": {"Workload", "PodGroup"}},
}
# the gates a gang needs on that release (GangScheduling merged into GenericWorkload in 1.37)
GANG_GATES = {
    "1.35": {"GenericWorkload": True, "GangScheduling": True},
    "1.36": {"GenericWorkload": True, "GangScheduling": True},
    "1.37": {"GenericWorkload": True},
}


def release() -> str:
    return C.lab_kube_version()


def minor() -> str:
    return release().rsplit(".", 1)[0]


def discovery() -> dict:
    """The discovery answer as kubernetes.core.k8s_cluster_info gives it: {group/version: {kind: {}}}."""
    from kubernetes import config

    from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.client import get_json

    api = config.new_client_from_config(str(C.KUBECONFIG))
    out: dict[str, dict] = {}
    paths = ["/api/v1"] + [
        f"/apis/{version['groupVersion']}"
        for group in get_json(api, "/apis")["groups"]
        for version in group["versions"]
    ]
    for path in paths:
        data = get_json(api, path)
        out[data["groupVersion"]] = {r["kind"]: {} for r in data["resources"] if "/" not in r["name"]}
    return out


def server_version() -> str:
    from kubernetes import client, config

    return client.VersionApi(config.new_client_from_config(str(C.KUBECONFIG))).get_code().git_version


def run_playbook(playbook: str, extra_vars: dict, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
        "ANSIBLE_NOCOLOR": "1",
        "PATH": ":".join(
            [*map(str, C.kubectl_dirs(release())), str(VENV_BIN), str(C.BIN), os.environ.get("PATH", "")]
        ),
    }
    return subprocess.run(
        [
            str(VENV_BIN / "ansible-playbook"),
            "-i",
            "inventory/lab",
            f"playbooks/{playbook}",
            "-e",
            json.dumps(extra_vars),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_the_control_plane_runs_the_releases_own_binaries(lab, kubectl):
    version = release()
    assert version in C.kube_versions()
    assert server_version() == f"v{version}"
    state = labctl.read_state()
    for name in C.STATIC_COMPONENTS:
        argv = C.command_from_manifest(C.MANIFESTS / f"{name}.yaml")
        assert argv[0] == str(C.kube_bin(version) / name)
        assert (C.kube_bin(version) / f".{name}.version").read_text().strip() == version
        out = subprocess.run([argv[0], "--version"], capture_output=True, text=True, check=True).stdout
        assert out.strip() == f"Kubernetes v{version}", name
        assert state[name]["running"], name
    # kwok's nodes (the lab's simulated kubelets) report the release
    nodes = [
        n
        for n in kubectl.json("get", "nodes")["items"]
        if (n["metadata"].get("annotations") or {}).get("kwok.x-k8s.io/node") == "fake"
    ]
    assert nodes and all(n["status"]["nodeInfo"]["kubeletVersion"] == f"v{version}-lab" for n in nodes)


def test_kubectl_is_within_one_minor_of_the_release(lab):
    env = {**os.environ, "PATH": ":".join([*map(str, C.kubectl_dirs(release())), os.environ.get("PATH", "")])}
    out = subprocess.run(
        ["kubectl", "version", "--client", "-o", "json"], capture_output=True, text=True, env=env, check=True
    ).stdout
    client = json.loads(out)["clientVersion"]["gitVersion"]  # v1.36.3
    assert abs(int(client.split(".")[1]) - int(minor().split(".")[1])) <= 1, client


def test_the_versions_picked_from_the_live_discovery(lab):
    served, version = discovery(), server_version()
    for use, want in OUT_OF_THE_BOX[minor()].items():
        if want is None:
            with pytest.raises(ApiVersionError) as err:
                pick(use, served, version)
            assert "Nothing was changed." in str(err.value)
        else:
            assert pick(use, served, version) == want, use
    assert pick("admission_policy", served, version) == "admissionregistration.k8s.io/v1"
    assert pick("eviction", served, version) == "policy/v1"


def test_device_taint_rules_refused_out_of_the_box_name_the_gates_of_the_release(lab):
    if minor() == "1.37":  # served out of the box, with no gate to name
        assert pick("device_taint_rule", discovery(), server_version()) == "resource.k8s.io/v1"
        return
    with pytest.raises(ApiVersionError) as err:
        pick("device_taint_rule", discovery(), server_version())
    text = str(err.value)
    assert "DRADeviceTaintRules" in text
    want = {
        # 1.35: no gate of its own makes gpusplit write the alpha v1alpha3 rule; the refusal names 1.36's
        "1.35": "1.35 has only the alpha resource.k8s.io/v1alpha3, which gpusplit does not write",
        "1.36": "--runtime-config=resource.k8s.io/v1beta2=true",
    }[minor()]
    assert want in text


@pytest.fixture
def manifests_restored(lab):
    found = {p.name: p.read_bytes() for p in C.MANIFESTS.glob("*.yaml")}
    yield
    for name, data in found.items():
        if (C.MANIFESTS / name).read_bytes() != data:
            (C.MANIFESTS / name).write_bytes(data)
    health = labctl.wait_healthy(240)
    assert health and all(v["healthy"] for v in health.values()), labctl.report_unhealthy(health or {})


def test_feature_gates_turn_the_workload_api_of_the_release_on(manifests_restored):
    before = discovery()
    for group_version in GENERIC_WORKLOAD[minor()]:
        assert group_version not in before
    done = run_playbook("feature_gates.yml", {"gpusplit_feature_gates": GANG_GATES[minor()]})
    assert done.returncode == 0, (done.stdout + done.stderr)[-5000:]
    after = discovery()
    for group_version, kinds in GENERIC_WORKLOAD[minor()].items():
        assert kinds <= set(after.get(group_version, {})), (group_version, sorted(after))
    version = server_version()
    assert pick("workload", after, version) == next(iter(GENERIC_WORKLOAD[minor()]))
    if minor() == "1.35":
        with pytest.raises(ApiVersionError, match="PodGroup"):
            pick("podgroup", after, version)
    else:
        assert pick("podgroup", after, version) == next(iter(GENERIC_WORKLOAD[minor()]))
    for name in C.STATIC_COMPONENTS:
        text = (C.MANIFESTS / f"{name}.yaml").read_text()
        assert "GenericWorkload=true" in text, name


# --------------------------------------------------------------------------------------------
# DRA mode on the release: the host share as DeviceTaintRules in the version it serves, or a refusal

DRA_NODE = "gsver-dgx-01"
DRA_RULES = {"1.36": "resource.k8s.io/v1beta2", "1.37": "resource.k8s.io/v1"}
CHART_RELEASE = "gsver-dra-driver"


@pytest.fixture(scope="module")
def dra(lab, tmp_path_factory):
    """One dgx node in mode dra (host_count 2: gpu-0 and gpu-1 stay with the host), the real DRA chart's
    DeviceClasses, the slice its driver would publish; its own namespace, inventory and outputs."""
    import uuid
    from types import SimpleNamespace

    import dra_harness as harness
    import real_charts
    from test_dra_lab import write_inventory

    from ansible_collections.gpusplit.k8s.plugins.plugin_utils._dra.chart import chart_values

    base = tmp_path_factory.mktemp("k8sver-dra")
    hosts = {
        DRA_NODE: {
            "gpusplit_lab_fixture": "dgx-h100",
            "gpusplit_mode": "dra",
            "gpusplit_split": {"host_count": 2},
        }
    }
    ctx = SimpleNamespace(
        ns=f"gsver-{uuid.uuid4().hex[:6]}",
        inventory=write_inventory(base / "inventory", hosts),
        out=base / "out",
        base=base,
    )
    real_charts.install(
        CHART_RELEASE, ctx.ns, real_charts.chart("dra-driver-nvidia-gpu"), chart_values(), base
    )
    harness.publish(DRA_NODE, "dgx-h100")
    harness.write_host_file(DRA_NODE, "/etc/containerd/config.toml", harness.CONTAINERD_2_CONFIG)
    yield ctx
    real_charts.uninstall(CHART_RELEASE, ctx.ns)
    harness.retry(lambda: harness.delete("v1", "Namespace", ctx.ns))
    harness.unpublish(DRA_NODE)
    harness.delete("v1", "Node", DRA_NODE)
    import shutil

    shutil.rmtree(harness.host_root(DRA_NODE), ignore_errors=True)


def dra_playbook(ctx, check=True):
    from test_dra_lab import run_playbook as dra_run

    return dra_run(ctx, "dra.yml", "-e", "gpusplit_dra_driver_install=false", check=check)


def node_mode(name):
    import dra_harness as harness

    return ((harness.get("v1", "Node", name) or {}).get("metadata", {}).get("labels") or {}).get(
        "gpusplit.io/mode"
    )


def test_dra_host_share_in_the_version_the_release_serves(dra, manifests_restored):
    import dra_harness as harness
    from test_dra_lab import allocated_device, claim_pod, list_objects, scheduled_message, wait_for

    from ansible_collections.gpusplit.k8s.plugins.plugin_utils._dra.render import render_claim

    if minor() in ("1.35", "1.36"):
        refused = dra_playbook(dra, check=False)
        text = " ".join(refused.stdout.split())
        assert refused.returncode != 0, text[-3000:]
        assert "needs DeviceTaintRule in resource.k8s.io/v1 or resource.k8s.io/v1beta2" in text, text[-3000:]
        assert "Nothing was changed" in text
        assert node_mode(DRA_NODE) is None  # refused before any node was labelled
        if minor() == "1.35":
            assert "1.35 has only the alpha resource.k8s.io/v1alpha3, which gpusplit does not write" in text
            return
        assert "DRADeviceTaintRules (beta, off by default" in text
        assert "--runtime-config=resource.k8s.io/v1beta2=true" in text
        gates = run_playbook("feature_gates.yml", {"gpusplit_feature_gates": {"DRADeviceTaintRules": True}})
        assert gates.returncode == 0, (gates.stdout + gates.stderr)[-5000:]
    api = DRA_RULES[minor()]
    rules = {}
    try:
        dra_playbook(dra)
        assert node_mode(DRA_NODE) == "dra"
        items = list_objects(api, "DeviceTaintRule", label_selector="app.kubernetes.io/managed-by=gpusplit")
        rules = {
            r["metadata"]["name"]: r for r in items if r["spec"]["deviceSelector"].get("pool") == DRA_NODE
        }
        assert sorted(rules) == [f"gpusplit-host-{DRA_NODE}-gpu-0", f"gpusplit-host-{DRA_NODE}-gpu-1"]
        assert all(r["apiVersion"] == api for r in rules.values())
        # the tenants' claims get the six Kubernetes devices, never the host's two: the seventh waits
        harness.apply(render_claim("one-gpu", dra.ns))
        names = [f"worker-{i}" for i in range(7)]
        wait_for(lambda: harness.get("v1", "ServiceAccount", "default", dra.ns), what="the service account")
        for name in names:
            harness.apply(claim_pod(dra, name, "one-gpu", DRA_NODE))
        wait_for(
            lambda: sum(1 for n in names if allocated_device(dra, n)) == 6,
            timeout=120,
            what="six allocations",
        )
        devices = {n: allocated_device(dra, n) for n in names}
        assert sorted(d for pool_device in devices.values() if pool_device for d in pool_device[1:]) == [
            f"gpu-{i}" for i in range(2, 8)
        ]
        [pending] = [n for n, d in devices.items() if d is None]
        assert "cannot allocate all claims" in wait_for(
            lambda: scheduled_message(dra, pending), what="its message"
        )
    finally:
        for name in rules:  # while their version is served (the gates go with manifests_restored)
            harness.delete(api, "DeviceTaintRule", name)
