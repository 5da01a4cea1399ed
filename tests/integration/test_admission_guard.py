"""The admission guard (playbooks/guard.yml, role admission_guard) on the lab's real kube-apiserver.

The guard installed here is scoped to this test's namespaces (gpusplit_guard_match_labels) and
has its own name, so that other tests sharing the lab are never affected; what it proves is the
same policies and bindings a fleet gets (only the namespace selector is narrower).

Besides the NVIDIA_VISIBLE_DEVICES policy: the DRA claim policy (claims and claim templates that
tolerate gpusplit's device taints), the privileged-pod policy (gpusplit_guard_privileged=enforce)
and the privileged-pod report. The DRA devices are what the lab's DRA harness publishes
(tests/integration/dra_harness.py); the claims are allocated by the real kube-scheduler.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import uuid
from pathlib import Path

import pytest
import yaml

from ansible_collections.gpusplit.k8s.plugins.module_utils._split.planner import plan_node
from ansible_collections.gpusplit.k8s.plugins.plugin_utils._dra.claims import host_share_toleration
from ansible_collections.gpusplit.k8s.plugins.plugin_utils._dra.render import (
    diagnostic_claim,
    render_claim,
    render_taint_rule,
)
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.split_render import render_split_daemonset
from lab.lab import TRANSIENT_ERRORS as TRANSIENT

ROOT = Path(__file__).resolve().parents[2]
PSA = "pod-security.kubernetes.io/enforce"
CLAIMS, PRIVILEGED = "-dra-claims", "-privileged"


def kc(kubectl, *args, check=True, stdin=None, timeout=90):
    return kubectl.retrying(*args, check=check, stdin=stdin, timeout=timeout)


def playbook(extra: dict, *args: str) -> subprocess.CompletedProcess:
    """guard.yml; run once more when the shared lab's apiserver was restarting under it."""
    proc = _playbook(extra, *args)
    deadline = time.time() + 120
    while proc.returncode != 0 and any(t in proc.stdout for t in TRANSIENT) and time.time() < deadline:
        time.sleep(5)
        proc = _playbook(extra, *args)
    return proc


def _playbook(extra: dict, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
    return subprocess.run(
        [
            "ansible-playbook",
            "-i",
            str(ROOT / "inventory" / "lab"),
            str(ROOT / "playbooks" / "guard.yml"),
            "-e",
            json.dumps(extra),
            *args,
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=300,
    )


def recap(output: str) -> dict[str, int]:
    line = [x for x in output.split("PLAY RECAP", 1)[1].splitlines() if x.startswith("localhost")][0]
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", line)}


def pod(name, ns, *, env=None, init_env=None):
    container = {"name": "main", "image": "registry.k8s.io/pause:3.10"}
    if env:
        container["env"] = [{"name": k, "value": v} for k, v in env.items()]
    spec = {
        "containers": [container],
        "terminationGracePeriodSeconds": 0,
        # never scheduled anywhere: admission is what is tested, not placement
        "nodeSelector": {"gpusplit.io/guard-test": "nowhere"},
    }
    if init_env:
        spec["initContainers"] = [
            {
                "name": "init",
                "image": "registry.k8s.io/pause:3.10",
                "env": [{"name": k, "value": v} for k, v in init_env.items()],
            }
        ]
    return json.dumps(
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns}, "spec": spec}
    )


@pytest.fixture(scope="module")
def guard(lab, kubectl, tmp_path_factory):
    run = uuid.uuid4().hex[:6]
    name = f"guard-{run}"
    deny, allow, outside = f"guard-{run}-deny", f"guard-{run}-allow", f"guard-{run}-outside"
    ok, late = f"guard-{run}-ok", f"guard-{run}-late"
    priv, base = f"guard-{run}-psa-privileged", f"guard-{run}-psa-baseline"
    scope = {"gpusplit.io/guard-test": run}
    labels = {
        deny: scope,
        allow: {**scope, "gpusplit.io/allow-visible-devices": "true"},
        outside: {},
        ok: scope,  # allowed by name (gpusplit_guard_allowed_namespaces)
        late: {},  # brought under the guard later
        priv: {**scope, PSA: "privileged"},
        base: {**scope, PSA: "baseline"},
    }
    for ns, ns_labels in labels.items():
        kubectl.namespace(ns, ns_labels)
    extra = {
        "gpusplit_guard_name": name,
        "gpusplit_guard_match_labels": scope,
        "gpusplit_guard_allowed_namespaces": ["kube-system", "gpu-operator", ok],
        "gpusplit_guard_privileged": "enforce",
        # the lab's apiserver has no AdmissionConfiguration: Pod Security enforces privileged by default
        "gpusplit_guard_pod_security_default": "privileged",
    }
    yield {
        "run": run,
        "name": name,
        "deny": deny,
        "allow": allow,
        "outside": outside,
        "ok": ok,
        "late": late,
        "priv": priv,
        "base": base,
        "extra": extra,
    }
    playbook({**extra, "gpusplit_guard_state": "absent"})
    for kind in ("validatingadmissionpolicybinding", "validatingadmissionpolicy"):
        for policy in (name, name + CLAIMS, name + PRIVILEGED):
            kc(kubectl, "delete", kind, policy, "--ignore-not-found", check=False)
    for ns in labels:
        kc(kubectl, "delete", "namespace", ns, "--wait=false", check=False)


def create(kubectl, manifest, *extra):
    return kc(kubectl, "create", "-f", "-", *extra, check=False, stdin=manifest)


def test_lint_errors_stop_the_play_before_the_cluster_is_touched(guard, kubectl, tmp_path):
    bad = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "trainer", "namespace": "ml"},
        "spec": {
            "selector": {"matchLabels": {"app": "t"}},
            "template": {
                "metadata": {"labels": {"app": "t"}},
                "spec": {
                    "containers": [
                        {
                            "name": "main",
                            "image": "x",
                            "resources": {
                                "requests": {"nvidia.com/gpu": "1"},
                                "limits": {"nvidia.com/gpu": "2"},
                            },
                        }
                    ]
                },
            },
        },
    }
    (tmp_path / "bad.yaml").write_text(
        yaml.safe_dump_all([bad, {"kind": "Service", "metadata": {"name": "s"}}])
    )
    proc = playbook({**guard["extra"], "gpusplit_lint_paths": [str(tmp_path / "*.yaml")]})
    assert proc.returncode != 0
    assert "Deployment/ml/trainer  [main]  extended-resource-requests-equal-limits" in proc.stdout
    assert "1 finding(s) of severity error" in proc.stdout
    assert kc(kubectl, "get", "validatingadmissionpolicy", guard["name"], check=False).returncode != 0


def test_guard_rejects_visible_devices_and_admits_the_rest(guard, kubectl, tmp_path):
    deny, allow, outside, name = guard["deny"], guard["allow"], guard["outside"], guard["name"]
    # a pod that set the variable before the guard existed
    assert create(kubectl, pod("legacy", deny, env={"NVIDIA_VISIBLE_DEVICES": "all"})).returncode == 0

    clean = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "ok", "namespace": deny},
        "spec": {
            "containers": [{"name": "main", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]
        },
    }
    (tmp_path / "ok.yaml").write_text(yaml.safe_dump(clean))
    proc = playbook({**guard["extra"], "gpusplit_lint_paths": [str(tmp_path / "ok.yaml")]})
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert recap(proc.stdout)["changed"] >= 1
    assert "no findings" in proc.stdout

    # policies become active a moment after they are stored: poll with a server-side dry run
    bad = pod("bad", deny, env={"NVIDIA_VISIBLE_DEVICES": "all"})
    kubectl.wait_for(
        lambda: create(kubectl, bad, "--dry-run=server").returncode != 0,
        timeout=90,
        interval=1,
        what="the guard to reject a dry run",
    )
    proc = create(kubectl, bad)
    assert proc.returncode != 0
    assert (
        f"ValidatingAdmissionPolicy '{name}' with binding '{name}' denied request: "
        f"container main of pod {deny}/bad set NVIDIA_VISIBLE_DEVICES" in proc.stderr
    ), proc.stderr
    assert "request nvidia.com/gpu instead" in proc.stderr

    proc = create(kubectl, pod("bad-init", deny, init_env={"NVIDIA_VISIBLE_DEVICES": "0"}))
    assert proc.returncode != 0 and f"initContainer init of pod {deny}/bad-init" in proc.stderr, proc.stderr

    # a clean pod in the guarded namespace, and the variable where it is allowed or not guarded
    assert create(kubectl, pod("clean", deny)).returncode == 0
    assert create(kubectl, pod("allowed", allow, env={"NVIDIA_VISIBLE_DEVICES": "all"})).returncode == 0
    assert create(kubectl, pod("elsewhere", outside, env={"NVIDIA_VISIBLE_DEVICES": "all"})).returncode == 0
    assert (
        create(kubectl, pod("cuda", deny, env={"CUDA_VISIBLE_DEVICES": "0"})).returncode == 0
    )  # not forbidden

    # kubectl debug adds ephemeral containers through pods/ephemeralcontainers: guarded too
    debug = {
        "spec": {
            "ephemeralContainers": [
                {"name": "dbg", "image": "x", "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}
            ]
        }
    }
    proc = kc(
        kubectl,
        "-n",
        deny,
        "patch",
        "pod",
        "clean",
        "--subresource=ephemeralcontainers",
        "--type=strategic",
        "-p",
        json.dumps(debug),
        check=False,
    )
    assert proc.returncode != 0 and f"ephemeralContainer dbg of pod {deny}/clean" in proc.stderr, proc.stderr
    debug["spec"]["ephemeralContainers"][0]["env"] = []
    kc(
        kubectl,
        "-n",
        deny,
        "patch",
        "pod",
        "clean",
        "--subresource=ephemeralcontainers",
        "--type=strategic",
        "-p",
        json.dumps(debug),
    )

    # the pod from before the guard can still be updated (only new offenders are rejected)
    kc(kubectl, "-n", deny, "label", "pod", "legacy", "touched=yes")

    # a re-run changes nothing
    proc = playbook(guard["extra"])
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert recap(proc.stdout)["changed"] == 0, proc.stdout[-3000:]
    policy = json.loads(kc(kubectl, "get", "validatingadmissionpolicy", name, "-o", "json").stdout)
    assert not policy["status"].get("typeChecking", {}).get("expressionWarnings")


def mount_pod(name, ns, path, *, volume=None, list_name="containers"):
    """A pod whose one container mounts ``volume`` (a hostPath of /dev/null by default) at ``path``."""
    volume = volume or {"hostPath": {"path": "/dev/null", "type": "CharDevice"}}
    mounting = {
        "name": "side",
        "image": "registry.k8s.io/pause:3.10",
        "volumeMounts": [{"name": "gpu", "mountPath": path}],
    }
    spec = {
        "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}],
        "volumes": [{"name": "gpu", **volume}],
        "terminationGracePeriodSeconds": 0,
        "nodeSelector": {"gpusplit.io/guard-test": "nowhere"},
    }
    spec.setdefault(list_name, []).append(mounting)
    return json.dumps(
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns}, "spec": spec}
    )


def test_guard_rejects_device_list_mounts_and_admits_other_mounts(guard, kubectl):
    """Threat model, enforced: with accept-nvidia-visible-devices-as-volume-mounts the container
    toolkit reads a /dev/null mount under /var/run/nvidia-container-devices as a GPU request (what the
    split plugin's volume-mounts strategy hands out), so a tenant pod that mounts a volume there
    itself is rejected, in any container list; the allowed namespaces (the split plugins') may."""
    deny, allow, ok, name = guard["deny"], guard["allow"], guard["ok"], guard["name"]
    proc = playbook(guard["extra"])
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    facts = json.loads((ROOT / "tests" / "fixtures" / "gpus" / "dgx-h100.json").read_text())["gpus"]
    host_gpu = plan_node("gsguard-mount", facts, "device_plugin", {"host_count": 2})["host_uuids"][0]
    root = "/var/run/nvidia-container-devices"
    bad = mount_pod("host-gpu", deny, f"{root}/{host_gpu}")
    kubectl.wait_for(
        lambda: create(kubectl, bad, "--dry-run=server").returncode != 0,
        timeout=90,
        interval=1,
        what="the guard to reject a device-list mount",
    )
    err = denied(create(kubectl, bad), name)
    assert (
        f"container side mounts volume gpu at {root}/{host_gpu} of pod {deny}/host-gpu: the NVIDIA "
        f"Container Toolkit reads a volume mounted under {root} as a request for the GPU its path names"
    ) in err, err
    assert "mount the volume elsewhere" in err and "request nvidia.com/gpu instead" in err

    empty_dir = {"emptyDir": {}}
    for pod_name, path, volume, list_name in (
        ("all-init", f"{root}/all", empty_dir, "initContainers"),
        ("no-separator", f"{root}all", None, "containers"),  # the toolkit reads this as "all" too
        ("unclean", f"/var/run/./nvidia-container-devices//{host_gpu}", None, "containers"),
    ):
        err = denied(
            create(kubectl, mount_pod(pod_name, deny, path, volume=volume, list_name=list_name)), name
        )
        kind = list_name[:-1]
        assert f"{kind} side mounts volume gpu at {path} of pod {deny}/{pod_name}: " in err, err

    # kubectl debug: an ephemeral container with such a mount is rejected, one without is admitted
    assert create(kubectl, mount_pod("elsewhere", deny, "/data")).returncode == 0
    debug = {
        "spec": {
            "ephemeralContainers": [
                {"name": "dbg", "image": "x", "volumeMounts": [{"name": "gpu", "mountPath": f"{root}/0"}]}
            ]
        }
    }

    def add_debug():
        return kc(
            kubectl, "-n", deny, "patch", "pod", "elsewhere", "--subresource=ephemeralcontainers",
            "--type=strategic", "-p", json.dumps(debug), check=False,
        )  # fmt: skip

    err = denied(add_debug(), name)
    assert f"ephemeralContainer dbg mounts volume gpu at {root}/0 of pod {deny}/elsewhere" in err, err
    debug["spec"]["ephemeralContainers"][0]["volumeMounts"][0]["mountPath"] = "/data"
    assert add_debug().returncode == 0

    # the allowed namespaces, by name or by label, may mount there (the split plugins' own pods)
    for ns in (ok, allow):
        assert create(kubectl, bad.replace(deny, ns), "--dry-run=server").returncode == 0


# --------------------------------------------------------------------------------------------
# DRA claims, privileged pods, the report


def claim(name, ns, tolerations, *, kind="ResourceClaim", shape="exactly"):
    """A claim (or template) whose one request tolerates ``tolerations``, as an exact request or
    as the second subrequest of firstAvailable."""
    if shape == "exactly":
        request = {
            "name": "gpu",
            "exactly": {"deviceClassName": "gpu.nvidia.com", "tolerations": tolerations},
        }
    else:
        request = {
            "name": "gpu",
            "firstAvailable": [
                {"name": "big", "deviceClassName": "gpu.nvidia.com"},
                {"name": "any", "deviceClassName": "gpu.nvidia.com", "tolerations": tolerations},
            ],
        }
    spec = {"devices": {"requests": [request]}}
    return json.dumps(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": kind,
            "metadata": {"name": name, "namespace": ns},
            "spec": spec if kind == "ResourceClaim" else {"spec": spec},
        }
    )


def who_text(guard):
    allowed = ", ".join(sorted(["kube-system", "gpu-operator", guard["ok"], "dra-driver-nvidia-gpu"]))
    return (
        f"only the namespaces {allowed} and namespaces labelled "
        "gpusplit.io/allow-visible-devices=true (an administrator adds one through "
        "gpusplit_guard_allowed_namespaces of the admission_guard role) may tolerate them"
    )


def denied(proc, policy):
    assert proc.returncode != 0, proc.stdout
    assert f"ValidatingAdmissionPolicy '{policy}' with binding '{policy}' denied request: " in proc.stderr, (
        proc.stderr
    )
    return proc.stderr


@pytest.fixture(scope="module")
def split_node(guard, lab, kubectl):
    """A kwok node gpusplit split (gpusplit.io/split=true, the GPU taint) in mode dra: the harness
    publishes its devices, and every device carries gpusplit's host-share DeviceTaintRule."""
    import dra_harness as harness

    node = f"gsguard-{guard['run']}"
    created_class = harness.ensure_device_class()
    rules = []
    try:
        devices = [d["name"] for d in harness.publish(node, "workstation")["spec"]["devices"]]
        kc(kubectl, "label", "node", node, "gpusplit.io/split=true", "gpusplit.io/mode=dra", "--overwrite")
        kc(kubectl, "taint", "node", node, "nvidia.com/gpu=present:NoSchedule", "--overwrite")
        rules = [render_taint_rule("host", node, device, host=node) for device in devices]
        for rule in rules:
            harness.apply(rule)
        yield {
            "name": node,
            "devices": devices,
            "rules": {r["spec"]["deviceSelector"]["device"]: r for r in rules},
        }
    finally:
        for rule in rules:
            harness.delete("resource.k8s.io/v1", "DeviceTaintRule", rule["metadata"]["name"])
        harness.unpublish(node)
        harness.delete("v1", "Node", node)
        if created_class:
            harness.delete("resource.k8s.io/v1", "DeviceClass", "gpu.nvidia.com")


def gpu_debug(name, ns, *, privileged=True, tolerate=True):
    """A Deployment whose pods could reach a split node (they tolerate the GPU taint)."""
    spec = {
        "containers": [
            {"name": "main", "image": "x", "securityContext": {"privileged": privileged}},
        ],
    }
    if tolerate:
        spec["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists"}]
    return json.dumps(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name, "namespace": ns},
            "spec": {
                "replicas": 0,
                "selector": {"matchLabels": {"app": name}},
                "template": {"metadata": {"labels": {"app": name}}, "spec": spec},
            },
        }
    )


@pytest.fixture(scope="module")
def installed(guard, kubectl, split_node):
    """The guard installed (claims and privileged enforced), with workloads in place for its report."""
    for ns in (guard["priv"], guard["base"]):
        assert create(kubectl, gpu_debug("gpu-debug", ns)).returncode == 0
    assert create(kubectl, gpu_debug("cpu-only", guard["priv"], tolerate=False)).returncode == 0
    proc = playbook(guard["extra"])
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    kubectl.wait_for(
        lambda: (
            create(
                kubectl, claim("probe", guard["deny"], [{"operator": "Exists"}]), "--dry-run=server"
            ).returncode
            != 0
        ),
        timeout=90,
        interval=1,
        what="the claim policy to reject a dry run",
    )
    return proc


def test_claims_tolerating_gpusplit_taints_are_rejected_outside_the_allowed_namespaces(
    guard, kubectl, installed
):
    """Threat model, enforced: a tenant claim tolerating the host-share, excluded or unhealthy taint,
    or every taint, in any request shape."""
    deny, ok, policy = guard["deny"], guard["ok"], guard["name"] + CLAIMS
    host = [{"key": "gpusplit.io/host-share", "operator": "Exists", "effect": "NoSchedule"}]

    err = denied(create(kubectl, claim("by-key", deny, host)), policy)
    assert f"ResourceClaim {deny}/by-key: request gpu tolerates gpusplit.io/host-share: " in err
    assert who_text(guard) in err

    err = denied(create(kubectl, claim("keyless", deny, [{"operator": "Exists"}])), policy)
    assert (
        f"ResourceClaim {deny}/keyless: request gpu tolerates every taint (a toleration without a key" in err
    )

    unhealthy = [
        {"key": "gpusplit.io/unhealthy", "operator": "Equal", "value": "xid-79", "effect": "NoExecute"}
    ]
    err = denied(create(kubectl, claim("isolated", deny, unhealthy, shape="firstAvailable")), policy)
    assert f"ResourceClaim {deny}/isolated: request gpu/any tolerates gpusplit.io/unhealthy" in err
    excluded = [{"key": "gpusplit.io/excluded", "operator": "Exists"}]
    err = denied(create(kubectl, claim("excluded", deny, excluded)), policy)
    assert "request gpu tolerates gpusplit.io/excluded" in err

    # gpusplit's diagnostic claim (isolated GPU) is a tenant's no more
    located = {"uuid": "GPU-e12288a1-0b40-4175-cdf5-d0d3d7226fff", "mig_enabled": False}
    diag = diagnostic_claim("burn-in", deny, located)
    err = denied(create(kubectl, json.dumps(diag)), policy)
    assert "tolerates gpusplit.io/unhealthy, gpusplit.io/excluded" in err

    # admitted: another key, no toleration, and all of the above in an allowed namespace
    assert (
        create(
            kubectl, claim("other", deny, [{"key": "example.com/maintenance", "operator": "Exists"}])
        ).returncode
        == 0
    )
    assert create(kubectl, claim("plain", deny, [])).returncode == 0
    for name, tol, shape in (("by-key", host, "exactly"), ("keyless", [{"operator": "Exists"}], "exactly")):
        assert create(kubectl, claim(name, ok, tol, shape=shape), "--dry-run=server").returncode == 0
    assert (
        create(
            kubectl, claim("isolated", ok, unhealthy, shape="firstAvailable"), "--dry-run=server"
        ).returncode
        == 0
    )
    diag["metadata"]["namespace"] = ok
    assert create(kubectl, json.dumps(diag), "--dry-run=server").returncode == 0
    # the label opt-out is honoured too
    assert create(kubectl, claim("by-key", guard["allow"], host), "--dry-run=server").returncode == 0


def test_a_claim_template_for_a_deployment(guard, kubectl, installed):
    """What happens to a Deployment whose pods use a ResourceClaimTemplate tolerating the host share:
    the template is rejected; one made before the guard covered its namespace yields pods whose
    claims the guard rejects when the resource claim controller creates them."""
    deny, late, policy = guard["deny"], guard["late"], guard["name"] + CLAIMS
    host = [{"key": "gpusplit.io/host-share", "operator": "Exists"}]
    err = denied(create(kubectl, claim("host-gpu", deny, host, kind="ResourceClaimTemplate")), policy)
    assert f"ResourceClaimTemplate {deny}/host-gpu: request gpu tolerates gpusplit.io/host-share" in err

    # a template from before: made while the namespace was outside the guard, then the namespace is guarded
    assert create(kubectl, claim("host-gpu", late, host, kind="ResourceClaimTemplate")).returncode == 0
    kc(kubectl, "label", "namespace", late, f"gpusplit.io/guard-test={guard['run']}")
    kubectl.wait_for(
        lambda: create(kubectl, claim("probe", late, host), "--dry-run=server").returncode != 0,
        timeout=60,
        interval=1,
        what="the guard to cover the namespace",
    )
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "trainer", "namespace": late},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "trainer"}},
            "template": {
                "metadata": {"labels": {"app": "trainer"}},
                "spec": {
                    "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "host-gpu"}],
                    "containers": [
                        {"name": "main", "image": "x", "resources": {"claims": [{"name": "gpu"}]}}
                    ],
                    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
                },
            },
        },
    }
    assert create(kubectl, json.dumps(deployment)).returncode == 0  # the Deployment itself is admitted

    def claim_failure():
        events = json.loads(kc(kubectl, "-n", late, "get", "events", "-o", "json").stdout)["items"]
        return [e for e in events if f"ValidatingAdmissionPolicy '{policy}'" in (e.get("message") or "")]

    events = kubectl.wait_for(
        claim_failure, timeout=90, interval=2, what="the claim controller's failure event"
    )
    assert "request gpu tolerates gpusplit.io/host-share" in events[0]["message"], events[0]
    assert events[0]["involvedObject"]["kind"] == "Pod"
    claims = json.loads(kc(kubectl, "-n", late, "get", "resourceclaims", "-o", "json").stdout)["items"]
    assert claims == []
    pods = json.loads(kc(kubectl, "-n", late, "get", "pods", "-o", "json").stdout)["items"]
    assert pods and all(not p["spec"].get("nodeName") for p in pods)  # never placed


def test_an_allowed_namespace_claim_is_placed_on_a_host_share_device(guard, kubectl, installed, split_node):
    """The split's own use keeps working: in an allowed namespace the same claim is admitted and
    the real scheduler allocates a host-share device (every device of the node carries the taint)."""
    import dra_harness as harness

    ok, node = guard["ok"], split_node["name"]
    body = render_claim("host-gpu", ok, tolerations=[host_share_toleration()], kind="ResourceClaim")
    assert create(kubectl, json.dumps(body)).returncode == 0
    consumer = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "diagnostics", "namespace": ok},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
            "terminationGracePeriodSeconds": 0,
            "resourceClaims": [{"name": "gpu", "resourceClaimName": "host-gpu"}],
            "containers": [{"name": "main", "image": "x", "resources": {"claims": [{"name": "gpu"}]}}],
        },
    }
    assert create(kubectl, json.dumps(consumer)).returncode == 0

    def allocated():
        got = harness.get("resource.k8s.io/v1", "ResourceClaim", "host-gpu", ok) or {}
        return (((got.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results")

    [result] = kubectl.wait_for(allocated, timeout=90, interval=1, what="the claim to be allocated")
    assert result["pool"] == node and result["device"] in split_node["devices"]
    rule = split_node["rules"][result["device"]]
    assert rule["spec"]["taint"]["key"] == "gpusplit.io/host-share"
    assert harness.get("resource.k8s.io/v1", "DeviceTaintRule", rule["metadata"]["name"]) is not None


def test_the_privileged_report_and_policy(guard, kubectl, installed, split_node):
    """The report lists the namespace labelled privileged and its workload that can reach the split
    node, not the one labelled baseline. Enforced: a privileged or CAP_SYS_ADMIN pod that tolerates
    the GPU taint or selects split nodes by label, outside the allowed namespaces."""
    # the report as the play shows it (a YAML list of lines, folded by the callback: unfold it)
    shown = installed.stdout.split("Show the report", 1)[1].split("PLAY RECAP", 1)[0]
    out = " ".join(shown.split()).replace("''", "'")
    priv, base, node = guard["priv"], guard["base"], split_node["name"]
    assert f"'namespace {priv}: privileged (label {PSA}=privileged; guarded)'" in out, out
    section = out.split(f"'namespace {priv}:", 1)[1].split("'namespace ", 1)[0]
    # the lab's own nodes may be split too (labelled by an earlier site.yml, without the GPU taint):
    # what matters is which workloads reach this test's tainted split node
    reach = {}
    for item in re.findall(r"Deployment/([\w-]+) can land on ([^;']+); privileged now: ([^']*)'", section):
        reach[item[0]] = ([n.strip() for n in item[1].split(",")], item[2])
    assert node in reach["gpu-debug"][0] and reach["gpu-debug"][1] == "container main", section
    assert node not in reach.get("cpu-only", ([], ""))[0], section  # it does not tolerate the GPU taint
    assert base not in out
    assert f"'namespace {guard['ok']}: privileged (the apiserver's default; allowed by the guard)'" in out

    deny, ok, policy = guard["deny"], guard["ok"], guard["name"] + PRIVILEGED

    def priv_pod(name, ns, security, **spec):
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"containers": [{"name": "main", "image": "x", "securityContext": security}], **spec},
        }
        return json.dumps(body)

    tolerates = {"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}]}
    err = denied(create(kubectl, priv_pod("p1", deny, {"privileged": True}, **tolerates)), policy)
    assert f"container main of pod {deny}/p1 (privileged or CAP_SYS_ADMIN) tolerates nvidia.com/gpu" in err
    sys_admin = {"capabilities": {"add": ["SYS_ADMIN"]}}
    err = denied(
        create(kubectl, priv_pod("p2", deny, sys_admin, nodeSelector={"gpusplit.io/split": "true"})), policy
    )
    assert f"pod {deny}/p2 (privileged or CAP_SYS_ADMIN) selects gpusplit.io/split" in err
    err = denied(
        create(kubectl, priv_pod("p3", deny, {"privileged": True}, tolerations=[{"operator": "Exists"}])),
        policy,
    )
    assert "tolerates every taint" in err
    # admitted: in an allowed namespace; not privileged; privileged but aimed nowhere near split nodes
    assert (
        create(kubectl, priv_pod("p1", ok, {"privileged": True}, **tolerates), "--dry-run=server").returncode
        == 0
    )
    assert (
        create(
            kubectl, priv_pod("p4", deny, {"privileged": False}, **tolerates), "--dry-run=server"
        ).returncode
        == 0
    )
    assert create(kubectl, priv_pod("p5", deny, {"privileged": True}), "--dry-run=server").returncode == 0
    # the split device plugin (hardening volume-mounts: CAP_SYS_ADMIN, tolerates the GPU taint):
    # admitted where it lives (an allowed namespace), rejected in a tenant's
    facts = json.loads((ROOT / "tests" / "fixtures" / "gpus" / "dgx-h100.json").read_text())["gpus"]
    plugin = render_split_daemonset(
        plan_node("gsguard-dp", facts, "device_plugin", {"count": 6}), {"hardening": "volume-mounts"}
    )
    template = plugin["spec"]["template"]

    def plugin_pod(ns, spec):
        meta = {**template["metadata"], "name": "plugin", "namespace": ns}
        return json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec})

    assert create(kubectl, plugin_pod(ok, template["spec"]), "--dry-run=server").returncode == 0
    # in a tenant namespace both the env policy (its NVIDIA_VISIBLE_DEVICES) and the privileged policy
    # (its CAP_SYS_ADMIN) reject it; the apiserver reports the one it evaluated first, and the order
    # of policies is not specified, so either denial is accepted here ...
    proc = create(kubectl, plugin_pod(deny, template["spec"]), "--dry-run=server")
    assert proc.returncode != 0, proc.stdout
    by = {name: f"ValidatingAdmissionPolicy '{name}' with binding '{name}' denied request: " in proc.stderr
          for name in (guard["name"], policy)}  # fmt: skip
    assert any(by.values()), proc.stderr
    assert "container nvidia-device-plugin-ctr of pod" in proc.stderr
    if by[guard["name"]]:
        assert "set NVIDIA_VISIBLE_DEVICES" in proc.stderr, proc.stderr
    # ... and without it, the privileged policy rejects its CAP_SYS_ADMIN
    spec = json.loads(json.dumps(template["spec"]))
    for c in spec["containers"]:
        c["env"] = [e for e in c.get("env") or [] if e["name"] != "NVIDIA_VISIBLE_DEVICES"]
    err = denied(create(kubectl, plugin_pod(deny, spec), "--dry-run=server"), policy)
    assert (
        f"container nvidia-device-plugin-ctr of pod {deny}/plugin (privileged or CAP_SYS_ADMIN) tolerates"
        in err
    )
    # the baseline namespace: Pod Security itself rejects the privileged pod first
    proc = create(kubectl, priv_pod("p6", base, {"privileged": True}))
    assert proc.returncode != 0 and "violates PodSecurity" in proc.stderr, proc.stderr


def test_absent_removes_the_guard(guard, kubectl):
    proc = playbook({**guard["extra"], "gpusplit_guard_state": "absent"})
    assert proc.returncode == 0, proc.stdout[-3000:]
    for kind in ("validatingadmissionpolicy", "validatingadmissionpolicybinding"):
        for policy in (guard["name"], guard["name"] + CLAIMS, guard["name"] + PRIVILEGED):
            assert kc(kubectl, "get", kind, policy, check=False).returncode != 0
    bad = pod("after", guard["deny"], env={"NVIDIA_VISIBLE_DEVICES": "all"})
    kubectl.wait_for(
        lambda: create(kubectl, bad, "--dry-run=server").returncode == 0,
        timeout=90,
        interval=1,
        what="the guard to stop rejecting",
    )
    proc = playbook({**guard["extra"], "gpusplit_guard_state": "absent"})
    assert recap(proc.stdout)["changed"] == 0
