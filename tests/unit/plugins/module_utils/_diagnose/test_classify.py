"""The whole diagnosis, class by class, with the objects of the captured lab scene."""

from __future__ import annotations

import json

from ansible_collections.gpusplit.k8s.plugins.module_utils._diagnose.report import (
    diagnose,
    dumps,
    report_table,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._diagnose.rules import (
    GATED,
    SHORTAGE,
    TAINT,
    UNKNOWN,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.scheduling import untolerated_taints
from ansible_collections.gpusplit.k8s.tests.unit.plugins.module_utils._diagnose.diagnose_scene import (
    GPU,
    GPU_TAINT,
    PRIVATE,
    PRIVATE_TOL,
    ROLE_A,
    ROLE_B,
    event,
    fixture,
    node,
    only,
    pod,
    scene_nodes,
)

# --------------------------------------------------------------------------------------------
# each class, with the objects of the captured scene


def test_untolerated_taint_names_taint_node_and_toleration():
    p = pod("want-taint", selector=ROLE_A, tolerations=[PRIVATE_TOL], message=fixture("untolerated-taint"))
    report = diagnose([p], scene_nodes())
    e = only(report, "want-taint")
    assert e["class"] == TAINT
    assert e["candidates"] == ["diag-a"]
    assert e["summary"] == "untolerated taint(s): nvidia.com/gpu=present:NoSchedule on diag-a"
    assert e["suggested_tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"}
    ]
    assert e["message"] == fixture("untolerated-taint")
    assert "kubectl describe node diag-a" in e["next"]
    # the suggested toleration really tolerates it
    assert untolerated_taints([PRIVATE_TOL, *e["suggested_tolerations"]], [PRIVATE, GPU_TAINT]) == []


def test_cordoned_candidate_is_a_taint_with_uncordon_advice():
    nodes = [node("n1", 2, {"pool": "x"}, unschedulable=True)]
    e = only(diagnose([pod("p", selector={"pool": "x"}, tolerations=[])], nodes), "p")
    assert e["class"] == TAINT
    assert "node.kubernetes.io/unschedulable:NoSchedule on n1" in e["summary"]
    assert "uncordon n1" in e["next"]
    assert e["suggested_tolerations"] == []


def test_shortage_per_node_numbers_and_holders():
    holder = pod("holder", selector=ROLE_B, node_name="diag-b")
    done = pod("finished", node_name="diag-b", phase="Succeeded")  # terminated pods hold nothing
    p = pod("want-gpu", selector=ROLE_B, tolerations=[PRIVATE_TOL], message=fixture("insufficient-gpu"))
    e = only(diagnose([holder, done, p], scene_nodes()), "want-gpu")
    assert e["class"] == SHORTAGE, e
    usage = e["nodes"]["diag-b"][0]["resources"][GPU]
    assert usage == {"allocatable": 1, "requested": 1, "free": 0, "wanted": 1, "holders": ["diag/holder (1)"]}
    assert "diag-b: nvidia.com/gpu allocatable 1, requested 1, free 0, pod wants 1" in e["summary"]
    assert "GPUs held by diag/holder (1)" in e["next"]
    # the message alone would have said "taint" as often as "shortage"
    assert "untolerated taint" in e["message"]


def test_shortage_where_nothing_is_advertised_points_at_the_device_plugin():
    nodes = [node("gpu-1", 0, {"pool": "x"}), node("gpu-2", None, {"pool": "x"})]
    e = only(diagnose([pod("p", selector={"pool": "x"})], nodes), "p")
    assert e["class"] == SHORTAGE
    assert "advertise(s) no GPUs" in e["next"] and "verify" in e["next"]


def test_unknown_quotes_the_scheduler():
    message = fixture("insufficient-cpu")
    res = {"requests": {"cpu": "1000"}, "limits": {"nvidia.com/gpu.shared": "1"}}
    nodes = scene_nodes()
    nodes[1]["status"]["allocatable"]["nvidia.com/gpu.shared"] = "4"
    p = pod("want-cpu", selector=ROLE_B, resources=res, message=message)
    e = only(diagnose([p], nodes), "want-cpu")
    assert e["class"] == UNKNOWN
    assert e["summary"] == f"the scheduler says: {message!r}"
    assert e["wants"]["resources"] == {"nvidia.com/gpu.shared": 1}


def test_no_message_yet():
    e = only(diagnose([pod("fresh", selector=ROLE_B)], scene_nodes()), "fresh")
    assert e["class"] == UNKNOWN
    assert e["summary"].startswith("no scheduling attempt recorded yet")


def test_event_message_is_used_when_the_condition_is_missing():
    p = pod("ev", selector=ROLE_A, tolerations=[PRIVATE_TOL])
    report = diagnose(
        [p],
        scene_nodes(),
        events=[event(p, "older", "2026-01-01T00:00:00Z"), event(p, fixture("untolerated-taint"))],
    )
    e = only(report, "ev")
    assert e["message"] == fixture("untolerated-taint")
    assert e["events"] == ["older", fixture("untolerated-taint")]


def test_scheduling_gated():
    p = pod("gated", extra_spec={"schedulingGates": [{"name": "example.com/quota"}]})
    assert only(diagnose([p], scene_nodes()), "gated")["class"] == GATED


def test_only_unscheduled_gpu_pods_are_diagnosed():
    pods = [
        pod("cpu-only", gpus=0),
        pod("bound", node_name="diag-b"),
        pod("gpu"),
        pod("other-ns", ns="elsewhere"),
        dict(pod("deleting"), metadata={"name": "deleting", "namespace": "diag", "deletionTimestamp": "x"}),
    ]
    report = diagnose(pods, scene_nodes(), namespaces=["diag"])
    assert [e["name"] for e in report["pods"]] == ["gpu"]
    json.dumps(report)


def test_table_and_json():
    p = pod("want-taint", selector=ROLE_A, tolerations=[PRIVATE_TOL], message=fixture("untolerated-taint"))
    report = diagnose([p], scene_nodes())
    table = report_table(report)
    lines = table.splitlines()
    assert lines[0].split()[:4] == ["POD", "CLASS", "REASON", "->"]
    assert lines[1].startswith("diag/want-taint") and "untolerated_taint" in lines[1] and "->" in lines[1]
    assert lines[-1] == "1 Pending GPU pod(s): 1 untolerated_taint"
    assert json.loads(dumps(report))["counts"] == {"untolerated_taint": 1}
    assert report_table({"pods": [], "counts": {}}) == "no Pending GPU pods"
