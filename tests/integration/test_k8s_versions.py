"""The lab at each Kubernetes release (lab/versions.env KUBE_VERSIONS), and what gpusplit picks on it.

These tests run on the release of the session's lab: the default (1.37.2) in `make test`, another with
GPUSPLIT_KUBE_VERSION=<release> and a lab folder of its own (docs/dev/lab.md, "Kubernetes releases"). What
each release serves is asked of its real kube-apiserver; the expectations per minor come from the
Kubernetes sources (plugins/module_utils/_control_plane/api_versions.py names them).

* the control plane runs the release's own binaries, the nodes report it, and kubectl is within the
  one minor version of skew kubectl supports;
* the group/version gpusplit picks for each versioned API, from the real discovery answer, or the
  refusal (naming the version it needs and the gates) where the release does not serve it;
* the module device_taint_rule writes in the version the release serves (a server dry-run on 1.37) or
  fails before any change naming the release's gates (1.35, 1.36);
* playbooks/feature_gates.yml turns GenericWorkload on (and GangScheduling on 1.35 and 1.36) on the
  release's kubeadm-shaped manifests, and the Workload API of that release is served afterwards; a gang
  job submitted through the filter gang_job, given the live discovery and kube-scheduler's gates
  (control_plane_health), in the release's shape (a v1alpha1 Workload with pod groups on 1.35, a PodGroup
  on 1.36 and 1.37) is held by the release's real kube-scheduler until every member fits, then bound
  together; on 1.35 and 1.36, with GangScheduling taken off kube-scheduler alone, the same submission is
  refused before anything is created, naming the gate; the manifests are put back at the end;
* gpu_pending_diagnose takes the release's kube-scheduler message apart (1.35 and 1.36 add their PostFilter's
  words before "preemption:", kept out of the reasons).

On a second release these run in a lab of its own (GPUSPLIT_KUBE_VERSION=1.36.3, GPUSPLIT_LAB_DIR,
GPUSPLIT_LAB_HOST; docs/kubernetes-versions.md says how), about three minutes once its binaries are built.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
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
    return server_version_info().git_version


def server_version_info():
    """kube-apiserver's /version (git_version, major, minor)."""
    from kubernetes import client, config

    return client.VersionApi(config.new_client_from_config(str(C.KUBECONFIG))).get_code()


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
            playbook if Path(playbook).is_absolute() else f"playbooks/{playbook}",
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
    info = server_version_info()
    assert info.git_version == f"v{version}"
    # stamped as Kubernetes' own build stamps it: the minor alone ("36", not "36.3")
    assert (info.major, info.minor) == tuple(minor().split(".")), info
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
    stamp = json.loads(out)["clientVersion"]
    client = stamp["gitVersion"]  # v1.36.3
    assert abs(int(client.split(".")[1]) - int(minor().split(".")[1])) <= 1, client
    assert stamp["minor"] == client.split(".")[1], stamp  # the minor alone, as kubectl's own build stamps it


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


def taint_rule_dry_run() -> subprocess.CompletedProcess:
    """The module device_taint_rule in check mode (a server dry-run) on a resource.k8s.io/v1 rule of no device."""
    rule = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceTaintRule",
        "metadata": {"name": "gsver-dry-run"},
        "spec": {
            "deviceSelector": {"driver": "gpu.nvidia.com", "pool": "gsver-none", "device": "gpu-0"},
            "taint": {"key": "gpusplit.io/version-test", "effect": "None"},
        },
    }
    args = {"kubeconfig": str(C.KUBECONFIG), "definition": rule}
    return subprocess.run(
        [
            str(VENV_BIN / "ansible"),
            "localhost",
            "-m",
            "gpusplit.k8s.device_taint_rule",
            "-a",
            json.dumps(args),
        ]
        + ["--check"],
        cwd=ROOT,
        env={
            **os.environ,
            "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
            "ANSIBLE_NOCOLOR": "1",
            "ANSIBLE_CALLBACK_RESULT_FORMAT": "json",  # the result as JSON, whatever ansible.cfg says
        },
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_device_taint_rule_module_writes_the_served_version_or_refuses(lab):
    """The module asks the API server which DeviceTaintRule version it serves; on 1.35 and 1.36 out of the box
    none: it fails before any change naming the gates; on 1.37 a server dry-run in resource.k8s.io/v1 (on 1.36
    with DRADeviceTaintRules on: test_feature_gates_turn_the_workload_api_of_the_release_on)."""
    done = taint_rule_dry_run()
    out = done.stdout + done.stderr
    if minor() == "1.37":
        assert done.returncode == 0 and '"apiVersion": "resource.k8s.io/v1"' in out, out[-3000:]
        return
    assert done.returncode != 0, out[-3000:]
    assert f"Kubernetes v{release()} serves none of them" in out, out[-3000:]
    assert "Nothing was changed." in out
    assert {"1.35": "1.35 has only the alpha resource.k8s.io/v1alpha3", "1.36": "DRADeviceTaintRules (beta"}[
        minor()
    ] in out


# what kube-scheduler adds after the filters' reasons on a release, before "preemption:" (its PostFilter
# plugins' words): DynamicResources says it on every unschedulable pod on 1.35 and 1.36, claims or not
POST_FILTER = {"1.35": "no new claims to deallocate", "1.36": "no new claims to deallocate", "1.37": None}


def test_diagnose_reads_the_release_schedulers_message(lab, kubectl):
    """A GPU pod no node's labels match: gpu_pending_diagnose takes the release's real kube-scheduler message
    apart into its reasons and classes it a selector mismatch (one read of the cluster, as the module does)."""
    from kubernetes import config

    from ansible_collections.gpusplit.k8s.plugins.module_utils._diagnose import rules
    from ansible_collections.gpusplit.k8s.plugins.module_utils._diagnose.messages import parse_message
    from ansible_collections.gpusplit.k8s.plugins.module_utils._diagnose.report import diagnose
    from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.scheduling import GPU_RESOURCE_PREFIXES
    from ansible_collections.gpusplit.k8s.plugins.modules import gpu_pending_diagnose as module

    ns = f"gsver-diag-{uuid.uuid4().hex[:6]}"
    selector = "node(s) didn't match Pod's node affinity/selector"
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "nowhere", "namespace": ns},
        "spec": {
            "nodeSelector": {"gpusplit.io/version-test": ns},
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "main",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                }
            ],
        },
    }
    kubectl.namespace(ns)
    try:
        kubectl("apply", "-f", "-", stdin=json.dumps(pod))

        def message():
            got = kubectl.json("-n", ns, "get", "pod", "nowhere")
            for cond in got.get("status", {}).get("conditions") or []:
                if cond["type"] == "PodScheduled" and selector in (cond.get("message") or ""):
                    return cond["message"]
            return None

        text = kubectl.wait_for(message, timeout=90, what="the scheduler's message")
        said = POST_FILTER[minor()]
        # the release's wording, as read off its scheduler
        assert (f"{said}, preemption: " in text) if said else (". preemption: " in text), text
        parsed = parse_message(text)
        assert parsed and parsed["reasons"].get(selector, 0) >= 1, (text, parsed)
        odd = [r for r in parsed["reasons"] if "preemption" in r or ". " in r or "claim" in r]
        assert not odd, (text, parsed)
        assert parsed["post_filter"] == ([said] if said else []), parsed
        assert parsed["preemption"] and parsed["preemption"].startswith("0/"), parsed
        api = config.new_client_from_config(str(C.KUBECONFIG))
        report = diagnose(*module.read_cluster(api, GPU_RESOURCE_PREFIXES), namespaces=[ns])
        (entry,) = [e for e in report["pods"] if e["name"] == "nowhere"]
        assert entry["class"] == rules.SELECTOR, entry
    finally:
        kubectl("delete", "namespace", ns, "--wait=false", check=False)


@pytest.fixture
def manifests_restored(lab):
    found = {p.name: p.read_bytes() for p in C.MANIFESTS.glob("*.yaml")}
    yield
    for name, data in found.items():
        if (C.MANIFESTS / name).read_bytes() != data:
            (C.MANIFESTS / name).write_bytes(data)
    health = labctl.wait_healthy(240)
    assert health and all(v["healthy"] for v in health.values()), labctl.report_unhealthy(health or {})


GANG_LABEL = "gpusplit.io/version-gang"


# A user's gang job: the discovery, the gates kube-scheduler runs with (control_plane_health on the control-plane
# node), the filter gang_job given both, then the objects created. Run on the lab's control-plane host.
GANG_PLAYBOOK = """
- name: Submit a gang job the release's kube-scheduler holds
  hosts: control_plane
  gather_facts: false
  tasks:
    - name: Ask the API server what it serves
      kubernetes.core.k8s_cluster_info:
        kubeconfig: "{{ gpusplit_kubeconfig }}"
      register: cluster_info
    - name: Read the gates kube-scheduler runs with
      gpusplit.k8s.control_plane_health:
        components: [kube-scheduler]
        endpoints: "{{ gpusplit_cp_endpoints }}"
        kubeconfig: "{{ gpusplit_cp_kubeconfig }}"
        feature_gates: {GenericWorkload: true, GangScheduling: true}
        timeout: 0
        stable_probes: 1
      register: scheduler
      failed_when: false
    - name: Render the gang
      ansible.builtin.set_fact:
        gang: "{{ gang_spec | gpusplit.k8s.gang_job(cluster_info, scheduler) }}"
    - name: Create it
      kubernetes.core.k8s:
        kubeconfig: "{{ gpusplit_kubeconfig }}"
        definition: "{{ gang }}"
"""


def submit_gang(tmp_path: Path, spec: dict) -> subprocess.CompletedProcess:
    playbook = tmp_path / "gang.yml"
    playbook.write_text(GANG_PLAYBOOK)
    return run_playbook(str(playbook), {"gang_spec": spec}, timeout=300)


def gang_spec(ns: str, run: str) -> dict:
    """Three one-GPU pods, kept to a kwok node of this run by its label and taint."""
    return {
        "name": "train",
        "namespace": ns,
        "replicas": 3,
        "gpus_per_pod": 1,
        "node_selector": {GANG_LABEL: run},
        "tolerations": [{"key": GANG_LABEL, "operator": "Equal", "value": run, "effect": "NoSchedule"}],
        "termination_grace_period_seconds": 0,
    }


def scheduler_without_gang_scheduling() -> None:
    """kube-scheduler's manifest with GenericWorkload kept and GangScheduling taken out (as where feature_gates.yml
    ran with GenericWorkload alone), the scheduler restarted with it; manifests_restored puts it back."""
    import re

    path = C.MANIFESTS / "kube-scheduler.yaml"
    text = path.read_text()
    edited = re.sub(r"GangScheduling=true,?", "", text).replace(",\n", "\n")
    assert edited != text and "GenericWorkload=true" in edited, edited
    path.write_text(edited)
    health = labctl.wait_healthy(240)
    assert health and all(v["healthy"] for v in health.values()), labctl.report_unhealthy(health or {})


def gang_refused_without_gang_scheduling(kubectl, tmp_path: Path) -> None:
    """GenericWorkload on, GangScheduling off on kube-scheduler: the run stops at the filter, naming the gate,
    before anything is created."""
    run = uuid.uuid4().hex[:6]
    ns = f"gsver-nogang-{run}"
    kubectl.namespace(ns)
    try:
        started = time.monotonic()
        scheduler_without_gang_scheduling()
        done = submit_gang(tmp_path, gang_spec(ns, run))
        text = " ".join((done.stdout + done.stderr).split())
        assert done.returncode != 0, text[-3000:]
        assert (
            f"Kubernetes v{release()} serves the API, but GangScheduling on kube-scheduler is off" in text
        ), text[-3000:]
        assert "gpusplit_feature_gates {GenericWorkload: true, GangScheduling: true}" in text
        assert "Nothing was changed." in text
        group = {"1.35": "workloads", "1.36": "podgroups"}[minor()] + ".scheduling.k8s.io"
        assert kubectl.json("-n", ns, "get", "pods")["items"] == []
        assert kubectl.json("-n", ns, "get", group)["items"] == []
        print(f"\n{release()}: gang refused without GangScheduling in {time.monotonic() - started:.1f}s")
    finally:
        kubectl("delete", "namespace", ns, "--wait=false", check=False)


def cluster_info(apis: dict, version: str) -> dict:
    """kubernetes.core.k8s_cluster_info's answer, the input of the filter gang_job."""
    return {"apis": apis, "version": {"server": {"kubernetes": {"gitVersion": version}}}}


def gang_waits_until_all_fit(
    kubectl, core_api, apis: dict, version: str, playbook_dir: Path | None = None
) -> None:
    """A gang of three one-GPU pods on a kwok node of its own with two GPUs: none is bound; with a third GPU all
    three are bound together. Submitted through the filter given the live discovery and kube-scheduler's gates
    (GANG_PLAYBOOK, run from ``playbook_dir``), or else rendered from ``apis`` and ``version`` and applied."""
    from test_gang_scheduling import node_ready, set_gpus

    from ansible_collections.gpusplit.k8s.plugins.plugin_utils import gang_job_render as workload
    from lab import nodes as labnodes

    run = uuid.uuid4().hex[:6]
    ns, node = f"gsver-gang-{run}", f"gsver-gang-{run}"
    labnodes.ensure_node(core_api, node, labels={GANG_LABEL: run})
    kubectl("taint", "node", node, f"{GANG_LABEL}={run}:NoSchedule", "--overwrite")
    set_gpus(kubectl, node, 2)
    kubectl.wait_for(lambda: node_ready(kubectl, node), timeout=90, what=f"node {node} Ready")
    kubectl.namespace(ns)
    group_kind = {"1.35": "Workload"}.get(minor(), "PodGroup")
    members = lambda: kubectl.json("-n", ns, "get", "pods", "-l", "gpusplit.io/podgroup=train")["items"]  # noqa: E731
    try:
        if playbook_dir is None:
            objects = workload.render_gang_job(gang_spec(ns, run), cluster_info(apis, version))
            kubectl(
                "apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects})
            )
        else:
            done = submit_gang(playbook_dir, gang_spec(ns, run))
            assert done.returncode == 0, (done.stdout + done.stderr)[-5000:]
        (group,) = kubectl.json("-n", ns, "get", f"{group_kind.lower()}s.scheduling.k8s.io")["items"]
        assert group["apiVersion"] == next(iter(GENERIC_WORKLOAD[minor()])), group
        created = members()
        link = "workloadRef" if group_kind == "Workload" else "schedulingGroup"
        assert len(created) == 3 and all(p["spec"].get(link) for p in created), (
            created
        )  # kept: the gate is on
        deadline = time.time() + 20
        while time.time() < deadline:  # two of the three would fit one by one: the gang holds them
            assert not [p["metadata"]["name"] for p in members() if p["spec"].get("nodeName")]
            time.sleep(1)
        messages = sorted(
            {c.get("message", "") for p in members() for c in p["status"].get("conditions") or []}
        )
        set_gpus(kubectl, node, 3)
        started = time.monotonic()
        kubectl.wait_for(
            lambda: all(p["spec"].get("nodeName") == node for p in members()),
            timeout=120,
            what="all three members bound",
        )
        print(
            f"\n{release()}: gang of 3 in {group['apiVersion']} {group_kind} held on 2 GPUs ({messages}), "
            f"bound {time.monotonic() - started:.1f}s after the third"
        )
    finally:
        kubectl("delete", "namespace", ns, "--wait=true", "--timeout=90s", check=False)
        kubectl("delete", "node", node, "--wait=false", check=False)


def test_feature_gates_turn_the_workload_api_of_the_release_on(
    manifests_restored, kubectl, core_api, tmp_path
):
    before = discovery()
    for group_version in GENERIC_WORKLOAD[minor()]:
        assert group_version not in before
    # out of the box the gang job is refused, naming the gates of the release
    with pytest.raises(ApiVersionError, match="GenericWorkload"):
        pick("gang", before, server_version())
    # on 1.36 DRADeviceTaintRules too (and its runtime-config, resource.k8s.io/v1beta2), in the same rollout
    gates = {**GANG_GATES[minor()], **({"DRADeviceTaintRules": True} if minor() == "1.36" else {})}
    done = run_playbook("feature_gates.yml", {"gpusplit_feature_gates": gates})
    assert done.returncode == 0, (done.stdout + done.stderr)[-5000:]
    after = discovery()
    if minor() == "1.36":  # the module now writes the rule as v1beta2 (a server dry-run)
        assert pick("device_taint_rule", after, server_version()) == "resource.k8s.io/v1beta2"
        dry = taint_rule_dry_run()
        out = dry.stdout + dry.stderr
        assert dry.returncode == 0 and '"apiVersion": "resource.k8s.io/v1beta2"' in out, out[-3000:]
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
    assert "GangScheduling=true" in (C.MANIFESTS / "kube-scheduler.yaml").read_text() or minor() == "1.37"
    gang_waits_until_all_fit(kubectl, core_api, after, version, playbook_dir=tmp_path)
    if "GangScheduling" in gates:
        # the Workload API served, but a kube-scheduler without GangScheduling would not hold a gang: refused
        gang_refused_without_gang_scheduling(kubectl, tmp_path)


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
