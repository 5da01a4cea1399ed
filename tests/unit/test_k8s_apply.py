"""Deciding what cluster_apply must send, from plain data (the lab proves the apply itself)."""

from __future__ import annotations

from ansible_collections.gpusplit.k8s.plugins.module_utils import k8s_apply


def node(labels, managed=None):
    meta = {"name": "n1", "labels": labels}
    if managed is not None:
        meta["managedFields"] = managed
    return {"apiVersion": "v1", "kind": "Node", "metadata": meta}


def applied(manager, labels, operation="Apply"):
    fields = {"f:metadata": {"f:labels": {".": {}, **{f"f:{k}": {} for k in labels}}}}
    return {"manager": manager, "operation": operation, "fieldsV1": fields}


def test_stopped_sending_finds_owned_map_fields_missing_from_desired():
    fields = {
        "f:metadata": {"f:labels": {".": {}, "f:a": {}, "f:b": {}}},
        "f:spec": {
            "f:template": {"f:spec": {"f:runtimeClassName": {}, "f:containers": {'k:{"name":"c"}': {}}}}
        },
    }
    desired = {"metadata": {"labels": {"a": "1"}}, "spec": {"template": {"spec": {"containers": []}}}}
    assert k8s_apply.stopped_sending(desired, fields) == [
        "metadata.labels.b",
        "spec.template.spec.runtimeClassName",
    ]
    desired["metadata"]["labels"]["b"] = "2"
    desired["spec"]["template"]["spec"]["runtimeClassName"] = "nvidia"
    assert k8s_apply.stopped_sending(desired, fields) == []


def test_decide_updates_an_object_that_still_carries_a_label_gpusplit_dropped():
    desired = node({"gpusplit.io/split": "true"})
    live = node(
        {"gpusplit.io/split": "true", "nvidia.com/gpu.deploy.device-plugin": "false", "other": "x"},
        [
            applied("gpusplit", ["gpusplit.io/split", "nvidia.com/gpu.deploy.device-plugin"]),
            applied("kubectl-label", ["other"], operation="Update"),
        ],
    )
    index = {k8s_apply.object_key(live): live}
    assert k8s_apply.decide([desired], index, "gpusplit")["update"] == [desired]
    # without the field manager (or when another manager owns the label) nothing is sent
    assert k8s_apply.decide([desired], index)["unchanged"] == [desired]
    assert k8s_apply.decide([desired], index, "someone")["unchanged"] == [desired]


def test_decide_leaves_an_object_alone_once_the_label_is_gone():
    desired = node({"gpusplit.io/split": "true"})
    live = node({"gpusplit.io/split": "true", "other": "x"}, [applied("gpusplit", ["gpusplit.io/split"])])
    assert k8s_apply.decide([desired], {k8s_apply.object_key(live): live}, "gpusplit")["unchanged"] == [
        desired
    ]
