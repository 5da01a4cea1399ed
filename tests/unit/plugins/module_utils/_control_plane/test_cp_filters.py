"""The control_plane_gates filters (plugins/filter/control_plane_gates.py): detection, versions, API
versions, a component's own error. They run in ansible-core's controller (Python 3.11+), unlike the
modules beside these tests, whose tests also run on the managed-host Pythons (3.8+)."""

from __future__ import annotations

import sys

import pytest

if sys.version_info < (3, 11):  # noqa: UP036 - these tests also run on the managed-host Pythons
    pytest.skip("controller-only: ansible-core's controller needs Python 3.11+", allow_module_level=True)

from ansible.errors import AnsibleFilterError  # noqa: E402

from ansible_collections.gpusplit.k8s.plugins.filter import control_plane_gates as cpg_filters  # noqa: E402
from ansible_collections.gpusplit.k8s.tests.unit.plugins.module_utils._control_plane.cp_testdata import (  # noqa: E402
    ROOT,
)
from ansible_collections.gpusplit.k8s.tests.unit.plugins.module_utils._control_plane.test_health import (  # noqa: E402
    APISERVER_CRASH_LOG,
)


def filters():
    return cpg_filters.FilterModule().filters()


def test_detect_and_version_filters():
    f = filters()
    assert f["cp_detect"]({"static_pod_manifests": ["kube-apiserver.yaml", "etcd.yaml"]})["kind"] == "kubeadm"
    assert f["cp_detect"]({"rancher": "rke2"})["kind"] == "rke2"
    managed = f["cp_detect"]({"node_labels": [{"eks.amazonaws.com/nodegroup": "gpu"}]})
    assert managed["kind"] == "managed" and "cannot be changed by gpusplit" in managed["message"]
    manifest = (ROOT / "tests" / "fixtures" / "kubeadm" / "v1beta4" / "kube-apiserver.yaml").read_text()
    assert f["cp_manifest_version"](manifest) == "1.37.2"
    assert f["cp_version_output"]("k3s version v1.37.2+k3s1 (abcdef)\ngo version go1.26") == "1.37.2"
    with pytest.raises(AnsibleFilterError, match="not a Pod manifest"):
        f["cp_manifest_version"]("kind: Service\n")


def test_enabled_api_versions_filter():
    enabled = filters()["cp_enabled_api_versions"]
    assert enabled(
        {"scheduling.k8s.io/v1beta1": "true", "resource.k8s.io/v1beta2": "false", "api/alpha": "true"}
    ) == ["scheduling.k8s.io/v1beta1"]
    assert enabled({"scheduling.k8s.io/v1alpha3": True, "x.k8s.io/v1/things": "true"}) == [
        "scheduling.k8s.io/v1alpha3"
    ]
    assert enabled({}) == []
    # kube-apiserver's reading: no value is on, Go ParseBool otherwise (what it refuses is not on)
    assert enabled({"a.io/v1": None, "b.io/v1": "", "c.io/v1": "TRUE", "d.io/v1": "tRuE", "e.io/v1": 0}) == [
        "a.io/v1",
        "b.io/v1",
        "c.io/v1",
    ]


def test_component_error_filter_reads_stdout_and_stderr():
    f = filters()["cp_component_error"]
    assert f(["", "Error: unknown flag: --runtime-config\n"]) == ["Error: unknown flag: --runtime-config"]
    assert f(APISERVER_CRASH_LOG, 1)[0].endswith('err="unrecognized feature gate: NoSuchGateForGpusplit"')
