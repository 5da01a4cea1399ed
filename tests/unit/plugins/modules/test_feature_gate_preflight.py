"""feature_gate_preflight (plugins/modules/feature_gate_preflight.py) refuses current flags of the
wrong shape naming the field, not with Python's error text. The module changes nothing."""

from __future__ import annotations

import json

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpusplit.k8s.plugins.modules import feature_gate_preflight

READ = "cannot read the current control-plane flags: "


def run_module(args, capsys):
    with patch_module_args(args), pytest.raises(SystemExit) as exc:
        feature_gate_preflight.main()
    return exc.value.code, json.loads(capsys.readouterr().out)


@pytest.mark.parametrize(
    ("current_flags", "msg"),
    [
        (
            {"kube-apiserver": "x"},
            "current_flags.kube-apiserver: expected a mapping with feature_gates and/or runtime_config, got string",
        ),
        (
            {"kube-scheduler": ["GangScheduling=true"]},
            "current_flags.kube-scheduler: expected a mapping with feature_gates and/or runtime_config, got list",
        ),
        (
            {"kube-scheduler": {"feature_gates": "GangScheduling"}},
            "current_flags.kube-scheduler.feature_gates: missing bool value for GangScheduling",
        ),
        (
            {"kube-scheduler": {"feature_gates": "GangScheduling=maybe"}},
            "current_flags.kube-scheduler.feature_gates: invalid value of GangScheduling=maybe: not a boolean",
        ),
    ],
)
def test_current_flags_of_the_wrong_shape_are_refused_naming_the_field(current_flags, msg, capsys):
    rc, out = run_module({"version": "1.37", "current_flags": current_flags}, capsys)
    assert rc == 1 and out["failed"] is True and not out.get("changed")
    assert out["msg"] == READ + msg and out["errors"] == [READ + msg]


def test_kubelet_feature_gates_that_are_no_mapping_are_refused_naming_the_file(tmp_path, capsys):
    kubelet = tmp_path / "config.yaml"
    kubelet.write_text(
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nfeatureGates:\n  - GangScheduling\n"
    )
    rc, out = run_module({"version": "1.37", "kubelet_config": str(kubelet)}, capsys)
    msg = f"{READ}{kubelet}: featureGates: expected a mapping of gate name to boolean, got list"
    assert rc == 1 and out["msg"] == msg and out["errors"] == [msg]


def test_good_current_flags_are_read_as_before(capsys):
    args = {
        "version": "1.37",
        "current_flags": {
            "kube-scheduler": {"feature_gates": "GenericWorkload=true"},
            "kube-apiserver": None,
        },
    }
    rc, out = run_module(args, capsys)
    assert rc == 0, out
    assert out["current_flags"]["kube-scheduler"] == {
        "feature_gates": {"GenericWorkload": True},
        "runtime_config": {},
    }
