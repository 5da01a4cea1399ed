"""The module pod_eviction against the lab's real apiserver, with kwok as the kubelet of lab-ws-01
(its stage lab-pod-gone deletes a pod once it is terminating).

Two CPU-only pods pinned to one node (nodeName): evicting one leaves the other running; a
PodDisruptionBudget with maxUnavailable 0 on a pod makes the apiserver refuse its dry-run
eviction, so nothing is evicted and the failure names the budget; check mode evicts nothing; a
re-run on gone or replaced pods is fine; a pod that does not go (a finalizer holds it) fails the
wait naming it; two pods under a budget that allows one disruption: the second eviction waits for
the budget and gives up at wait_timeout.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from pathlib import Path

import pytest
from ansible_output import changed_tasks

from lab import components as C

ROOT = Path(__file__).resolve().parents[2]
NODE = "lab-ws-01"
HOLD = "gpusplit.io/test-hold"
EVICT_TASK = "Evict the pods -> localhost"  # as changed_tasks names it

PLAYBOOK = """
- name: Evict pods
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Evict the pods
      gpusplit.k8s.pod_eviction:
        kubeconfig: "{{ kubeconfig }}"
        pods: "{{ pods }}"
        wait_timeout: "{{ wait_timeout }}"
        delay: 0.5
      register: eviction
      ignore_errors: true

    - name: Keep the result for the test
      ansible.builtin.copy:
        content: "{{ eviction | to_json }}"
        dest: "{{ result_file }}"
        mode: "0644"
      check_mode: false
"""


def evict(tmp_path: Path, pods: list[dict], *extra: str, wait_timeout: int = 60) -> tuple[dict, str]:
    """Run the module through ansible-playbook; its registered result and the playbook's output (stdout, then stderr)."""
    playbook = tmp_path / "evict.yml"
    playbook.write_text(PLAYBOOK)
    result_file = tmp_path / f"result-{uuid.uuid4().hex[:6]}.json"
    variables = {
        "kubeconfig": str(C.KUBECONFIG),
        "pods": pods,
        "wait_timeout": wait_timeout,
        "result_file": str(result_file),
    }
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
    proc = subprocess.run(
        ["ansible-playbook", "-i", str(ROOT / "inventory" / "lab"), str(playbook), "-e", json.dumps(variables), *extra],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    return json.loads(result_file.read_text()), proc.stdout + proc.stderr  # warnings go to stderr


@pytest.fixture
def ns(kubectl):
    name = f"evict-{uuid.uuid4().hex[:6]}"
    kubectl.namespace(name)
    yield name
    for item in kubectl.json("-n", name, "get", "pods")["items"]:  # let held pods go
        if item["metadata"].get("finalizers"):
            kubectl("-n", name, "patch", "pod", item["metadata"]["name"], "--type=json",
                    "-p", '[{"op": "remove", "path": "/metadata/finalizers"}]', check=False)  # fmt: skip
    kubectl("delete", "namespace", name, "--wait=false")


def make_pod(kubectl, ns: str, name: str, labels: dict | None = None, finalizers: list | None = None) -> str:
    """A CPU-only pod pinned to NODE, Running (kwok); its uid."""
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": labels or {}, "finalizers": finalizers or []},
        "spec": {
            "nodeName": NODE,
            "terminationGracePeriodSeconds": 5,
            "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}],
        },
    }
    kubectl("apply", "-f", "-", stdin=json.dumps(body))
    kubectl.wait_for(
        lambda: phase(kubectl, ns, name) == "Running", timeout=60, what=f"pod {ns}/{name} Running"
    )
    return uid_of(kubectl, ns, name)


def live(kubectl, ns: str, name: str) -> dict | None:
    proc = kubectl("-n", ns, "get", "pod", name, "-o", "json", check=False)
    if proc.returncode != 0:
        assert "NotFound" in proc.stderr, proc.stderr
        return None
    return json.loads(proc.stdout)


def phase(kubectl, ns: str, name: str) -> str | None:
    pod = live(kubectl, ns, name)
    return pod and pod["status"].get("phase")


def uid_of(kubectl, ns: str, name: str) -> str | None:
    pod = live(kubectl, ns, name)
    return pod and pod["metadata"]["uid"]


def make_pdb(kubectl, ns: str, name: str, selector: dict, **spec) -> None:
    """A policy/v1 PodDisruptionBudget, waited for until the disruption controller has processed it."""
    body = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"selector": selector, **spec},
    }
    kubectl("apply", "-f", "-", stdin=json.dumps(body))
    kubectl.wait_for(
        lambda: kubectl.json("-n", ns, "get", "pdb", name).get("status", {}).get("observedGeneration") == 1,
        timeout=60,
        what=f"the disruption controller on PodDisruptionBudget {ns}/{name}",
    )


def names(entries: list[dict]) -> list[str]:
    return [e["name"] for e in entries]


def test_evicts_exactly_the_named_pod_and_a_rerun_is_fine(lab, kubectl, ns, tmp_path):
    uid_a = make_pod(kubectl, ns, "gpu-holder")
    uid_b = make_pod(kubectl, ns, "neighbour")

    # check mode: only the dry run, nothing evicted
    result, _out = evict(tmp_path, [{"namespace": ns, "name": "gpu-holder"}], "--check")
    assert result["changed"] is False and not result.get("failed"), result
    assert names(result["would_evict"]) == ["gpu-holder"] and result["evicted"] == []
    assert uid_of(kubectl, ns, "gpu-holder") == uid_a

    result, out = evict(tmp_path, [{"namespace": ns, "name": "gpu-holder", "uid": uid_a}])
    assert not result.get("failed"), result["msg"]
    assert result["changed"] is True and EVICT_TASK in changed_tasks(out)
    assert result["evicted"] == [{"namespace": ns, "name": "gpu-holder", "uid": uid_a, "node": NODE}]
    assert live(kubectl, ns, "gpu-holder") is None  # gone by the time the module returned
    assert uid_of(kubectl, ns, "neighbour") == uid_b and phase(kubectl, ns, "neighbour") == "Running"

    # a re-run: the pod is gone, which is fine and changes nothing
    result, out = evict(tmp_path, [{"namespace": ns, "name": "gpu-holder", "uid": uid_a}])
    assert result["changed"] is False and not result.get("failed"), result
    assert result["already_gone"] == [
        {"namespace": ns, "name": "gpu-holder", "uid": uid_a, "why": "not found"}
    ]
    assert EVICT_TASK not in changed_tasks(out)

    # a new pod of the same name is a replacement: the one asked for (by uid) is gone, the new one stays
    uid_new = make_pod(kubectl, ns, "gpu-holder")
    result, _out = evict(tmp_path, [{"namespace": ns, "name": "gpu-holder", "uid": uid_a}])
    assert result["changed"] is False and not result.get("failed"), result
    assert result["already_gone"][0]["why"] == f"replaced: the pod of that name now has uid {uid_new}"
    assert uid_of(kubectl, ns, "gpu-holder") == uid_new


def test_a_budget_blocks_the_eviction_and_nothing_is_evicted(lab, kubectl, ns, tmp_path):
    """The apiserver's dry-run eviction consults the budget (the module has no check of its own)."""
    uid_guarded = make_pod(kubectl, ns, "guarded", labels={"app": "trainer", "tier": "gpu"})
    uid_free = make_pod(kubectl, ns, "free", labels={"app": "web"})
    make_pdb(
        kubectl, ns, "keep-trainer",
        {"matchLabels": {"app": "trainer"}, "matchExpressions": [{"key": "tier", "operator": "In", "values": ["gpu"]}]},
        maxUnavailable=0,
    )  # fmt: skip
    make_pdb(kubectl, ns, "web-only", {"matchLabels": {"app": "web"}}, minAvailable=0)

    pods = [{"namespace": ns, "name": "free"}, {"namespace": ns, "name": "guarded"}]
    for extra in ((), ("--check",)):
        result, _out = evict(tmp_path, pods, *extra)
        assert result["failed"] is True and result["changed"] is False, result
        assert result["evicted"] == [] and names(result["would_evict"]) == ["free"]
        (blocked,) = result["blocked"]
        assert (
            blocked["name"] == "guarded"
            and blocked["status"] == 429
            and blocked["reason"] == "TooManyRequests"
        )
        assert "Cannot evict pod as it would violate the pod's disruption budget" in blocked["message"]
        assert "keep-trainer" in blocked["message"]  # the apiserver's cause names it too
        assert [(b["name"], b["max_unavailable"], b["disruptions_allowed"]) for b in blocked["pdbs"]] == [
            ("keep-trainer", 0, 0)
        ]
        msg = result["msg"]
        assert msg.startswith("nothing was evicted: the apiserver refuses the eviction of 1 of the 2 pod(s)")
        assert f"pod {ns}/guarded on node {NODE}: the eviction is refused (HTTP 429 TooManyRequests)" in msg
        assert (
            f"selected by PodDisruptionBudget {ns}/keep-trainer (maxUnavailable 0, disruptionsAllowed 0"
            in msg
        )
        # nothing was evicted: not the guarded pod, not the free one whose dry run passed
        assert uid_of(kubectl, ns, "guarded") == uid_guarded and uid_of(kubectl, ns, "free") == uid_free
        assert not live(kubectl, ns, "free")["metadata"].get("deletionTimestamp")


def test_a_pod_that_does_not_go_fails_the_wait_naming_it(lab, kubectl, ns, tmp_path):
    uid = make_pod(kubectl, ns, "held", finalizers=[HOLD])  # kwok deletes it, the finalizer keeps it
    result, out = evict(tmp_path, [{"namespace": ns, "name": "held"}], wait_timeout=2)
    assert result["failed"] is True and result["changed"] is True, result
    assert result["evicted"] == [{"namespace": ns, "name": "held", "uid": uid, "node": NODE}]
    first, second = result["msg"].splitlines()
    assert first.startswith("1 of the 1 evicted or terminating pod(s) are still there after ")
    assert first.endswith(" s (wait_timeout 2 s)")
    assert second.startswith(f"pod {ns}/held (uid {uid}) on node {NODE} is still there after ")
    assert ": phase Running, being deleted since " in second

    # the pod is terminating now: a second run does not evict it again but waits for it
    kubectl("-n", ns, "patch", "pod", "held", "--type=json", "-p",
            '[{"op": "remove", "path": "/metadata/finalizers"}]')  # fmt: skip
    result, _out = evict(tmp_path, [{"namespace": ns, "name": "held", "uid": uid}])
    assert not result.get("failed"), result
    assert result["changed"] is False and result["evicted"] == []
    assert names(result["terminating"]) + names(result["already_gone"]) == ["held"]
    assert live(kubectl, ns, "held") is None


def test_a_budget_shared_by_two_pods_holds_the_second_eviction_back(lab, kubectl, ns, tmp_path):
    """Each dry run passes alone; the real second eviction gets 429 until wait_timeout."""
    make_pod(kubectl, ns, "replica-0", labels={"app": "trainer"})
    make_pod(kubectl, ns, "replica-1", labels={"app": "trainer"})
    make_pdb(kubectl, ns, "one-at-a-time", {"matchLabels": {"app": "trainer"}}, minAvailable=1)
    kubectl.wait_for(
        lambda: (
            kubectl.json("-n", ns, "get", "pdb", "one-at-a-time")["status"].get("disruptionsAllowed") == 1
        ),
        timeout=60,
        what="disruptionsAllowed 1",
    )
    pods = [{"namespace": ns, "name": "replica-0"}, {"namespace": ns, "name": "replica-1"}]
    result, out = evict(tmp_path, pods, wait_timeout=3)
    assert "selects 2 of the pods to evict" in out and "allows 1 disruption(s) now" in out  # the warning
    assert result["failed"] is True and result["changed"] is True, result
    assert names(result["evicted"]) == ["replica-0"] and names(result["blocked"]) == ["replica-1"]
    assert result["msg"].startswith("the evictions stopped: 1 eviction(s) still refused after ")
    assert f"evicted before that: {ns}/replica-0" in result["msg"]
    assert live(kubectl, ns, "replica-0") is None and phase(kubectl, ns, "replica-1") == "Running"
