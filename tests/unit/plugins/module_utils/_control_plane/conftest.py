"""Fixtures of the control-plane tests: a kubeadm manifest directory and a k3s config directory."""

from __future__ import annotations

import os
import shutil

import pytest

from ansible_collections.gpusplit.k8s.tests.unit.plugins.module_utils._control_plane.cp_testdata import (
    COMPONENTS,
    V1BETA4,
)


@pytest.fixture
def manifests(tmp_path):
    directory = tmp_path / "etc-kubernetes" / "manifests"
    directory.mkdir(parents=True)
    for component in COMPONENTS:
        shutil.copy(V1BETA4 / f"{component}.yaml", directory / f"{component}.yaml")
        os.chmod(directory / f"{component}.yaml", 0o600)
    return directory


@pytest.fixture
def k3s_dir(tmp_path):
    directory = tmp_path / "etc-rancher-k3s"
    directory.mkdir()
    (directory / "config.yaml").write_text("write-kubeconfig-mode: '0600'\nkube-apiserver-arg:\n  - v=2\n")
    return directory


@pytest.fixture
def module_warnings(monkeypatch):
    """Every ``AnsibleModule.warn`` text of the modules run in the test, in order.

    Read here, not from the result: once anything of the controller is imported into the test
    process, ansible-core shows module warnings through its Display instead of returning them.
    """
    from ansible.module_utils.basic import AnsibleModule

    seen = []
    original = AnsibleModule.warn

    def record(self, warning, *args, **kwargs):
        seen.append(str(warning))
        return original(self, warning, *args, **kwargs)

    monkeypatch.setattr(AnsibleModule, "warn", record)
    return seen
