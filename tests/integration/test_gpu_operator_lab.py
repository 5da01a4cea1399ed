"""GPU Operator mode on the lab control plane (playbooks/gpu_operator.yml).

Real here: kube-apiserver (with the real ClusterPolicy CRD of NVIDIA/gpu-operator v26.7.0 from the
shared reference folder, so every ClusterPolicy write is validated against its openAPIV3Schema),
scheduler, controller-manager (the DaemonSet controller places the plugin pods by node label).
Simulated: the kubelets (kwok), the device plugins (lab/deviceplugin.py: a privileged plugin sees
every GPU of the node), and the GPU Operator itself - there is none in the lab, and helm cannot
reach NVIDIA's chart repository here, so the play runs with gpusplit_operator_install=skip (the
test checks that it says so). This test plays the operator's part: it creates the ClusterPolicy as
the chart would (server-side, field manager helm) with a toolkit.env entry of its own, labels its
GPU nodes nvidia.com/gpu.deploy.device-plugin=true as the operator does for every GPU node, and
runs the operator's device-plugin DaemonSet shape (privileged, nodeSelector on that label, owned by
the ClusterPolicy). Only this test's own nodes get the operator's labels, not the shared lab nodes.

The fleet: the lab inventory (device_plugin/none nodes, unchanged) plus this test's own nodes: two
split gpu_operator nodes, one gpu_operator MIG node (mig_strategy single, gpusplit_mig_config) and
one GPU node that gpusplit does not plan (it keeps the operator's plugin). At the end the lab is put
back with `ansible-playbook -i inventory/lab playbooks/site.yml`, which must verify all OK.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
import uuid
from pathlib import Path

import pytest
import yaml
from ansible_output import ansible_playbook, changed_tasks, recap

from lab import components as C

ROOT = Path(__file__).resolve().parents[2]
INVENTORY = ROOT / "inventory" / "lab"
REFERENCE_DIR = Path(
    os.environ.get("GPUSPLIT_REFERENCE_DIR") or Path(__file__).resolve().parents[3] / "shared" / "reference"
)
CRD_FILE = REFERENCE_DIR / "NVIDIA_gpu-operator" / "nvidia.com_clusterpolicies.yaml"
SAMPLE_FILE = REFERENCE_DIR / "NVIDIA_gpu-operator" / "v1_clusterpolicy.yaml"
CRD_NAME = "clusterpolicies.nvidia.com"
GPU = "nvidia.com/gpu"
DEPLOY_DP = "nvidia.com/gpu.deploy.device-plugin"
MIG_CONFIG = "nvidia.com/mig.config"
CONFLICT = "gpusplit.io/lab-device-plugin-conflict"
PLUGIN_SELECTOR = "app.kubernetes.io/managed-by=gpusplit,app.kubernetes.io/name=gpusplit-device-plugin"
HARDENING = [
    {"name": "ACCEPT_NVIDIA_VISIBLE_DEVICES_ENVVAR_WHEN_UNPRIVILEGED", "value": "false"},
    {"name": "ACCEPT_NVIDIA_VISIBLE_DEVICES_AS_VOLUME_MOUNTS", "value": "true"},
]
OTHERS_ENTRY = {"name": "CONTAINERD_SOCKET", "value": "/run/containerd/containerd.sock"}
API_DOWN = ("Connection refused", "Max retries exceeded", "connection reset", "ServiceUnavailable")

if not CRD_FILE.exists():
    pytest.skip(
        f"reference file {CRD_FILE} is absent (the shared reference folder with the real ClusterPolicy CRD)",
        allow_module_level=True,
    )

RUN = uuid.uuid4().hex[:5]
P = f"gpo-{RUN}"
NS = f"{P}-operator"
POLICY = f"{P}-policy"
SPLIT_DGX, SPLIT_H200, MIG_NODE, FREE = f"{P}-dgx", f"{P}-h200", f"{P}-mig", f"{P}-free"
A100 = f"{P}-a100"
A100_FIXTURE = json.loads((ROOT / "tests" / "fixtures" / "gpus" / "a100-mig-uniform.json").read_text())
A100_MIG_GPUS = [g["uuid"] for g in A100_FIXTURE["gpus"][:2]]  # MIG on: two 3g.40gb devices each
A100_MIGS = [m["uuid"] for g in A100_FIXTURE["gpus"][:2] for m in g["mig_devices"]]
OWN_HOSTS = {
    SPLIT_DGX: {
        "gpusplit_lab_fixture": "dgx-h100",
        "gpusplit_mode": "gpu_operator",
        "gpusplit_mig_strategy": "single",
        "gpusplit_split": {"host_count": 2},
    },
    SPLIT_H200: {
        "gpusplit_lab_fixture": "h200",
        "gpusplit_mode": "gpu_operator",
        "gpusplit_mig_strategy": "single",
        "gpusplit_split": {"count": 1},
    },
    # MIG asked of the operator's MIG manager on an H200 node whose GPU has MIG off today and goes to
    # Kubernetes (a node-wide layout is refused where the host keeps a GPU): the plan counts whole GPUs
    # until the MIG manager has applied the config and gpusplit runs again
    MIG_NODE: {
        "gpusplit_lab_fixture": "h200",
        "gpusplit_mode": "gpu_operator",
        "gpusplit_mig_strategy": "single",
        "gpusplit_mig_config": "all-1g.18gb",
        "gpusplit_split": {"count": 1},
    },
    # an A100 host with MIG on GPUs 0 and 1: Kubernetes gets them, named by the MIG UUIDs of their
    # four MIG devices (as `nvidia-smi -L` prints them); GPUs 2 and 3 stay with the host
    A100: {
        "gpusplit_lab_fixture": "a100-mig-uniform",
        "gpusplit_mode": "gpu_operator",
        "gpusplit_mig_strategy": "single",
        "gpusplit_split": {"uuids": A100_MIGS},
    },
}
FIXTURE_OF = {
    SPLIT_DGX: "dgx-h100",
    SPLIT_H200: "h200",
    MIG_NODE: "h200",
    A100: "a100-mig-uniform",
    FREE: "workstation",
}
# the operator's privileged plugin sees every GPU; without a MIG strategy it counts whole GPUs
ALL_GPUS = {SPLIT_DGX: 8, SPLIT_H200: 1, MIG_NODE: 1, A100: 4, FREE: 2}


# --------------------------------------------------------------------------------------------
# helpers

API_DOWN_KUBECTL = (
    "refused",
    "Unable to connect",
    "ServiceUnavailable",
    "unable to handle the request",
    "EOF",
)


class Patient:
    """The session's kubectl, retried while the lab apiserver restarts (another engineer's tests do that)."""

    def __init__(self, kubectl):
        self.kubectl = kubectl

    def __call__(self, *args, check=True, stdin=None):
        for _ in range(60):
            proc = self.kubectl(*args, check=False, stdin=stdin)
            if proc.returncode == 0 or not any(s in proc.stderr for s in API_DOWN_KUBECTL):
                break
            time.sleep(3)
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {proc.stderr.strip()}")
        return proc

    def json(self, *args):
        return json.loads(self(*args, "-o", "json").stdout)

    def namespace(self, name):
        return self.kubectl.namespace(name)

    def wait_for(self, predicate, timeout=60, interval=0.5, what="condition"):
        return self.kubectl.wait_for(predicate, timeout=timeout, interval=interval, what=what)


@pytest.fixture(scope="module")
def kubectl(kubectl):
    return Patient(kubectl)


def api_ready(kubectl, timeout=180):
    """Other engineers restart the lab apiserver now and then: wait until it answers."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if kubectl("get", "--raw", "/readyz", check=False).returncode == 0:
            return
        time.sleep(2)
    raise AssertionError("the lab apiserver did not become ready")


def run_playbook(kubectl, playbook, inventory, *extra, check=True):
    for attempt in range(4):
        api_ready(kubectl)
        proc = ansible_playbook(playbook, inventory, *extra)
        if proc.returncode == 0 or attempt == 3 or not any(s in proc.stdout + proc.stderr for s in API_DOWN):
            break
        time.sleep(5)  # the apiserver went away during the run: run it again once it is back
    if check and proc.returncode != 0:
        raise AssertionError(f"{playbook} failed:\n{proc.stdout[-8000:]}\n{proc.stderr[-3000:]}")
    return proc


def clusterpolicy_writes(kubectl):
    """Write requests to ClusterPolicies (nobody but this test and gpusplit touches them in the lab)."""
    total = 0
    for line in kubectl("get", "--raw", "/metrics").stdout.splitlines():
        if (
            line.startswith("apiserver_request_total{")
            and 'resource="clusterpolicies"' in line
            and 'dry_run="All"' not in line
            and 'subresource="status"' not in line
            and re.search(r'verb="(POST|PUT|PATCH|APPLY|DELETE)"', line)
        ):
            total += int(float(line.rsplit(" ", 1)[1]))
    return total


def manager_times(obj):
    """When gpusplit's field managers last changed something on obj."""
    return {
        (m["manager"], m["operation"]): m.get("time")
        for m in obj["metadata"].get("managedFields") or []
        if m["manager"].startswith("gpusplit")
    }


def fields(obj, manager):
    """The fieldsV1 that ``manager`` owns through Apply on obj."""
    (entry,) = [
        m for m in obj["metadata"]["managedFields"] if m["manager"] == manager and m["operation"] == "Apply"
    ]
    return entry["fieldsV1"]


def node(kubectl, name):
    return kubectl.json("get", "node", name, "--show-managed-fields")


def advertised(kubectl, name):
    return node(kubectl, name)["status"].get("allocatable", {}).get(GPU)


def split_daemonsets(kubectl):
    items = kubectl.json("get", "daemonsets", "-A", "-l", PLUGIN_SELECTOR)["items"]
    return {d["metadata"]["name"]: d for d in items}


def operator_inventory(tmp: Path, edit=None) -> Path:
    """The lab inventory plus this test's hosts (gpu_nodes), settings for the run in group_vars."""
    dest = tmp / "inventory"
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(INVENTORY, dest)
    doc = yaml.safe_load((dest / "hosts.yml").read_text())
    hosts = doc["all"]["children"]["gpu_nodes"]["hosts"]
    for name, hvars in OWN_HOSTS.items():
        # the host side (gpu_host) of this test's hosts writes under the test's own scratch root
        hosts[name] = {**json.loads(json.dumps(hvars)), "gpusplit_host_root": str(tmp / "hosts" / name)}
    if edit:
        edit(hosts)
    (dest / "hosts.yml").write_text(yaml.safe_dump(doc))
    extra = {
        # the operator's toolkit is hardened, so the split plugins take their GPUs by volume mounts
        "gpusplit_plugin_settings": {"hardening": "volume-mounts"},
        # helm cannot reach https://helm.ngc.nvidia.com/nvidia from the lab: configure what is there
        "gpusplit_operator_install": "skip",
        "gpusplit_out_dir": str(tmp / "out"),
        # named, so that a second ClusterPolicy (another run of this test) cannot stop this run;
        # test_several_clusterpolicies_stop_the_play_until_one_is_named runs without it
        "gpusplit_operator_clusterpolicy": POLICY,
    }
    group_vars = dest / "group_vars" / "all.yml"
    merged = {**yaml.safe_load(group_vars.read_text()), **extra}
    group_vars.write_text(
        "# the lab's group_vars/all.yml with test_gpu_operator_lab's settings\n" + yaml.safe_dump(merged)
    )
    return dest


def drop_nulls(node):
    if isinstance(node, dict):
        return {k: drop_nulls(v) for k, v in node.items() if v is not None}
    return node


def clusterpolicy_doc(name):
    # the sample's empty `validator.plugin:` (null) is refused by the CRD's schema: left out
    doc = drop_nulls(yaml.safe_load(SAMPLE_FILE.read_text()))
    doc["metadata"] = {"name": name}
    doc["spec"]["toolkit"]["env"] = [dict(OTHERS_ENTRY)]
    return doc


def operator_plugin_daemonset(owner):
    """The shape of the operator's device plugin (gpu-operator assets/state-device-plugin/0500_daemonset.yaml)."""
    name = "nvidia-device-plugin-daemonset"
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {
            "name": name,
            "namespace": NS,
            "labels": {"app": name},
            "ownerReferences": [
                {
                    "apiVersion": "nvidia.com/v1",
                    "kind": "ClusterPolicy",
                    "name": owner["metadata"]["name"],
                    "uid": owner["metadata"]["uid"],
                    "controller": True,
                }
            ],
        },
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "nodeSelector": {DEPLOY_DP: "true"},
                    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                    "priorityClassName": "system-node-critical",
                    "containers": [
                        {
                            "name": "nvidia-device-plugin",
                            "image": "nvcr.io/nvidia/k8s-device-plugin:v0.20.0",
                            "securityContext": {"privileged": True},
                            "env": [
                                {"name": "DEVICE_ID_STRATEGY", "value": "uuid"},
                                {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
                            ],
                        }
                    ],
                },
            },
        },
    }


# --------------------------------------------------------------------------------------------
# the fixture: CRD, ClusterPolicy, simulated operator, own nodes; the run; the lab restored


@pytest.fixture(scope="module")
def operator(lab, kubectl, core_api, tmp_path_factory):
    from lab import nodes as labnodes

    tmp = tmp_path_factory.mktemp("gpu-operator")
    api_ready(kubectl)
    created_crd = kubectl("get", "crd", CRD_NAME, check=False).returncode != 0
    state = {"tmp": tmp, "created_crd": created_crd}
    try:
        if created_crd:
            kubectl("apply", "--server-side", "--field-manager=gpusplit-test", "-f", str(CRD_FILE))
        # not `kubectl wait`: it errors out instead of waiting while a new CRD has no conditions yet
        kubectl.wait_for(
            lambda: any(
                c["type"] == "Established" and c["status"] == "True"
                for c in kubectl.json("get", "crd", CRD_NAME).get("status", {}).get("conditions") or []
            ),
            timeout=60,
            what=f"CRD {CRD_NAME} to be Established",
        )
        kubectl.namespace(NS)
        for name, fixture in FIXTURE_OF.items():
            labnodes.ensure_node(core_api, name, fixture)
            # what the operator does on every GPU node that has no such label yet
            kubectl(
                "label",
                "node",
                name,
                "nvidia.com/gpu.present=true",
                f"{DEPLOY_DP}=true",
                "nvidia.com/gpu.deploy.container-toolkit=true",
                "nvidia.com/gpu.deploy.gpu-feature-discovery=true",
                "--overwrite",
            )
        # the ClusterPolicy as the chart creates it (helm applies server-side), with an env entry of its own
        kubectl(
            "apply",
            "--server-side",
            "--field-manager=helm",
            "-f",
            "-",
            stdin=json.dumps(clusterpolicy_doc(POLICY)),
        )
        kubectl(
            "patch",
            "clusterpolicy",
            POLICY,
            "--subresource=status",
            "--type=merge",
            "-p",
            json.dumps({"status": {"state": "ready", "namespace": NS}}),
        )
        policy = kubectl.json("get", "clusterpolicy", POLICY)
        kubectl("apply", "-f", "-", stdin=json.dumps(operator_plugin_daemonset(policy)))
        kubectl.wait_for(
            lambda: all(advertised(kubectl, n) == str(c) for n, c in ALL_GPUS.items()),
            timeout=120,
            what="the operator's privileged plugin to advertise every GPU of the test's nodes",
        )
        state["before"] = {n: advertised(kubectl, n) for n in ALL_GPUS}
        state["inventory"] = operator_inventory(tmp)
        state["run"] = run_playbook(kubectl, "gpu_operator.yml", state["inventory"])
        yield state
    finally:
        api_ready(kubectl)
        kubectl("delete", "namespace", NS, "--wait=false", "--ignore-not-found")
        kubectl("delete", "clusterpolicy", "-l", f"gpusplit-test={RUN}", "--ignore-not-found")
        kubectl("delete", "clusterpolicy", POLICY, "--ignore-not-found")
        for name in FIXTURE_OF:
            kubectl("delete", "node", name, "--wait=false", "--ignore-not-found")
        # the run switched the operator's plugin off on the shared lab nodes too (operator_managed):
        # take that label away again, the lab has no operator
        lab_doc = yaml.safe_load((INVENTORY / "hosts.yml").read_text())
        for name in lab_doc["all"]["children"]["gpu_nodes"]["hosts"]:
            if kubectl("get", "node", name, check=False).returncode == 0:
                kubectl("label", "node", name, f"{DEPLOY_DP}-")
        left = kubectl("get", "clusterpolicies", "-o", "name", check=False).stdout.split()
        if created_crd and not left:  # another run of this test may still use it
            kubectl("delete", "crd", CRD_NAME, "--ignore-not-found")
        restore = run_playbook(kubectl, "site.yml", INVENTORY, check=False)
        assert restore.returncode == 0, restore.stdout[-6000:]
        counts = json.loads((C.OUT / "fleet-report.json").read_text())["counts"]
        assert counts["FAIL"] == 0 and counts["DRIFT"] == 0, counts
        assert not split_daemonsets(kubectl).keys() & {f"gpusplit-dp-{n}" for n in FIXTURE_OF}


# --------------------------------------------------------------------------------------------
# tests


def test_helm_is_skipped_in_the_lab_and_the_play_says_so(operator):
    out = " ".join(operator["run"].stdout.split())
    assert "helm skipped (gpusplit_operator_install=skip)" in out
    assert "gpu-operator v26.7.0 from https://helm.ngc.nvidia.com/nvidia" in out
    assert (
        "Install the GPU Operator chart" in out
        and "skipping" in out.split("Install the GPU Operator chart")[1][:400]
    )


def test_the_clusterpolicy_carries_gpusplits_fields_and_keeps_the_others(operator, kubectl):
    cp = kubectl.json("get", "clusterpolicy", POLICY, "--show-managed-fields")
    assert cp["spec"]["toolkit"]["env"] == [OTHERS_ENTRY, *HARDENING]
    assert cp["spec"]["mig"]["strategy"] == "single"
    assert "env" not in cp["spec"].get("devicePlugin", {})  # the operator's CDI is on (CRD default)
    assert cp["spec"]["cdi"]["enabled"] is True
    assert (
        cp["spec"]["driver"]["enabled"] is True and cp["spec"]["migManager"]["enabled"] is True
    )  # untouched
    gpusplit, helm = fields(cp, "gpusplit"), fields(cp, "helm")
    # the atomic env list moved to gpusplit as a whole (with helm's entry in it); helm keeps the rest
    assert gpusplit["f:spec"] == {"f:toolkit": {"f:env": {}}, "f:mig": {"f:strategy": {}}}
    assert "f:env" not in helm["f:spec"]["f:toolkit"] and "f:enabled" in helm["f:spec"]["f:toolkit"]
    assert "f:driver" in helm["f:spec"]
    summary = " ".join(operator["run"].stdout.split())
    assert f"configures ClusterPolicy {POLICY} (active)" in summary


def test_the_apiserver_validates_clusterpolicies_against_the_crd(operator, kubectl):
    """Control: the CRD's schema is enforced here (a bad enum is refused), and a whole ClusterPolicy
    made of the chart's sample plus gpusplit's fields is accepted as a new object."""
    bad = {
        "apiVersion": "nvidia.com/v1",
        "kind": "ClusterPolicy",
        "metadata": {"name": POLICY},
        "spec": {"mig": {"strategy": "half"}},
    }
    proc = kubectl(
        "apply",
        "--server-side",
        "--dry-run=server",
        "--field-manager=gpusplit-test",
        "--force-conflicts",  # helm and gpusplit own spec.mig.strategy: get past them to the schema
        "-f",
        "-",
        stdin=json.dumps(bad),
        check=False,
    )
    assert proc.returncode != 0 and "spec.mig.strategy" in proc.stderr and "supported values" in proc.stderr
    whole = clusterpolicy_doc(f"{P}-whole")
    live = kubectl.json("get", "clusterpolicy", POLICY)
    whole["spec"]["toolkit"]["env"] = live["spec"]["toolkit"]["env"]
    whole["spec"]["mig"] = live["spec"]["mig"]
    kubectl("create", "--dry-run=server", "-f", "-", stdin=json.dumps(whole))


def test_split_nodes_get_the_split_plugin_and_the_operators_plugin_stays_on_the_unsplit_node(
    operator, kubectl
):
    dss = split_daemonsets(kubectl)
    for name in (SPLIT_DGX, SPLIT_H200, MIG_NODE, A100):
        labels = node(kubectl, name)["metadata"]["labels"]
        assert labels[DEPLOY_DP] == "false", name
        assert labels["gpusplit.io/split"] == "true" and labels["gpusplit.io/mode"] == "gpu_operator"
        ds = dss[f"gpusplit-dp-{name}"]
        container = ds["spec"]["template"]["spec"]["containers"][0]
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["DEVICE_LIST_STRATEGY"] == "volume-mounts" and env["MIG_STRATEGY"] == "single"
        assert container["securityContext"]["privileged"] is False
        assert container["securityContext"]["capabilities"]["add"] == ["SYS_ADMIN"]
    free = node(kubectl, FREE)["metadata"]["labels"]
    assert free[DEPLOY_DP] == "true" and "gpusplit.io/split" not in free
    assert f"gpusplit-dp-{FREE}" not in dss
    # MIG: the operator's label for the MIG manager, under gpusplit's second field manager
    mig = node(kubectl, MIG_NODE)
    assert mig["metadata"]["labels"][MIG_CONFIG] == "all-1g.18gb"
    assert fields(mig, "gpusplit-gpu-operator")["f:metadata"] == {"f:labels": {f"f:{MIG_CONFIG}": {}}}
    assert f"f:{MIG_CONFIG}" not in fields(mig, "gpusplit")["f:metadata"]["f:labels"]
    assert f"f:{DEPLOY_DP}" in fields(mig, "gpusplit")["f:metadata"]["f:labels"]
    env = {
        e["name"]: e.get("value")
        for e in dss[f"gpusplit-dp-{MIG_NODE}"]["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    plan = json.loads((operator["tmp"] / "out" / "fleet-plan.json").read_text())
    # parent GPUs by UUID: once the MIG manager has made MIG devices of them, the plugin (single)
    # advertises those; the UUIDs of whole GPUs stay the same, so this DaemonSet stays valid
    assert env["NVIDIA_VISIBLE_DEVICES"].split(",") == plan["nodes"][MIG_NODE]["kubernetes_uuids"]
    assert len(plan["nodes"][MIG_NODE]["kubernetes_uuids"]) == 1
    assert plan["nodes"][MIG_NODE]["kubernetes_mig_uuids"] == []  # MIG is off on them today
    text = " ".join(operator["run"].stdout.split())
    assert (
        f"{MIG_NODE}: nvidia.com/mig.config=all-1g.18gb asks for MIG but no GPU of the Kubernetes share"
        in text
    )
    for name in (SPLIT_DGX, SPLIT_H200, FREE):
        assert MIG_CONFIG not in node(kubectl, name)["metadata"]["labels"], name


def test_advertisements_and_verify_verdicts(operator, kubectl):
    assert operator["before"] == {n: str(c) for n, c in ALL_GPUS.items()}  # the operator's plugin saw all
    # the A100's split plugin sees GPUs 0 and 1 and, under single, advertises their four MIG devices
    expected = {SPLIT_DGX: "6", SPLIT_H200: "1", FREE: "2", MIG_NODE: "1", A100: "4"}
    kubectl.wait_for(
        lambda: all(advertised(kubectl, n) == v for n, v in expected.items()),
        what=f"advertisements {expected}",
    )
    pods = kubectl.json("-n", NS, "get", "pods")["items"]
    assert sorted(p["spec"].get("nodeName") for p in pods if not p["metadata"].get("deletionTimestamp")) == [
        FREE
    ]
    for name in (SPLIT_DGX, SPLIT_H200, MIG_NODE):
        assert not (node(kubectl, name)["metadata"].get("annotations") or {}).get(CONFLICT), name
    report = json.loads((operator["tmp"] / "out" / "fleet-report.json").read_text())
    verdicts = {n["name"]: n for n in report["nodes"]}
    assert verdicts[SPLIT_DGX]["verdict"] == "OK" and verdicts[SPLIT_DGX]["allocatable"] == 6
    assert verdicts[SPLIT_H200]["verdict"] == "OK" and verdicts[SPLIT_H200]["allocatable"] == 1
    assert verdicts[MIG_NODE]["verdict"] == "OK" and verdicts[MIG_NODE]["allocatable"] == 1
    assert verdicts[A100]["verdict"] == "OK" and verdicts[A100]["resources"] == {GPU: 4}
    assert report["counts"] == {"OK": len(verdicts), "DRIFT": 0, "FAIL": 0}
    lab_hosts = yaml.safe_load((INVENTORY / "hosts.yml").read_text())["all"]["children"]["gpu_nodes"]["hosts"]
    assert all(verdicts[h]["verdict"] == "OK" for h in lab_hosts), {h: verdicts[h] for h in lab_hosts}
    assert FREE not in verdicts  # not planned: gpusplit leaves it to the operator


def test_rerun_changes_nothing(operator, kubectl):
    def snapshot():
        cp = kubectl.json("get", "clusterpolicy", POLICY, "--show-managed-fields")
        nodes = {n: manager_times(node(kubectl, n)) for n in (SPLIT_DGX, SPLIT_H200, MIG_NODE, A100)}
        dss = {n: d["metadata"]["generation"] for n, d in split_daemonsets(kubectl).items()}
        return cp["metadata"]["generation"], manager_times(cp), nodes, dss

    before, writes = snapshot(), clusterpolicy_writes(kubectl)
    proc = run_playbook(kubectl, "gpu_operator.yml", operator["inventory"])
    assert all(r["changed"] == 0 for r in recap(proc.stdout).values()), changed_tasks(proc.stdout)
    assert snapshot() == before
    assert clusterpolicy_writes(kubectl) == writes


def test_several_clusterpolicies_stop_the_play_until_one_is_named(operator, kubectl):
    other = f"{P}-second"
    doc = clusterpolicy_doc(other)
    doc["metadata"]["labels"] = {"gpusplit-test": RUN}
    kubectl("create", "-f", "-", stdin=json.dumps(doc))
    try:
        before = kubectl.json("get", "clusterpolicy", POLICY)["metadata"]["resourceVersion"]
        unnamed = ("-e", json.dumps({"gpusplit_operator_clusterpolicy": None}))
        proc = run_playbook(kubectl, "gpu_operator.yml", operator["inventory"], *unnamed, check=False)
        assert proc.returncode != 0
        text = " ".join(proc.stdout.split())
        assert re.search(r"\b\d ClusterPolicies in the cluster: ", text), text[-3000:]
        assert f"{POLICY} (created" in text and "ACTIVE" in text and f"The active one is {POLICY}" in text
        assert "gpusplit_operator_clusterpolicy" in text and "Nothing was changed." in text
        assert kubectl.json("get", "clusterpolicy", POLICY)["metadata"]["resourceVersion"] == before
        assert kubectl.json("get", "clusterpolicy", other)["spec"]["toolkit"]["env"] == [OTHERS_ENTRY]

        named = run_playbook(kubectl, "gpu_operator.yml", operator["inventory"])  # names POLICY
        assert all(r["changed"] == 0 for r in recap(named.stdout).values()), changed_tasks(named.stdout)
        assert kubectl.json("get", "clusterpolicy", other)["spec"]["toolkit"]["env"] == [OTHERS_ENTRY]
    finally:
        kubectl("delete", "clusterpolicy", other, "--ignore-not-found")


def test_mixed_mig_strategies_across_gpu_operator_nodes_are_refused(operator, kubectl):
    def edit(hosts):
        hosts[SPLIT_H200]["gpusplit_mig_strategy"] = "none"

    inv = operator_inventory(operator["tmp"] / "mixed", edit)
    before = kubectl.json("get", "clusterpolicy", POLICY)["metadata"]["resourceVersion"]
    dss = {n: d["metadata"]["generation"] for n, d in split_daemonsets(kubectl).items()}
    proc = run_playbook(kubectl, "gpu_operator.yml", inv, check=False)
    assert proc.returncode != 0
    text = " ".join(proc.stdout.split())
    assert "one MIG strategy for the whole cluster" in text
    assert f"none: {SPLIT_H200}; single: {A100}, {SPLIT_DGX}, {MIG_NODE}" in text
    assert kubectl.json("get", "clusterpolicy", POLICY)["metadata"]["resourceVersion"] == before
    assert {n: d["metadata"]["generation"] for n, d in split_daemonsets(kubectl).items()} == dss


def test_mig_devices_selected_by_uuid_give_kubernetes_their_gpus(operator, kubectl):
    plan = json.loads((operator["tmp"] / "out" / "fleet-plan.json").read_text())["nodes"][A100]
    assert plan["kubernetes_uuids"] == A100_MIG_GPUS and plan["kubernetes_mig_uuids"] == A100_MIGS
    assert plan["host_uuids"] == [g["uuid"] for g in A100_FIXTURE["gpus"][2:]]
    assert plan["resources"] == {GPU: 4}
    container = split_daemonsets(kubectl)[f"gpusplit-dp-{A100}"]["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    # the plugin is handed the parent GPUs; it advertises every MIG device on them, which is all of them
    assert env["NVIDIA_VISIBLE_DEVICES"] == ",".join(A100_MIG_GPUS) and env["MIG_STRATEGY"] == "single"
    assert env["NVIDIA_MIG_MONITOR_DEVICES"] == "all"
    kubectl.wait_for(lambda: advertised(kubectl, A100) == "4", what=f"{A100} to advertise its 4 MIG devices")


def test_part_of_a_gpus_mig_devices_is_refused_before_anything_changes(operator, kubectl):
    def edit(hosts):
        hosts[A100]["gpusplit_split"] = {"uuids": A100_MIGS[:3]}

    inv = operator_inventory(operator["tmp"] / "part-of-a-gpu", edit)
    before = kubectl.json("get", "clusterpolicy", POLICY)["metadata"]["resourceVersion"]
    dss = {n: d["metadata"]["generation"] for n, d in split_daemonsets(kubectl).items()}
    labels = node(kubectl, A100)["metadata"]["labels"]
    proc = run_playbook(kubectl, "gpu_operator.yml", inv, check=False)
    assert proc.returncode != 0
    text = " ".join(proc.stdout.split())
    assert f"{A100}: split.uuids names 1 of the 2 MIG devices of GPU {A100_MIG_GPUS[1]}" in text, text[-3000:]
    assert f"so {A100_MIGS[3]} would go to the same share" in text
    assert kubectl.json("get", "clusterpolicy", POLICY)["metadata"]["resourceVersion"] == before
    assert {n: d["metadata"]["generation"] for n, d in split_daemonsets(kubectl).items()} == dss
    assert node(kubectl, A100)["metadata"]["labels"] == labels
    assert advertised(kubectl, A100) == "4"


def test_a_node_wide_mig_layout_where_the_host_keeps_gpus_is_refused_before_anything_changes(
    operator, kubectl
):
    def edit(hosts):
        hosts[SPLIT_DGX]["gpusplit_mig_config"] = "all-1g.10gb"  # the DGX keeps GPUs for the host

    host_gpus = json.loads((operator["tmp"] / "out" / "fleet-plan.json").read_text())["nodes"][SPLIT_DGX][
        "host_uuids"
    ]
    assert len(host_gpus) == 2
    inv = operator_inventory(operator["tmp"] / "mig-host-share", edit)
    before = kubectl.json("get", "clusterpolicy", POLICY)["metadata"]["resourceVersion"]
    dss = {n: d["metadata"]["generation"] for n, d in split_daemonsets(kubectl).items()}
    labels = node(kubectl, SPLIT_DGX)["metadata"]["labels"]
    proc = run_playbook(kubectl, "gpu_operator.yml", inv, check=False)
    assert proc.returncode != 0
    text = " ".join(proc.stdout.split())
    assert (
        f"{SPLIT_DGX}: gpusplit_mig_config 'all-1g.10gb' is one MIG layout for every GPU of the node: the MIG "
        f"manager would also repartition the GPU(s) the host keeps, {', '.join(host_gpus)}." in text
    ), text[-3000:]
    assert "gpusplit_mig_geometry" in text
    assert kubectl.json("get", "clusterpolicy", POLICY)["metadata"]["resourceVersion"] == before
    assert {n: d["metadata"]["generation"] for n, d in split_daemonsets(kubectl).items()} == dss
    assert node(kubectl, SPLIT_DGX)["metadata"]["labels"] == labels


# --------------------------------------------------------------------------------------------
# the unsplit of the whole cluster puts the ClusterPolicy back (last: it takes every split node back)

GUARD_SELECTOR = "app.kubernetes.io/managed-by=gpusplit,gpusplit.io/guard"
ORIGINAL = "gpusplit.io/original-spec"


def gpusplits_marks(obj):
    """What of gpusplit's is left on ``obj``: its labels, annotations and field managers."""
    meta = obj["metadata"]
    return sorted(
        [f"label {k}" for k in meta.get("labels") or {} if "gpusplit" in k]
        + [f"annotation {k}" for k in meta.get("annotations") or {} if "gpusplit" in k]
        + [f"manager {m['manager']}" for m in meta.get("managedFields") or [] if m["manager"] == "gpusplit"]
    )


def test_the_unsplit_of_the_whole_cluster_puts_the_clusterpolicy_back_and_leaves_nothing_of_gpusplits(
    operator, kubectl
):
    sample = drop_nulls(yaml.safe_load(SAMPLE_FILE.read_text()))
    cp = kubectl.json("get", "clusterpolicy", POLICY, "--show-managed-fields")
    record = json.loads(cp["metadata"]["annotations"][ORIGINAL])
    # what the chart had, recorded by the first gpu_operator.yml run; later runs kept it
    assert record["toolkit.env"] == {"before": [OTHERS_ENTRY], "wrote": [OTHERS_ENTRY, *HARDENING]}
    assert record["mig.strategy"] == {"before": sample["spec"]["mig"]["strategy"], "wrote": "single"}
    guarded = kubectl("get", "validatingadmissionpolicies", "-l", GUARD_SELECTOR, "-o", "name").stdout.split()
    wide = ("-e", "gpusplit_unsplit_to=host", "-e", "gpusplit_unsplit_cluster=true")
    try:
        writes = clusterpolicy_writes(kubectl)
        check = " ".join(
            run_playbook(kubectl, "unsplit.yml", operator["inventory"], *wide, "--check").stdout.split()
        )
        assert f"whole cluster: ClusterPolicy {POLICY}: spec.toolkit.env put back to" in check, check[-5000:]
        # (the output doubles the quotes of a value)
        assert re.search(r"spec\.mig\.strategy put back to '+single'+", check), check[-5000:]
        assert clusterpolicy_writes(kubectl) == writes
        assert kubectl.json("get", "clusterpolicy", POLICY)["metadata"]["annotations"][ORIGINAL]

        run_playbook(kubectl, "unsplit.yml", operator["inventory"], *wide)
        after = kubectl.json("get", "clusterpolicy", POLICY, "--show-managed-fields")
        assert after["spec"]["toolkit"]["env"] == [OTHERS_ENTRY]
        assert after["spec"]["mig"] == sample["spec"]["mig"]
        assert "env" not in after["spec"].get("devicePlugin", {})
        assert after["spec"]["driver"] == cp["spec"]["driver"]  # never gpusplit's: untouched
        assert gpusplits_marks(after) == []

        # a second run finds nothing of gpusplit's on it and writes nothing
        writes = clusterpolicy_writes(kubectl)
        again = run_playbook(kubectl, "unsplit.yml", operator["inventory"], *wide)
        assert f"ClusterPolicy {POLICY}" not in " ".join(again.stdout.split())
        assert clusterpolicy_writes(kubectl) == writes
        assert (
            kubectl.json("get", "clusterpolicy", POLICY)["metadata"]["resourceVersion"]
            == (after["metadata"]["resourceVersion"])
        )
    finally:
        if guarded:  # the unsplit took the lab's guard away: put it back (the fixture re-splits the lab)
            run_playbook(kubectl, "guard.yml", INVENTORY, check=False)
