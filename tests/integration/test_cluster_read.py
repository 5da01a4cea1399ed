"""The module cluster_read against the lab's apiserver: several kinds in one module execution, label selectors
and a namespace as kubernetes.core.k8s_info reads them, a kind the cluster does not serve named by its query,
and a bad query refused before the cluster is reached."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from ansible_output import ansible_module

from lab import components as C

ROOT = Path(__file__).resolve().parents[2]


def run(tmp_path, queries: dict, kubeconfig: str = str(C.KUBECONFIG)) -> dict:
    """cluster_read ad hoc on the lab's control-plane host (a local connection), as a user runs it."""
    args = json.dumps({"queries": queries, "kubeconfig": kubeconfig})
    return ansible_module(
        "lab-cp-01", "gpusplit.k8s.cluster_read", args, ROOT / "inventory" / "lab", check=False
    )


@pytest.fixture
def ns(kubectl):
    name = f"read-{uuid.uuid4().hex[:6]}"
    kubectl.namespace(name)
    for cm, labels in (("a", "t=read,side=x"), ("b", "t=read,side=y"), ("c", "t=other")):
        kubectl("-n", name, "create", "configmap", cm)
        kubectl("-n", name, "label", "configmap", cm, *labels.split(","))
    yield name
    kubectl("delete", "namespace", name, "--wait=false")


def test_several_kinds_in_one_step_with_selectors_and_a_namespace(ns, kubectl, tmp_path):
    result = run(
        tmp_path,
        {
            "read": {
                "api_version": "v1",
                "kind": "ConfigMap",
                "namespace": ns,
                "label_selectors": ["t=read"],
            },
            "x_only": {
                "api_version": "v1",
                "kind": "ConfigMap",
                "namespace": ns,
                "label_selectors": ["t=read", "side=x"],
            },
            "nodes": {"api_version": "v1", "kind": "Node"},
            "namespaces": {
                "api_version": "v1",
                "kind": "Namespace",
                "label_selectors": [f"kubernetes.io/metadata.name={ns}"],
            },
        },
    )
    assert not result.get("failed"), result
    assert sorted(o["metadata"]["name"] for o in result["resources"]["read"]) == ["a", "b"]
    assert [o["metadata"]["name"] for o in result["resources"]["x_only"]] == ["a"]
    assert {o["apiVersion"] + "/" + o["kind"] for o in result["resources"]["read"]} == {"v1/ConfigMap"}
    live_nodes = {n["metadata"]["name"] for n in kubectl.json("get", "nodes")["items"]}
    assert {n["metadata"]["name"] for n in result["resources"]["nodes"]} == live_nodes
    assert result["counts"] == {"read": 2, "x_only": 1, "nodes": len(live_nodes), "namespaces": 1}
    assert result["changed"] is False


def test_objects_come_back_without_managed_fields_or_with_only_the_querys_fields(ns, kubectl, tmp_path):
    """What the apiserver sends of an applied object carries metadata.managedFields (kubectl get hides
    them; the raw answer has them): cluster_read leaves them out, and a query's fields keep only those
    paths."""
    for name, side in (("d", "x"), ("e", "y")):
        kubectl(
            "apply",
            "--server-side",
            "--field-manager=gpusplit-test",
            "-f",
            "-",
            stdin=json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": name, "namespace": ns, "labels": {"t": "applied", "side": side}},
                    "data": {"k": name},
                }
            ),
        )
    raw = json.loads(
        kubectl("get", "--raw", f"/api/v1/namespaces/{ns}/configmaps?labelSelector=t%3Dapplied").stdout
    )
    assert len(raw["items"]) == 2 and all(o["metadata"].get("managedFields") for o in raw["items"])
    query = {"api_version": "v1", "kind": "ConfigMap", "namespace": ns, "label_selectors": ["t=applied"]}
    result = run(
        tmp_path,
        {
            "whole": query,
            "names": {**query, "fields": ["metadata.name", "metadata.labels.side", "data", "binaryData"]},
            "managed": {
                **query,
                "label_selectors": ["t=applied", "side=x"],
                "fields": ["metadata.managedFields"],
            },
        },
    )
    assert not result.get("failed"), result
    by_name = {o["metadata"]["name"]: o for o in raw["items"]}
    for obj in result["resources"]["whole"]:
        live = by_name[obj["metadata"]["name"]]
        assert obj["metadata"] == {k: v for k, v in live["metadata"].items() if k != "managedFields"}
        assert obj["data"] == live["data"]
    assert sorted(result["resources"]["names"], key=lambda o: o["metadata"]["name"]) == [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "d", "labels": {"side": "x"}},
            "data": {"k": "d"},
        },
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "e", "labels": {"side": "y"}},
            "data": {"k": "e"},
        },
    ]  # no binaryData: the path is left out
    [managed] = result["resources"]["managed"]
    assert managed["metadata"] == {"managedFields": by_name["d"]["metadata"]["managedFields"]}


def test_a_kind_the_cluster_does_not_serve_is_named_by_its_query(tmp_path):
    result = run(
        tmp_path,
        {
            "pods": {"api_version": "v1", "kind": "Pod"},
            "gangs": {"api_version": "example.com/v9", "kind": "Gang"},
        },
    )
    assert result["failed"] and result["msg"].startswith(
        "gangs: reading Gang (example.com/v9) from the cluster failed"
    )


def test_a_bad_query_or_kubeconfig_fails_before_any_request(tmp_path):
    result = run(tmp_path, {"pods": {"api_version": "v1", "kind": "Pod", "namespace": ""}})
    assert (
        result["failed"]
        and result["msg"] == "queries['pods'].namespace: expected a namespace name, got string"
    )
    missing = run(
        tmp_path, {"pods": {"api_version": "v1", "kind": "Pod"}}, kubeconfig=str(tmp_path / "nowhere")
    )
    assert missing["failed"] and f"kubeconfig {tmp_path / 'nowhere'} does not exist" in missing["msg"]
