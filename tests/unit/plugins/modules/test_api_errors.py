"""The modules that talk to a cluster report what reaching it raised (API_ERRORS in
plugins/module_utils/_k8s/client.py) as a failed request, and nothing else: a bug in their own
logic stays a traceback instead of being disguised as an API failure."""

from __future__ import annotations

import json

import pytest
from ansible.module_utils.testing import patch_module_args
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException
from urllib3.exceptions import MaxRetryError

from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.client import API_ERRORS
from ansible_collections.gpusplit.k8s.plugins.modules import cluster_apply, fleet_verify, gpu_pending_diagnose

API_FAILURES = [
    ApiException(status=503, reason="Service Unavailable"),
    ConfigException("Invalid kube-config file. No configuration found."),
    MaxRetryError(None, "https://127.0.0.1:6443/api", "connection refused"),
    ConnectionRefusedError(111, "Connection refused"),
]


def raising(exc):
    def call(*_args, **_kwargs):
        raise exc

    return call


def run_main(main, args, capsys):
    with patch_module_args(args), pytest.raises(SystemExit) as exc:
        main()
    return exc.value.code, json.loads(capsys.readouterr().out)


def test_api_errors_are_what_reaching_a_cluster_raises():
    assert all(isinstance(exc, API_ERRORS) for exc in API_FAILURES)
    assert not any(issubclass(kind, (KeyError, AttributeError, TypeError)) for kind in API_ERRORS)


OBJECT = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "default"}}


@pytest.mark.parametrize("exc", API_FAILURES, ids=lambda e: type(e).__name__)
def test_cluster_apply_reports_an_api_error(exc, monkeypatch, capsys):
    monkeypatch.setattr(cluster_apply, "Cluster", raising(exc))
    rc, out = run_main(cluster_apply.main, {"objects": [OBJECT]}, capsys)
    assert rc == 1 and out["msg"].startswith("applying to the cluster failed: ")


def test_cluster_apply_refuses_bad_objects_before_a_request(monkeypatch, capsys):
    monkeypatch.setattr(cluster_apply, "Cluster", lambda *_args: object())  # no request can be made
    rc, out = run_main(cluster_apply.main, {"objects": [{"kind": "ConfigMap"}]}, capsys)
    assert rc == 1 and out["msg"].startswith("nothing was applied: ") and out["errors"] == [out["msg"]]


def test_cluster_apply_does_not_disguise_a_bug(monkeypatch):
    monkeypatch.setattr(cluster_apply, "Cluster", lambda *_args: object())
    monkeypatch.setattr(
        cluster_apply, "run", raising(AttributeError("'NoneType' object has no attribute 'get'"))
    )
    with patch_module_args({"objects": [OBJECT]}), pytest.raises(AttributeError):
        cluster_apply.main()


class Failed(Exception):
    pass


class FakeModule:
    def fail_json(self, **result):
        raise Failed(result)


@pytest.mark.parametrize("exc", API_FAILURES, ids=lambda e: type(e).__name__)
def test_fleet_verify_reports_a_failed_read(exc):
    with pytest.raises(Failed) as failed:
        fleet_verify.reading(FakeModule(), raising(exc))
    assert failed.value.args[0]["msg"].startswith("reading the cluster failed: ")


def test_fleet_verify_does_not_disguise_a_bug():
    with pytest.raises(KeyError):
        fleet_verify.reading(FakeModule(), raising(KeyError("node")))


def test_gpu_pending_diagnose_reports_a_failed_read(monkeypatch, capsys):
    monkeypatch.setattr(gpu_pending_diagnose, "api_client", raising(API_FAILURES[0]))
    rc, out = run_main(gpu_pending_diagnose.main, {}, capsys)
    assert rc == 1 and out["msg"].startswith("reading the cluster failed: (503)")


def test_gpu_pending_diagnose_does_not_disguise_a_bug(monkeypatch):
    monkeypatch.setattr(gpu_pending_diagnose, "api_client", lambda _params: object())
    monkeypatch.setattr(gpu_pending_diagnose, "read_cluster", raising(TypeError("unhashable type: 'list'")))
    with patch_module_args({}), pytest.raises(TypeError):
        gpu_pending_diagnose.main()
