"""No node matches the pod's node selection: which label or expression fails, and where."""

from __future__ import annotations

import json

from ansible_collections.gpusplit.k8s.plugins.module_utils._diagnose.report import diagnose
from ansible_collections.gpusplit.k8s.plugins.module_utils._diagnose.rules import SELECTOR
from ansible_collections.gpusplit.k8s.tests.unit.plugins.module_utils._diagnose.diagnose_scene import (
    PRIVATE_TOL,
    claim_pod,
    dra_objects,
    fixture,
    node,
    only,
    pod,
    scene_nodes,
)


def test_selector_mismatch_with_label_hints():
    selector = {"gpusplit.io/diag-run": "r1", "nvidia.com/gpu.product": "NO-SUCH-GPU"}
    p = pod(
        "want-product", selector=selector, tolerations=[PRIVATE_TOL], message=fixture("selector-mismatch")
    )
    e = only(diagnose([p], scene_nodes()), "want-product")
    assert e["class"] == SELECTOR, e
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
    e = only(diagnose([p], gpu_fleet()), "want-h100")
    assert e["class"] == SELECTOR, e
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
    assert only(diagnose([p], fleet), "want-h100")["candidates"] == ["lab-l4-01"]


def test_affinity_terms_are_explained_one_by_one():
    terms = affinity(
        [expr(PRODUCT, "In", "A100-SXM4-80GB"), expr("zone", "In", "c")],  # zone fails everywhere
        [expr(PRODUCT, "In", "L4"), expr("zone", "NotIn", "a")],  # L4 is only in zone a
        {"matchFields": [expr("metadata.name", "In", "lab-h100-01")]},
    )
    p = pod("picky", tolerations=[], extra_spec=terms)
    e = only(diagnose([p], gpu_fleet()), "picky")
    assert e["class"] == SELECTOR
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
    e = only(diagnose([p], nodes), "vision-l4")
    assert e["class"] == SELECTOR
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
    e = only(diagnose([p], gpu_fleet()), "typo")
    assert e["class"] == SELECTOR
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
    e = only(diagnose([p], nodes), "big")
    assert e["class"] == SELECTOR
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
    e = only(diagnose([p], nodes, resource=resource), "want-dra")
    assert e["class"] == SELECTOR
    assert e["affinity"]["nodes"] == ["diag-a"]
    assert "GPU nodes have gpusplit.io/diag-role: a (diag-a)" in e["summary"]


def test_affinity_hint_cuts_long_lists_but_keeps_every_node_in_the_details():
    nodes = [node(f"gpu-{i:02}", 1, {PRODUCT: f"model-{i % 10}"}) for i in range(40)]
    p = pod("many", tolerations=[], extra_spec=affinity([expr(PRODUCT, "In", "H200")]))
    e = only(diagnose([p], nodes), "many")
    assert "model-0 (gpu-00, gpu-10, gpu-20, +1 more)" in e["summary"]
    assert "+2 more value(s)" in e["summary"]
    assert "model-8" not in e["summary"]
    values = e["affinity"]["terms"][0]["failing"][0]["node_values"]
    assert sum(len(v["nodes"]) for v in values) == 40


def test_affinity_without_terms_or_with_an_empty_term():
    p = pod("none", tolerations=[], extra_spec=affinity())
    e = only(diagnose([p], gpu_fleet()), "none")
    assert e["class"] == SELECTOR
    assert "required nodeAffinity has no nodeSelectorTerms: it matches no node" in e["summary"]
    p = pod("empty", tolerations=[], extra_spec=affinity({}))
    e = only(diagnose([p], gpu_fleet()), "empty")
    assert "nodeAffinity is empty: an empty term matches no node" in e["summary"]
