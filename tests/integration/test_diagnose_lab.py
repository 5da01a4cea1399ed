"""Every Pending class of gpu_pending_diagnose produced for real on the lab's kube-scheduler.

Two nodes of our own (kwok), labelled and tainted with a private taint so that nobody else's
pods land there: node A advertises 2 GPUs behind the fleet's GPU taint, node B 1 GPU without it;
they carry different nvidia.com/gpu.product labels (as GPU Feature Discovery sets them).
Each test makes one pod Pending for one reason, waits for the scheduler's verdict, runs the
diagnosis the module runs (one read of the cluster, then the pure classifier) and checks the
class, the computed details and, where it is cheap, that following the advice unblocks the pod.

The scheduler's messages are the unit tests' fixtures (tests/fixtures/scheduler/*.txt). They are
captured here, never written by hand: GPUSPLIT_CAPTURE_SCHEDULER=1 rewrites them from this run.
Without it, each live message must still carry its fixture's reasons, worded the same (the
fixtures stay true to the running scheduler; the node counts depend on who else uses the lab).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from ansible_collections.gpusplit.k8s.plugins.module_utils._diagnose import rules
from ansible_collections.gpusplit.k8s.plugins.module_utils._diagnose.messages import (
    parse_gang_message,
    parse_message,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._diagnose.report import diagnose
from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.scheduling import GPU_RESOURCE_PREFIXES
from ansible_collections.gpusplit.k8s.plugins.modules import gpu_pending_diagnose as module
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.output_digest import json_digest
from lab import nodes as labnodes
from lab.lab import TRANSIENT_ERRORS as TRANSIENT

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "scheduler"
CAPTURE = os.environ.get("GPUSPLIT_CAPTURE_SCHEDULER") == "1"
GPU = "nvidia.com/gpu"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
DRIVER = "gpu.nvidia.com"
PRODUCT = "nvidia.com/gpu.product"
PRODUCTS = {"a": "NVIDIA-A100-SXM4-80GB", "b": "NVIDIA-L4"}
FOREIGN_REASONS = {"node(s) had untolerated taint(s)", "node(s) didn't match Pod's node affinity/selector"}


def kc(kubectl, *args, check=True, stdin=None, timeout=90):
    return kubectl.retrying(*args, check=check, stdin=stdin, timeout=timeout)


def apply(kubectl, obj):
    return kc(kubectl, "apply", "-f", "-", stdin=json.dumps(obj))


def served(kubectl, group_version):
    return group_version in kc(kubectl, "api-versions").stdout.split()


def diagnosis(lab, ns):
    """Exactly what the module does: one read of the cluster, then the classifier."""
    from kubernetes import config

    deadline = time.time() + 90
    while True:
        try:
            api = config.new_client_from_config(str(lab.KUBECONFIG))
            pods, nodes, events, podgroups, resource = module.read_cluster(api, GPU_RESOURCE_PREFIXES)
            break
        except Exception:  # the apiserver restarting under us
            if time.time() > deadline:
                raise
            time.sleep(2)
    report = diagnose(pods, nodes, events, podgroups, resource, namespaces=[ns])
    json.dumps(report)  # what the playbook writes to out/pending.json
    return {e["name"]: e for e in report["pods"]}


def pod_obj(name, ns, run, *, role, gpus=1, tolerate_gpu=True, node_selector=None, extra_spec=None):
    tolerations = [{"key": "gpusplit.io/diag-run", "operator": "Equal", "value": run, "effect": "NoSchedule"}]
    if tolerate_gpu:
        tolerations.append({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"})
    container = {"name": "main", "image": "registry.k8s.io/pause:3.10"}
    if gpus:
        container["resources"] = {"limits": {GPU: str(gpus)}}
    spec = {
        "nodeSelector": node_selector or {"gpusplit.io/diag-run": run, "gpusplit.io/diag-role": role},
        "tolerations": tolerations,
        "terminationGracePeriodSeconds": 0,
        "containers": [container],
    }
    spec.update(extra_spec or {})
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns}, "spec": spec}


def get_pod(kubectl, ns, name):
    return json.loads(kc(kubectl, "-n", ns, "get", "pod", name, "-o", "json").stdout)


def scheduled_message(kubectl, ns, name, contains, timeout=90):
    """The PodScheduled=False message once it contains ``contains``."""

    def probe():
        for cond in get_pod(kubectl, ns, name).get("status", {}).get("conditions") or []:
            if (
                cond["type"] == "PodScheduled"
                and cond["status"] == "False"
                and contains in (cond.get("message") or "")
            ):
                return cond["message"]
        return None

    return kubectl.wait_for(
        probe, timeout=timeout, interval=1, what=f"{name}: PodScheduled message with {contains!r}"
    )


def bound_node(kubectl, ns, name, timeout=90):
    return kubectl.wait_for(
        lambda: get_pod(kubectl, ns, name)["spec"].get("nodeName"),
        timeout=timeout,
        what=f"{name} to be bound",
    )


def keep(name, text, note):
    """Capture (GPUSPLIT_CAPTURE_SCHEDULER=1) or check a scheduler message against its fixture."""
    path = FIXTURES / f"{name}.txt"
    if CAPTURE:
        FIXTURES.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")
        index = FIXTURES / "CAPTURED.md"
        lines = index.read_text().splitlines() if index.exists() else []
        lines = [line for line in lines if not line.startswith(f"- `{name}.txt`")]
        if not lines:
            lines = [
                "# Scheduler messages captured from the lab (never hand-written)",
                "",
                "Written by tests/integration/test_diagnose_lab.py with GPUSPLIT_CAPTURE_SCHEDULER=1",
                "against the lab's kube-scheduler v1.37.2. Each file holds one message verbatim.",
                "",
            ]
        lines.append(f"- `{name}.txt`: {note}")
        index.write_text("\n".join(lines) + "\n")
        return
    assert path.exists(), f"missing fixture {path}; run with GPUSPLIT_CAPTURE_SCHEDULER=1"
    fixture = path.read_text().strip()
    fx, live = parse_message(fixture), parse_message(text)
    if fx is None:  # the gang plugin's own wording
        assert parse_gang_message(fixture) and parse_gang_message(text), (text, fixture)
        return
    assert live, (text, fixture)
    # other tests' nodes change the counts and add taint/selector reasons; the fixture's own
    # reasons must still be there, worded the same
    wanted = set(fx["reasons"]) - FOREIGN_REASONS or set(fx["reasons"])
    assert wanted <= set(live["reasons"]), (text, fixture)


def node_ready(kubectl, name):
    node = json.loads(kc(kubectl, "get", "node", name, "-o", "json").stdout)
    ready = any(
        c["type"] == "Ready" and c["status"] == "True" for c in node.get("status", {}).get("conditions") or []
    )
    taints = {t["key"] for t in node.get("spec", {}).get("taints") or []}
    return ready and not taints & {"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"}


@pytest.fixture(scope="module")
def scene(lab, kubectl, core_api):
    run = uuid.uuid4().hex[:6]
    ns = f"diag-{run}"
    a, b = f"diag-{run}-a", f"diag-{run}-b"
    kubectl.namespace(ns)
    for name, role, gpus in ((a, "a", 2), (b, "b", 1)):
        labnodes.ensure_node(
            core_api,
            name,
            labels={"gpusplit.io/diag-run": run, "gpusplit.io/diag-role": role, PRODUCT: PRODUCTS[role]},
        )
        taints = [f"gpusplit.io/diag-run={run}:NoSchedule"]
        if role == "a":
            taints.append("nvidia.com/gpu=present:NoSchedule")
        kc(kubectl, "taint", "node", name, *taints, "--overwrite")
        patch = [
            {"op": "add", "path": "/status/capacity/nvidia.com~1gpu", "value": str(gpus)},
            {"op": "add", "path": "/status/allocatable/nvidia.com~1gpu", "value": str(gpus)},
        ]
        kc(kubectl, "patch", "node", name, "--subresource=status", "--type=json", "-p", json.dumps(patch))
    for name in (a, b):
        # a new node carries node.kubernetes.io/not-ready until kwok reports it Ready; the tests
        # count every taint of the node, so wait for that one to go
        kubectl.wait_for(
            lambda name=name: node_ready(kubectl, name),
            timeout=120,
            interval=1,
            what=f"node {name} Ready without the not-ready taint",
        )
    cluster_objects = []
    yield {"run": run, "ns": ns, "a": a, "b": b, "cluster_objects": cluster_objects}
    kc(kubectl, "delete", "namespace", ns, "--wait=false", check=False)
    for kind, name in cluster_objects:
        kc(kubectl, "delete", kind, name, "--ignore-not-found", "--wait=false", check=False)
    for name in (a, b):
        kc(kubectl, "delete", "node", name, "--wait=false", check=False)


def test_untolerated_taint_names_the_taint_and_the_toleration_unblocks(scene, kubectl, lab):
    ns, run, a = scene["ns"], scene["run"], scene["a"]
    apply(kubectl, pod_obj("want-taint", ns, run, role="a", tolerate_gpu=False))
    message = scheduled_message(kubectl, ns, "want-taint", "untolerated taint")
    keep(
        "untolerated-taint",
        message,
        "GPU pod without the fleet's GPU toleration, its only candidate node tainted",
    )
    entry = diagnosis(lab, ns)["want-taint"]
    assert entry["class"] == rules.TAINT, entry
    assert entry["candidates"] == [a]
    assert f"nvidia.com/gpu=present:NoSchedule on {a}" in entry["summary"]
    assert entry["suggested_tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"}
    ]
    assert entry["message"] == message
    assert entry["next"] == (
        'add to the pod\'s tolerations: [{"key":"nvidia.com/gpu","operator":"Equal","value":"present",'
        f'"effect":"NoSchedule"}}]; kubectl describe node {a} | grep -A3 Taints'
    )
    # the advice works: adding exactly the suggested toleration gets the pod scheduled on A
    tolerations = get_pod(kubectl, ns, "want-taint")["spec"]["tolerations"] + entry["suggested_tolerations"]
    kc(
        kubectl,
        "-n",
        ns,
        "patch",
        "pod",
        "want-taint",
        "--type=merge",
        "-p",
        json.dumps({"spec": {"tolerations": tolerations}}),
    )
    assert bound_node(kubectl, ns, "want-taint") == a


def test_shortage_counts_allocatable_requested_free(scene, kubectl, lab):
    ns, run, b = scene["ns"], scene["run"], scene["b"]
    apply(kubectl, pod_obj("holder", ns, run, role="b"))
    assert bound_node(kubectl, ns, "holder") == b
    # B carries no GPU taint, so the pod needs no GPU toleration; node A's GPU taint is then
    # counted by the scheduler ("had untolerated taint(s)") although A never was a candidate
    apply(kubectl, pod_obj("want-gpu", ns, run, role="b", tolerate_gpu=False))
    message = scheduled_message(kubectl, ns, "want-gpu", "Insufficient nvidia.com/gpu")
    assert "untolerated taint" in message, message
    keep(
        "insufficient-gpu",
        message,
        "GPU pod whose only candidate node has all its GPUs taken; a non-candidate tainted node is counted as a taint",
    )
    entry = diagnosis(lab, ns)["want-gpu"]
    assert entry["class"] == rules.SHORTAGE, entry
    usage = entry["nodes"][b][0]["resources"][GPU]
    assert (usage["allocatable"], usage["requested"], usage["free"], usage["wanted"]) == (1, 1, 0, 1)
    assert usage["holders"] == [f"{ns}/holder (1)"]
    assert f"{b}: nvidia.com/gpu allocatable 1, requested 1, free 0" in entry["summary"]
    assert f"{ns}/holder" in entry["next"]


def test_node_selector_mismatch(scene, kubectl, lab):
    ns, run = scene["ns"], scene["run"]
    selector = {"gpusplit.io/diag-run": run, "nvidia.com/gpu.product": "NO-SUCH-GPU"}
    apply(kubectl, pod_obj("want-product", ns, run, role="a", node_selector=selector, tolerate_gpu=False))
    message = scheduled_message(kubectl, ns, "want-product", "untolerated taint")
    keep(
        "selector-mismatch",
        message,
        "GPU pod whose nodeSelector names a GPU product no node carries; node A's GPU taint is counted first",
    )
    entry = diagnosis(lab, ns)["want-product"]
    assert entry["class"] == rules.SELECTOR, entry
    assert entry["candidates"] == []
    assert "nvidia.com/gpu.product=NO-SUCH-GPU" in entry["summary"]
    assert f"gpusplit.io/diag-run={run} on 2 node(s)" in entry["summary"]
    assert entry["next"] == (
        "kubectl get nodes -L gpusplit.io/diag-run,nvidia.com/gpu.product; "
        "fix the pod's spec.nodeSelector or label the GPU nodes"
    )


def required_affinity(*expressions):
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": list(expressions)}]
            }
        }
    }


def test_node_affinity_mismatch_names_the_expression_and_the_gpu_nodes_values(scene, kubectl, lab):
    """A required nodeAffinity that no GPU node meets: the entry names the failing expression and
    the product each of our GPU nodes carries; labelling a node as advised unblocks the pod."""
    ns, run, a, b = scene["ns"], scene["run"], scene["a"], scene["b"]
    want = "NVIDIA-H100-80GB-HBM3"
    pod = pod_obj(
        "want-h100",
        ns,
        run,
        role="a",
        node_selector={"gpusplit.io/diag-run": run},
        extra_spec={"affinity": required_affinity({"key": PRODUCT, "operator": "In", "values": [want]})},
    )
    apply(kubectl, pod)
    # the pod tolerates both our taints: A and B fail on the affinity itself
    message = scheduled_message(kubectl, ns, "want-h100", "didn't match Pod's node affinity/selector")
    parsed = parse_message(message)
    assert parsed and parsed["reasons"]["node(s) didn't match Pod's node affinity/selector"] >= 2, message
    assert not [r for r in parsed["reasons"] if r.startswith("Insufficient")], message
    entry = diagnosis(lab, ns)["want-h100"]
    assert entry["class"] == rules.SELECTOR, entry
    assert entry["candidates"] == []
    assert entry["message"] == message
    assert (
        f"nodeAffinity wants {PRODUCT} In [{want}] (not met on any of the 2 GPU nodes matching the nodeSelector); "
        f"GPU nodes matching the nodeSelector have {PRODUCT}: {PRODUCTS['a']} ({a}), {PRODUCTS['b']} ({b})"
    ) in entry["summary"]
    (term,) = entry["affinity"]["terms"]
    assert [f["expression"] for f in term["failing"]] == [f"{PRODUCT} In [{want}]"]
    assert term["failing"][0]["fails_on"] == [a, b]
    assert entry["next"] == (
        f"kubectl get nodes -L gpusplit.io/diag-run,{PRODUCT}; fix the pod's spec.nodeSelector / "
        "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution or label the GPU nodes"
    )
    # the advice works: once A carries the wanted product the scheduler binds the pod there
    kc(kubectl, "label", "node", a, f"{PRODUCT}={want}", "--overwrite")
    try:
        assert bound_node(kubectl, ns, "want-h100", timeout=120) == a
    finally:
        kc(kubectl, "-n", ns, "delete", "pod", "want-h100", "--wait=false", check=False)
        kc(kubectl, "label", "node", a, f"{PRODUCT}={PRODUCTS['a']}", "--overwrite")


def test_unknown_reason_is_quoted(scene, kubectl, lab):
    """A reason the classifier does not own (CPU): by the GPU numbers the pod fits, so the entry
    is "unknown" and quotes the scheduler. The pod asks for nvidia.com/gpu.shared (time-slicing)."""
    ns, run, b = scene["ns"], scene["run"], scene["b"]
    shared = {"nvidia.com/gpu.shared": "4"}
    kc(
        kubectl,
        "patch",
        "node",
        b,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": {"capacity": shared, "allocatable": shared}}),
    )
    pod = pod_obj("want-cpu", ns, run, role="b", gpus=0)
    pod["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": "1000"},
        "limits": {"nvidia.com/gpu.shared": "1"},
    }
    apply(kubectl, pod)
    message = scheduled_message(kubectl, ns, "want-cpu", "Insufficient cpu")
    keep(
        "insufficient-cpu",
        message,
        "GPU pod (nvidia.com/gpu.shared) that fits by GPUs but asks for more CPU than any node has",
    )
    entry = diagnosis(lab, ns)["want-cpu"]
    # the lab's real node (lab-node-01) keeps other pods off with its taint, which the scheduler then names among
    # the reasons: the entry is an untolerated taint where that node is up, unknown where it is not
    real_node_taint = "untolerated taint" in message
    assert entry["class"] == (rules.TAINT if real_node_taint else rules.UNKNOWN), entry
    assert entry["wants"]["resources"] == {"nvidia.com/gpu.shared": 1}
    assert message in entry["summary"]


def _podgroup(ns, name, min_count):
    return {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}},
    }


def _need_podgroups(kubectl):
    if not served(kubectl, "scheduling.k8s.io/v1beta1"):
        pytest.fail(
            "gang quorum not produced: the lab does not serve scheduling.k8s.io/v1beta1 (PodGroup) right now; "
            "it needs the GenericWorkload feature gate on kube-apiserver, kube-scheduler and "
            "kube-controller-manager and --runtime-config=scheduling.k8s.io/v1beta1=true"
        )


def _need_gang_aware_scheduler(pod):
    """The feature-gate tests roll GenericWorkload one component at a time: the API may serve
    PodGroups while kube-scheduler still runs without the gate and places members one by one."""
    if pod["spec"].get("nodeName"):
        pytest.fail(
            f"kube-scheduler is not gang-aware right now (GenericWorkload off on the scheduler while the "
            f"API serves PodGroups): {pod['metadata']['name']} was bound on its own"
        )


def test_gang_quorum_not_present(generic_workload, scene, kubectl, lab):
    _need_podgroups(kubectl)
    ns, run = scene["ns"], scene["run"]
    apply(kubectl, _podgroup(ns, "trio", 3))
    for i in range(2):
        apply(
            kubectl,
            pod_obj(f"trio-{i}", ns, run, role="a", extra_spec={"schedulingGroup": {"podGroupName": "trio"}}),
        )
        if not get_pod(kubectl, ns, f"trio-{i}")["spec"].get("schedulingGroup"):
            pytest.fail(
                "the apiserver dropped spec.schedulingGroup (GenericWorkload went off during the test)"
            )
    time.sleep(5)  # the scheduler holds them in PreEnqueue and writes no condition: nothing to wait for
    for i in range(2):
        pod = get_pod(kubectl, ns, f"trio-{i}")
        _need_gang_aware_scheduler(pod)
        assert not [c for c in pod["status"].get("conditions") or [] if c["type"] == "PodScheduled"], pod[
            "status"
        ]
    entry = diagnosis(lab, ns)["trio-0"]
    assert entry["class"] == rules.GANG, entry
    assert f"gang {ns}/trio: 2 of minCount 3 pods present (0 bound)" in entry["summary"]
    assert "create the 1 missing member pod(s)" in entry["next"]
    assert (entry["gang"]["present"], entry["gang"]["min_count"]) == (2, 3)
    assert entry["message"] is None  # the class comes from the objects alone


def test_gang_quorum_present_but_unplaceable(generic_workload, scene, kubectl, lab):
    _need_podgroups(kubectl)
    ns, run, b = scene["ns"], scene["run"], scene["b"]
    apply(kubectl, _podgroup(ns, "pair", 2))
    for i in range(2):
        apply(
            kubectl,
            pod_obj(f"pair-{i}", ns, run, role="b", extra_spec={"schedulingGroup": {"podGroupName": "pair"}}),
        )
        if not get_pod(kubectl, ns, f"pair-{i}")["spec"].get("schedulingGroup"):
            pytest.fail(
                "the apiserver dropped spec.schedulingGroup (GenericWorkload went off during the test)"
            )

    def gang_event():
        events = json.loads(
            kc(
                kubectl,
                "-n",
                ns,
                "get",
                "events",
                "--field-selector",
                "reason=FailedScheduling",
                "-o",
                "json",
            ).stdout
        )["items"]
        for e in events:
            if e["involvedObject"]["name"].startswith("pair-") and parse_gang_message(e["message"]):
                return e["message"]
        return None

    def gang_event_or_bound():
        for i in range(2):
            pod = get_pod(kubectl, ns, f"pair-{i}")
            if pod["spec"].get("nodeName"):
                return pod
        return gang_event()

    try:
        said = kubectl.wait_for(gang_event_or_bound, timeout=120, interval=2, what="the gang plugin's event")
    except AssertionError:
        pytest.fail("no verdict of the gang plugin within 120 s: kube-scheduler is not gang-aware right now")
    if isinstance(said, dict):
        _need_gang_aware_scheduler(said)
    keep(
        "gang-cannot-satisfy",
        said,
        "FailedScheduling event of a gang member: quorum present (2 of minCount 2), no GPU free on their node",
    )
    group = json.loads(kc(kubectl, "-n", ns, "get", "podgroup", "pair", "-o", "json").stdout)
    conds = [
        c
        for c in group.get("status", {}).get("conditions") or []
        if c["type"] == "PodGroupInitiallyScheduled"
    ]
    if conds:
        keep(
            "gang-podgroup-condition",
            conds[0]["message"],
            "PodGroupInitiallyScheduled=False message of that group",
        )
    entries = diagnosis(lab, ns)
    for i in range(2):
        entry = entries[f"pair-{i}"]
        assert entry["class"] == rules.GANG, entry
        assert entry["cause"] == rules.SHORTAGE, entry
        assert f"gang {ns}/pair: 2 pods present (minCount 2), 0 bound" in entry["summary"]
        assert f"{b}: nvidia.com/gpu allocatable 1, requested 1, free 0" in entry["summary"]


def _dra_objects(scene, tag, node, *, taint, claim_selector=None):
    run, ns = scene["run"], scene["ns"]
    cls = f"diag-{run}-{tag}"
    objs = [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": cls},
            "spec": {
                "selectors": [
                    {
                        "cel": {
                            "expression": f'device.driver == "{DRIVER}" && device.attributes["gpusplit.io"].run == "{run}"'
                        }
                    }
                ]
            },
        },
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-{tag}"},
            "spec": {
                "driver": DRIVER,
                "nodeName": node,
                "pool": {"name": f"{node}-{tag}", "generation": 1, "resourceSliceCount": 1},
                "devices": [
                    {
                        "name": f"gpu-{i}",
                        "attributes": {
                            "gpusplit.io/run": {"string": run},
                            "uuid": {"string": f"GPU-{run}-{tag}-{i}"},
                        },
                    }
                    for i in range(2)
                ],
            },
        },
    ]
    if taint:
        objs.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceTaintRule",
                "metadata": {"name": f"{node}-{tag}"},
                "spec": {
                    "deviceSelector": {"driver": DRIVER, "pool": f"{node}-{tag}"},
                    "taint": {"key": "gpusplit.io/unhealthy", "value": "Degraded", "effect": "NoSchedule"},
                },
            }
        )
    request = {"name": "gpu", "exactly": {"deviceClassName": cls}}
    if claim_selector:
        request["exactly"]["selectors"] = [{"cel": {"expression": claim_selector}}]
    objs.append(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": f"claim-{tag}", "namespace": ns},
            "spec": {"devices": {"requests": [request]}},
        }
    )
    for o in objs:
        if o["kind"] != "ResourceClaim":
            scene["cluster_objects"].append((o["kind"].lower(), o["metadata"]["name"]))
    return objs


def _claim_pod(scene, name, tag, role):
    pod = pod_obj(name, scene["ns"], scene["run"], role=role, gpus=0)
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": f"claim-{tag}"}]
    pod["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpu"}]}
    return pod


def _need_dra(kubectl):
    resources = kc(kubectl, "api-resources", "--api-group=resource.k8s.io", "-o", "name").stdout.split()
    if "devicetaintrules.resource.k8s.io" not in resources:
        pytest.fail(f"the lab does not serve resource.k8s.io/v1 DeviceTaintRule (served: {resources})")


def test_dra_device_taint_names_the_rule(scene, kubectl, lab):
    _need_dra(kubectl)
    ns, a = scene["ns"], scene["a"]
    for obj in _dra_objects(scene, "tainted", a, taint=True):
        apply(kubectl, obj)
    apply(kubectl, _claim_pod(scene, "want-dra", "tainted", "a"))
    message = scheduled_message(kubectl, ns, "want-dra", "cannot allocate all claims")
    keep(
        "dra-device-taint",
        message,
        "pod with a ResourceClaim whose every matching device a DeviceTaintRule taints",
    )
    entry = diagnosis(lab, ns)["want-dra"]
    assert entry["class"] == rules.DRA_TAINT, entry
    rule = f"{a}-tainted"
    assert (
        f"{DRIVER}/{rule}/gpu-0 gpusplit.io/unhealthy=Degraded:NoSchedule (DeviceTaintRule {rule})"
        in entry["summary"]
    )
    assert entry["suggested_device_tolerations"] == [
        {"key": "gpusplit.io/unhealthy", "operator": "Equal", "value": "Degraded", "effect": "NoSchedule"}
    ]
    assert f"kubectl get devicetaintrule {rule} -o yaml" in entry["next"]
    # the rule is the cause: without it the claim is allocated and the pod scheduled on A
    kc(kubectl, "delete", "devicetaintrule", rule)
    assert bound_node(kubectl, ns, "want-dra", timeout=120) == a


def test_dra_no_matching_device(scene, kubectl, lab):
    _need_dra(kubectl)
    ns, b = scene["ns"], scene["b"]
    selector = 'device.attributes["gpu.nvidia.com"].uuid == "GPU-does-not-exist"'
    for obj in _dra_objects(scene, "plain", b, taint=False, claim_selector=selector):
        apply(kubectl, obj)
    apply(kubectl, _claim_pod(scene, "want-uuid", "plain", "b"))
    message = scheduled_message(kubectl, ns, "want-uuid", "cannot allocate all claims")
    keep("dra-no-device", message, "pod with a ResourceClaim whose selector matches no published device")
    entry = diagnosis(lab, ns)["want-uuid"]
    assert entry["class"] == rules.DRA_NO_DEVICE, entry
    assert f"{b}: no published device matches the class and selectors on this node" in entry["summary"]
    assert f"ResourceClaim {ns}/claim-plain" in entry["next"]


def test_playbook_writes_pending_json_table_and_fleet_svg(scene, kubectl, lab, tmp_path):
    """The playbook on pods of its own (it does not rely on what earlier tests left Pending)."""
    ns, run, a = scene["ns"], scene["run"], scene["a"]
    apply(kubectl, pod_obj("pb-taint", ns, run, role="a", tolerate_gpu=False))
    selector = {"gpusplit.io/diag-run": run, PRODUCT: "NO-SUCH-GPU"}
    apply(kubectl, pod_obj("pb-selector", ns, run, role="a", node_selector=selector))
    affinity = required_affinity({"key": PRODUCT, "operator": "In", "values": ["NO-SUCH-GPU"]})
    apply(
        kubectl,
        pod_obj(
            "pb-affinity",
            ns,
            run,
            role="a",
            node_selector={"gpusplit.io/diag-run": run},
            extra_spec={"affinity": affinity},
        ),
    )
    out = tmp_path / "out"
    out.mkdir()
    report = {
        "nodes": [
            {
                "name": "n1",
                "host": "h1",
                "mode": "device_plugin",
                "host_gpus": ["GPU-1"],
                "kubernetes_gpus": ["GPU-2"],
                "excluded_gpus": [],
                "expected_allocatable": 1,
                "allocatable": 1,
                "verdict": "OK",
                "reasons": [],
            }
        ],
        "counts": {"OK": 1, "DRIFT": 0, "FAIL": 0},
        "ok": True,
    }
    plan = {
        "nodes": {
            "h1": {
                "node": "n1",
                "host": "h1",
                "mode": "device_plugin",
                "gpus": [
                    {
                        "uuid": "GPU-1",
                        "pci_bus_id": "00000000:18:00.0",
                        "index": 0,
                        "name": "NVIDIA H100",
                        "share": "host",
                        "health": "ok",
                    },
                    {
                        "uuid": "GPU-2",
                        "pci_bus_id": "00000000:2A:00.0",
                        "index": 1,
                        "name": "NVIDIA H100",
                        "share": "kubernetes",
                        "health": "ok",
                    },
                ],
            }
        }
    }
    # the report names the plan it verified, as fleet_verify's report does (its digest)
    report["plan_digest"] = json_digest(plan)
    (out / "fleet-plan.json").write_text(json.dumps(plan))
    (out / "fleet-report.json").write_text(json.dumps(report))
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
    extra = json.dumps({"gpusplit_out_dir": str(out), "gpusplit_diagnose_namespaces": [ns]})
    command = [
        "ansible-playbook",
        "-i",
        str(ROOT / "inventory" / "lab"),
        str(ROOT / "playbooks" / "diagnose.yml"),
        "-e",
        extra,
    ]
    deadline = time.time() + 120
    while True:
        proc = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
        if proc.returncode == 0 or not any(t in proc.stdout for t in TRANSIENT) or time.time() > deadline:
            break
        time.sleep(5)  # the shared lab's apiserver was restarting
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    pending = json.loads((out / "pending.json").read_text())
    entries = {e["name"]: e for e in pending["pods"]}
    names = {name: e["class"] for name, e in entries.items()}
    assert names.get("pb-taint") == rules.TAINT, names
    assert names.get("pb-selector") == rules.SELECTOR, names
    assert names.get("pb-affinity") == rules.SELECTOR, names
    assert entries["pb-taint"]["next"].endswith(f"kubectl describe node {a} | grep -A3 Taints")
    assert entries["pb-affinity"]["affinity"]["terms"][0]["failing"][0]["key"] == PRODUCT
    assert entries["pb-affinity"]["next"].startswith(f"kubectl get nodes -L gpusplit.io/diag-run,{PRODUCT}; ")
    # the table as printed (the YAML result format folds long lines at spaces)
    printed = " ".join(proc.stdout.split())
    for name, cls in (("pb-taint", "untolerated_taint"), ("pb-affinity", "node_selector_mismatch")):
        assert f"{ns}/{name} {cls} " in printed, printed[-3000:]
    assert f"nodeAffinity wants {PRODUCT} In [NO-SUCH-GPU]" in printed
    assert f"-> kubectl get nodes -L gpusplit.io/diag-run,{PRODUCT};" in printed
    svg = (out / "fleet.svg").read_text()
    assert svg.startswith("<?xml") and "GPU-2" in svg
    assert str(out / "fleet.svg") in proc.stdout
