"""DRA mode end to end on the lab: the host share as DeviceTaintRules, and faulty-GPU isolation.

What is real: kube-apiserver (validation of every object), kube-scheduler (it allocates the
ResourceClaims, honouring device taints and tolerations), kube-controller-manager (the resource
claim controller makes the claims from the templates; the device taint eviction controller
writes the EvictionInProgress condition and evicts). What is simulated: the kubelets (kwok), the
NVIDIA DRA driver's ResourceSlices (tests/integration/dra_harness.py), the device plugin
(lab/deviceplugin.py), the GPUs (fixtures). The DeviceClasses (gpu.nvidia.com, mig.nvidia.com) are
the real dra-driver-nvidia-gpu chart's: the module's fixture installs the chart folder
(tests/integration/real_charts.py) with the values gpusplit renders. The playbook runs skip helm
(gpusplit_dra_driver_install=false; test_dra_helm.py proves dra.yml's install); the preflight runs
for real.

The tests use their own nodes (gsdra-*), namespace and inventory (a copy of inventory/lab with
only these hosts), and their own output directory; everything is removed at the end.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
import uuid
from pathlib import Path
from types import SimpleNamespace

import dra_harness as harness
import pytest
import real_charts
import yaml
from ansible_output import changed_tasks, recap

from ansible_collections.gpusplit.k8s.plugins.module_utils._dra.names import DEVICE_CLASS, DRIVER
from ansible_collections.gpusplit.k8s.plugins.module_utils._dra.report import (
    eviction_condition,
    parse_eviction_message,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._gpu.ids import sysfs_pci_address_or_none
from ansible_collections.gpusplit.k8s.plugins.module_utils._split import sharing
from ansible_collections.gpusplit.k8s.plugins.module_utils._split.planner import plan_node
from ansible_collections.gpusplit.k8s.plugins.plugin_utils._dra.chart import chart_values
from ansible_collections.gpusplit.k8s.plugins.plugin_utils._dra.claims import host_share_toleration
from ansible_collections.gpusplit.k8s.plugins.plugin_utils._dra.render import (
    diagnostic_claim,
    host_share_rules,
    render_claim,
)
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.split_render import render_template
from lab import components as C

ROOT = Path(__file__).resolve().parents[2]
DGX, WS, DP = "gsdra-dgx-01", "gsdra-ws-01", "gsdra-dp-01"
HOSTS = {
    DGX: {"gpusplit_lab_fixture": "dgx-h100", "gpusplit_mode": "dra", "gpusplit_split": {"host_count": 2}},
    WS: {
        "gpusplit_lab_fixture": "workstation",
        "gpusplit_mode": "dra",
        "gpusplit_split": {"host_count": 1},
        # its Kubernetes GPU in gpusplit's DeviceClass gpusplit-time-slicing-short
        "gpusplit_sharing": {"time_slicing": {"interval": "Short"}},
        # a simulated host: containerd cannot be asked, its version is given
        "gpusplit_containerd_version": "1.7.27",
    },
    DP: {
        "gpusplit_lab_fixture": "dgx-h100",
        "gpusplit_mode": "device_plugin",
        "gpusplit_split": {"host_count": 2},
    },
}
RULES = "resource.k8s.io/v1"
PLUGIN_IMAGE = "nvcr.io/nvidia/k8s-device-plugin:v0.20.0"
CHART_RELEASE = "gsdra-driver"
SHARED_CLASS = "gpusplit-time-slicing-short"


def fixture_gpus(name):
    return harness.fixture_doc(name)["gpus"]


def uuid_of(fixture, minor):
    return next(g["uuid"] for g in fixture_gpus(fixture) if g["minor_number"] == minor)


def run_playbook(ctx, playbook, *extra, check=True, inventory=None):
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
    cmd = [
        "ansible-playbook",
        "-i",
        str(inventory or ctx.inventory),
        str(ROOT / "playbooks" / playbook),
        "-e",
        f"gpusplit_out_dir={ctx.out}",
        *extra,
    ]
    for _ in range(3):
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env, timeout=900)
        if proc.returncode == 0 or not LAB_DOWN.search(proc.stdout + proc.stderr):
            break
        # another test restarted the shared lab's API server under this run: wait, run again
        wait_for(lab_ready, timeout=180, what="the lab API server to come back")
    if check and proc.returncode != 0:
        raise AssertionError(f"{playbook} failed:\n{proc.stdout[-8000:]}\n{proc.stderr[-3000:]}")
    return proc


# the shared lab's API server restarted under a run (other tests change its flags): its port is
# closed, or it answers before every API group is back in discovery
LAB_DOWN = re.compile(
    r"[Cc]onnection refused|ServiceUnavailable|the server is currently unable|it serves no resource\.k8s\.io version"
)


def lab_ready():
    return harness.get("v1", "Namespace", "default") is not None  # harness.get waits for the API server


def write_inventory(path, hosts):
    shutil.copytree(ROOT / "inventory" / "lab" / "group_vars", path / "group_vars")
    doc = {"all": {"children": {"gpu_nodes": {"hosts": hosts}}}}
    (path / "hosts.yml").write_text(yaml.safe_dump(doc))
    return path


def wait_for(predicate, timeout=90, interval=1.0, what="condition"):
    timeout = timeout * C.wait_scale()
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        try:
            last = predicate()
        except AssertionError:
            raise
        except Exception as exc:  # the lab apiserver may be restarting
            last = exc
        else:
            if last:
                return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last value: {last!r}")


def list_objects(api_version, kind, namespace=None, label_selector=None):
    def run():
        client = harness.dynamic()
        res = client.resources.get(api_version=api_version, kind=kind)
        kwargs = {"label_selector": label_selector} if label_selector else {}
        if namespace:
            kwargs["namespace"] = namespace
        return client.get(res, **kwargs).to_dict()["items"]

    return harness.retry(run)


def our_rules():
    """The DeviceTaintRules gpusplit made for this test's nodes, by name."""
    items = list_objects(RULES, "DeviceTaintRule", label_selector="app.kubernetes.io/managed-by=gpusplit")
    return {
        r["metadata"]["name"]: r for r in items if r["spec"]["deviceSelector"].get("pool") in (DGX, WS, DP)
    }


def claim_pod(ctx, name, template, node):
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ctx.ns, "labels": {"app": "gsdra"}},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 0,
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template}],
            "containers": [{"name": "cuda", "image": "cuda:12", "resources": {"claims": [{"name": "gpu"}]}}],
        },
    }


def pod(ctx, name):
    return harness.get("v1", "Pod", name, ctx.ns)


def allocated_device(ctx, name):
    """(pool, device) of the pod's claim, None while it is not allocated."""
    p = pod(ctx, name)
    if not p:
        return None
    statuses = (p.get("status") or {}).get("resourceClaimStatuses") or []
    if not statuses or not statuses[0].get("resourceClaimName"):
        return None
    claim = harness.get(RULES, "ResourceClaim", statuses[0]["resourceClaimName"], ctx.ns)
    results = ((((claim or {}).get("status") or {}).get("allocation") or {}).get("devices") or {}).get(
        "results"
    )
    if not results:
        return None
    [result] = results
    assert result["driver"] == "gpu.nvidia.com"
    return result["pool"], result["device"]


def claim_device(ctx, claim_name):
    """(pool, device) of a ResourceClaim the pod names directly (no resourceClaimStatuses then)."""
    claim = harness.get(RULES, "ResourceClaim", claim_name, ctx.ns) or {}
    results = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results")
    if not results:
        return None
    [result] = results
    return result["pool"], result["device"]


def scheduled_message(ctx, name):
    p = pod(ctx, name) or {}
    for cond in (p.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return cond.get("message")
    return None


@pytest.fixture(scope="module")
def ctx(lab, tmp_path_factory):
    base = tmp_path_factory.mktemp("dra")
    c = SimpleNamespace(
        ns=f"gsdra-{uuid.uuid4().hex[:6]}",
        inventory=write_inventory(base / "inventory", HOSTS),
        out=base / "out",
        base=base,
    )
    # the driver's chart, for its DeviceClasses; its kubelet plugin (kwok pods) goes to the DRA nodes
    real_charts.install(CHART_RELEASE, c.ns, real_charts.chart("dra-driver-nvidia-gpu"), chart_values(), base)
    harness.publish(DGX, "dgx-h100")
    harness.publish(WS, "workstation")
    from kubernetes import client

    from lab.nodes import ensure_node

    core = client.CoreV1Api(harness.api_client())
    harness.retry(lambda: ensure_node(core, DP, "dgx-h100"))
    harness.write_host_file(DGX, "/etc/containerd/config.toml", harness.CONTAINERD_2_CONFIG)
    harness.write_host_file(WS, "/etc/containerd/config.toml", harness.CONTAINERD_17_CONFIG)
    harness.write_host_file(WS, "/etc/containerd/conf.d/cdi.toml", harness.CONTAINERD_17_CDI_DROPIN)
    harness.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": c.ns}})
    wait_for(
        lambda: harness.get("v1", "ServiceAccount", "default", c.ns), what="the namespace's service account"
    )
    yield c
    real_charts.uninstall(CHART_RELEASE, c.ns)
    harness.retry(lambda: harness.delete("v1", "Namespace", c.ns))
    for name in our_rules():
        harness.delete(RULES, "DeviceTaintRule", name)
    harness.delete(RULES, "DeviceClass", SHARED_CLASS)
    harness.delete("apps/v1", "DaemonSet", f"gpusplit-dp-{DP}", "kube-system")
    for node in (DGX, WS):
        harness.unpublish(node)
    for node in (DGX, WS, DP):
        harness.delete("v1", "Node", node)
        shutil.rmtree(harness.host_root(node), ignore_errors=True)


# --------------------------------------------------------------------------------------------
# (1) what the driver would publish


def test_harness_publishes_slices_and_the_device_class(ctx):
    dc = harness.get(RULES, "DeviceClass", DEVICE_CLASS)
    assert dc["spec"]["selectors"][0]["cel"]["expression"].startswith("device.driver == 'gpu.nvidia.com'")
    assert dc["metadata"]["annotations"]["meta.helm.sh/release-name"] == CHART_RELEASE  # the chart's own
    for node, fixture in ((DGX, "dgx-h100"), (WS, "workstation")):
        rs = harness.get(RULES, "ResourceSlice", f"{node}-gpu.nvidia.com")
        spec = rs["spec"]
        assert spec["driver"] == "gpu.nvidia.com" and spec["nodeName"] == node
        assert spec["pool"]["name"] == node and spec["pool"]["resourceSliceCount"] == 1
        gpus = {f"gpu-{g['minor_number']}": g for g in fixture_gpus(fixture)}
        assert {d["name"] for d in spec["devices"]} == set(gpus)
        for dev in spec["devices"]:
            g = gpus[dev["name"]]
            assert dev["attributes"]["uuid"]["string"] == g["uuid"]
            assert dev["attributes"]["productName"]["string"] == g["name"]
            pci_bus_id = dev["attributes"]["resource.kubernetes.io/pciBusID"]["string"]
            assert pci_bus_id == sysfs_pci_address_or_none(g["pci_bus_id"])


# --------------------------------------------------------------------------------------------
# preflight, then the host share as DeviceTaintRules


def test_preflight_refuses_and_changes_nothing(ctx):
    """containerd 1.7 without CDI on one node, a device plugin on the other: both said, nothing applied."""
    harness.write_host_file(WS, "/etc/containerd/conf.d/cdi.toml", None)
    fake = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "fake-device-plugin", "namespace": ctx.ns},
        "spec": {
            "nodeName": DGX,
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "nvidia-device-plugin-ctr", "image": PLUGIN_IMAGE}],
        },
    }
    harness.apply(fake)
    try:
        proc = run_playbook(ctx, "dra.yml", "-e", "gpusplit_dra_driver_install=false", check=False)
        assert proc.returncode != 0
        assert "DRA preflight failed, nothing was changed" in proc.stdout
        assert f"{WS}: CDI: containerd 1.7 has CDI off by default" in proc.stdout
        assert f"{ctx.ns}/fake-device-plugin" in proc.stdout and DGX in proc.stdout
        assert "device_taint_rules  cluster" in proc.stdout  # the checks that passed are listed too
        assert our_rules() == {}
    finally:
        harness.delete("v1", "Pod", "fake-device-plugin", ctx.ns)
        harness.write_host_file(WS, "/etc/containerd/conf.d/cdi.toml", harness.CONTAINERD_17_CDI_DROPIN)
    wait_for(lambda: pod(ctx, "fake-device-plugin") is None, what="the fake plugin pod to go")


def test_dra_playbook_taints_the_host_share(ctx):
    proc = run_playbook(ctx, "dra.yml", "-e", "gpusplit_dra_driver_install=false")
    assert "NOT calling helm (gpusplit_dra_driver_install is false)" in proc.stdout
    assert "9 check(s), 0 failed" in proc.stdout
    rules = our_rules()
    # dgx: host_count 2 = the first two GPUs by bus id = minors 0, 1; workstation: its first GPU by
    # bus id (01:00.0, the RTX 4090) has minor 1
    assert sorted(rules) == [
        f"gpusplit-host-{DGX}-gpu-0",
        f"gpusplit-host-{DGX}-gpu-1",
        f"gpusplit-host-{WS}-gpu-1",
    ]
    ws_rule = rules[f"gpusplit-host-{WS}-gpu-1"]
    assert ws_rule["spec"]["deviceSelector"] == {"driver": "gpu.nvidia.com", "pool": WS, "device": "gpu-1"}
    assert ws_rule["spec"]["taint"]["key"] == "gpusplit.io/host-share"
    assert ws_rule["spec"]["taint"]["effect"] == "NoSchedule"
    assert ws_rule["metadata"]["annotations"]["gpusplit.io/gpu-uuid"] == uuid_of("workstation", 1)
    assert ws_rule["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "gpusplit"
    node = harness.get("v1", "Node", DGX)
    assert node["metadata"]["labels"]["gpusplit.io/mode"] == "dra"
    values = yaml.safe_load((ctx.out / "dra-driver-values.yaml").read_text())
    assert values["kubeletPlugin"]["nodeSelector"] == {"gpusplit.io/mode": "dra"}
    assert values["gpuResourcesEnabledOverride"] is True
    # the time-sliced workstation: its Kubernetes GPU (minor 0) in gpusplit's class, the driver's gate on
    assert values["featureGates"] == {"TimeSlicingSettings": True}
    dc = harness.get(RULES, "DeviceClass", SHARED_CLASS)
    assert dc["spec"]["selectors"][0]["cel"]["expression"].endswith(
        f"uuid in ['{uuid_of('workstation', 0)}']"
    )
    assert dc["spec"]["config"][0]["opaque"]["parameters"]["sharing"] == {
        "strategy": "TimeSlicing",
        "timeSlicingConfig": {"interval": "Short"},
    }

    # a re-run changes nothing and sends no write: cluster_apply counts its own requests (the API
    # server's request metrics are shared with the other tests on this lab)
    versions = {n: r["metadata"]["resourceVersion"] for n, r in our_rules().items()}
    again = run_playbook(ctx, "dra.yml", "-e", "gpusplit_dra_driver_install=false")
    assert all(r["changed"] == 0 for r in recap(again.stdout).values()), recap(again.stdout)
    assert "DeviceTaintRules: 3 unchanged, created none, updated none, pruned none, API writes 0" in " ".join(
        again.stdout.split()
    )
    assert {n: r["metadata"]["resourceVersion"] for n, r in our_rules().items()} == versions


def test_rules_are_pruned_when_the_plan_changes(ctx):
    hosts = json.loads(json.dumps(HOSTS))
    hosts[WS]["gpusplit_split"] = {"host_count": 0}
    changed = write_inventory(ctx.base / "inventory-ws0", hosts)
    run_playbook(ctx, "dra.yml", "-e", "gpusplit_dra_driver_install=false", inventory=changed)
    assert sorted(our_rules()) == [f"gpusplit-host-{DGX}-gpu-0", f"gpusplit-host-{DGX}-gpu-1"]
    run_playbook(ctx, "dra.yml", "-e", "gpusplit_dra_driver_install=false")
    assert f"gpusplit-host-{WS}-gpu-1" in our_rules()


def test_limit_leaves_the_rules_of_hosts_outside_the_run_alone(ctx):
    """--limit plans fewer hosts: the rules of inventory hosts outside the run must stay as they are."""
    before = {n: r["metadata"]["resourceVersion"] for n, r in our_rules().items()}
    assert f"gpusplit-host-{WS}-gpu-1" in before
    hosts = json.loads(json.dumps(HOSTS))
    hosts[DGX]["gpusplit_split"] = {"host_count": 1}
    changed = write_inventory(ctx.base / "inventory-dgx1", hosts)
    try:
        run_playbook(
            ctx,
            "dra.yml",
            "-e",
            "gpusplit_dra_driver_install=false",
            "--limit",
            f"{DGX},localhost",
            inventory=changed,
        )
        after = {n: r["metadata"]["resourceVersion"] for n, r in our_rules().items()}
        # the dgx lost its second host GPU; the workstation, not in this run, kept its rule untouched
        assert sorted(after) == [f"gpusplit-host-{DGX}-gpu-0", f"gpusplit-host-{WS}-gpu-1"]
        assert after[f"gpusplit-host-{WS}-gpu-1"] == before[f"gpusplit-host-{WS}-gpu-1"]
        assert after[f"gpusplit-host-{DGX}-gpu-0"] == before[f"gpusplit-host-{DGX}-gpu-0"]
    finally:
        run_playbook(ctx, "dra.yml", "-e", "gpusplit_dra_driver_install=false")
    assert sorted(our_rules()) == sorted(before)


# --------------------------------------------------------------------------------------------
# (2) the real scheduler never allocates a host-share device


@pytest.fixture(scope="module")
def dgx_pods(ctx):
    """Seven pods with one-GPU claims on the dgx node: six devices are free, two are the host's."""
    harness.apply(render_claim("one-gpu", ctx.ns))
    names = [f"worker-{i}" for i in range(7)]
    for name in names:
        harness.apply(claim_pod(ctx, name, "one-gpu", DGX))
    wait_for(
        lambda: sum(1 for n in names if allocated_device(ctx, n)) == 6,
        timeout=120,
        what="six claims to be allocated",
    )
    return names


def test_claims_never_get_a_host_share_device(ctx, dgx_pods):
    devices = {n: allocated_device(ctx, n) for n in dgx_pods}
    allocated = {n: d for n, d in devices.items() if d}
    assert len(allocated) == 6
    assert sorted(d for _, d in allocated.values()) == [f"gpu-{i}" for i in range(2, 8)]
    assert all(pool == DGX for pool, _ in allocated.values())
    [pending] = [n for n, d in devices.items() if d is None]
    # the two host-share devices are free, but tainted: the seventh pod waits
    time.sleep(3)
    assert allocated_device(ctx, pending) is None
    msg = wait_for(lambda: scheduled_message(ctx, pending), what="the pending pod's message")
    assert "cannot allocate all claims" in msg
    # the workstation: its one Kubernetes GPU (gpu-0) and never its host GPU (gpu-1)
    harness.apply(claim_pod(ctx, "ws-0", "one-gpu", WS))
    harness.apply(claim_pod(ctx, "ws-1", "one-gpu", WS))
    wait_for(
        lambda: allocated_device(ctx, "ws-0") or allocated_device(ctx, "ws-1"), what="a workstation claim"
    )
    time.sleep(3)
    ws = [allocated_device(ctx, n) for n in ("ws-0", "ws-1")]
    assert sorted(ws, key=str) == sorted([(WS, "gpu-0"), None], key=str)


# --------------------------------------------------------------------------------------------
# (5) a claim that tolerates the host-share taint may use a host-share device


def test_a_tolerating_claim_reaches_a_host_share_device(ctx, dgx_pods):
    template = render_claim("host-gpu-ok", ctx.ns, tolerations=[host_share_toleration()])
    assert template["spec"]["spec"]["devices"]["requests"][0]["exactly"]["tolerations"] == [
        {"key": "gpusplit.io/host-share", "operator": "Exists", "effect": "NoSchedule"}
    ]
    harness.apply(template)
    harness.apply(claim_pod(ctx, "diagnostics", "host-gpu-ok", DGX))
    pool, device = wait_for(
        lambda: allocated_device(ctx, "diagnostics"), timeout=60, what="the tolerating claim"
    )
    assert pool == DGX and device in ("gpu-0", "gpu-1")  # nothing else is free: a host-share device
    harness.delete("v1", "Pod", "diagnostics", ctx.ns)
    wait_for(lambda: pod(ctx, "diagnostics") is None, what="the diagnostics pod to go")


# --------------------------------------------------------------------------------------------
# (3) isolation in mode dra: report (None), evict (NoExecute), undo


def isolate(ctx, host, gpu_uuid, *extra):
    """isolate_gpu.yml for one GPU. The dgx and the device-plugin node share one fixture (the same
    UUIDs, which real GPUs never do), so the search is limited to the one host."""
    args = ["-e", f"gpusplit_hosts={host}", "-e", f"gpusplit_isolate_uuid={gpu_uuid}"]
    for e in extra:
        args += ["-e", e]
    return run_playbook(ctx, "isolate_gpu.yml", *args)


def test_isolate_reports_then_evicts_then_gives_back(ctx, dgx_pods):
    victim = dgx_pods[0]
    _, device = allocated_device(ctx, victim)
    minor = int(device.split("-")[1])
    gpu_uuid = uuid_of("dgx-h100", minor)
    name = f"gpusplit-isolate-{DGX}-{device}"

    proc = isolate(ctx, DGX, gpu_uuid)
    rule = harness.get(RULES, "DeviceTaintRule", name)
    assert rule["spec"]["taint"]["effect"] == "None"
    assert rule["spec"]["taint"]["key"] == "gpusplit.io/unhealthy"
    assert rule["spec"]["deviceSelector"] == {"driver": "gpu.nvidia.com", "pool": DGX, "device": device}
    cond = eviction_condition(rule)
    assert cond["reason"] == "NoEffect" and cond["observedGeneration"] == rule["metadata"]["generation"]
    impact = parse_eviction_message(cond["message"])
    # the rule names one device; it is allocated, to one pod in one namespace
    assert (impact["published_devices"], impact["allocated_devices"]) == (1, 1)
    assert (impact["pods_would_be_evicted"], impact["namespaces"]) == (1, 1)
    said = " ".join(proc.stdout.split())  # the callback folds long lines
    assert "1 published device selected. 1 allocated device selected." in said
    assert "1 pod would be evicted in 1 namespace if the effect was NoExecute" in said
    assert "published_devices=1 allocated_devices=1 pods_would_be_evicted=1 namespaces=1" in said
    assert "deletionTimestamp" not in pod(ctx, victim)["metadata"]  # None evicts nothing

    isolate(ctx, DGX, gpu_uuid, "gpusplit_isolate_effect=NoExecute")
    rule = harness.get(RULES, "DeviceTaintRule", name)
    assert rule["spec"]["taint"]["effect"] == "NoExecute"
    gone = wait_for(
        lambda: (lambda p: p is None or "deletionTimestamp" in p["metadata"])(pod(ctx, victim)),
        what="the pod on the isolated GPU to be evicted",
    )
    assert gone
    for other in dgx_pods[1:]:
        p = pod(ctx, other)
        assert p is not None and "deletionTimestamp" not in p["metadata"], other

    isolate(ctx, DGX, gpu_uuid, "gpusplit_isolate_action=undo")
    assert harness.get(RULES, "DeviceTaintRule", name) is None
    # the host share's rules are not touched by isolation
    assert f"gpusplit-host-{DGX}-gpu-0" in our_rules()


# --------------------------------------------------------------------------------------------
# (3b) a re-split in mode dra: a claimed device goes to the host (docs/resplit.md)


def test_resplit_refuses_then_evicts_the_claims_pod_after_the_none_report(ctx, dgx_pods):
    alive = [n for n in dgx_pods if pod(ctx, n) and "deletionTimestamp" not in pod(ctx, n)["metadata"]]
    holder = next(n for n in alive if allocated_device(ctx, n))
    _, device = allocated_device(ctx, holder)
    minor = int(device.split("-")[1])
    index = next(g["index"] for g in fixture_gpus("dgx-h100") if g["minor_number"] == minor)
    hosts = json.loads(json.dumps(HOSTS))
    hosts[DGX]["gpusplit_split"] = {"host_indices": sorted({0, 1, index})}
    moved = write_inventory(ctx.base / "inventory-resplit", hosts)
    rule = f"gpusplit-host-{DGX}-{device}"
    extra = ("-e", "gpusplit_dra_driver_install=false", "-e", f"gpusplit_hosts={DGX}")

    proc = run_playbook(ctx, "dra.yml", *extra, inventory=moved, check=False)
    assert proc.returncode != 0
    said = " ".join(proc.stdout.split())
    assert f"{ctx.ns}/{holder} holds GPU {index}" in said and "Nothing was changed" in said
    assert rule not in our_rules()
    assert "deletionTimestamp" not in pod(ctx, holder)["metadata"]

    proc = run_playbook(ctx, "dra.yml", *extra, "-e", "gpusplit_resplit_policy=evict", inventory=moved)
    said = " ".join(proc.stdout.split())
    # the controller's report with effect None came first, shown with the pod that holds the device
    assert "1 allocated device selected" in said, said[-4000:]
    assert f"pods holding it: {holder}" in said
    wait_for(
        lambda: (lambda p: p is None or "deletionTimestamp" in p["metadata"])(pod(ctx, holder)),
        what="the holder to be evicted",
    )
    for other in alive:
        if other != holder:
            p = pod(ctx, other)
            assert p is not None and "deletionTimestamp" not in p["metadata"], other
    live = our_rules()[rule]
    assert live["spec"]["taint"]["key"] == "gpusplit.io/host-share"
    assert live["spec"]["taint"]["effect"] == "NoSchedule"  # dra_split's effect after the backstop

    run_playbook(ctx, "dra.yml", "-e", "gpusplit_dra_driver_install=false")  # back to the inventory's split
    assert rule not in our_rules()


# --------------------------------------------------------------------------------------------
# (4) isolation in mode device_plugin: the node is planned without the GPU, its plugin rolled


def allocatable(node):
    n = harness.get("v1", "Node", node) or {}
    return ((n.get("status") or {}).get("allocatable") or {}).get("nvidia.com/gpu")


def visible_devices(ds):
    [container] = ds["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e.get("value") for e in container["env"]}["NVIDIA_VISIBLE_DEVICES"].split(",")


def dp_step(ctx, gpu_uuid, *extra):
    """isolate_gpu.yml on the device-plugin node; returns (output, its DaemonSet).

    Another test's site.yml on this shared lab prunes every gpusplit DaemonSet that is not in its
    own plan, ours included; when that happened right after our run, run it again.
    """
    for _ in range(3):
        proc = isolate(ctx, DP, gpu_uuid, *extra)
        ds = harness.get("apps/v1", "DaemonSet", f"gpusplit-dp-{DP}", "kube-system")
        if ds is not None:
            return proc, ds
    raise AssertionError(f"the DaemonSet of {DP} keeps disappearing")


def test_isolate_on_a_device_plugin_node_drops_one_gpu_and_undo_restores_it(ctx):
    gpu_uuid = uuid_of("dgx-h100", 4)  # host_count 2 keeps minors 0 and 1: minor 4 is Kubernetes'
    # the node as the inventory says (undo = plan without isolation), then isolate, then undo
    _, ds = dp_step(ctx, gpu_uuid, "gpusplit_isolate_action=undo")
    assert gpu_uuid in visible_devices(ds) and len(visible_devices(ds)) == 6
    wait_for(lambda: allocatable(DP) == "6", what="6 GPUs advertised")

    proc, ds = dp_step(ctx, gpu_uuid)
    assert gpu_uuid not in visible_devices(ds) and len(visible_devices(ds)) == 5
    said = " ".join(proc.stdout.split())
    assert "advertises 5 nvidia.com/gpu (planned 5)" in said  # the playbook waited for the roll
    assert f"{gpu_uuid} excluded: health lost: isolated by isolate_gpu.yml (isolated)" in said
    assert harness.get("v1", "Node", DP)["metadata"]["labels"]["gpusplit.io/kubernetes-gpus"] == "5"
    wait_for(lambda: allocatable(DP) == "5", what="5 GPUs advertised")

    proc, ds = dp_step(ctx, gpu_uuid, "gpusplit_isolate_action=undo")
    assert gpu_uuid in visible_devices(ds) and len(visible_devices(ds)) == 6
    assert "advertises 6 nvidia.com/gpu (planned 6)" in " ".join(proc.stdout.split())
    wait_for(lambda: allocatable(DP) == "6", what="6 GPUs advertised again")


# --------------------------------------------------------------------------------------------
# (5) GPUs picked by their health, a diagnostic claim on an isolated GPU, MIG devices of the
# host share. Two more nodes: a host whose facts report an ECC error, a lost GPU and a failed
# row remapping (fixture gpu-lost), and an A100 node whose host share is a MIG-enabled GPU.

SICK, MIGN = "gsdra-sick-01", "gsdra-mig-01"
MIG_HOST_GPU = harness.fixture_doc("a100-mig")["gpus"][0]  # MIG enabled: two 3g.40gb devices
MORE_HOSTS = {
    SICK: {"gpusplit_lab_fixture": "gpu-lost", "gpusplit_mode": "dra", "gpusplit_split": {"host_count": 0}},
    MIGN: {
        "gpusplit_lab_fixture": "a100-mig",
        "gpusplit_mode": "dra",
        "gpusplit_split": {"host_uuids": [MIG_HOST_GPU["uuid"]]},
    },
}
MIG_CLASS = "mig.nvidia.com"


def rules_on(pool):
    items = list_objects(RULES, "DeviceTaintRule", label_selector="app.kubernetes.io/managed-by=gpusplit")
    return {r["metadata"]["name"]: r for r in items if r["spec"]["deviceSelector"].get("pool") == pool}


@pytest.fixture(scope="module")
def more(ctx):
    """The two extra nodes, published, and an inventory with every host of this file."""
    for node, fixture_name in ((SICK, "gpu-lost"), (MIGN, "a100-mig")):
        harness.publish(node, fixture_name)
        harness.write_host_file(node, "/etc/containerd/config.toml", harness.CONTAINERD_2_CONFIG)
    assert harness.get(RULES, "DeviceClass", MIG_CLASS) is not None  # the chart's second DeviceClass
    inventory = write_inventory(ctx.base / "inventory-more", {**HOSTS, **MORE_HOSTS})
    yield SimpleNamespace(inventory=inventory)
    for node in (SICK, MIGN):
        for name in rules_on(node):
            harness.delete(RULES, "DeviceTaintRule", name)
        harness.unpublish(node)
        harness.delete("v1", "Node", node)
        shutil.rmtree(harness.host_root(node), ignore_errors=True)


def isolate_unhealthy(ctx, more, *extra):
    args = ["-e", f"gpusplit_hosts={SICK}", "-e", "gpusplit_isolate_unhealthy=true"]
    for e in extra:
        args += ["-e", e]
    return run_playbook(ctx, "isolate_gpu.yml", *args, inventory=more.inventory)


def test_unhealthy_gpus_are_found_reported_first_then_tainted_and_a_diagnostic_claim_reaches_one(ctx, more):
    sick = {g["minor_number"]: g["uuid"] for g in fixture_gpus("gpu-lost")}
    proc = isolate_unhealthy(ctx, more, "gpusplit_isolate_effect=NoSchedule", "gpusplit_isolate_reason=ecc")
    said = " ".join(proc.stdout.split())
    # the facts' health chose them: minor 1 (uncorrected ECC), 2 (lost), 3 (row remapping failed)
    assert f"GPU {sick[1]}" in said and "uncorrected ECC error(s)" in said
    assert f"GPU {sick[3]}" in said and "row remapping failed" in said
    assert f"GPU {sick[2]} is lost: the DRA driver does not publish it" in said
    assert f"GPU {sick[0]}" not in said
    rules = rules_on(SICK)
    assert sorted(rules) == [f"gpusplit-isolate-{SICK}-gpu-1", f"gpusplit-isolate-{SICK}-gpu-3"]
    for rule in rules.values():
        assert rule["spec"]["taint"]["effect"] == "NoSchedule"
        assert rule["spec"]["taint"]["key"] == "gpusplit.io/unhealthy"
    # NoSchedule was asked for straight away: the rule reported with effect None first
    assert (
        said.count("before NoSchedule, with effect None: 1 published device selected. 0 allocated devices")
        == 2
    )

    harness.apply(render_claim("plain", ctx.ns))
    for name in ("plain-1", "plain-2"):
        harness.apply(claim_pod(ctx, name, "plain", SICK))
    located = {"uuid": sick[1], "mig_enabled": False}
    harness.apply(diagnostic_claim("burn-in", ctx.ns, located))
    diag = claim_pod(ctx, "burn-in", "unused", SICK)
    diag["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "burn-in"}]
    harness.apply(diag)
    # the diagnostic claim gets exactly the isolated GPU; an ordinary claim gets the one healthy GPU,
    # and the next ordinary one nothing (the two tainted GPUs are off limits, the lost one unpublished)
    assert wait_for(lambda: claim_device(ctx, "burn-in"), what="the diagnostic claim") == (SICK, "gpu-1")
    got = wait_for(
        lambda: [allocated_device(ctx, n) for n in ("plain-1", "plain-2") if allocated_device(ctx, n)],
        what="an ordinary claim to be allocated",
    )
    assert got == [(SICK, "gpu-0")]
    wait_for(
        lambda: scheduled_message(ctx, "plain-1") or scheduled_message(ctx, "plain-2"), what="a Pending pod"
    )
    for name in ("plain-1", "plain-2", "burn-in"):
        harness.delete("v1", "Pod", name, ctx.ns)

    proc = isolate_unhealthy(ctx, more, "gpusplit_isolate_action=undo")
    assert rules_on(SICK) == {}
    assert f"gpusplit-isolate-{SICK}-gpu-1" in " ".join(proc.stdout.split())


def test_a_reserved_mig_gpu_has_each_published_mig_device_tainted(ctx, more):
    proc = run_playbook(ctx, "dra.yml", "-e", "gpusplit_dra_driver_install=false", inventory=more.inventory)
    slice_ = harness.get(RULES, "ResourceSlice", f"{MIGN}-{DRIVER}")
    host_migs = sorted(
        d["name"]
        for d in slice_["spec"]["devices"]
        if d["attributes"].get("parentUUID", {}).get("string") == MIG_HOST_GPU["uuid"]
    )
    assert len(host_migs) == 2
    rules = rules_on(MIGN)
    assert sorted(r["spec"]["deviceSelector"]["device"] for r in rules.values()) == sorted(
        ["gpu-0", *host_migs]
    )
    assert all(r["spec"]["taint"]["key"] == "gpusplit.io/host-share" for r in rules.values())
    assert "API writes" in proc.stdout

    # the real scheduler: MIG claims on that node get only the Kubernetes share's MIG devices
    kube_migs = [
        d["name"]
        for d in slice_["spec"]["devices"]
        if d["attributes"].get("type", {}).get("string") == "mig" and d["name"] not in host_migs
    ]
    harness.apply(render_claim("one-mig", ctx.ns, device_class=MIG_CLASS))
    names = [f"mig-{i}" for i in range(len(kube_migs) + 1)]
    for name in names:
        harness.apply(claim_pod(ctx, name, "one-mig", MIGN))
    wait_for(
        lambda: sum(1 for n in names if allocated_device(ctx, n)) == len(kube_migs),
        timeout=120,
        what="every Kubernetes MIG device to be allocated",
    )
    got = sorted(allocated_device(ctx, n)[1] for n in names if allocated_device(ctx, n))
    assert got == sorted(kube_migs)
    assert not set(got) & set(host_migs)
    pending = [n for n in names if not allocated_device(ctx, n)]
    assert len(pending) == 1
    wait_for(lambda: scheduled_message(ctx, pending[0]), what="the extra MIG pod to be Pending")
    for name in names:
        harness.delete("v1", "Pod", name, ctx.ns)
    # back to the inventory without the extra nodes: their rules are pruned
    run_playbook(ctx, "dra.yml", "-e", "gpusplit_dra_driver_install=false")
    assert rules_on(MIGN) == {}


def test_many_device_taint_rules_in_one_module_execution(ctx):
    """device_taint_rule's definitions: three rules created in one step (each reported with effect None first,
    then tainted), no change on a re-run, nothing changed in check mode, all removed in one step."""
    from ansible_output import ansible_module

    from lab import components as C

    run_id = uuid.uuid4().hex[:6]
    names = [f"gsdra-many-{run_id}-gpu-{minor}" for minor in (5, 6, 7)]

    def definition(name, effect="NoSchedule"):
        return {
            "apiVersion": RULES,
            "kind": "DeviceTaintRule",
            "metadata": {"name": name, "labels": {"gpusplit.io/test": run_id}},
            "spec": {
                "deviceSelector": {"driver": DRIVER, "pool": DGX, "device": "gpu-" + name.rsplit("-", 1)[1]},
                "taint": {"key": "gpusplit.io/test", "effect": effect},
            },
        }

    def run(definitions, *options, **extra):
        args = json.dumps({"definitions": definitions, "kubeconfig": str(C.KUBECONFIG), **extra})
        return ansible_module(
            "lab-cp-01", "gpusplit.k8s.device_taint_rule", args, ROOT / "inventory" / "lab", options=options
        )

    try:
        made = run([definition(n) for n in names])
        assert made["changed"] is True
        assert [r["name"] for r in made["rules"]] == names
        for result in made["rules"]:
            assert result["action"] == "created"
            assert result["first_report"]["effect"] == "None" and result["first_report"]["current"]
            assert result["first_report"]["impact"]["published_devices"] == 1
            assert result["report"]["effect"] == "NoSchedule" and result["report"]["current"]
        for name in names:
            live = harness.get(RULES, "DeviceTaintRule", name)
            assert live["spec"]["taint"]["effect"] == "NoSchedule"

        again = run([definition(n) for n in names])
        assert again["changed"] is False and {r["action"] for r in again["rules"]} == {"unchanged"}

        checked = run([definition(n, "NoExecute") for n in names], "--check")
        assert checked["changed"] is True and {r["action"] for r in checked["rules"]} == {"updated"}
        assert {harness.get(RULES, "DeviceTaintRule", n)["spec"]["taint"]["effect"] for n in names} == {
            "NoSchedule"
        }

        gone = run([{"metadata": {"name": n}} for n in names], state="absent")
        assert [r["action"] for r in gone["rules"]] == ["deleted"] * 3
        assert [harness.get(RULES, "DeviceTaintRule", n) for n in names] == [None] * 3
    finally:
        for name in names:
            harness.delete(RULES, "DeviceTaintRule", name)


# --------------------------------------------------------------------------------------------
# (6) the unsplit to Kubernetes of a node in mode dra


def test_unsplit_to_kubernetes_leaves_no_device_taint_rule_of_gpusplits_on_the_node(ctx):
    run_playbook(ctx, "dra.yml", "-e", "gpusplit_dra_driver_install=false")  # as site.yml left the nodes
    before = {n: r["metadata"]["resourceVersion"] for n, r in our_rules().items()}
    assert {n for n in before if DGX in n} == {f"gpusplit-host-{DGX}-gpu-0", f"gpusplit-host-{DGX}-gpu-1"}
    unsplit = ("-e", "gpusplit_unsplit_to=kubernetes", "-e", f"gpusplit_hosts={DGX}")
    try:
        check = " ".join(run_playbook(ctx, "unsplit.yml", *unsplit, "--check").stdout.split())
        # (the output doubles the apostrophe of "gpusplit's")
        said = (
            re.escape(f"{DGX} (mode dra): gpusplit")
            + "'+"
            + re.escape("s DeviceTaintRules of the node removed")
        )
        assert re.search(said, check), check[-4000:]
        assert {n: r["metadata"]["resourceVersion"] for n, r in our_rules().items()} == before

        run_playbook(ctx, "unsplit.yml", *unsplit)
        after = {n: r["metadata"]["resourceVersion"] for n, r in our_rules().items()}
        # none of gpusplit's rules is left on the node; the workstation, not in the run, keeps its rule untouched
        assert not [n for n in after if DGX in n], after
        assert after == {n: v for n, v in before.items() if DGX not in n}
        left = list_objects(RULES, "DeviceTaintRule", label_selector="app.kubernetes.io/managed-by=gpusplit")
        assert not [r for r in left if r["spec"]["deviceSelector"].get("pool") == DGX]
        # the node keeps the one label the DRA driver's kubelet plugin runs by; gpusplit's others go
        [node] = [n for n in list_objects("v1", "Node") if n["metadata"]["name"] == DGX]
        labels = node["metadata"]["labels"]
        assert labels.get("gpusplit.io/mode") == "dra" and "gpusplit.io/split" not in labels, labels

        again = run_playbook(ctx, "unsplit.yml", *unsplit)
        # a re-run changes nothing but the re-split's plan diff it writes on the controller
        assert {t.split(" -> ")[0] for t in changed_tasks(again.stdout)} <= {
            "gpusplit.k8s.gpu_resplit : Write the plan diff (on the controller)"
        }, changed_tasks(again.stdout)
        assert {n: r["metadata"]["resourceVersion"] for n, r in our_rules().items()} == after
    finally:
        run_playbook(ctx, "dra.yml", "-e", "gpusplit_dra_driver_install=false")  # the node split again


# --------------------------------------------------------------------------------------------
# (7) a time-sliced Kubernetes share: gpusplit's DeviceClass with the driver's GpuConfig

TS = "gsdra-ts-01"


def test_time_sliced_device_class_is_admitted_and_no_claim_without_toleration_gets_the_host_share(ctx):
    """gpusplit's DeviceClass (opaque GpuConfig, the Kubernetes GPUs by UUID) as the real API server stores it; a
    claim from it gets the node's Kubernetes GPU, and a claim of the chart's class with its own sharing config and
    no toleration never gets the host-share GPU, the one device left."""
    gpus = fixture_gpus("workstation")
    plan = plan_node(TS, gpus, "dra", {"host_count": 1}, sharing={"time_slicing": {"interval": "Medium"}})
    [host_device] = plan["dra_devices"]
    [context] = sharing.dra_device_class_contexts([plan])
    device_class = render_template("deviceclass.yaml.j2", **context)
    rules = host_share_rules(plan)
    try:
        harness.publish(TS, "workstation")
        for rule in rules:
            harness.apply(rule)
        harness.apply(device_class)
        stored = harness.get(RULES, "DeviceClass", context["name"])
        assert stored["spec"] == device_class["spec"]  # the opaque GpuConfig kept as written
        assert stored["spec"]["config"][0]["opaque"]["parameters"]["sharing"] == {
            "strategy": "TimeSlicing",
            "timeSlicingConfig": {"interval": "Medium"},
        }

        harness.apply(render_claim("ts-gpu", ctx.ns, device_class=context["name"]))
        harness.apply(claim_pod(ctx, "ts-0", "ts-gpu", TS))
        pool, device = wait_for(
            lambda: allocated_device(ctx, "ts-0"), timeout=60, what="the time-sliced claim"
        )
        kube_minor = next(g["minor_number"] for g in gpus if g["uuid"] in plan["dra_sharing"]["uuids"])
        assert (pool, device) == (TS, f"gpu-{kube_minor}")

        tenant = render_claim("own-sharing", ctx.ns)
        tenant["spec"]["spec"]["devices"]["config"] = [
            {"requests": ["gpu"], "opaque": context["config"][0]},
        ]
        harness.apply(tenant)
        harness.apply(claim_pod(ctx, "ts-1", "own-sharing", TS))
        settled = wait_for(
            lambda: allocated_device(ctx, "ts-1") or scheduled_message(ctx, "ts-1"),
            what="the tenant pod's claim",
        )
        assert isinstance(settled, str) and "cannot allocate all claims" in settled, settled
        # the host-share device is free: only its taint keeps the tenant's claim off it
        held = [
            (r["pool"], r["device"])
            for c in list_objects(RULES, "ResourceClaim", ctx.ns)
            for r in ((c.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results", [])
        ]
        assert (TS, host_device) not in held and (TS, device) in held
    finally:
        for name in ("ts-0", "ts-1"):
            harness.delete("v1", "Pod", name, ctx.ns)
        harness.delete(RULES, "DeviceClass", context["name"])
        for rule in rules:
            harness.delete(RULES, "DeviceTaintRule", rule["metadata"]["name"])
        harness.unpublish(TS)
        harness.delete("v1", "Node", TS)
