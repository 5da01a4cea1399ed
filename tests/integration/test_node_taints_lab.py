"""The module node_taints against the lab's apiserver: taints set and taken off on several nodes in one module
execution, every other taint kept, no write on a re-run, nothing changed in check mode or when a node is
missing, and a node changed by someone else between the read and the patch read again (the JSON patch's
resourceVersion test, as the real apiserver answers it)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from ansible_output import ansible_module

from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.taints import (
    NodeTaintsApi,
    apply_changes,
    check_requests,
)
from lab import components as C

ROOT = Path(__file__).resolve().parents[2]
GPU = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


def run(nodes: list, *options: str, check: bool = True) -> dict:
    """node_taints ad hoc on the lab's control-plane host (a local connection), as a user runs it."""
    args = json.dumps({"nodes": nodes, "kubeconfig": str(C.KUBECONFIG)})
    return ansible_module(
        "lab-cp-01",
        "gpusplit.k8s.node_taints",
        args,
        ROOT / "inventory" / "lab",
        check=check,
        options=options,
    )


def taints(kubectl, name: str, prefix: str = "") -> list:
    """The node's taints whose key starts with ``prefix`` (the lab's node controller adds its own)."""
    node = kubectl.json("get", "node", name)
    return [t for t in node["spec"].get("taints") or [] if t["key"].startswith(prefix)]


@pytest.fixture
def nodes(kubectl):
    """Three Nodes of this test (kwok runs them), each with a taint someone else set."""
    run_id = uuid.uuid4().hex[:6]
    names = [f"taints-{run_id}-{i}" for i in range(3)]
    for name in names:
        kubectl(
            "create",
            "-f",
            "-",
            stdin=json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {"name": name, "labels": {"gpusplit.io/test": run_id}},
                    "spec": {"taints": [{"key": f"other-{run_id}", "value": "x", "effect": "NoSchedule"}]},
                }
            ),
        )
    yield names
    kubectl("delete", "node", *names, "--ignore-not-found", "--wait=false")


def test_several_nodes_in_one_step_keeping_other_taints_and_no_write_when_unchanged(nodes, kubectl):
    a, b, c = nodes
    other = f"other-{a.split('-')[1]}"
    kubectl("taint", "node", b, "nvidia.com/gpu=present:NoSchedule")
    kubectl("taint", "node", c, "nvidia.com/gpu=old:NoSchedule")
    want = [
        {"name": a, "present": [GPU]},
        {"name": b, "absent": [{"key": GPU["key"], "effect": "NoSchedule"}]},
        {"name": c, "present": [GPU]},  # another value: replaced in place
    ]

    checked = run(want, "--check", "--diff")
    assert checked["changed"] is True and [n["name"] for n in checked["nodes"]] == [a, b, c]
    assert "nvidia.com/gpu=present:NoSchedule" in checked["diff"][0]["after"]
    assert (
        taints(kubectl, a, "nvidia.com/") == [] and taints(kubectl, b, "nvidia.com/") != []
    )  # nothing changed

    result = run(want)
    assert result["changed"] is True and [n["name"] for n in result["nodes"]] == [a, b, c]
    for name, gpu in ((a, [GPU]), (b, []), (c, [GPU])):
        assert taints(kubectl, name, "nvidia.com/") == gpu, name
        assert [t["key"] for t in taints(kubectl, name, other)] == [other], name  # someone else's stays
    # replaced in its place: the order of c's taints is as it was
    [changed_c] = [n for n in result["nodes"] if n["name"] == c]
    assert [t["key"] for t in changed_c["after"]] == [t["key"] for t in changed_c["before"]]
    assert [t["value"] for t in changed_c["after"] if t["key"] == GPU["key"]] == ["present"]

    versions = {n: kubectl.json("get", "node", n)["spec"] for n in nodes}
    again = run(want)
    assert again["changed"] is False and again["nodes"] == []
    assert {n: kubectl.json("get", "node", n)["spec"] for n in nodes} == versions


def test_a_missing_node_or_a_bad_request_changes_nothing(nodes, kubectl):
    a = nodes[0]
    missing = run([{"name": a, "present": [GPU]}, {"name": f"{a}-gone", "present": [GPU]}], check=False)
    assert missing.get("failed") and f"node(s) not in the cluster: {a}-gone" in missing["msg"], missing
    assert taints(kubectl, a, "nvidia.com/") == []
    bad = run([{"name": a, "present": [{"key": "k", "effect": "NoSchedul"}]}], check=False)
    assert bad.get("failed") and "effect: expected one of NoSchedule" in bad["msg"], bad
    assert taints(kubectl, a, "k") == []
    # a taint the module's check lets through and the API server refuses: its answer, nothing changed
    refused = run([{"name": a, "present": [{"key": "not a key!", "effect": "NoSchedule"}]}], check=False)
    assert refused.get("failed") and f"node {a}: the API server refused the patch" in refused["msg"], refused
    assert "not a key!" in refused["msg"]


def test_a_node_changed_between_the_read_and_the_patch_is_read_again(nodes, kubectl, core_api):
    """The apiserver refuses the JSON patch whose resourceVersion test no longer holds; the node is read
    again and the taint set on top of what the other writer added."""
    from kubernetes.client.rest import ApiException

    a = nodes[0]

    class Interleaved(NodeTaintsApi):
        def nodes(self):
            read = super().nodes()
            kubectl("taint", "node", a, "meanwhile=1:NoExecute")  # after the read, before the patch
            return read

    api = Interleaved(core_api, ApiException)
    done = apply_changes(api, check_requests([{"name": a, "present": [GPU]}]))
    assert [t["key"] for t in done[0]["before"] if t["key"] == "meanwhile"] == ["meanwhile"]
    assert [t["key"] for t in taints(kubectl, a) if t["key"] in ("meanwhile", GPU["key"])] == [
        "meanwhile",
        GPU["key"],
    ]
    assert api.writes == 1
