# Copyright: gpusplit contributors
# Apache-2.0
"""Which kind of control plane a host has (kubeadm static pods, k3s, rke2, a managed one), and why.

Private to the collection.

No Ansible imports and no I/O: the role gathers the hints (files on the host, node labels and
provider IDs, the server version) and :func:`detect_control_plane` decides whether gpusplit may edit
the control plane's flags, and where.
"""

from __future__ import annotations

from ansible_collections.gpusplit.k8s.plugins.module_utils._control_plane.components import CONTROL_PLANE

#: provider -> (name, spec.providerID prefix (weak evidence), node label keys, server version suffix)
_PROVIDERS = {
    "eks": (
        "Amazon EKS",
        "aws://",
        ("eks.amazonaws.com/nodegroup", "eks.amazonaws.com/compute-type"),
        "-eks-",
    ),
    "gke": (
        "Google GKE",
        "gce://",
        ("cloud.google.com/gke-nodepool", "cloud.google.com/gke-os-distribution"),
        "-gke.",
    ),
    "aks": (
        "Azure AKS",
        "azure://",
        ("kubernetes.azure.com/cluster", "kubernetes.azure.com/agentpool"),
        None,
    ),
}


def detect_control_plane(hints: dict) -> dict:
    """Decide from host/cluster hints whether gpusplit may edit the control plane, and how.

    ``hints`` (all optional): ``static_pod_manifests`` (file names found in
    ``/etc/kubernetes/manifests``; or ``manifests_dir_exists``), ``rancher`` (``k3s``/``rke2``
    when ``/etc/rancher/<x>/config.yaml`` or ``config.yaml.d`` exists), ``provider_ids`` (nodes'
    ``spec.providerID``), ``node_labels`` (list of label maps, or one map), ``server_git_version``
    (``/version`` gitVersion).

    Returns ``{kind: kubeadm|k3s|rke2|managed|unknown, managed, provider, provider_name, evidence,
    message}``.  A cloud providerID alone is weak evidence (self-managed clusters on a cloud use it
    too), so local control-plane files win over it; provider node labels and the EKS/GKE server
    version suffix are strong.
    """
    evidence: list[str] = []
    manifests = [str(m) for m in hints.get("static_pod_manifests") or []]
    cp_manifests = sorted(m for m in manifests if m.rsplit("/", 1)[-1].split(".")[0] in CONTROL_PLANE)
    if cp_manifests:
        evidence.append(f"static-pod manifests: {', '.join(cp_manifests)}")
        return _cp_result("kubeadm", None, evidence, "self-managed (static pods); flags can be edited")
    rancher = hints.get("rancher")
    if rancher in ("k3s", "rke2"):
        evidence.append(f"/etc/rancher/{rancher} configuration present")
        return _cp_result(rancher, None, evidence, f"self-managed {rancher}; flags go into config.yaml.d")
    if hints.get("manifests_dir_exists"):
        evidence.append("/etc/kubernetes/manifests exists but holds no control-plane manifest")

    labels = hints.get("node_labels") or []
    if isinstance(labels, dict):
        labels = [labels]
    label_keys = {str(k) for lbl in labels for k in (lbl or {})}
    provider_ids = [str(p) for p in hints.get("provider_ids") or [] if p]
    git_version = str(hints.get("server_git_version") or "")

    strong = weak = None
    for pid, (_name, prefix, keys, suffix) in _PROVIDERS.items():
        hit = sorted(k for k in keys if k in label_keys)
        if hit:
            evidence.append(f"node label {hit[0]}")
            strong = strong or pid
        if suffix and suffix in git_version:
            evidence.append(f"server version {git_version}")
            strong = strong or pid
        if any(p.startswith(prefix) for p in provider_ids):
            evidence.append(f"node providerID {prefix}...")
            weak = weak or pid
    provider = strong or weak
    if provider:
        name = _PROVIDERS[provider][0]
        certainty = "" if strong else "probably "
        return _cp_result(
            "managed",
            provider,
            evidence,
            f"the control plane is {certainty}managed by {name}: no static-pod manifests and no k3s/rke2 "
            "configuration here, so kube-apiserver, kube-scheduler and kube-controller-manager flags "
            f"cannot be changed by gpusplit; GenericWorkload (gang scheduling) needs {name} to offer it "
            "for your Kubernetes version",
        )
    return _cp_result(
        "unknown",
        None,
        evidence,
        "no static-pod manifests and no k3s/rke2 configuration found on this host; run against a "
        "control-plane host, or the control plane is managed elsewhere and cannot be changed from here",
    )


def _cp_result(kind, provider, evidence, message):
    return {
        "kind": kind,
        "managed": kind == "managed",
        "provider": provider,
        "provider_name": _PROVIDERS[provider][0] if provider else None,
        "evidence": evidence,
        "message": message,
    }
