"""The guard's privileged-pod report (pure, over API objects)."""

from __future__ import annotations

import pytest

from ansible_collections.gpusplit.k8s.plugins.plugin_utils import guard_report as gr
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.role_steps import StepContext, run_step

PSA = "pod-security.kubernetes.io/enforce"
GPU_TOL = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


def ns(name, level=None):
    labels = {"kubernetes.io/metadata.name": name}
    if level is not None:
        labels[PSA] = level
    return {"metadata": {"name": name, "labels": labels}}


def node(name, split=True, taints=(TAINT,), labels=None):
    return {
        "metadata": {
            "name": name,
            "labels": {"gpusplit.io/split": "true" if split else "false", **(labels or {})},
        },
        "spec": {"taints": list(taints)},
    }


def deployment(
    name, namespace, *, tolerations=(), node_selector=None, privileged=False, owner=None, kind="Deployment"
):
    spec = {
        "containers": [{"name": "main", "image": "x", "securityContext": {"privileged": privileged}}],
        "tolerations": list(tolerations),
    }
    if node_selector:
        spec["nodeSelector"] = node_selector
    meta = {"name": name, "namespace": namespace}
    if owner:
        meta["ownerReferences"] = [{"kind": owner, "name": "o"}]
    if kind == "Pod":
        return {"kind": "Pod", "metadata": meta, "spec": spec}
    return {"kind": kind, "metadata": meta, "spec": {"template": {"spec": spec}}}


NODES = [node("gpu-1"), node("cpu-1", split=False, taints=())]


def test_privileged_namespaces_are_listed_baseline_ones_are_not():
    report = gr.privileged_report(
        [ns("team-a", "privileged"), ns("team-b", "baseline"), ns("team-c", "restricted")],
        [
            deployment("debug", "team-a", tolerations=[GPU_TOL], privileged=True),
            deployment("web", "team-a"),  # does not tolerate the GPU taint: never on gpu-1
            deployment("debug", "team-b", tolerations=[GPU_TOL]),
        ],
        NODES,
        default_level="baseline",
        allowed_namespaces=["kube-system"],
    )
    assert report["namespaces"] == [
        {"name": "team-a", "level": "privileged", "source": f"label {PSA}=privileged", "allowed": False}
    ]
    assert report["workloads"] == [
        {
            "namespace": "team-a",
            "kind": "Deployment",
            "name": "debug",
            "split_nodes": ["gpu-1"],
            "privileged": ["container main"],
        }
    ]
    assert report["split_nodes"] == ["gpu-1"]
    table = gr.report_table(report)
    assert (
        "namespace team-a: privileged (label pod-security.kubernetes.io/enforce=privileged; guarded)" in table
    )
    assert "  Deployment/debug can land on gpu-1; privileged now: container main" in table
    assert "team-b" not in table


def test_the_default_level_unknown_given_or_from_the_admission_configuration():
    namespaces = [ns("plain"), ns("kube-system")]
    unknown = gr.privileged_report(namespaces, [], NODES)
    assert (
        unknown["default_level"]
        == gr.UNKNOWN_DEFAULT
        == "unknown: default from AdmissionConfiguration not readable"
    )
    assert [(r["name"], r["level"], r["source"]) for r in unknown["namespaces"]] == [
        ("kube-system", "unknown", gr.UNKNOWN_DEFAULT),
        ("plain", "unknown", gr.UNKNOWN_DEFAULT),
    ]
    given = gr.privileged_report(namespaces, [], NODES, default_level="restricted")
    assert given["namespaces"] == [] and given["default_source"] == "given"
    config = """
apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
  - name: PodSecurity
    configuration:
      apiVersion: pod-security.admission.config.k8s.io/v1
      kind: PodSecurityConfiguration
      defaults: {enforce: baseline}
      exemptions: {namespaces: [kube-system]}
"""
    read = gr.privileged_report(namespaces, [], NODES, default_level="privileged", admission_config=config)
    assert read["default_level"] == "baseline" and read["default_source"] == "AdmissionConfiguration"
    assert read["namespaces"] == [
        {
            "name": "kube-system",
            "level": "privileged",
            "source": "exempt in the AdmissionConfiguration",
            "allowed": False,
        }
    ]
    # no PodSecurity plugin configured: the built-in default, privileged
    assert gr.pod_security_defaults({"kind": "AdmissionConfiguration", "plugins": []}) == ("privileged", [])
    # configured in another file: not readable from here
    other = {"kind": "AdmissionConfiguration", "plugins": [{"name": "PodSecurity", "path": "/etc/psa.yaml"}]}
    assert gr.pod_security_defaults(other) == (None, [])


def test_an_invalid_label_is_reported_as_unknown():
    report = gr.privileged_report([ns("odd", "Privileged")], [], NODES, default_level="baseline")
    assert report["namespaces"][0]["level"] == "unknown"
    assert "is not a Pod Security level" in report["namespaces"][0]["source"]


def test_what_can_land_follows_selection_and_taints():
    namespaces = [ns("a", "privileged")]
    nodes = [node("gpu-1"), node("gpu-2", taints=()), node("cpu-1", split=False, taints=())]
    workloads = [
        deployment("untainted", "a"),  # gpu-2 has no GPU taint: reachable without toleration
        deployment("pinned", "a", node_selector={"kubernetes.io/hostname": "cpu-1"}),
        deployment("tolerant", "a", tolerations=[{"operator": "Exists"}]),
        deployment("rs", "a", tolerations=[GPU_TOL], owner="Deployment", kind="ReplicaSet"),
        deployment("pod-of-ds", "a", tolerations=[GPU_TOL], owner="DaemonSet", kind="Pod"),
        deployment("bare", "a", tolerations=[GPU_TOL], kind="Pod"),
        deployment("operand", "a", tolerations=[GPU_TOL], owner="ClusterPolicy", kind="DaemonSet"),
    ]
    report = gr.privileged_report(namespaces, workloads, nodes, default_level="baseline")
    got = {(w["kind"], w["name"]): w["split_nodes"] for w in report["workloads"]}
    assert got == {
        ("Deployment", "untainted"): ["gpu-2"],
        ("Deployment", "tolerant"): ["gpu-1", "gpu-2"],
        ("Pod", "bare"): ["gpu-1", "gpu-2"],
        ("DaemonSet", "operand"): ["gpu-1", "gpu-2"],  # owned by a non-workload: listed itself
    }


def test_privileged_containers():
    spec = {
        "initContainers": [{"name": "i", "securityContext": {"capabilities": {"add": ["cap_sys_admin"]}}}],
        "containers": [
            {"name": "a", "securityContext": {"privileged": True}},
            {"name": "b", "securityContext": {"capabilities": {"add": ["NET_ADMIN"]}}},
            {"name": "c", "securityContext": {"capabilities": {"add": ["ALL"]}}},
        ],
    }
    assert gr.privileged_containers(spec) == ["initContainer i", "container a", "container c"]


def test_bad_input_is_refused():
    with pytest.raises(
        gr.GuardReportError, match="default_level 'admin' is not one of privileged, baseline, restricted"
    ):
        gr.privileged_report([], [], [], default_level="admin")
    with pytest.raises(gr.GuardReportError, match="expected a document of kind AdmissionConfiguration"):
        gr.pod_security_defaults("kind: Pod")
    with pytest.raises(gr.GuardReportError, match="defaults.enforce 'open'"):
        gr.pod_security_defaults(
            {
                "kind": "AdmissionConfiguration",
                "plugins": [{"name": "PodSecurity", "configuration": {"defaults": {"enforce": "open"}}}],
            }
        )
    refused = run_step(
        "guard_report",
        {"namespaces": [], "workloads": [], "nodes": [], "default_level": "admin"},
        StepContext(),
    )
    assert refused["failed"] and refused["msg"].startswith("gpusplit guard report refused")
