"""The module device_taint_rule (plugins/modules/device_taint_rule.py): its documentation, its
refusals, and that it runs without Jinja2 (it imports only module_utils)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import fail_on_refusal
from ansible_collections.gpusplit.k8s.plugins.modules import device_taint_rule as mod

ROOT = Path(__file__).resolve().parents[4]


class Failed(Exception):
    pass


class FakeModule:
    check_mode = False

    def __init__(self, **params):
        self.params = {
            "definition": None,
            "definitions": None,
            "name": None,
            "state": "present",
            "wait": True,
            "wait_eviction": False,
            "wait_timeout": 1,
            "refresh": False,
            "report_first": True,
            "field_manager": "gpusplit",
            **params,
        }

    def fail_json(self, **result):
        raise Failed(result)


class NoRuleCluster:
    """A cluster without any DeviceTaintRule; anything that would write fails the test."""

    class client:  # noqa: N801 (the attribute the module reads)
        @staticmethod
        def get(res, name):
            class Absent:
                @staticmethod
                def to_dict():
                    return None

            return Absent()

    def resource(self, api_version, kind):
        return (api_version, kind)

    def apply(self, *args, **kwargs):
        raise AssertionError("nothing may be applied")

    delete = apply


def test_device_taint_rule_module_documents_its_arguments():
    doc = yaml.safe_load(mod.DOCUMENTATION)
    assert doc["module"] == "device_taint_rule"
    assert set(doc["options"]) == {
        "definition",
        "definitions",
        "name",
        "state",
        "wait",
        "wait_eviction",
        "wait_timeout",
        "refresh",
        "report_first",
        "field_manager",
        "api_version",
    }
    assert doc["extends_documentation_fragment"] == [
        "gpusplit.k8s.cluster_auth",  # kubeconfig, context (and their K8S_AUTH_* fallbacks)
        "gpusplit.k8s.attributes.check_mode_no_diff",
    ]
    yaml.safe_load(mod.EXAMPLES)
    yaml.safe_load(mod.RETURN)


@pytest.mark.parametrize(
    ("params", "msg"),
    [
        ({}, "give name, or a definition with metadata.name"),
        ({"name": "r", "definition": {}}, "state=present needs a definition"),
        (
            {
                "definition": {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "DeviceTaintRule",
                    "metadata": {"name": "r"},
                    "spec": {"taint": {"key": "k", "effect": "Evict"}},
                }
            },
            "nothing was applied: spec.taint.effect 'Evict' is not one of None, NoSchedule, NoExecute",
        ),
    ],
)
def test_refusals_fail_the_module_with_their_message(params, msg):
    module = FakeModule(**params)
    with pytest.raises(Failed) as failed, fail_on_refusal(module):
        mod.run(module, NoRuleCluster())
    assert failed.value.args[0] == {"msg": msg, "errors": [msg]}


def test_the_module_runs_without_jinja2():
    code = (
        "import sys; sys.modules['jinja2'] = None; "
        "import ansible_collections.gpusplit.k8s.plugins.modules.device_taint_rule; "
        "assert not [m for m in sys.modules if '.plugin_utils' in m], sorted(sys.modules)"
    )
    env_path = [os.environ["ANSIBLE_COLLECTIONS_PATH"], *sys.path]
    proc = subprocess.run(
        [sys.executable, "-c", f"import sys; sys.path[:0] = {env_path!r}; {code}"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr


class UntouchedCluster:
    """A cluster that may not even be read: the refusal comes first."""

    def __getattr__(self, name):
        raise AssertionError(f"the cluster was used ({name})")


def rule(**fields):
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceTaintRule",
        "metadata": {"name": "r"},
        "spec": {"taint": {"key": "k", "effect": "NoSchedule"}},
        **fields,
    }


@pytest.mark.parametrize(
    ("params", "msg"),
    [
        ({"definition": rule(metadata="r")}, "definition.metadata: expected a mapping, got string"),
        (
            {"definition": rule(metadata={"name": 7})},
            "definition.metadata.name: expected a string, got integer",
        ),
        (
            {"definition": rule(spec="taint me")},
            "nothing was applied: definition.spec: expected a mapping, got string",
        ),
        (
            {"definition": rule(spec={"taint": ["k", "NoSchedule"]})},
            "nothing was applied: definition.spec.taint: expected a mapping, got list",
        ),
        ({"definition": "r"}, "definition: expected a mapping, got string"),
        (
            {"definition": rule(metadata=["r"]), "state": "absent"},
            "definition.metadata: expected a mapping, got list",
        ),
    ],
)
def test_a_definition_of_the_wrong_shape_is_refused_before_the_cluster_is_used(params, msg):
    module = FakeModule(**params)
    with pytest.raises(Failed) as failed, fail_on_refusal(module):
        mod.run(module, UntouchedCluster())
    assert failed.value.args[0] == {"msg": msg, "errors": [msg]}


def run_main(params, capsys):
    import json

    from ansible.module_utils.testing import patch_module_args

    with patch_module_args(params), pytest.raises(SystemExit) as exc:
        mod.main()
    return exc.value.code, json.loads(capsys.readouterr().out)


def test_main_refuses_before_it_connects(monkeypatch, capsys):
    monkeypatch.setattr(mod, "Cluster", UntouchedCluster)  # constructing it would fail the test
    rc, out = run_main({"definition": rule(spec="taint me")}, capsys)
    msg = "nothing was applied: definition.spec: expected a mapping, got string"
    assert rc == 1 and out["msg"] == msg and out["errors"] == [msg] and not out.get("changed")


def test_main_reports_an_api_error_as_a_failed_request(monkeypatch, capsys):
    from kubernetes.client.exceptions import ApiException

    def unreachable(*_args):
        raise ApiException(status=503, reason="Service Unavailable")

    monkeypatch.setattr(mod, "Cluster", unreachable)
    rc, out = run_main({"definition": rule()}, capsys)
    assert rc == 1 and out["msg"].startswith("DeviceTaintRule: the API request failed: (503)")


def test_main_does_not_disguise_a_bug_as_a_failed_request(monkeypatch):
    from ansible.module_utils.testing import patch_module_args

    def buggy(module, cluster):
        return {}["no such key"]

    monkeypatch.setattr(mod, "Cluster", lambda *_args: NoRuleCluster())
    monkeypatch.setattr(mod, "run", buggy)
    with patch_module_args({"definition": rule()}), pytest.raises(KeyError):
        mod.main()
