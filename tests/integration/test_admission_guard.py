"""The admission guard (playbooks/guard.yml, role admission_guard) on the lab's real kube-apiserver.

The guard installed here is scoped to this test's namespaces (gpusplit_guard_match_labels) and
has its own name, so that other tests sharing the lab are never affected; what it proves is the
same policy and binding a fleet gets (only the namespace selector is narrower).
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

from lab.lab import TRANSIENT_ERRORS as TRANSIENT

ROOT = Path(__file__).resolve().parents[2]


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
    labels = {
        deny: {"gpusplit.io/guard-test": run},
        allow: {"gpusplit.io/guard-test": run, "gpusplit.io/allow-visible-devices": "true"},
        outside: {},
    }
    for ns, ns_labels in labels.items():
        kubectl.namespace(ns, ns_labels)
    extra = {
        "gpusplit_guard_name": name,
        "gpusplit_guard_match_labels": {"gpusplit.io/guard-test": run},
    }
    yield {"run": run, "name": name, "deny": deny, "allow": allow, "outside": outside, "extra": extra}
    playbook({**extra, "gpusplit_guard_state": "absent"})
    for kind in ("validatingadmissionpolicybinding", "validatingadmissionpolicy"):
        kc(kubectl, "delete", kind, name, "--ignore-not-found", check=False)
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


def test_absent_removes_the_guard(guard, kubectl):
    proc = playbook({**guard["extra"], "gpusplit_guard_state": "absent"})
    assert proc.returncode == 0, proc.stdout[-3000:]
    for kind in ("validatingadmissionpolicy", "validatingadmissionpolicybinding"):
        assert kc(kubectl, "get", kind, guard["name"], check=False).returncode != 0
    bad = pod("after", guard["deny"], env={"NVIDIA_VISIBLE_DEVICES": "all"})
    kubectl.wait_for(
        lambda: create(kubectl, bad, "--dry-run=server").returncode == 0,
        timeout=90,
        interval=1,
        what="the guard to stop rejecting",
    )
    proc = playbook({**guard["extra"], "gpusplit_guard_state": "absent"})
    assert recap(proc.stdout)["changed"] == 0
