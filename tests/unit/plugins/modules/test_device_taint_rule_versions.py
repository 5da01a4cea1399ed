"""The module device_taint_rule writes its rules in the group/version the API server serves (resource.k8s.io/v1 on
1.37, v1beta2 on 1.36 with DRADeviceTaintRules and its runtime-config on), or fails before any change naming the
gates of the cluster's release (k8s.io/kubernetes v1.36.3 and v1.37.2 pkg/registry/resource/rest/storage_resource.go)."""

from __future__ import annotations

import pytest
from kubernetes.dynamic.exceptions import ResourceNotFoundError

from ansible_collections.gpusplit.k8s.plugins.module_utils._control_plane.api_versions import APIS
from ansible_collections.gpusplit.k8s.plugins.module_utils._dra import taint_rules
from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import fail_on_refusal
from ansible_collections.gpusplit.k8s.plugins.modules import device_taint_rule as mod


class Failed(Exception):
    pass


class FakeModule:
    check_mode = True  # a server dry-run: no wait

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
            "api_version": None,
            **params,
        }

    def fail_json(self, **result):
        raise Failed(result)


class ServingCluster:
    """An API server of ``release`` serving DeviceTaintRule in ``served`` only; it records what is applied."""

    def __init__(self, release, *served):
        self.served = served
        self.applied = []
        self.client = self.Client(release)

    class Client:
        def __init__(self, release):
            self.version = {"kubernetes": {"gitVersion": release}}

        @staticmethod
        def get(res, name):
            class Absent:
                @staticmethod
                def to_dict():
                    return None

            return Absent()

    def resource(self, api_version, kind):
        if api_version not in self.served:
            raise ResourceNotFoundError(
                f"No matches found for {{'api_version': '{api_version}', 'kind': '{kind}'}}"
            )
        return (api_version, kind)

    def apply(self, definition, field_manager, dry_run=False):
        self.applied.append(definition)
        return definition

    def delete(self, rule, dry_run=False):
        raise AssertionError("nothing is deleted here")


def rule(name="r", api_version="resource.k8s.io/v1"):
    return {
        "apiVersion": api_version,
        "kind": "DeviceTaintRule",
        "metadata": {"name": name},
        "spec": {
            "deviceSelector": {"driver": "gpu.nvidia.com", "pool": "node-a", "device": "gpu-0"},
            "taint": {"key": "gpusplit.io/host-share", "effect": "NoSchedule"},
        },
    }


def test_the_module_speaks_the_versions_of_the_table():
    assert taint_rules.WRITTEN_VERSIONS == APIS["device_taint_rule"]["versions"]


def test_on_136_a_v1_rule_is_written_as_v1beta2():
    cluster = ServingCluster("v1.36.3", "resource.k8s.io/v1beta2")
    out = mod.run(FakeModule(definitions=[rule("a"), rule("b")]), cluster)
    assert [d["apiVersion"] for d in cluster.applied] == ["resource.k8s.io/v1beta2"] * 2
    assert [r["name"] for r in out["rules"]] == ["a", "b"]


def test_on_137_v1_is_written_even_for_a_v1beta2_definition():
    cluster = ServingCluster("v1.37.2", "resource.k8s.io/v1", "resource.k8s.io/v1beta2")
    mod.run(FakeModule(definition=rule(api_version="resource.k8s.io/v1beta2")), cluster)
    assert [d["apiVersion"] for d in cluster.applied] == ["resource.k8s.io/v1"]
    cluster = ServingCluster("v1.37.2", "resource.k8s.io/v1", "resource.k8s.io/v1beta2")
    mod.run(FakeModule(definition=rule(), api_version="resource.k8s.io/v1beta2"), cluster)
    assert [d["apiVersion"] for d in cluster.applied] == ["resource.k8s.io/v1beta2"]


@pytest.mark.parametrize(
    ("release", "words"),
    [
        (
            "v1.36.3",
            ("DRADeviceTaintRules (beta, off by default", "--runtime-config=resource.k8s.io/v1beta2=true"),
        ),
        ("v1.35.4", ("1.35 has only the alpha resource.k8s.io/v1alpha3",)),
    ],
)
def test_no_served_version_fails_before_any_change_naming_the_gates(release, words):
    cluster = ServingCluster(release)
    module = FakeModule(definitions=[rule()])
    with pytest.raises(Failed) as failed, fail_on_refusal(module):
        mod.run(module, cluster)
    msg = failed.value.args[0]["msg"]
    assert f"Kubernetes {release} serves none of them" in msg
    for text in words:
        assert text in msg
    assert msg.endswith("Nothing was changed.")
    assert cluster.applied == []


def test_a_version_asked_for_that_is_not_served_is_refused():
    cluster = ServingCluster("v1.36.3", "resource.k8s.io/v1beta2")
    module = FakeModule(definition=rule(), api_version="resource.k8s.io/v1")
    with pytest.raises(Failed) as failed, fail_on_refusal(module):
        mod.run(module, cluster)
    assert (
        "resource.k8s.io/v1 was asked for, but the API server does not serve" in failed.value.args[0]["msg"]
    )
    assert cluster.applied == []


def test_an_alpha_definition_is_refused_before_the_cluster_is_asked():
    module = FakeModule(definition=rule(api_version="resource.k8s.io/v1alpha3"))
    with pytest.raises(Failed) as failed, fail_on_refusal(module):
        mod.run(module, None)
    assert (
        "must be a resource.k8s.io/v1 or resource.k8s.io/v1beta2 DeviceTaintRule"
        in failed.value.args[0]["msg"]
    )
