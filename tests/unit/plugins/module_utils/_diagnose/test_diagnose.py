"""The Pending-pod classifier, fed with scheduler messages captured from the lab.

The messages in tests/fixtures/scheduler/*.txt were written by tests/integration/test_diagnose_lab.py
from the real kube-scheduler v1.37.2; the objects here rebuild the scene those messages came
from (two nodes of our own among others: A with 2 GPUs behind the GPU taint, B with 1 GPU).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ansible_collections.gpusplit.k8s.plugins.module_utils._diagnose import diagnose as d

FIXTURES = Path(__file__).resolve().parents[4] / "fixtures" / "scheduler"
GPU = "nvidia.com/gpu"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
PRIVATE = {"key": "gpusplit.io/diag-run", "value": "r1", "effect": "NoSchedule"}
PRIVATE_TOL = {"key": "gpusplit.io/diag-run", "operator": "Equal", "value": "r1", "effect": "NoSchedule"}
GPU_TOL = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def fixture(name):
    path = FIXTURES / f"{name}.txt"
    if not path.exists():
        pytest.skip(f"{path.name} not captured yet (run the lab test with GPUSPLIT_CAPTURE_SCHEDULER=1)")
    return path.read_text().strip()


def node(name, gpus=0, labels=None, taints=(), unschedulable=False, extra_alloc=None):
    alloc = {"cpu": "64", "memory": "512Gi", "pods": "110"}
    if gpus is not None:
        alloc[GPU] = str(gpus)
    alloc.update(extra_alloc or {})
    spec = {"taints": list(taints)} if taints else {}
    if unschedulable:
        spec["unschedulable"] = True
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": spec,
        "status": {"allocatable": alloc, "capacity": dict(alloc)},
    }


def pod(
    name,
    ns="diag",
    gpus=1,
    selector=None,
    tolerations=(PRIVATE_TOL, GPU_TOL),
    node_name=None,
    phase=None,
    message=None,
    extra_spec=None,
    resources=None,
):
    container = {"name": "main", "image": "registry.k8s.io/pause:3.10"}
    if resources is not None:
        container["resources"] = resources
    elif gpus:
        container["resources"] = {"limits": {GPU: str(gpus)}, "requests": {GPU: str(gpus)}}
    spec = {"containers": [container], "tolerations": list(tolerations)}
    if selector:
        spec["nodeSelector"] = selector
    if node_name:
        spec["nodeName"] = node_name
    spec.update(extra_spec or {})
    status = {"phase": phase or ("Running" if node_name else "Pending")}
    if message:
        status["conditions"] = [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
        ]
    return {"metadata": {"name": name, "namespace": ns, "uid": f"uid-{name}"}, "spec": spec, "status": status}


def event(p, message, when="2026-11-29T07:00:00Z"):
    return {
        "metadata": {"name": f"{p['metadata']['name']}.1", "namespace": p["metadata"]["namespace"]},
        "involvedObject": {
            "kind": "Pod",
            "name": p["metadata"]["name"],
            "namespace": p["metadata"]["namespace"],
        },
        "reason": "FailedScheduling",
        "message": message,
        "lastTimestamp": when,
    }


def scene_nodes():
    """The lab scene: our A and B, six other nodes (untainted lab nodes, one tainted)."""
    a = node("diag-a", 2, {"gpusplit.io/diag-run": "r1", "gpusplit.io/diag-role": "a"}, [PRIVATE, GPU_TAINT])
    b = node("diag-b", 1, {"gpusplit.io/diag-run": "r1", "gpusplit.io/diag-role": "b"}, [PRIVATE])
    others = [node(f"lab-{i}", 2, {"nvidia.com/gpu.product": "NVIDIA-H100"}) for i in range(6)]
    others.append(node("other-tainted", 8, {}, [GPU_TAINT]))
    return [a, b, *others]


ROLE_A = {"gpusplit.io/diag-run": "r1", "gpusplit.io/diag-role": "a"}
ROLE_B = {"gpusplit.io/diag-run": "r1", "gpusplit.io/diag-role": "b"}


def only(report, name):
    entries = {e["name"]: e for e in report["pods"]}
    return entries[name]


# --------------------------------------------------------------------------------------------
# the captured messages


@pytest.mark.parametrize(
    "name",
    [
        "untolerated-taint",
        "insufficient-gpu",
        "selector-mismatch",
        "dra-device-taint",
        "dra-no-device",
        "insufficient-cpu",
    ],
)
def test_captured_messages_parse(name):
    text = fixture(name)
    parsed = d.parse_message(text)
    assert parsed, text
    assert sum(parsed["reasons"].values()) == parsed["total"]
    assert parsed["preemption"].startswith(f"0/{parsed['total']} nodes are available")


def test_messages_count_nodes_but_name_no_taint_and_no_device():
    # why the classifier reads the objects: the words do not carry the facts
    taint = d.parse_message(fixture("untolerated-taint"))
    assert "node(s) had untolerated taint(s)" in taint["reasons"]
    assert "nvidia.com/gpu" not in fixture("untolerated-taint")
    # a device taint and a missing device read exactly the same
    assert d.parse_message(fixture("dra-device-taint"))["reasons"].keys() == {
        "cannot allocate all claims",
        "node(s) didn't match Pod's node affinity/selector",
    }
    assert (
        d.parse_message(fixture("dra-no-device"))["reasons"]
        == d.parse_message(fixture("dra-device-taint"))["reasons"]
    )
    # and a shortage message counts a tainted non-candidate node as a taint
    assert set(d.parse_message(fixture("insufficient-gpu"))["reasons"]) >= {
        "Insufficient nvidia.com/gpu",
        "node(s) had untolerated taint(s)",
    }


def test_message_only_classes():
    assert d.classify_message(fixture("untolerated-taint")) == d.TAINT
    assert d.classify_message(fixture("dra-no-device")) == d.DRA_NO_DEVICE
    assert d.classify_message(fixture("insufficient-cpu")) == d.UNKNOWN
    assert (
        d.classify_message("0/4 nodes are available: 4 node(s) didn't match Pod's node affinity/selector.")
        == d.SELECTOR
    )
    assert d.classify_message("something else entirely") == d.UNKNOWN
    assert d.parse_message("not a scheduler message") is None


# --------------------------------------------------------------------------------------------
# each class, with the objects of the captured scene


def test_untolerated_taint_names_taint_node_and_toleration():
    p = pod("want-taint", selector=ROLE_A, tolerations=[PRIVATE_TOL], message=fixture("untolerated-taint"))
    report = d.diagnose([p], scene_nodes())
    e = only(report, "want-taint")
    assert e["class"] == d.TAINT
    assert e["candidates"] == ["diag-a"]
    assert e["summary"] == "untolerated taint(s): nvidia.com/gpu=present:NoSchedule on diag-a"
    assert e["suggested_tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"}
    ]
    assert e["message"] == fixture("untolerated-taint")
    assert "kubectl describe node diag-a" in e["next"]
    # the suggested toleration really tolerates it
    assert d.untolerated_taints([PRIVATE_TOL, *e["suggested_tolerations"]], [PRIVATE, GPU_TAINT]) == []


def test_cordoned_candidate_is_a_taint_with_uncordon_advice():
    nodes = [node("n1", 2, {"pool": "x"}, unschedulable=True)]
    e = only(d.diagnose([pod("p", selector={"pool": "x"}, tolerations=[])], nodes), "p")
    assert e["class"] == d.TAINT
    assert "node.kubernetes.io/unschedulable:NoSchedule on n1" in e["summary"]
    assert "uncordon n1" in e["next"]
    assert e["suggested_tolerations"] == []


def test_shortage_per_node_numbers_and_holders():
    holder = pod("holder", selector=ROLE_B, node_name="diag-b")
    done = pod("finished", node_name="diag-b", phase="Succeeded")  # terminated pods hold nothing
    p = pod("want-gpu", selector=ROLE_B, tolerations=[PRIVATE_TOL], message=fixture("insufficient-gpu"))
    e = only(d.diagnose([holder, done, p], scene_nodes()), "want-gpu")
    assert e["class"] == d.SHORTAGE, e
    usage = e["nodes"]["diag-b"][0]["resources"][GPU]
    assert usage == {"allocatable": 1, "requested": 1, "free": 0, "wanted": 1, "holders": ["diag/holder (1)"]}
    assert "diag-b: nvidia.com/gpu allocatable 1, requested 1, free 0, pod wants 1" in e["summary"]
    assert "GPUs held by diag/holder (1)" in e["next"]
    # the message alone would have said "taint" as often as "shortage"
    assert "untolerated taint" in e["message"]


def test_shortage_where_nothing_is_advertised_points_at_the_device_plugin():
    nodes = [node("gpu-1", 0, {"pool": "x"}), node("gpu-2", None, {"pool": "x"})]
    e = only(d.diagnose([pod("p", selector={"pool": "x"})], nodes), "p")
    assert e["class"] == d.SHORTAGE
    assert "advertise(s) no GPUs" in e["next"] and "verify" in e["next"]


def test_selector_mismatch_with_label_hints():
    selector = {"gpusplit.io/diag-run": "r1", "nvidia.com/gpu.product": "NO-SUCH-GPU"}
    p = pod(
        "want-product", selector=selector, tolerations=[PRIVATE_TOL], message=fixture("selector-mismatch")
    )
    e = only(d.diagnose([p], scene_nodes()), "want-product")
    assert e["class"] == d.SELECTOR, e
    assert e["candidates"] == []
    assert "gpusplit.io/diag-run=r1 on 2 node(s)" in e["summary"]
    assert "no node has nvidia.com/gpu.product=NO-SUCH-GPU (values present: NVIDIA-H100 (6))" in e["summary"]
    # the scheduler counted node A's taint first
    assert "untolerated taint" in e["message"]
    assert e["next"].startswith("kubectl get nodes -L gpusplit.io/diag-run,nvidia.com/gpu.product; ")
    assert "spec.nodeSelector" in e["next"]
    assert "affinity" not in e  # no required node affinity: nothing to explain there


# --------------------------------------------------------------------------------------------
# required node affinity nobody matches: which expression fails, and what the GPU nodes carry

PRODUCT = "nvidia.com/gpu.product"


def affinity(*terms):
    """spec.affinity with a required node affinity of ``terms`` (each a list of expressions)."""
    return {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        t if isinstance(t, dict) else {"matchExpressions": t} for t in terms
                    ]
                }
            }
        }
    }


def expr(key, op, *values):
    out = {"key": key, "operator": op}
    if values:
        out["values"] = list(values)
    return out


def gpu_fleet():
    return [
        node("lab-a100-01", 8, {PRODUCT: "A100-SXM4-80GB", "zone": "a"}),
        node("lab-a100-02", 8, {PRODUCT: "A100-SXM4-80GB", "zone": "b"}),
        node("lab-l4-01", 2, {PRODUCT: "L4", "zone": "a"}),
        node("lab-new-01", 4, {"zone": "a"}),  # GPU Feature Discovery has not labelled it yet
        node("cpu-01", 0, {PRODUCT: "Tesla-T4", "zone": "a"}),  # advertises no GPU: not a GPU node
    ]


def test_affinity_mismatch_names_the_failing_expression_and_the_gpu_nodes_values():
    p = pod("want-h100", tolerations=[], extra_spec=affinity([expr(PRODUCT, "In", "H100")]))
    e = only(d.diagnose([p], gpu_fleet()), "want-h100")
    assert e["class"] == d.SELECTOR, e
    assert e["candidates"] == []
    assert e["summary"] == (
        "no node matches the pod's node selection (required nodeAffinity: nvidia.com/gpu.product In [H100]): "
        "nodeAffinity wants nvidia.com/gpu.product In [H100] (not met on any of the 4 GPU nodes); "
        "GPU nodes have nvidia.com/gpu.product: A100-SXM4-80GB (lab-a100-01, lab-a100-02), L4 (lab-l4-01), "
        "<unset> (lab-new-01)"
    )
    assert "Tesla-T4" not in e["summary"]
    assert e["next"] == (
        "kubectl get nodes -L nvidia.com/gpu.product; fix the pod's "
        "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution or label the GPU nodes"
    )
    (term,) = e["affinity"]["terms"]
    (failing,) = term["failing"]
    assert failing["fails_on"] == ["lab-a100-01", "lab-a100-02", "lab-l4-01", "lab-new-01"]
    assert failing["node_values"] == [
        {"value": "A100-SXM4-80GB", "nodes": ["lab-a100-01", "lab-a100-02"]},
        {"value": "L4", "nodes": ["lab-l4-01"]},
        {"value": None, "nodes": ["lab-new-01"]},
    ]
    assert e["affinity"]["scope"] == "GPU nodes"
    json.dumps(e)
    # the advice is right: once a GPU node carries the wanted value the pod has a candidate
    fleet = gpu_fleet()
    fleet[2]["metadata"]["labels"][PRODUCT] = "H100"
    assert only(d.diagnose([p], fleet), "want-h100")["candidates"] == ["lab-l4-01"]


def test_affinity_terms_are_explained_one_by_one():
    terms = affinity(
        [expr(PRODUCT, "In", "A100-SXM4-80GB"), expr("zone", "In", "c")],  # zone fails everywhere
        [expr(PRODUCT, "In", "L4"), expr("zone", "NotIn", "a")],  # L4 is only in zone a
        {"matchFields": [expr("metadata.name", "In", "lab-h100-01")]},
    )
    p = pod("picky", tolerations=[], extra_spec=terms)
    e = only(d.diagnose([p], gpu_fleet()), "picky")
    assert e["class"] == d.SELECTOR
    summary = e["summary"]
    assert (
        "required nodeAffinity: (nvidia.com/gpu.product In [A100-SXM4-80GB] AND zone In [c]) OR "
        "(nvidia.com/gpu.product In [L4] AND zone NotIn [a]) OR (field metadata.name In [lab-h100-01])"
    ) in summary
    # term 1: the product is met on the A100s, the zone nowhere
    assert (
        "nodeAffinity term 1 wants nvidia.com/gpu.product In [A100-SXM4-80GB] (not met on 2 of the 4 GPU nodes)"
        in summary
    )
    assert (
        "nodeAffinity term 1 wants zone In [c] (not met on any of the 4 GPU nodes); "
        "GPU nodes have zone: a (lab-a100-01, lab-l4-01, lab-new-01), b (lab-a100-02)"
    ) in summary
    assert "nodeAffinity term 2 wants zone NotIn [a] (not met on 3 of the 4 GPU nodes)" in summary
    assert (
        "nodeAffinity term 3 wants field metadata.name In [lab-h100-01] (not met on any of the 4 GPU nodes); "
        "GPU nodes are: lab-a100-01, lab-a100-02, lab-l4-01, lab-new-01"
    ) in summary
    failing = {t["term"]: [f["expression"] for f in t["failing"]] for t in e["affinity"]["terms"]}
    assert failing == {
        1: ["nvidia.com/gpu.product In [A100-SXM4-80GB]", "zone In [c]"],
        2: ["nvidia.com/gpu.product In [L4]", "zone NotIn [a]"],
        3: ["field metadata.name In [lab-h100-01]"],
    }
    assert e["next"].startswith("kubectl get nodes -L nvidia.com/gpu.product,zone; ")


def test_affinity_hint_looks_at_the_gpu_nodes_the_node_selector_admits():
    nodes = gpu_fleet()
    for n in nodes[:2]:
        n["metadata"]["labels"]["team"] = "vision"
    p = pod(
        "vision-l4",
        selector={"team": "vision"},
        tolerations=[],
        extra_spec=affinity([expr(PRODUCT, "In", "L4")]),
    )
    e = only(d.diagnose([p], nodes), "vision-l4")
    assert e["class"] == d.SELECTOR
    assert "team=vision on 2 node(s)" in e["summary"]
    assert (
        "nodeAffinity wants nvidia.com/gpu.product In [L4] (not met on any of the 2 GPU nodes matching the "
        "nodeSelector); GPU nodes matching the nodeSelector have nvidia.com/gpu.product: "
        "A100-SXM4-80GB (lab-a100-01, lab-a100-02)"
    ) in e["summary"]
    assert e["affinity"]["nodes"] == ["lab-a100-01", "lab-a100-02"]
    assert e["next"].startswith("kubectl get nodes -L team,nvidia.com/gpu.product; ")
    assert "spec.nodeSelector / spec.affinity.nodeAffinity" in e["next"]


def test_affinity_met_but_the_node_selector_rules_the_nodes_out():
    p = pod(
        "typo", selector={"team": "visoin"}, tolerations=[], extra_spec=affinity([expr("zone", "In", "a")])
    )
    e = only(d.diagnose([p], gpu_fleet()), "typo")
    assert e["class"] == d.SELECTOR
    assert "no node has the label team" in e["summary"]
    assert "nodeAffinity (zone In [a]) is met by GPU nodes lab-a100-01, lab-l4-01, lab-new-01" in e["summary"]
    assert e["affinity"]["terms"][0]["met_by"] == ["lab-a100-01", "lab-l4-01", "lab-new-01"]
    assert e["affinity"]["terms"][0]["failing"] == [
        {
            "expression": "zone In [a]",
            "field": False,
            "key": "zone",
            "operator": "In",
            "values": ["a"],
            "fails_on": ["lab-a100-02"],
            "node_values": [
                {"value": "a", "nodes": ["lab-a100-01", "lab-l4-01", "lab-new-01"]},
                {"value": "b", "nodes": ["lab-a100-02"]},
            ],
        }
    ]


def test_affinity_operators_and_the_scope_without_gpu_nodes():
    nodes = [node("n1", 0, {"gpus": "2"}), node("n2", None, {})]
    terms = affinity([expr("gpus", "Gt", "4"), expr("gpu.present", "Exists"), expr("gpus", "DoesNotExist")])
    p = pod("big", tolerations=[], extra_spec=terms)
    e = only(d.diagnose([p], nodes), "big")
    assert e["class"] == d.SELECTOR
    # no node advertises a GPU: the hint speaks of all nodes
    assert e["affinity"]["scope"] == "nodes"
    assert (
        "nodeAffinity wants gpus Gt 4 (not met on any of the 2 nodes); nodes have gpus: 2 (n1), <unset> (n2)"
        in e["summary"]
    )
    assert "nodeAffinity wants gpu.present Exists (not met on any of the 2 nodes)" in e["summary"]
    assert (
        "nodeAffinity wants gpus DoesNotExist (not met on 1 of the 2 nodes); nodes have gpus: 2 (n1)"
        in e["summary"]
    )


def test_affinity_hint_for_a_dra_pod_uses_the_nodes_its_devices_reach():
    nodes = scene_nodes()  # diag-a carries the ResourceSlice below; the lab-* nodes advertise nvidia.com/gpu
    p = claim_pod(selector=None)
    p["spec"].update(affinity([expr("gpusplit.io/diag-role", "In", "c")]))
    resource = dra_objects(taint_rule=False)
    e = only(d.diagnose([p], nodes, resource=resource), "want-dra")
    assert e["class"] == d.SELECTOR
    assert e["affinity"]["nodes"] == ["diag-a"]
    assert "GPU nodes have gpusplit.io/diag-role: a (diag-a)" in e["summary"]


def test_affinity_hint_cuts_long_lists_but_keeps_every_node_in_the_details():
    nodes = [node(f"gpu-{i:02}", 1, {PRODUCT: f"model-{i % 10}"}) for i in range(40)]
    p = pod("many", tolerations=[], extra_spec=affinity([expr(PRODUCT, "In", "H200")]))
    e = only(d.diagnose([p], nodes), "many")
    assert "model-0 (gpu-00, gpu-10, gpu-20, +1 more)" in e["summary"]
    assert "+2 more value(s)" in e["summary"]
    assert "model-8" not in e["summary"]
    values = e["affinity"]["terms"][0]["failing"][0]["node_values"]
    assert sum(len(v["nodes"]) for v in values) == 40


def test_affinity_without_terms_or_with_an_empty_term():
    p = pod("none", tolerations=[], extra_spec=affinity())
    e = only(d.diagnose([p], gpu_fleet()), "none")
    assert e["class"] == d.SELECTOR
    assert "required nodeAffinity has no nodeSelectorTerms: it matches no node" in e["summary"]
    p = pod("empty", tolerations=[], extra_spec=affinity({}))
    e = only(d.diagnose([p], gpu_fleet()), "empty")
    assert "nodeAffinity is empty: an empty term matches no node" in e["summary"]


def test_unknown_quotes_the_scheduler():
    message = fixture("insufficient-cpu")
    res = {"requests": {"cpu": "1000"}, "limits": {"nvidia.com/gpu.shared": "1"}}
    nodes = scene_nodes()
    nodes[1]["status"]["allocatable"]["nvidia.com/gpu.shared"] = "4"
    p = pod("want-cpu", selector=ROLE_B, resources=res, message=message)
    e = only(d.diagnose([p], nodes), "want-cpu")
    assert e["class"] == d.UNKNOWN
    assert e["summary"] == f"the scheduler says: {message!r}"
    assert e["wants"]["resources"] == {"nvidia.com/gpu.shared": 1}


def test_no_message_yet():
    e = only(d.diagnose([pod("fresh", selector=ROLE_B)], scene_nodes()), "fresh")
    assert e["class"] == d.UNKNOWN
    assert e["summary"].startswith("no scheduling attempt recorded yet")


def test_event_message_is_used_when_the_condition_is_missing():
    p = pod("ev", selector=ROLE_A, tolerations=[PRIVATE_TOL])
    report = d.diagnose(
        [p],
        scene_nodes(),
        events=[event(p, "older", "2026-01-01T00:00:00Z"), event(p, fixture("untolerated-taint"))],
    )
    e = only(report, "ev")
    assert e["message"] == fixture("untolerated-taint")
    assert e["events"] == ["older", fixture("untolerated-taint")]


def test_scheduling_gated():
    p = pod("gated", extra_spec={"schedulingGates": [{"name": "example.com/quota"}]})
    assert only(d.diagnose([p], scene_nodes()), "gated")["class"] == d.GATED


def test_only_unscheduled_gpu_pods_are_diagnosed():
    pods = [
        pod("cpu-only", gpus=0),
        pod("bound", node_name="diag-b"),
        pod("gpu"),
        pod("other-ns", ns="elsewhere"),
        dict(pod("deleting"), metadata={"name": "deleting", "namespace": "diag", "deletionTimestamp": "x"}),
    ]
    report = d.diagnose(pods, scene_nodes(), namespaces=["diag"])
    assert [e["name"] for e in report["pods"]] == ["gpu"]
    json.dumps(report)


# --------------------------------------------------------------------------------------------
# gang scheduling


def podgroup(name, min_count, ns="diag", conditions=None):
    pg = {
        "metadata": {"name": name, "namespace": ns},
        "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}},
    }
    if conditions:
        pg["status"] = {"conditions": conditions}
    return pg


def member(name, group, **kw):
    return pod(name, extra_spec={"schedulingGroup": {"podGroupName": group}}, **kw)


def test_gang_quorum_not_present_from_objects_alone():
    pods = [member(f"trio-{i}", "trio", selector=ROLE_A) for i in range(2)]
    e = only(d.diagnose(pods, scene_nodes(), podgroups=[podgroup("trio", 3)]), "trio-0")
    assert e["class"] == d.GANG
    assert e["summary"].startswith("gang diag/trio: 2 of minCount 3 pods present (0 bound)")
    assert "create the 1 missing member pod(s)" in e["next"]
    assert e["message"] is None


def test_gang_group_missing():
    e = only(d.diagnose([member("m", "nope", selector=ROLE_A)], scene_nodes(), podgroups=[]), "m")
    assert e["class"] == d.GANG
    assert "PodGroup diag/nope does not exist" in e["summary"]


def test_gang_api_not_served_falls_back_to_the_pod():
    e = only(
        d.diagnose(
            [member("m", "trio", selector=ROLE_A, tolerations=[PRIVATE_TOL])], scene_nodes(), podgroups=None
        ),
        "m",
    )
    assert e["class"] == d.TAINT
    assert e["gang"] == {"group": "trio", "api_served": False}


def test_gang_quorum_present_but_unplaceable():
    said = fixture("gang-cannot-satisfy")
    assert d.parse_gang_message(said)["final"] is True
    holder = pod("holder", node_name="diag-b")
    pair = [
        member(f"pair-{i}", "pair", selector=ROLE_B, message=fixture("insufficient-gpu")) for i in range(2)
    ]
    report = d.diagnose(
        [holder, *pair], scene_nodes(), events=[event(pair[1], said)], podgroups=[podgroup("pair", 2)]
    )
    for i in range(2):
        e = only(report, f"pair-{i}")
        assert e["class"] == d.GANG
        assert e["cause"] == d.SHORTAGE
        assert e["summary"].startswith(
            f"gang diag/pair: 2 pods present (minCount 2), 0 bound, the group cannot be placed ({said})"
        )


def test_gang_podgroup_condition_alone():
    said = fixture("gang-podgroup-condition")
    cond = {
        "type": "PodGroupInitiallyScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": said,
    }
    holder = pod("holder", node_name="diag-b")
    pair = [member(f"pair-{i}", "pair", selector=ROLE_B) for i in range(2)]
    report = d.diagnose([holder, *pair], scene_nodes(), podgroups=[podgroup("pair", 2, conditions=[cond])])
    e = only(report, "pair-0")
    assert e["class"] == d.GANG and e["cause"] == d.SHORTAGE
    assert f"the group cannot be placed ({said})" in e["summary"]
    assert e["gang"]["condition"] == {"status": "False", "reason": "Unschedulable", "message": said}


def test_gang_basic_policy_is_an_ordinary_pod():
    pg = {"metadata": {"name": "b", "namespace": "diag"}, "spec": {"schedulingPolicy": {"basic": {}}}}
    e = only(
        d.diagnose(
            [member("m", "b", selector=ROLE_A, tolerations=[PRIVATE_TOL])], scene_nodes(), podgroups=[pg]
        ),
        "m",
    )
    assert e["class"] == d.TAINT


# --------------------------------------------------------------------------------------------
# DRA


def dra_objects(
    run="r1", node_name="diag-a", taint_rule=True, slice_taints=(), claim_selectors=(), tolerations=()
):
    cls = {
        "metadata": {"name": "diag-gpu"},
        "spec": {
            "selectors": [
                {
                    "cel": {
                        "expression": f'device.driver == "gpu.nvidia.com" && device.attributes["gpusplit.io"].run == "{run}"'
                    }
                }
            ]
        },
    }
    devices = [
        {
            "name": f"gpu-{i}",
            "attributes": {"gpusplit.io/run": {"string": run}, "uuid": {"string": f"GPU-{i}"}},
        }
        for i in range(2)
    ]
    for dev in devices:
        if slice_taints:
            dev["taints"] = list(slice_taints)
    sl = {
        "metadata": {"name": f"{node_name}-gpus"},
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": node_name,
            "pool": {"name": node_name},
            "devices": devices,
        },
    }
    rules = []
    if taint_rule:
        rules.append(
            {
                "metadata": {"name": f"{node_name}-unhealthy"},
                "spec": {
                    "deviceSelector": {"driver": "gpu.nvidia.com", "pool": node_name},
                    "taint": {"key": "gpusplit.io/unhealthy", "value": "Degraded", "effect": "NoSchedule"},
                },
            }
        )
    exactly = {"deviceClassName": "diag-gpu"}
    if claim_selectors:
        exactly["selectors"] = [{"cel": {"expression": e}} for e in claim_selectors]
    if tolerations:
        exactly["tolerations"] = list(tolerations)
    claim = {
        "metadata": {"name": "claim", "namespace": "diag"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}},
    }
    return {"classes": [cls], "slices": [sl], "rules": rules, "claims": [claim], "templates": []}


def claim_pod(name="want-dra", selector=ROLE_A, message=None):
    return pod(
        name,
        gpus=0,
        selector=selector,
        message=message,
        extra_spec={"resourceClaims": [{"name": "gpu", "resourceClaimName": "claim"}]},
    )


def test_dra_device_taint_rule():
    p = claim_pod(message=fixture("dra-device-taint"))
    e = only(d.diagnose([p], scene_nodes(), resource=dra_objects()), "want-dra")
    assert e["class"] == d.DRA_TAINT, e
    assert (
        "gpu.nvidia.com/diag-a/gpu-0 gpusplit.io/unhealthy=Degraded:NoSchedule (DeviceTaintRule diag-a-unhealthy)"
        in e["summary"]
    )
    assert e["suggested_device_tolerations"] == [
        {"key": "gpusplit.io/unhealthy", "operator": "Equal", "value": "Degraded", "effect": "NoSchedule"}
    ]
    assert e["next"].startswith("kubectl get devicetaintrule diag-a-unhealthy -o yaml")


def test_dra_driver_taint_in_the_resource_slice():
    taint = {"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoExecute"}
    res = dra_objects(taint_rule=False, slice_taints=[taint])
    e = only(
        d.diagnose([claim_pod(message=fixture("dra-device-taint"))], scene_nodes(), resource=res), "want-dra"
    )
    assert e["class"] == d.DRA_TAINT
    assert "gpu.nvidia.com/xid=79:NoExecute (ResourceSlice diag-a-gpus)" in e["summary"]


def test_dra_tolerated_taint_or_effect_none_does_not_block():
    tol = {"key": "gpusplit.io/unhealthy", "operator": "Exists", "effect": "NoSchedule"}
    e = only(d.diagnose([claim_pod()], scene_nodes(), resource=dra_objects(tolerations=[tol])), "want-dra")
    assert e["class"] == d.UNKNOWN and e["nodes"]["diag-a"] == []
    res = dra_objects(taint_rule=False, slice_taints=[{"key": "k", "value": "v", "effect": "None"}])
    assert only(d.diagnose([claim_pod()], scene_nodes(), resource=res), "want-dra")["nodes"]["diag-a"] == []


def test_dra_no_matching_device():
    sel = 'device.attributes["gpu.nvidia.com"].uuid == "GPU-does-not-exist"'
    res = dra_objects(taint_rule=False, claim_selectors=[sel])
    e = only(
        d.diagnose([claim_pod(message=fixture("dra-no-device"))], scene_nodes(), resource=res), "want-dra"
    )
    assert e["class"] == d.DRA_NO_DEVICE
    assert "diag-a: no published device matches the class and selectors on this node" in e["summary"]
    assert "kubectl get deviceclass diag-gpu -o yaml" in e["next"]
    assert "ResourceClaim diag/claim" in e["next"]


def test_dra_devices_allocated_to_other_claims():
    res = dra_objects(taint_rule=False)
    other = {
        "metadata": {"name": "other", "namespace": "team"},
        "spec": {},
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {"driver": "gpu.nvidia.com", "pool": "diag-a", "device": f"gpu-{i}", "request": "gpu"}
                        for i in range(2)
                    ]
                }
            }
        },
    }
    res["claims"].append(other)
    e = only(d.diagnose([claim_pod()], scene_nodes(), resource=res), "want-dra")
    assert e["class"] == d.DRA_NO_DEVICE
    assert "2 matching device(s) already allocated" in e["summary"]


def test_dra_unevaluated_selector_is_reported_not_guessed():
    sel = 'device.attributes["gpu.nvidia.com"].uuid.matches("^GPU-9")'
    res = dra_objects(taint_rule=True, claim_selectors=[sel])
    e = only(d.diagnose([claim_pod()], scene_nodes(), resource=res), "want-dra")
    # the unevaluated selector does not filter; the rule still taints every device
    assert e["class"] == d.DRA_TAINT
    assert e["nodes"]["diag-a"][0]["unevaluated_selectors"] == [sel]


def test_dra_claim_missing_and_template():
    p = claim_pod()
    res = dra_objects(taint_rule=False)
    res["claims"] = []
    assert only(d.diagnose([p], scene_nodes(), resource=res), "want-dra")["class"] == d.DRA_NO_DEVICE
    tmpl = {
        "metadata": {"name": "tmpl", "namespace": "diag"},
        "spec": {"spec": dra_objects()["claims"][0]["spec"]},
    }
    res = dra_objects()
    res["claims"], res["templates"] = [], [tmpl]
    p = pod(
        "t",
        gpus=0,
        selector=ROLE_A,
        extra_spec={"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "tmpl"}]},
    )
    e = only(d.diagnose([p], scene_nodes(), resource=res), "t")
    assert e["class"] == d.DRA_TAINT
    assert e["nodes"]["diag-a"][0]["where"] == "ResourceClaimTemplate diag/tmpl"


def test_dra_all_mode_and_first_available():
    res = dra_objects(taint_rule=False)
    res["claims"][0]["spec"]["devices"]["requests"] = [
        {
            "name": "gpu",
            "firstAvailable": [
                {"name": "big", "deviceClassName": "diag-gpu", "count": 3},
                {"name": "small", "deviceClassName": "diag-gpu", "count": 1},
            ],
        }
    ]
    assert only(d.diagnose([claim_pod()], scene_nodes(), resource=res), "want-dra")["nodes"]["diag-a"] == []
    res["claims"][0]["spec"]["devices"]["requests"] = [
        {"name": "gpu", "exactly": {"deviceClassName": "diag-gpu", "allocationMode": "All"}}
    ]
    res["rules"] = dra_objects()["rules"]
    assert only(d.diagnose([claim_pod()], scene_nodes(), resource=res), "want-dra")["class"] == d.DRA_TAINT


# --------------------------------------------------------------------------------------------
# the building blocks


@pytest.mark.parametrize(
    ("toleration", "taint", "expected"),
    [
        ({"key": "nvidia.com/gpu", "operator": "Exists"}, GPU_TAINT, True),
        ({"operator": "Exists"}, GPU_TAINT, True),
        ({"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}, GPU_TAINT, True),
        ({"key": "nvidia.com/gpu", "value": "absent"}, GPU_TAINT, False),
        ({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"}, GPU_TAINT, False),
        ({"key": "other", "operator": "Exists"}, GPU_TAINT, False),
        (
            {"key": "level", "operator": "Gt", "value": "3"},
            {"key": "level", "value": "5", "effect": "NoSchedule"},
            True,
        ),
        (
            {"key": "level", "operator": "Lt", "value": "3"},
            {"key": "level", "value": "5", "effect": "NoSchedule"},
            False,
        ),
        (
            {"key": "level", "operator": "Lt", "value": "x"},
            {"key": "level", "value": "5", "effect": "NoSchedule"},
            False,
        ),
    ],
)
def test_tolerates(toleration, taint, expected):
    assert d.tolerates(toleration, taint) is expected


def test_prefer_no_schedule_never_blocks():
    assert d.untolerated_taints([], [{"key": "k", "effect": "PreferNoSchedule"}]) == []


def test_node_affinity_and_fields():
    n = node("gpu-7", 8, {"nvidia.com/gpu.count": "8", "zone": "b"})

    def with_affinity(*exprs, fields=()):
        term = {"matchExpressions": list(exprs)}
        if fields:
            term["matchFields"] = list(fields)
        return pod(
            "p",
            extra_spec={
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
                    }
                }
            },
        )

    assert d.matches_node(with_affinity({"key": "zone", "operator": "In", "values": ["a", "b"]}), n)
    assert not d.matches_node(with_affinity({"key": "zone", "operator": "NotIn", "values": ["b"]}), n)
    assert d.matches_node(
        with_affinity({"key": "nvidia.com/gpu.count", "operator": "Gt", "values": ["4"]}), n
    )
    assert not d.matches_node(with_affinity({"key": "missing", "operator": "Exists"}), n)
    assert d.matches_node(
        with_affinity(fields=[{"key": "metadata.name", "operator": "In", "values": ["gpu-7"]}]), n
    )
    assert not d.matches_node(pod("p", node_name="gpu-8"), n)


def test_pod_gpu_requests_counts_init_containers_and_sidecars():
    p = pod("p", gpus=0)
    p["spec"]["containers"] = [
        {"name": "a", "resources": {"limits": {GPU: "1"}}},
        {"name": "b", "resources": {"requests": {GPU: "1"}, "limits": {GPU: "1"}}},
    ]
    p["spec"]["initContainers"] = [
        {"name": "side", "restartPolicy": "Always", "resources": {"limits": {GPU: "1"}}},
        {"name": "warm", "resources": {"limits": {GPU: "4", "nvidia.com/mig-1g.10gb": "2"}}},
    ]
    assert d.pod_gpu_requests(p) == {GPU: 5, "nvidia.com/mig-1g.10gb": 2}
    assert d.wants_gpu(p)
    assert not d.wants_gpu(pod("cpu", gpus=0))
    assert d.wants_gpu(pod("dra", gpus=0, extra_spec={"resourceClaims": [{"name": "x"}]}))


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("2", 2),
        (3, 3),
        ("500m", 0.5),
        ("1k", 1000),
        ("1Ki", 1024),
        ("1e3", 1000),
        (".5", 0.5),
        ("x", None),
        ("1.5Gi", 1.5 * 2**30),
    ],
)
def test_parse_quantity(text, value):
    q = d.parse_quantity(text)
    assert (None if q is None else float(q)) == value


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ('device.driver == "gpu.nvidia.com"', True),
        ('device.driver == "gpu.nvidia.com" && device.attributes["gpusplit.io"].run == "r1"', True),
        ("device.attributes['gpusplit.io']['run'] == 'r1'", True),
        ('device.attributes["gpu.nvidia.com"].uuid == "GPU-0"', True),  # an unqualified name is the driver's
        ('device.attributes["gpu.nvidia.com"].missing == "x"', False),  # CEL: no such key -> no match
        ('device.attributes["gpu.nvidia.com"].missing == "x" || device.driver == "gpu.nvidia.com"', True),
        ('!(device.attributes["gpu.nvidia.com"].index > 3)', True),
        ('device.driver in ["a", "gpu.nvidia.com"]', True),
        ('"uuid" in device.attributes["gpu.nvidia.com"]', True),
    ],
)
def test_cel_subset(expression, expected):
    view = d.device_view(
        "gpu.nvidia.com",
        {
            "attributes": {
                "gpusplit.io/run": {"string": "r1"},
                "uuid": {"string": "GPU-0"},
                "index": {"int": 2},
            }
        },
    )
    assert d.cel_matches(expression, view) is expected


@pytest.mark.parametrize(
    "expression",
    ['device.attributes["a"].b.matches("x")', "size(device.attributes) > 0", 'device.driver + "x"'],
)
def test_cel_outside_the_subset_is_refused(expression):
    with pytest.raises(d.CelUnsupported):
        d.cel_matches(expression, d.device_view("gpu.nvidia.com", {}))


def test_table_and_json():
    p = pod("want-taint", selector=ROLE_A, tolerations=[PRIVATE_TOL], message=fixture("untolerated-taint"))
    report = d.diagnose([p], scene_nodes())
    table = d.report_table(report)
    lines = table.splitlines()
    assert lines[0].split()[:4] == ["POD", "CLASS", "REASON", "->"]
    assert lines[1].startswith("diag/want-taint") and "untolerated_taint" in lines[1] and "->" in lines[1]
    assert lines[-1] == "1 Pending GPU pod(s): 1 untolerated_taint"
    assert json.loads(d.dumps(report))["counts"] == {"untolerated_taint": 1}
    assert d.report_table({"pods": [], "counts": {}}) == "no Pending GPU pods"
