"""Batched server-side apply against the real apiserver: create, no-op re-run, update, prune."""

from __future__ import annotations

import json
import re
import uuid

import pytest

from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s import apply
from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.names import LABEL_MANAGED_BY
from ansible_collections.gpusplit.k8s.plugins.module_utils._split.planner import MIG_STRATEGIES, plan_fleet
from ansible_collections.gpusplit.k8s.plugins.plugin_utils import split_render as render
from lab import components as C

WRITE_VERBS = ("POST", "PUT", "PATCH", "APPLY", "DELETE")
PLUGIN_SELECTOR = f"{LABEL_MANAGED_BY}=gpusplit,app.kubernetes.io/name={render.APP_NAME}"


def configmap(ns: str, name: str, data: dict) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": {LABEL_MANAGED_BY: "gpusplit", "t": "apply"},
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


def terminating_namespaces(kubectl) -> list[str]:
    items = kubectl.json("get", "namespaces")["items"]
    return [
        item["metadata"]["name"] for item in items if item.get("status", {}).get("phase") == "Terminating"
    ]


def writes_during(kubectl, resource: str, action, tries: int = 3):
    """(result of ``action()``, the apiserver's write requests to ``resource`` while it ran).

    The counter is the whole apiserver's, and the lab writes ConfigMaps of its own: every new namespace
    gets its kube-root-ca.crt, and the namespace controller deletes a namespace's ConfigMaps when an earlier
    test's namespace goes (this file's namespaces are deleted without waiting). Where writes were counted,
    the action is run again, up to ``tries`` times, each once no namespace is terminating. A run that writes
    writes every time, so it still shows."""
    for attempt in range(tries):
        if attempt:
            kubectl.wait_for(
                lambda: not terminating_namespaces(kubectl), timeout=120, what="no terminating namespace"
            )
        before = writes_to(kubectl, resource)
        result = action()
        seen = writes_to(kubectl, resource) - before
        if seen == 0:
            break
    return result, seen


@pytest.fixture
def ns(kubectl):
    name = f"apply-{uuid.uuid4().hex[:6]}"
    kubectl.namespace(name)
    yield name
    kubectl("delete", "namespace", name, "--wait=false")


def test_apply_rerun_update_prune(ns, kubectl):
    cluster = apply.Cluster(str(C.KUBECONFIG))
    prune = [
        {
            "api_version": "v1",
            "kind": "ConfigMap",
            "namespace": ns,
            "label_selector": f"{LABEL_MANAGED_BY}=gpusplit,t=apply",
        }
    ]
    objs = [configmap(ns, f"cm-{i}", {"gpus": str(i)}) for i in range(3)]

    first = apply.run(cluster, objs, prune=prune)
    assert sorted(first["created"]) == sorted(f"ConfigMap/{ns}/cm-{i} (v1)" for i in range(3))
    assert first["api_writes"] == 3

    again, seen = writes_during(
        kubectl, "configmaps", lambda: apply.run(apply.Cluster(str(C.KUBECONFIG)), objs, prune=prune)
    )
    assert again["changed"] is False and again["unchanged"] == 3 and again["api_writes"] == 0
    assert seen == 0  # the apiserver saw no write at all

    objs[1] = configmap(ns, "cm-1", {"gpus": "7"})
    changed = apply.run(apply.Cluster(str(C.KUBECONFIG)), objs[:2], prune=prune)
    assert changed["updated"] == [f"ConfigMap/{ns}/cm-1 (v1)"]
    assert changed["pruned"] == [f"ConfigMap/{ns}/cm-2 (v1)"]
    assert kubectl.json("-n", ns, "get", "configmap", "cm-1")["data"] == {"gpus": "7"}
    assert kubectl("-n", ns, "get", "configmap", "cm-2", check=False).returncode != 0
    # the diff shows the changed field
    entry = next(d for d in changed["diff"] if "cm-1" in d["after_header"])
    assert "gpus: '1'" in entry["before"] and "gpus: '7'" in entry["after"]


def test_check_mode_is_a_server_dry_run(ns, kubectl):
    cluster = apply.Cluster(str(C.KUBECONFIG))
    result = apply.run(cluster, [configmap(ns, "dry", {"a": "b"})], check_mode=True)
    assert result["created"] == [f"ConfigMap/{ns}/dry (v1)"] and result["api_writes"] == 0
    assert kubectl("-n", ns, "get", "configmap", "dry", check=False).returncode != 0
    # the server validated it: an invalid object fails even in check mode
    bad = configmap(ns, "Not_A_Valid_Name", {"a": "b"})
    with pytest.raises(Exception, match="Invalid value"):
        apply.run(cluster, [bad], check_mode=True)


def test_bad_input_is_refused_before_any_request(ns):
    cluster = apply.Cluster(str(C.KUBECONFIG))
    with pytest.raises(apply.ApplyError, match="lacks metadata.name"):
        apply.run(cluster, [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}}])
    dup = configmap(ns, "x", {})
    with pytest.raises(apply.ApplyError, match="appears more than once"):
        apply.run(cluster, [dup, dup])
    with pytest.raises(apply.ApplyError, match="must include app.kubernetes.io/managed-by"):
        apply.run(
            cluster, [dup], prune=[{"api_version": "v1", "kind": "ConfigMap", "label_selector": "t=apply"}]
        )
    assert cluster.writes == 0


def test_a_label_no_longer_sent_is_removed_and_a_label_of_others_stays(ns, kubectl):
    """A field gpusplit applied earlier and stops sending goes away; what others set stays."""
    cluster = apply.Cluster(str(C.KUBECONFIG))
    first = configmap(ns, "labels", {"k": "v"})
    first["metadata"]["labels"]["gpusplit.io/mode"] = "gpu_operator"
    apply.run(cluster, [first])
    kubectl("-n", ns, "label", "configmap", "labels", "someone-else=keep")  # another manager's label

    second = configmap(ns, "labels", {"k": "v"})  # gpusplit.io/mode no longer sent
    result = apply.run(cluster, [second])
    assert result["updated"] == [apply.key_text(apply.object_key(second))], result
    labels = kubectl.json("-n", ns, "get", "configmap", "labels")["metadata"]["labels"]
    assert "gpusplit.io/mode" not in labels
    assert labels["someone-else"] == "keep"

    again, seen = writes_during(
        kubectl, "configmaps", lambda: apply.run(apply.Cluster(str(C.KUBECONFIG)), [second])
    )
    assert again["changed"] is False and again["unchanged"] == 1 and again["api_writes"] == 0
    assert seen == 0


# --------------------------------------------------------------------------------------------
# a Namespace in the batch: applied before the objects in it; in check mode not yet there


def gpu(i: int) -> dict:
    return {
        "uuid": f"GPU-0000aaaa-{i:04x}-4000-8000-{i:012x}",
        "index": i,
        "minor_number": i,
        "pci_bus_id": f"0000:{0x18 + 0x10 * i:02x}:00.0",
        "name": "NVIDIA H100 80GB HBM3",
        "memory_total_mib": 81559,
        "mig_mode": {"current": "disabled", "pending": None},
        "mig_devices": [],
        "health": {"status": "ok", "reasons": []},
        "processes": [],
    }


def fleet_plan(nodes: dict[str, str], mig_strategy: str = "none") -> dict:
    """A fleet plan of hosts -> node names (nodes that do not exist: no plugin pod ever runs)."""
    return plan_fleet(
        {
            host: {
                "facts": [gpu(i) for i in range(4)],
                "mode": "device_plugin",
                "split": {"count": 2},
                "mig_strategy": mig_strategy,
                "node_name": node,
            }
            for host, node in nodes.items()
        }
    )


def test_a_custom_namespace_check_mode_then_for_real(kubectl):
    ns = f"gpusplit-ns-{uuid.uuid4().hex[:6]}"
    objs = render.render_fleet(fleet_plan({"h1": f"{ns}-node-a", "h2": f"{ns}-node-b"}), {"namespace": ns})
    assert [o["kind"] for o in objs] == ["Namespace", "DaemonSet", "DaemonSet"]
    # the DaemonSets first: the apply must still create the Namespace before them
    objs = objs[1:] + objs[:1]
    daemonsets = [apply.key_text(apply.object_key(o)) for o in objs if o["kind"] == "DaemonSet"]
    try:
        check = apply.run(apply.Cluster(str(C.KUBECONFIG)), objs, check_mode=True)
        assert sorted(check["created"]) == sorted([*daemonsets, f"Namespace/{ns} (v1)"]), check
        assert sorted(check["not_dry_run"]) == sorted(daemonsets)
        assert check["api_writes"] == 0 and ns in check["warnings"][0]
        assert kubectl("get", "namespace", ns, check=False).returncode != 0  # nothing stored

        real = apply.run(apply.Cluster(str(C.KUBECONFIG)), objs)
        assert sorted(real["created"]) == sorted(check["created"]) and real["api_writes"] == 3, real
        assert real["not_dry_run"] == [] and "warnings" not in real
        live = kubectl.json("-n", ns, "get", "daemonsets")["items"]
        assert sorted(d["metadata"]["name"] for d in live) == sorted(
            o["metadata"]["name"] for o in objs if o["kind"] == "DaemonSet"
        )
        # once the Namespace exists, check mode dry-runs everything again and finds nothing to do
        again = apply.run(apply.Cluster(str(C.KUBECONFIG)), objs, check_mode=True)
        assert again["changed"] is False and again["unchanged"] == 3 and again["not_dry_run"] == []
    finally:
        kubectl("delete", "namespace", ns, "--ignore-not-found", "--wait=false")


# --------------------------------------------------------------------------------------------
# every variant the renderers produce is accepted by the real apiserver (dryRun=All)


def long_node_name(tag: str) -> str:
    """A 253-character DNS subdomain node name (labels of at most 63) starting with ``tag``."""
    name = ".".join([tag] + ["n" * 63] * 4)[:253]
    return name[:-1] + "n" if name.endswith(".") else name


def stock_plugin(ns: str) -> dict:
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "nvidia-device-plugin-daemonset", "namespace": ns},
        "spec": {
            "selector": {"matchLabels": {"name": "stock-dp"}},
            "template": {
                "metadata": {"labels": {"name": "stock-dp"}},
                "spec": {
                    "nodeSelector": {"nvidia.com/gpu.present": "true"},
                    "containers": [{"name": "nvidia-device-plugin-ctr", "image": render.DEVICE_PLUGIN_IMAGE}],
                },
            },
        },
    }


def test_every_rendered_variant_is_accepted_by_the_apiserver(ns, kubectl):
    objects = []
    for hardening in sorted(render.HARDENING):
        for mig_strategy in MIG_STRATEGIES:
            for pinning in render.NODE_PINNING:
                tag = f"{hardening}-{mig_strategy}-{pinning}".replace("_", "-")
                plan = fleet_plan(
                    {f"{tag}-short": f"{tag}-short", f"{tag}-long": long_node_name(tag)}, mig_strategy
                )
                assert all(len(p["node"]) in (len(f"{tag}-short"), 253) for p in plan["nodes"].values())
                settings = {"namespace": ns, "hardening": hardening, "node_pinning": pinning}
                if hardening.startswith("cdi"):
                    settings["nvidia_cdi_hook_path"] = "/usr/local/nvidia/toolkit/nvidia-cdi-hook"
                objects.extend(render.render_daemonsets(plan, settings))
                objects.extend(render.render_node_patches(plan, operator_managed=mig_strategy == "mixed"))
    # every optional setting at once
    full = {
        "namespace": ns,
        "image": "registry.local/nvidia/k8s-device-plugin:v0.20.0",
        "image_pull_policy": "Always",
        "image_pull_secrets": ["regcred"],
        "pass_device_specs": True,
        "fail_on_init_error": False,
        "resources": {"limits": {"memory": "128Mi"}, "requests": {"cpu": "10m"}},
        "extra_tolerations": [
            {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}
        ],
        "runtime_class_name": "nvidia",
        "priority_class_name": "system-node-critical",
    }
    objects.extend(render.render_daemonsets(fleet_plan({"full": "full-settings"}), full))
    # the Namespace object of a namespace that does not exist yet
    objects.append(render.render_namespace({"namespace": f"{ns}-x"}))
    # departed nodes' release patches (exist only as a dry-run create here: still a valid Node)
    objects.extend(render.render_release_patches([long_node_name("released")]))
    # the stock plugin exclusion, against a live stock-like plugin
    kubectl("apply", "-f", "-", stdin=json.dumps(stock_plugin(ns)))
    live = kubectl.json("-n", ns, "get", "daemonset", "nvidia-device-plugin-daemonset")
    objects.append(
        render.render_stock_plugin_exclusion(
            {"stock_plugin_name": "nvidia-device-plugin-daemonset", "stock_plugin_namespace": ns}, live
        )
    )
    kinds = sorted({o["kind"] for o in objects})
    assert kinds == ["DaemonSet", "Namespace", "Node"]

    cluster = apply.Cluster(str(C.KUBECONFIG))
    result = apply.run(cluster, objects, check_mode=True)  # dryRun=All: rejected objects raise
    assert result["api_writes"] == 0 and result["not_dry_run"] == []
    assert len(result["created"]) + len(result["updated"]) + result["unchanged"] == len(objects)
    assert "DaemonSet/" + ns + "/nvidia-device-plugin-daemonset (apps/v1)" in result["updated"]
    # the dry-run answer is what the server would store: every DaemonSet kept its node pinning
    for entry in result["diff"]:
        if entry["after_header"].startswith("DaemonSet/") and "gpusplit-dp-" in entry["after_header"]:
            assert "kubernetes.io/hostname" in entry["after"] or "metadata.name" in entry["after"]
    assert kubectl("get", "namespace", f"{ns}-x", check=False).returncode != 0
    assert not kubectl.json("-n", ns, "get", "daemonsets", "-l", PLUGIN_SELECTOR)["items"]
