"""Batched server-side apply against the real apiserver: create, no-op re-run, update, prune."""

from __future__ import annotations

import re
import uuid

import pytest

from ansible_collections.gpusplit.k8s.plugins.module_utils import k8s_apply
from lab import components as C

WRITE_VERBS = ("POST", "PUT", "PATCH", "APPLY", "DELETE")


def configmap(ns: str, name: str, data: dict) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": {k8s_apply.MANAGED_BY: "gpusplit", "t": "apply"},
        },
        "data": data,
    }


def writes_to(kubectl, resource: str) -> int:
    """Write requests the apiserver has served for a resource, from its own /metrics."""
    text = kubectl("get", "--raw", "/metrics").stdout
    total = 0
    for line in text.splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        if f'resource="{resource}"' not in line or 'dry_run="All"' in line:
            continue
        verb = re.search(r'verb="([A-Z]+)"', line)
        if verb and verb.group(1) in WRITE_VERBS:
            total += int(float(line.rsplit(" ", 1)[1]))
    return total


@pytest.fixture
def ns(kubectl):
    name = f"apply-{uuid.uuid4().hex[:6]}"
    kubectl.namespace(name)
    yield name
    kubectl("delete", "namespace", name, "--wait=false")


def test_apply_rerun_update_prune(ns, kubectl):
    cluster = k8s_apply.Cluster(str(C.KUBECONFIG))
    prune = [
        {
            "api_version": "v1",
            "kind": "ConfigMap",
            "namespace": ns,
            "label_selector": f"{k8s_apply.MANAGED_BY}=gpusplit,t=apply",
        }
    ]
    objs = [configmap(ns, f"cm-{i}", {"gpus": str(i)}) for i in range(3)]

    first = k8s_apply.run(cluster, objs, prune=prune)
    assert sorted(first["created"]) == sorted(f"ConfigMap/{ns}/cm-{i} (v1)" for i in range(3))
    assert first["api_writes"] == 3

    before = writes_to(kubectl, "configmaps")
    again = k8s_apply.run(k8s_apply.Cluster(str(C.KUBECONFIG)), objs, prune=prune)
    assert again["changed"] is False and again["unchanged"] == 3 and again["api_writes"] == 0
    assert writes_to(kubectl, "configmaps") == before  # the apiserver saw no write at all

    objs[1] = configmap(ns, "cm-1", {"gpus": "7"})
    changed = k8s_apply.run(k8s_apply.Cluster(str(C.KUBECONFIG)), objs[:2], prune=prune)
    assert changed["updated"] == [f"ConfigMap/{ns}/cm-1 (v1)"]
    assert changed["pruned"] == [f"ConfigMap/{ns}/cm-2 (v1)"]
    assert kubectl.json("-n", ns, "get", "configmap", "cm-1")["data"] == {"gpus": "7"}
    assert kubectl("-n", ns, "get", "configmap", "cm-2", check=False).returncode != 0
    # the diff shows the changed field
    entry = next(d for d in changed["diff"] if "cm-1" in d["after_header"])
    assert "gpus: '1'" in entry["before"] and "gpus: '7'" in entry["after"]


def test_check_mode_is_a_server_dry_run(ns, kubectl):
    cluster = k8s_apply.Cluster(str(C.KUBECONFIG))
    result = k8s_apply.run(cluster, [configmap(ns, "dry", {"a": "b"})], check_mode=True)
    assert result["created"] == [f"ConfigMap/{ns}/dry (v1)"] and result["api_writes"] == 0
    assert kubectl("-n", ns, "get", "configmap", "dry", check=False).returncode != 0
    # the server validated it: an invalid object fails even in check mode
    bad = configmap(ns, "Not_A_Valid_Name", {"a": "b"})
    with pytest.raises(Exception, match="Invalid value"):
        k8s_apply.run(cluster, [bad], check_mode=True)


def test_bad_input_is_refused_before_any_request(ns):
    cluster = k8s_apply.Cluster(str(C.KUBECONFIG))
    with pytest.raises(k8s_apply.ApplyError, match="lacks metadata.name"):
        k8s_apply.run(cluster, [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}}])
    dup = configmap(ns, "x", {})
    with pytest.raises(k8s_apply.ApplyError, match="appears more than once"):
        k8s_apply.run(cluster, [dup, dup])
    with pytest.raises(k8s_apply.ApplyError, match="must include app.kubernetes.io/managed-by"):
        k8s_apply.run(
            cluster, [dup], prune=[{"api_version": "v1", "kind": "ConfigMap", "label_selector": "t=apply"}]
        )
    assert cluster.writes == 0


def test_a_label_no_longer_sent_is_removed_and_a_label_of_others_stays(ns, kubectl):
    """A field gpusplit applied earlier and stops sending goes away; what others set stays."""
    cluster = k8s_apply.Cluster(str(C.KUBECONFIG))
    first = configmap(ns, "labels", {"k": "v"})
    first["metadata"]["labels"]["gpusplit.io/mode"] = "gpu_operator"
    k8s_apply.run(cluster, [first])
    kubectl("-n", ns, "label", "configmap", "labels", "someone-else=keep")  # another manager's label

    second = configmap(ns, "labels", {"k": "v"})  # gpusplit.io/mode no longer sent
    result = k8s_apply.run(cluster, [second])
    assert result["updated"] == [k8s_apply.key_text(k8s_apply.object_key(second))], result
    labels = kubectl.json("-n", ns, "get", "configmap", "labels")["metadata"]["labels"]
    assert "gpusplit.io/mode" not in labels
    assert labels["someone-else"] == "keep"

    before = writes_to(kubectl, "configmaps")
    again = k8s_apply.run(k8s_apply.Cluster(str(C.KUBECONFIG)), [second])
    assert again["changed"] is False and again["unchanged"] == 1
    assert writes_to(kubectl, "configmaps") == before
