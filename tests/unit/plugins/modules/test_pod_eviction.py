"""The module pod_eviction (plugins/modules/pod_eviction.py): its documentation against its
argument spec, bad input refused before any connection, the result of a blocked run, and that
request errors are reported as such while a bug in the logic is not disguised."""

from __future__ import annotations

import json

import pytest
import yaml
from ansible.module_utils.testing import patch_module_args
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import MaxRetryError

from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s import eviction as ev
from ansible_collections.gpusplit.k8s.plugins.modules import pod_eviction as mod

BLOCKED = ev.answer_from_error(
    429,
    "Too Many Requests",
    '{"message": "Cannot evict pod as it would violate the pod\'s disruption budget.", "reason": "TooManyRequests"}',
)


class Api:
    """Two pods, a and b; a's eviction is refused by budget ``keep``. Records every call."""

    calls: list = []

    def __init__(self, kubeconfig=None, context=None):
        Api.calls = [("connect", kubeconfig, context)]

    def read_pod(self, namespace, name):
        Api.calls.append(("read", name))
        if name == "gone":
            return None
        return {
            "metadata": {"namespace": namespace, "name": name, "uid": f"uid-{name}", "labels": {"app": name}},
            "spec": {"nodeName": "lab-ws-01"},
            "status": {"phase": "Running"},
        }

    def evict(self, ref, dry_run):
        Api.calls.append(("dry-run" if dry_run else "evict", ref["name"]))
        if ref["name"] == "a":
            return BLOCKED
        return {"outcome": "ok", "status": 201, "reason": "", "message": ""}

    def list_pdbs(self, namespace):
        return [
            {
                "metadata": {"name": "keep", "namespace": namespace},
                "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "a"}}},
                "status": {"disruptionsAllowed": 0},
            }
        ]


def run_main(args, capsys):
    with patch_module_args(args), pytest.raises(SystemExit) as exc:
        mod.main()
    return exc.value.code, json.loads(capsys.readouterr().out)


def test_documentation_matches_the_argument_spec():
    doc = yaml.safe_load(mod.DOCUMENTATION)
    assert doc["module"] == "pod_eviction"
    assert set(doc["options"]) == {"pods", "wait_timeout", "delay"}
    assert doc["extends_documentation_fragment"] == [
        "gpusplit.k8s.cluster_auth",  # kubeconfig, context (and their K8S_AUTH_* fallbacks)
        "gpusplit.k8s.attributes.check_mode_no_diff",
    ]
    assert doc["options"]["wait_timeout"]["default"] == ev.DEFAULT_WAIT_TIMEOUT
    assert doc["options"]["delay"]["default"] == ev.DEFAULT_DELAY
    yaml.safe_load(mod.EXAMPLES)
    assert set(yaml.safe_load(mod.RETURN)) == set(ev.new_result()) - {"changed", "warnings"}


def test_bad_input_is_refused_before_any_connection(monkeypatch, capsys):
    monkeypatch.setattr(mod, "PodApi", Api)
    Api.calls = []
    rc, out = run_main({"pods": [{"namespace": "team"}, {"name": "b", "namespace": 4}], "delay": 0}, capsys)
    assert rc == 1 and Api.calls == []
    assert out["errors"] == [
        "pods[0].name is missing",
        "pods[1].namespace: expected a non-empty string, got integer",
        "delay: expected a number of seconds above 0 and at most 86400, got 0.0",
    ]
    assert out["msg"].startswith("pod eviction refused:\n- pods[0].name is missing")


def test_no_pods_is_nothing_to_do_without_a_connection(monkeypatch, capsys):
    monkeypatch.setattr(mod, "PodApi", Api)
    Api.calls = []
    rc, out = run_main({"pods": []}, capsys)
    assert rc == 0 and out["changed"] is False and Api.calls == []


def test_a_blocked_run_fails_with_what_it_found(monkeypatch, capsys):
    monkeypatch.setattr(mod, "PodApi", Api)
    pods = [{"namespace": "team", "name": n} for n in ("gone", "b", "a")]
    rc, out = run_main({"pods": pods, "kubeconfig": None}, capsys)
    assert rc == 1 and out["failed"] is True and out["changed"] is False
    assert not [c for c in Api.calls if c[0] == "evict"]
    assert [p["name"] for p in out["already_gone"]] == ["gone"]
    assert [p["name"] for p in out["would_evict"]] == ["b"]
    assert out["blocked"][0]["pdbs"][0]["name"] == "keep" and out["evicted"] == []
    assert (
        out["msg"]
        .splitlines()[0]
        .startswith("nothing was evicted: the apiserver refuses the eviction of 1 of the 2")
    )
    assert "selected by PodDisruptionBudget team/keep (maxUnavailable 0, disruptionsAllowed 0)" in out["msg"]


def test_check_mode_evicts_nothing(monkeypatch, capsys):
    monkeypatch.setattr(mod, "PodApi", Api)
    rc, out = run_main({"pods": [{"namespace": "team", "name": "b"}], "_ansible_check_mode": True}, capsys)
    assert rc == 0 and out["changed"] is False and [p["name"] for p in out["would_evict"]] == ["b"]
    assert [c[0] for c in Api.calls] == ["connect", "read", "dry-run"]


def test_a_run_evicts_and_reports_changed(monkeypatch, capsys):
    monkeypatch.setattr(mod, "PodApi", Api)
    reads = iter([True, False])  # b is there for the first read, gone for the second
    there = Api.read_pod

    def read_pod(self, namespace, name):
        return there(self, namespace, name) if next(reads) else None

    monkeypatch.setattr(Api, "read_pod", read_pod)
    rc, out = run_main({"pods": [{"namespace": "team", "name": "b"}], "delay": 0.01}, capsys)
    assert rc == 0 and out["changed"] is True and [p["name"] for p in out["evicted"]] == ["b"]


@pytest.mark.parametrize(
    "exc",
    [ApiException(status=503, reason="Service Unavailable"), MaxRetryError(None, "https://x/api", "refused")],
    ids=lambda e: type(e).__name__,
)
def test_a_failed_request_is_reported_as_one(exc, monkeypatch, capsys):
    def failing(*_args, **_kwargs):
        raise exc

    monkeypatch.setattr(mod, "PodApi", failing)
    rc, out = run_main({"pods": [{"namespace": "team", "name": "b"}]}, capsys)
    assert rc == 1 and out["msg"].startswith("pod eviction: the API request failed: ")
    assert out["changed"] is False and out["evicted"] == []


def test_a_missing_kubeconfig_is_refused_naming_it(tmp_path, capsys):
    missing = tmp_path / "nowhere"
    rc, out = run_main({"pods": [{"namespace": "team", "name": "b"}], "kubeconfig": str(missing)}, capsys)
    assert rc == 1 and out["msg"].startswith(f"kubeconfig {missing} does not exist")


def test_a_bug_is_not_disguised(monkeypatch, capsys):
    """A bug fails the module as one, with its text (and its traceback; never as a refusal or a failed
    request), and with the pods already evicted (issue 43: a late crash lost them)."""
    monkeypatch.setattr(mod, "PodApi", Api)

    def broken(api, request, check_mode, result, *_args):
        result["evicted"].append({"namespace": "team", "name": "b", "uid": None})
        result["changed"] = True
        raise AttributeError("'NoneType' object has no attribute 'get'")

    monkeypatch.setattr(mod, "run", broken)
    rc, out = run_main({"pods": [{"namespace": "team", "name": "b"}]}, capsys)
    assert rc == 1
    assert out["msg"] == (
        "pod eviction: stopped by an unexpected error, a bug ('NoneType' object has no attribute 'get'; the "
        "traceback is in the result's exception); evicted before that: team/b"
    )
    assert out["changed"] is True and out["evicted"] == [{"namespace": "team", "name": "b", "uid": None}]


@pytest.mark.parametrize("delay", ["nan", "inf", "1e300", "-inf", "86401"])
def test_a_delay_outside_its_domain_is_refused_before_any_eviction(monkeypatch, capsys, delay):
    """issue 43: delay nan passed (nan < 0 and nan == 0 are both false); after b was evicted and a answered 429,
    time.sleep(nan) crashed the module, and the answer saying that b was evicted was lost."""
    monkeypatch.setattr(mod, "PodApi", Api)
    rc, out = run_main(
        {"pods": [{"namespace": "team", "name": "a"}, {"namespace": "team", "name": "b"}], "delay": delay},
        capsys,
    )
    assert rc == 1 and "delay: expected a number of seconds above 0 and at most 86400, got " in out["msg"]
    assert out["evicted"] == [] and out["changed"] is False
    assert [c for c in Api.calls if c[0] == "evict"] == []


@pytest.mark.parametrize("wait_timeout", [10**30, -1, 86401])
def test_a_wait_timeout_outside_its_domain_is_refused(monkeypatch, capsys, wait_timeout):
    monkeypatch.setattr(mod, "PodApi", Api)
    rc, out = run_main({"pods": [{"namespace": "team", "name": "b"}], "wait_timeout": wait_timeout}, capsys)
    assert rc == 1 and "wait_timeout: expected a whole number of seconds from 0 to 86400, got " in out["msg"]
