"""Test data and helpers shared by the control-plane tests (tests/unit/plugins/module_utils/_control_plane/):
the kubeadm fixtures, reading texts, diffing lines, running a module."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from ansible.module_utils.testing import patch_module_args

ROOT = Path(__file__).resolve().parents[5]
FIXTURES = ROOT / "tests" / "fixtures" / "kubeadm"
V1BETA4 = FIXTURES / "v1beta4"
STALE_136 = FIXTURES / "v1beta4-1.36-gates"
COMPONENTS = ("kube-apiserver", "kube-scheduler", "kube-controller-manager")
KUBEADM = ROOT / ".lab" / "bin" / "kubeadm"
HEADER = "Written by gpusplit"

APISERVER_ARGS = {
    "feature_gates": {"GenericWorkload": True},
    "runtime_config": {"scheduling.k8s.io/v1beta1": "true"},
    "validate_version": "auto",
}


def read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def configmap_cluster_configuration(directory: Path) -> str:
    return yaml.safe_load(read(directory / "kubeadm-config.configmap.yaml"))["data"]["ClusterConfiguration"]


def command_line_numbers(text: str) -> set[int]:
    node = yaml.compose(text)
    spec = dict((k.value, v) for k, v in node.value)["spec"]
    container = dict((k.value, v) for k, v in spec.value)["containers"].value[0]
    command = dict((k.value, v) for k, v in container.value)["command"]
    return {item.start_mark.line for item in command.value}


def run_module(main, args, capsys):
    """``(exit code, result)`` of a module's ``main`` run with ``args``."""
    with patch_module_args(args), pytest.raises(SystemExit) as exc:
        main()
    return exc.value.code, json.loads(capsys.readouterr().out)


def manifest_dir_names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def dropin_args(k3s_dir, tmp_path, **kw):
    return {
        "config_dir": str(k3s_dir),
        "backup_dir": str(tmp_path / "backups"),
        "header": HEADER,
        # the version is given: validate_version=auto would ask a k3s binary, which a unit test has not
        "validate_version": "1.37.2",
        **kw,
    }
