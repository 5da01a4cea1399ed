"""kubeadm ClusterConfiguration editing (plugins/module_utils/_control_plane/kubeadm.py) on real kubeadm
output, and the kubeadm_config_flags module."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from ansible_collections.gpusplit.k8s.plugins.module_utils._control_plane.flag_values import (
    FlagEditError,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._control_plane.kubeadm import (
    cluster_config_extra_args,
    merge_cluster_config_flags,
    set_cluster_config_extra_args,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._control_plane.static_pod import (
    edit_static_pod_manifest,
)
from ansible_collections.gpusplit.k8s.plugins.modules import (
    kubeadm_config_flags,
)
from ansible_collections.gpusplit.k8s.tests.unit.plugins.module_utils._control_plane.cp_testdata import (
    COMPONENTS,
    FIXTURES,
    KUBEADM,
    STALE_136,
    V1BETA4,
    configmap_cluster_configuration,
    read,
    run_module,
)
from ansible_collections.gpusplit.k8s.tests.unit.textdiff import changed_lines

# ---------------------------------------------------------------------------------------------
# kubeadm ClusterConfiguration


def test_v1beta3_is_rejected_by_kubeadm_137():
    rejected = read(FIXTURES / "v1beta3" / "REJECTED.txt")
    assert 'old API spec: "kubeadm.k8s.io/v1beta3"' in rejected


def test_cluster_config_extra_args_reads_both_versions():
    assert cluster_config_extra_args(configmap_cluster_configuration(V1BETA4), "apiServer") == [
        ("audit-log-maxage", "7")
    ]
    assert cluster_config_extra_args(configmap_cluster_configuration(V1BETA4), "kube-scheduler") == []
    assert cluster_config_extra_args(read(FIXTURES / "v1beta3" / "config.yaml"), "apiServer") == [
        ("audit-log-maxage", "7")
    ]
    with pytest.raises(FlagEditError, match="unknown control-plane component"):
        cluster_config_extra_args(configmap_cluster_configuration(V1BETA4), "etcd")


def test_v1beta4_configmap_all_three_components():
    text = configmap_cluster_configuration(V1BETA4)
    new = text
    for component in ("apiServer", "scheduler", "controllerManager"):
        rc = {"scheduling.k8s.io/v1beta1": "true"} if component == "apiServer" else None
        result = merge_cluster_config_flags(new, component, {"GenericWorkload": True}, rc)
        assert result["changed"]
        new = result["text"]
    removed, added = changed_lines(text, new)
    assert removed == ["controllerManager: {}\n", "scheduler: {}\n"]
    assert added == [
        "  - name: feature-gates\n",
        "    value: GenericWorkload=true\n",
        "  - name: runtime-config\n",
        "    value: scheduling.k8s.io/v1beta1=true\n",
        "controllerManager:\n",
        "  extraArgs:\n",
        "  - name: feature-gates\n",
        "    value: GenericWorkload=true\n",
        "scheduler:\n",
        "  extraArgs:\n",
        "  - name: feature-gates\n",
        "    value: GenericWorkload=true\n",
    ]
    data = yaml.safe_load(new)
    assert data["apiServer"]["extraArgs"][0] == {"name": "audit-log-maxage", "value": "7"}
    assert data["scheduler"] == {"extraArgs": [{"name": "feature-gates", "value": "GenericWorkload=true"}]}
    for component in ("apiServer", "scheduler", "controllerManager"):
        rc = {"scheduling.k8s.io/v1beta1": "true"} if component == "apiServer" else None
        again = merge_cluster_config_flags(new, component, {"GenericWorkload": True}, rc)
        assert again["changed"] is False and again["text"] == new


def test_v1beta4_stale_gates_replaced_in_place_and_emptied_back():
    text = configmap_cluster_configuration(STALE_136)
    result = merge_cluster_config_flags(
        text,
        "apiServer",
        {"GenericWorkload": True},
        {"scheduling.k8s.io/v1beta1": "true"},
        ["GangScheduling", "WorkloadAwarePreemption"],
        ["scheduling.k8s.io/v1alpha2"],
    )
    removed, added = changed_lines(text, result["text"])
    assert removed == [
        "    value: GenericWorkload=true,GangScheduling=true,WorkloadAwarePreemption=true\n",
        "    value: scheduling.k8s.io/v1alpha2=true\n",
    ]
    assert added == ["    value: GenericWorkload=true\n", "    value: scheduling.k8s.io/v1beta1=true\n"]
    assert result["before"]["feature_gates"]["GangScheduling"] is True
    assert result["after"] == {
        "feature_gates": {"GenericWorkload": True},
        "runtime_config": {"scheduling.k8s.io/v1beta1": "true"},
    }
    emptied = merge_cluster_config_flags(
        text,
        "scheduler",
        remove_feature_gates=["GenericWorkload", "GangScheduling", "WorkloadAwarePreemption"],
    )
    assert "scheduler: {}\n" in emptied["text"]
    assert yaml.safe_load(emptied["text"])["scheduler"] == {}


def test_set_extra_args_v1beta4_duplicates_and_removal():
    text = (
        "apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\napiServer:\n  certSANs:\n  - a.example\n"
        '  extraArgs:\n  - name: feature-gates\n    value: A=true\n  - name: v\n    value: "2"\n'
        "  - name: feature-gates\n    value: B=true\n"
    )
    assert merge_cluster_config_flags(text, "apiServer", {"C": True})["text"] == text.replace(
        "    value: A=true\n", "    value: A=true,B=true,C=true\n"
    ).replace("  - name: feature-gates\n    value: B=true\n", "")
    removed = set_cluster_config_extra_args(text, "apiServer", {}, remove=["feature-gates"])
    assert yaml.safe_load(removed)["apiServer"] == {
        "certSANs": ["a.example"],
        "extraArgs": [{"name": "v", "value": "2"}],
    }
    gone = set_cluster_config_extra_args(removed, "apiServer", {}, remove=["v"])
    assert yaml.safe_load(gone)["apiServer"] == {"certSANs": ["a.example"]}
    assert "  certSANs:\n  - a.example\n" in gone


def test_set_extra_args_in_a_multi_document_config_file():
    text = read(V1BETA4 / "config.yaml")
    new = merge_cluster_config_flags(text, "controllerManager", {"GenericWorkload": True})["text"]
    removed, added = changed_lines(text, new)
    assert removed == []
    assert added == [
        "controllerManager:\n",
        "  extraArgs:\n",
        "  - name: feature-gates\n",
        "    value: GenericWorkload=true\n",
    ]
    docs = list(yaml.safe_load_all(new))
    assert docs[0]["kind"] == "InitConfiguration" and "controllerManager" not in docs[0]
    assert docs[1]["controllerManager"]["extraArgs"] == [
        {"name": "feature-gates", "value": "GenericWorkload=true"}
    ]


V1BETA3 = """\
apiVersion: kubeadm.k8s.io/v1beta3
kind: ClusterConfiguration
kubernetesVersion: v1.36.3
apiServer:
  extraArgs:
    audit-log-maxage: "7"
    feature-gates: GangScheduling=true,GenericWorkload=true
  timeoutForControlPlane: 4m0s
controllerManager: {}
scheduler:
  extraArgs: {}
"""


def test_v1beta3_map_editing():
    # kubeadm 1.37 cannot produce v1beta3 any more (REJECTED.txt), so this input is written here
    result = merge_cluster_config_flags(
        V1BETA3,
        "apiServer",
        {"GenericWorkload": True},
        {"scheduling.k8s.io/v1beta1": "true"},
        ["GangScheduling"],
    )
    removed, added = changed_lines(V1BETA3, result["text"])
    assert removed == ["    feature-gates: GangScheduling=true,GenericWorkload=true\n"]
    assert added == [
        "    feature-gates: GenericWorkload=true\n",
        "    runtime-config: scheduling.k8s.io/v1beta1=true\n",
    ]
    new = result["text"]
    for component in ("controllerManager", "scheduler"):
        new = merge_cluster_config_flags(new, component, {"GenericWorkload": True})["text"]
    data = yaml.safe_load(new)
    assert data["controllerManager"] == {"extraArgs": {"feature-gates": "GenericWorkload=true"}}
    assert data["scheduler"] == {"extraArgs": {"feature-gates": "GenericWorkload=true"}}
    assert data["apiServer"]["timeoutForControlPlane"] == "4m0s"
    assert "controllerManager:\n  extraArgs:\n    feature-gates: GenericWorkload=true\n" in new
    assert "scheduler:\n  extraArgs:\n    feature-gates: GenericWorkload=true\n" in new
    assert merge_cluster_config_flags(new, "scheduler", {"GenericWorkload": True})["changed"] is False


def test_v1beta3_component_missing_is_appended():
    text = "apiVersion: kubeadm.k8s.io/v1beta3\nkind: ClusterConfiguration\nclusterName: c\n"
    new = set_cluster_config_extra_args(text, "scheduler", {"feature-gates": "GenericWorkload=true"})
    assert new == text + "scheduler:\n  extraArgs:\n    feature-gates: GenericWorkload=true\n"


def test_cluster_config_refusals():
    with pytest.raises(FlagEditError, match="unsupported kubeadm API version"):
        set_cluster_config_extra_args(
            "apiVersion: kubeadm.k8s.io/v1beta2\nkind: ClusterConfiguration\n", "apiServer", {"a": "b"}
        )
    with pytest.raises(FlagEditError, match="no ClusterConfiguration"):
        set_cluster_config_extra_args("kind: InitConfiguration\n", "apiServer", {"a": "b"})
    wrong_shape = (
        "apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\napiServer:\n  extraArgs:\n    a: b\n"
    )
    with pytest.raises(FlagEditError, match="must be a list"):
        set_cluster_config_extra_args(wrong_shape, "apiServer", {"a": "c"})


def test_scalars_that_need_quotes():
    text = "apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\napiServer: {}\n"
    new = set_cluster_config_extra_args(text, "apiServer", {"v": "2", "flag": "true", "odd": "a: b #c"})
    assert '    value: "2"\n' in new and '    value: "true"\n' in new and '    value: "a: b #c"\n' in new
    assert yaml.safe_load(new)["apiServer"]["extraArgs"][2] == {"name": "odd", "value": "a: b #c"}


@pytest.mark.skipif(not os.access(KUBEADM, os.X_OK), reason="kubeadm is built by lab/build.sh into .lab/bin")
def test_kubeadm_renders_our_cluster_config_edit_like_our_manifest_edit(tmp_path):
    """The edited ClusterConfiguration, given back to kubeadm v1.37.2, yields exactly the manifests
    that edit_static_pod_manifest produced from kubeadm's original output."""
    config = read(V1BETA4 / "config.yaml")
    for component in ("apiServer", "scheduler", "controllerManager"):
        rc = {"scheduling.k8s.io/v1beta1": "true"} if component == "apiServer" else None
        config = merge_cluster_config_flags(config, component, {"GenericWorkload": True}, rc)["text"]
    (tmp_path / "config.yaml").write_text(config)
    out = tmp_path / "out"
    out.mkdir()
    subprocess.run(
        [
            str(KUBEADM),
            "init",
            "phase",
            "control-plane",
            "all",
            "--config",
            str(tmp_path / "config.yaml"),
            "--dry-run",
        ],
        check=True,
        capture_output=True,
        env=dict(os.environ, KUBEADM_INIT_DRYRUN_DIR=str(out)),
        timeout=120,
    )
    for component in COMPONENTS:
        rc = {"scheduling.k8s.io/v1beta1": "true"} if component == "kube-apiserver" else None
        ours = edit_static_pod_manifest(read(V1BETA4 / f"{component}.yaml"), {"GenericWorkload": True}, rc)
        assert read(out / f"{component}.yaml") == ours["text"], component


# ---------------------------------------------------------------------------------------------
# module gpusplit.k8s.kubeadm_config_flags


def test_kubeadm_module_content_mode(capsys):
    text = configmap_cluster_configuration(STALE_136)
    args = {
        "content": text,
        "feature_gates": {"GenericWorkload": True},
        "runtime_config": {"scheduling.k8s.io/v1beta1": "true"},
        "remove_feature_gates": ["GangScheduling", "WorkloadAwarePreemption"],
        "remove_runtime_config": ["scheduling.k8s.io/v1alpha2"],
        "validate_version": "1.37",
        "_ansible_diff": True,
    }
    rc, out = run_module(kubeadm_config_flags.main, args, capsys)
    assert rc == 0 and out["changed"] is True and out["api_version"] == "v1beta4"
    for section in ("apiServer", "scheduler", "controllerManager"):
        assert out["sections"][section]["after"]["feature_gates"] == {"GenericWorkload": True}
    assert out["sections"]["apiServer"]["after"]["runtime_config"] == {"scheduling.k8s.io/v1beta1": "true"}
    rc, again = run_module(kubeadm_config_flags.main, dict(args, content=out["content"]), capsys)
    assert rc == 0 and again["changed"] is False and again["content"] == out["content"]


def test_kubeadm_module_validation_auto_refuses_stale(capsys):
    text = configmap_cluster_configuration(STALE_136).replace(
        "kubernetesVersion: v1.36.3", "kubernetesVersion: v1.37.2"
    )
    rc, out = run_module(kubeadm_config_flags.main, {"content": text, "validate_version": "auto"}, capsys)
    assert rc == 1 and "GangScheduling" in out["msg"] and "scheduling.k8s.io/v1alpha2" in out["msg"]


def test_kubeadm_module_path_mode(tmp_path, capsys):
    path = tmp_path / "kubeadm-config.yaml"
    shutil.copy(V1BETA4 / "config.yaml", path)
    before = read(path)
    args = {"path": str(path), "components": ["scheduler"], "feature_gates": {"GenericWorkload": True}}
    rc, out = run_module(kubeadm_config_flags.main, dict(args, _ansible_check_mode=True), capsys)
    assert rc == 0 and out["changed"] and read(path) == before
    rc, out = run_module(kubeadm_config_flags.main, dict(args, backup=True), capsys)
    assert rc == 0 and out["changed"] and read(path) == out["content"] != before
    assert read(Path(out["backup_file"])) == before
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
