"""Control-plane flag editing (plugins/module_utils/_control_plane/flags.py) on real kubeadm output,
and the static_pod_flags / kubeadm_config_flags modules."""

from __future__ import annotations

import difflib
import json
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
import yaml
from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpusplit.k8s.plugins.module_utils._control_plane import flags as cpf
from ansible_collections.gpusplit.k8s.plugins.modules import (
    kubeadm_config_flags,
    rancher_config_dropin,
    static_pod_flags,
)

ROOT = Path(__file__).resolve().parents[5]
FIXTURES = ROOT / "tests" / "fixtures" / "kubeadm"
V1BETA4 = FIXTURES / "v1beta4"
STALE_136 = FIXTURES / "v1beta4-1.36-gates"
COMPONENTS = ("kube-apiserver", "kube-scheduler", "kube-controller-manager")
KUBEADM = ROOT / ".lab" / "bin" / "kubeadm"


def read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def configmap_cluster_configuration(directory: Path) -> str:
    return yaml.safe_load(read(directory / "kubeadm-config.configmap.yaml"))["data"]["ClusterConfiguration"]


def changed_lines(before: str, after: str) -> tuple[list[str], list[str]]:
    """(removed lines, added lines) between two texts."""
    removed, added = [], []
    for line in difflib.ndiff(before.splitlines(keepends=True), after.splitlines(keepends=True)):
        if line.startswith("- "):
            removed.append(line[2:])
        elif line.startswith("+ "):
            added.append(line[2:])
    return removed, added


def command_line_numbers(text: str) -> set[int]:
    node = yaml.compose(text)
    spec = dict((k.value, v) for k, v in node.value)["spec"]
    container = dict((k.value, v) for k, v in spec.value)["containers"].value[0]
    command = dict((k.value, v) for k, v in container.value)["command"]
    return {item.start_mark.line for item in command.value}


# ---------------------------------------------------------------------------------------------
# flag values


def test_parse_and_format_feature_gates():
    assert cpf.parse_feature_gates(" A=true, B=False ,,C=0") == {"A": True, "B": False, "C": False}
    assert cpf.format_feature_gates({"A": True, "B": "false"}) == "A=true,B=false"
    with pytest.raises(cpf.FlagEditError, match="missing bool value for A"):
        cpf.parse_feature_gates("A")
    with pytest.raises(cpf.FlagEditError, match="invalid value of A=yes"):
        cpf.parse_feature_gates("A=yes")


def test_parse_and_format_runtime_config():
    assert cpf.parse_runtime_config("a/v1=true, api/beta ,b/v1/r=false") == {
        "a/v1": "true",
        "api/beta": "",
        "b/v1/r": "false",
    }
    assert cpf.format_runtime_config({"a/v1": True, "api/beta": ""}) == "a/v1=true,api/beta"


def test_merge_map_order():
    merged = cpf.merge_map({"B": 1, "A": 2, "C": 3}, {"Z": 9, "A": 5, "M": 7}, remove={"C"})
    assert list(merged.items()) == [("B", 1), ("A", 5), ("M", 7), ("Z", 9)]


# ---------------------------------------------------------------------------------------------
# merge_flags


BASE = ["kube-apiserver", "--advertise-address=192.0.2.10", "--secure-port=6443"]


def test_merge_flags_appends_new_flags_at_the_end():
    new = cpf.merge_flags(BASE, {"GenericWorkload": True}, {"scheduling.k8s.io/v1beta1": True})
    assert new == BASE + [
        "--feature-gates=GenericWorkload=true",
        "--runtime-config=scheduling.k8s.io/v1beta1=true",
    ]


def test_merge_flags_replaces_in_place_keeps_others_appends_sorted():
    command = BASE[:2] + ["--feature-gates=Zeta=true,GenericWorkload=false,Alpha=true"] + BASE[2:]
    new = cpf.merge_flags(command, {"GenericWorkload": True, "Omega": True, "Beta": False})
    assert new[2] == "--feature-gates=Zeta=true,GenericWorkload=true,Alpha=true,Beta=false,Omega=true"
    assert new[:2] + new[3:] == BASE


def test_merge_flags_is_idempotent_and_keeps_foreign_spelling():
    command = BASE + ["--feature-gates=GenericWorkload=True"]
    assert cpf.merge_flags(command, {"GenericWorkload": True}) == command
    once = cpf.merge_flags(BASE, {"GenericWorkload": True}, {"scheduling.k8s.io/v1beta1": "true"})
    assert cpf.merge_flags(once, {"GenericWorkload": True}, {"scheduling.k8s.io/v1beta1": "true"}) == once


def test_merge_flags_two_token_form_and_repeats():
    command = BASE + [
        "--feature-gates",
        "A=true",
        "--feature-gates=B=true,A=false",
        "--runtime-config=x/v1=true",
    ]
    assert cpf.command_flags(command)["feature_gates"] == {"A": False, "B": True}  # later wins
    new = cpf.merge_flags(command, {"C": True})
    assert new == BASE + ["--feature-gates", "A=false,B=true,C=true", "--runtime-config=x/v1=true"]


def test_merge_flags_removals():
    command = BASE + [
        "--feature-gates=GangScheduling=true,GenericWorkload=true",
        "--runtime-config=s/v1alpha2=true",
    ]
    new = cpf.merge_flags(
        command,
        None,
        {"s/v1beta1": "true"},
        remove_feature_gates=["GangScheduling"],
        remove_runtime_config=["s/v1alpha2"],
    )
    assert new == BASE + ["--feature-gates=GenericWorkload=true", "--runtime-config=s/v1beta1=true"]
    emptied = cpf.merge_flags(command, remove_feature_gates=["GangScheduling", "GenericWorkload"])
    assert emptied == BASE + ["--runtime-config=s/v1alpha2=true"]
    assert cpf.merge_flags(BASE, remove_feature_gates=["Nothing"]) == BASE


def test_merge_flags_rejects_bad_values():
    with pytest.raises(cpf.FlagEditError):
        cpf.merge_flags(BASE, {"GenericWorkload": "sure"})
    with pytest.raises(cpf.FlagEditError):
        cpf.merge_flags(BASE + ["--feature-gates=Broken"], {"GenericWorkload": True})


# ---------------------------------------------------------------------------------------------
# static-pod manifests generated by kubeadm v1.37.2


def test_fixtures_are_kubeadm_output():
    assert "kubeadm: v1.37.2" in read(FIXTURES / "GENERATED.txt")
    for component in COMPONENTS:
        pod = cpf.parse_static_pod(read(V1BETA4 / f"{component}.yaml"))
        assert pod["component"] == component
        assert pod["image"] == f"registry.k8s.io/{component}:v1.37.2"
        assert pod["version"] == "1.37.2"
        assert pod["feature_gates"] == {} and pod["runtime_config"] == {}
    stale = cpf.parse_static_pod(read(STALE_136 / "kube-apiserver.yaml"))
    assert stale["version"] == "1.36.3"
    assert stale["feature_gates"] == {
        "GenericWorkload": True,
        "GangScheduling": True,
        "WorkloadAwarePreemption": True,
    }
    assert stale["runtime_config"] == {"scheduling.k8s.io/v1alpha2": "true"}


@pytest.mark.parametrize("component", COMPONENTS)
def test_edit_real_manifest_touches_only_command_lines(component):
    text = read(V1BETA4 / f"{component}.yaml")
    rc = {"scheduling.k8s.io/v1beta1": "true"} if component == "kube-apiserver" else None
    result = cpf.edit_static_pod_manifest(text, {"GenericWorkload": True}, rc)
    assert result["changed"]
    removed, added = changed_lines(text, result["text"])
    assert removed == []
    expected = ["    - --feature-gates=GenericWorkload=true\n"]
    if rc:
        expected.append("    - --runtime-config=scheduling.k8s.io/v1beta1=true\n")
    assert added == expected
    new_lines = result["text"].splitlines()
    assert {
        i for i, line in enumerate(new_lines) if line in [e.rstrip("\n") for e in expected]
    } <= command_line_numbers(result["text"])
    # everything but the command reads back identical
    before, after = yaml.safe_load(text), yaml.safe_load(result["text"])
    assert after["spec"]["containers"][0]["command"] == result["command_after"]
    after["spec"]["containers"][0]["command"] = before["spec"]["containers"][0]["command"]
    assert after == before
    assert result["after"]["feature_gates"] == {"GenericWorkload": True}
    # idempotent
    again = cpf.edit_static_pod_manifest(result["text"], {"GenericWorkload": True}, rc)
    assert again["changed"] is False and again["text"] == result["text"]


def test_edit_stale_manifest_in_place():
    text = read(STALE_136 / "kube-apiserver.yaml")
    result = cpf.edit_static_pod_manifest(
        text,
        {"GenericWorkload": True},
        {"scheduling.k8s.io/v1beta1": True},
        remove_feature_gates=["GangScheduling", "WorkloadAwarePreemption"],
        remove_runtime_config=["scheduling.k8s.io/v1alpha2"],
    )
    removed, added = changed_lines(text, result["text"])
    assert removed == [
        "    - --feature-gates=GenericWorkload=true,GangScheduling=true,WorkloadAwarePreemption=true\n",
        "    - --runtime-config=scheduling.k8s.io/v1alpha2=true\n",
    ]
    assert added == [
        "    - --feature-gates=GenericWorkload=true\n",
        "    - --runtime-config=scheduling.k8s.io/v1beta1=true\n",
    ]
    assert len(result["text"].splitlines()) == len(text.splitlines())


def test_edit_removing_the_last_gate_deletes_the_line():
    text = read(STALE_136 / "kube-scheduler.yaml")
    result = cpf.edit_static_pod_manifest(
        text, remove_feature_gates=["GenericWorkload", "GangScheduling", "WorkloadAwarePreemption"]
    )
    removed, added = changed_lines(text, result["text"])
    assert added == [] and len(removed) == 1 and removed[0].startswith("    - --feature-gates=")
    assert result["after"]["feature_gates"] == {}


def test_edit_keeps_crlf_quotes_and_comments():
    text = (
        "apiVersion: v1\r\nkind: Pod\r\nmetadata:\r\n  name: kube-scheduler  # hand-made\r\n  namespace: kube-system\r\n"
        "spec:\r\n  containers:\r\n  - name: kube-scheduler\r\n    command:\r\n    - kube-scheduler\r\n"
        "    - '--feature-gates=A=true'   # keep me\r\n    - \"--v=2\"\r\n"
        "    image: registry.k8s.io/kube-scheduler:v1.37.2\r\n"
    )
    result = cpf.edit_static_pod_manifest(text, {"GenericWorkload": True})
    assert result["text"] == text.replace(
        "'--feature-gates=A=true'   # keep me", "'--feature-gates=A=true,GenericWorkload=true'   # keep me"
    )
    result = cpf.edit_static_pod_manifest(text, {"B": True}, {"x/v1": "true"})
    assert result["text"].endswith(
        '    - "--v=2"\r\n    - --runtime-config=x/v1=true\r\n    image: registry.k8s.io/kube-scheduler:v1.37.2\r\n'
    )


def test_edit_last_line_without_newline():
    text = "kind: Pod\nmetadata:\n  name: x\nspec:\n  containers:\n  - name: x\n    command:\n    - x\n    - --a=b"
    result = cpf.edit_static_pod_manifest(text, {"G": True})
    assert result["text"] == text + "\n    - --feature-gates=G=true\n"


def test_edit_refuses_what_it_cannot_edit_safely():
    flow = "kind: Pod\nmetadata:\n  name: x\nspec:\n  containers:\n  - name: x\n    command: [x, --a=b]\n"
    with pytest.raises(cpf.FlagEditError, match="flow-style"):
        cpf.edit_static_pod_manifest(flow, {"G": True})
    with pytest.raises(cpf.FlagEditError, match="not a Pod"):
        cpf.edit_static_pod_manifest("kind: Deployment\n", {"G": True})
    with pytest.raises(cpf.FlagEditError, match="one YAML document"):
        cpf.edit_static_pod_manifest("kind: Pod\n---\nkind: Pod\n", {"G": True})
    in_args = "kind: Pod\nmetadata:\n  name: x\nspec:\n  containers:\n  - name: x\n    command: [x]\n    args: [--feature-gates=A=true]\n"
    with pytest.raises(cpf.FlagEditError, match="in args"):
        cpf.parse_static_pod(in_args)
    with pytest.raises(cpf.FlagEditError, match="not valid YAML"):
        cpf.parse_static_pod("kind: Pod\n  bad: [\n")


# ---------------------------------------------------------------------------------------------
# kubeadm ClusterConfiguration


def test_v1beta3_is_rejected_by_kubeadm_137():
    rejected = read(FIXTURES / "v1beta3" / "REJECTED.txt")
    assert 'old API spec: "kubeadm.k8s.io/v1beta3"' in rejected


def test_cluster_config_extra_args_reads_both_versions():
    assert cpf.cluster_config_extra_args(configmap_cluster_configuration(V1BETA4), "apiServer") == [
        ("audit-log-maxage", "7")
    ]
    assert cpf.cluster_config_extra_args(configmap_cluster_configuration(V1BETA4), "kube-scheduler") == []
    assert cpf.cluster_config_extra_args(read(FIXTURES / "v1beta3" / "config.yaml"), "apiServer") == [
        ("audit-log-maxage", "7")
    ]
    with pytest.raises(cpf.FlagEditError, match="unknown control-plane component"):
        cpf.cluster_config_extra_args(configmap_cluster_configuration(V1BETA4), "etcd")


def test_v1beta4_configmap_all_three_components():
    text = configmap_cluster_configuration(V1BETA4)
    new = text
    for component in ("apiServer", "scheduler", "controllerManager"):
        rc = {"scheduling.k8s.io/v1beta1": "true"} if component == "apiServer" else None
        result = cpf.merge_cluster_config_flags(new, component, {"GenericWorkload": True}, rc)
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
        again = cpf.merge_cluster_config_flags(new, component, {"GenericWorkload": True}, rc)
        assert again["changed"] is False and again["text"] == new


def test_v1beta4_stale_gates_replaced_in_place_and_emptied_back():
    text = configmap_cluster_configuration(STALE_136)
    result = cpf.merge_cluster_config_flags(
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
    emptied = cpf.merge_cluster_config_flags(
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
    assert cpf.merge_cluster_config_flags(text, "apiServer", {"C": True})["text"] == text.replace(
        "    value: A=true\n", "    value: A=true,B=true,C=true\n"
    ).replace("  - name: feature-gates\n    value: B=true\n", "")
    removed = cpf.set_cluster_config_extra_args(text, "apiServer", {}, remove=["feature-gates"])
    assert yaml.safe_load(removed)["apiServer"] == {
        "certSANs": ["a.example"],
        "extraArgs": [{"name": "v", "value": "2"}],
    }
    gone = cpf.set_cluster_config_extra_args(removed, "apiServer", {}, remove=["v"])
    assert yaml.safe_load(gone)["apiServer"] == {"certSANs": ["a.example"]}
    assert "  certSANs:\n  - a.example\n" in gone


def test_set_extra_args_in_a_multi_document_config_file():
    text = read(V1BETA4 / "config.yaml")
    new = cpf.merge_cluster_config_flags(text, "controllerManager", {"GenericWorkload": True})["text"]
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
    result = cpf.merge_cluster_config_flags(
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
        new = cpf.merge_cluster_config_flags(new, component, {"GenericWorkload": True})["text"]
    data = yaml.safe_load(new)
    assert data["controllerManager"] == {"extraArgs": {"feature-gates": "GenericWorkload=true"}}
    assert data["scheduler"] == {"extraArgs": {"feature-gates": "GenericWorkload=true"}}
    assert data["apiServer"]["timeoutForControlPlane"] == "4m0s"
    assert "controllerManager:\n  extraArgs:\n    feature-gates: GenericWorkload=true\n" in new
    assert "scheduler:\n  extraArgs:\n    feature-gates: GenericWorkload=true\n" in new
    assert cpf.merge_cluster_config_flags(new, "scheduler", {"GenericWorkload": True})["changed"] is False


def test_v1beta3_component_missing_is_appended():
    text = "apiVersion: kubeadm.k8s.io/v1beta3\nkind: ClusterConfiguration\nclusterName: c\n"
    new = cpf.set_cluster_config_extra_args(text, "scheduler", {"feature-gates": "GenericWorkload=true"})
    assert new == text + "scheduler:\n  extraArgs:\n    feature-gates: GenericWorkload=true\n"


def test_cluster_config_refusals():
    with pytest.raises(cpf.FlagEditError, match="unsupported kubeadm API version"):
        cpf.set_cluster_config_extra_args(
            "apiVersion: kubeadm.k8s.io/v1beta2\nkind: ClusterConfiguration\n", "apiServer", {"a": "b"}
        )
    with pytest.raises(cpf.FlagEditError, match="no ClusterConfiguration"):
        cpf.set_cluster_config_extra_args("kind: InitConfiguration\n", "apiServer", {"a": "b"})
    wrong_shape = (
        "apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\napiServer:\n  extraArgs:\n    a: b\n"
    )
    with pytest.raises(cpf.FlagEditError, match="must be a list"):
        cpf.set_cluster_config_extra_args(wrong_shape, "apiServer", {"a": "c"})


def test_scalars_that_need_quotes():
    text = "apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\napiServer: {}\n"
    new = cpf.set_cluster_config_extra_args(text, "apiServer", {"v": "2", "flag": "true", "odd": "a: b #c"})
    assert '    value: "2"\n' in new and '    value: "true"\n' in new and '    value: "a: b #c"\n' in new
    assert yaml.safe_load(new)["apiServer"]["extraArgs"][2] == {"name": "odd", "value": "a: b #c"}


@pytest.mark.skipif(not os.access(KUBEADM, os.X_OK), reason="kubeadm is built by lab/build.sh into .lab/bin")
def test_kubeadm_renders_our_cluster_config_edit_like_our_manifest_edit(tmp_path):
    """The edited ClusterConfiguration, given back to kubeadm v1.37.2, yields exactly the manifests
    that edit_static_pod_manifest produced from kubeadm's original output."""
    config = read(V1BETA4 / "config.yaml")
    for component in ("apiServer", "scheduler", "controllerManager"):
        rc = {"scheduling.k8s.io/v1beta1": "true"} if component == "apiServer" else None
        config = cpf.merge_cluster_config_flags(config, component, {"GenericWorkload": True}, rc)["text"]
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
        ours = cpf.edit_static_pod_manifest(
            read(V1BETA4 / f"{component}.yaml"), {"GenericWorkload": True}, rc
        )
        assert read(out / f"{component}.yaml") == ours["text"], component


# ---------------------------------------------------------------------------------------------
# k3s / rke2


def test_render_rancher_dropin():
    text = cpf.render_rancher_dropin(
        {"GenericWorkload": True}, {"scheduling.k8s.io/v1beta1": "true"}, header="Managed by gpusplit"
    )
    assert text == (
        "# Managed by gpusplit\n"
        "kube-apiserver-arg+:\n"
        "  - feature-gates=GenericWorkload=true\n"
        "  - runtime-config=scheduling.k8s.io/v1beta1=true\n"
        "kube-scheduler-arg+:\n"
        "  - feature-gates=GenericWorkload=true\n"
        "kube-controller-manager-arg+:\n"
        "  - feature-gates=GenericWorkload=true\n"
    )
    plain = cpf.render_rancher_dropin({"B": False, "A": True}, append=False, components=("kube-scheduler",))
    assert plain == "kube-scheduler-arg:\n  - feature-gates=A=true,B=false\n"
    assert cpf.render_rancher_dropin({}, {}) == ""


def test_rancher_merge_semantics():
    base = "kube-apiserver-arg:\n  - audit-log-maxage=7\n  - feature-gates=Foo=true\nkube-scheduler-arg:\n  - v=2\n"
    dropin = cpf.render_rancher_dropin({"GenericWorkload": True}, {"scheduling.k8s.io/v1beta1": "true"})
    flags = cpf.rancher_component_flags([base, dropin])
    assert flags["kube-apiserver"] == {
        "feature_gates": {"Foo": True, "GenericWorkload": True},
        "runtime_config": {"scheduling.k8s.io/v1beta1": "true"},
    }
    assert flags["kube-scheduler"]["feature_gates"] == {"GenericWorkload": True}
    # a plain key in a later file replaces the whole list from config.yaml
    replaced = cpf.rancher_component_flags([base, cpf.render_rancher_dropin({"G": True}, append=False)])
    assert replaced["kube-apiserver"]["feature_gates"] == {"G": True}


# ---------------------------------------------------------------------------------------------
# versions and managed detection


@pytest.mark.parametrize(
    ("image", "version"),
    [
        ("registry.k8s.io/kube-apiserver:v1.37.2", "1.37.2"),
        ("my-registry:5000/k8s/kube-scheduler:v1.36.3", "1.36.3"),
        ("registry.k8s.io/kube-apiserver:v1.37.2@sha256:" + "a" * 64, "1.37.2"),
        ("registry.k8s.io/kube-apiserver@sha256:" + "a" * 64, None),
        ("my-registry:5000/kube-apiserver", None),
        ("registry.k8s.io/kube-apiserver:latest", None),
        ("", None),
    ],
)
def test_version_from_image(image, version):
    assert cpf.version_from_image(image) == version


@pytest.mark.parametrize(
    ("output", "version"),
    [
        ("Kubernetes v1.37.2\n", "1.37.2"),
        ("k3s version v1.37.2+k3s1 (0123abcd)\ngo version go1.26.8\n", "1.37.2"),
        ("rke2 version v1.36.3+rke2r1 (deadbeef)\n", "1.36.3"),
        ("no version here", None),
    ],
)
def test_version_from_version_output(output, version):
    assert cpf.version_from_version_output(output) == version


def test_version_from_manifest():
    assert cpf.version_from_manifest(read(STALE_136 / "kube-scheduler.yaml")) == "1.36.3"


@pytest.mark.parametrize(
    ("hints", "kind", "provider"),
    [
        (
            {"static_pod_manifests": ["kube-apiserver.yaml", "etcd.yaml"], "provider_ids": ["aws:///a/i-1"]},
            "kubeadm",
            None,
        ),
        ({"rancher": "rke2", "provider_ids": ["gce://p/z/n"]}, "rke2", None),
        ({"node_labels": [{"eks.amazonaws.com/nodegroup": "gpu"}]}, "managed", "eks"),
        ({"node_labels": {"cloud.google.com/gke-nodepool": "gpu-pool"}}, "managed", "gke"),
        (
            {"node_labels": [{"kubernetes.azure.com/cluster": "MC_rg"}], "provider_ids": ["azure:///sub/x"]},
            "managed",
            "aks",
        ),
        ({"server_git_version": "v1.37.2-eks-1a2b3c4"}, "managed", "eks"),
        ({"provider_ids": ["gce://project/zone/node"], "manifests_dir_exists": True}, "managed", "gke"),
        ({}, "unknown", None),
    ],
)
def test_detect_control_plane(hints, kind, provider):
    result = cpf.detect_control_plane(hints)
    assert (result["kind"], result["provider"]) == (kind, provider)
    assert result["managed"] is (kind == "managed")
    assert result["message"]


def test_detect_managed_message_names_the_provider():
    strong = cpf.detect_control_plane({"node_labels": [{"eks.amazonaws.com/nodegroup": "gpu"}]})
    assert strong["provider_name"] == "Amazon EKS"
    assert "managed by Amazon EKS" in strong["message"] and "cannot be changed" in strong["message"]
    weak = cpf.detect_control_plane({"provider_ids": ["aws:///us-east-1a/i-0abc"]})
    assert "probably managed by Amazon EKS" in weak["message"]


# ---------------------------------------------------------------------------------------------
# module gpusplit.k8s.static_pod_flags


def run_module(main, args, capsys):
    with patch_module_args(args), pytest.raises(SystemExit) as exc:
        main()
    return exc.value.code, json.loads(capsys.readouterr().out)


@pytest.fixture
def manifests(tmp_path):
    directory = tmp_path / "etc-kubernetes" / "manifests"
    directory.mkdir(parents=True)
    for component in COMPONENTS:
        shutil.copy(V1BETA4 / f"{component}.yaml", directory / f"{component}.yaml")
        os.chmod(directory / f"{component}.yaml", 0o600)
    return directory


APISERVER_ARGS = {
    "feature_gates": {"GenericWorkload": True},
    "runtime_config": {"scheduling.k8s.io/v1beta1": "true"},
    "validate_version": "auto",
}


def test_module_check_mode_changes_nothing(manifests, tmp_path, capsys):
    path = manifests / "kube-apiserver.yaml"
    before = read(path)
    args = dict(
        APISERVER_ARGS,
        path=str(path),
        backup_dir=str(tmp_path / "backup"),
        _ansible_check_mode=True,
        _ansible_diff=True,
    )
    rc, out = run_module(static_pod_flags.main, args, capsys)
    assert rc == 0 and out["changed"] is True
    assert read(path) == before and not (tmp_path / "backup").exists()
    assert out["diff"]["before"] == before and "--feature-gates=GenericWorkload=true" in out["diff"]["after"]
    assert out["needed_runtime_config"] == {"scheduling.k8s.io/v1beta1": "true"}
    assert "backup_file" not in out


def test_module_real_run_backup_outside_and_idempotent(manifests, tmp_path, capsys):
    path = manifests / "kube-apiserver.yaml"
    before = read(path)
    backup_dir = tmp_path / "backup"
    args = dict(APISERVER_ARGS, path=str(path), backup_dir=str(backup_dir))
    rc, out = run_module(static_pod_flags.main, args, capsys)
    assert rc == 0 and out["changed"] is True
    assert out["previous_feature_gates"] == {} and out["feature_gates"] == {"GenericWorkload": True}
    assert out["runtime_config"] == {"scheduling.k8s.io/v1beta1": "true"}
    backup = Path(out["backup_file"])
    assert backup.parent == backup_dir and read(backup) == before
    after = read(path)
    assert (
        after
        == cpf.edit_static_pod_manifest(
            before, APISERVER_ARGS["feature_gates"], APISERVER_ARGS["runtime_config"]
        )["text"]
    )
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert sorted(p.name for p in manifests.iterdir()) == sorted(
        f"{c}.yaml" for c in COMPONENTS
    )  # no temp left
    rc, out = run_module(static_pod_flags.main, args, capsys)
    assert rc == 0 and out["changed"] is False and "backup_file" not in out
    assert read(path) == after and len(list(backup_dir.iterdir())) == 1


@pytest.mark.parametrize("where", ["same", "inside"])
def test_module_refuses_backup_dir_in_manifest_dir(manifests, capsys, where):
    path = manifests / "kube-scheduler.yaml"
    before = read(path)
    backup_dir = manifests if where == "same" else manifests / "backups"
    rc, out = run_module(
        static_pod_flags.main,
        {"path": str(path), "feature_gates": {"GenericWorkload": True}, "backup_dir": str(backup_dir)},
        capsys,
    )
    assert rc == 1 and "kubelet runs every file there" in out["msg"]
    assert read(path) == before and not (manifests / "backups").exists()


def test_module_requires_backup_dir_only_when_changing(manifests, capsys):
    path = manifests / "kube-scheduler.yaml"
    rc, out = run_module(
        static_pod_flags.main, {"path": str(path), "feature_gates": {"GenericWorkload": True}}, capsys
    )
    assert rc == 1 and "backup_dir is required" in out["msg"]
    rc, out = run_module(static_pod_flags.main, {"path": str(path)}, capsys)
    assert rc == 0 and out["changed"] is False


def test_module_validation_refuses_before_writing(manifests, tmp_path, capsys):
    path = manifests / "kube-scheduler.yaml"
    before = read(path)
    args = {
        "path": str(path),
        "feature_gates": {"GenericWorkload": True, "GangScheduling": True},
        "backup_dir": str(tmp_path / "backup"),
        "validate_version": "auto",
    }
    rc, out = run_module(static_pod_flags.main, args, capsys)
    assert rc == 1 and "removed in 1.37, merged into GenericWorkload" in out["msg"]
    assert read(path) == before
    rc, out = run_module(static_pod_flags.main, dict(args, validate_version="1.36"), capsys)
    assert rc == 0 and out["changed"] is True


def test_module_validation_of_runtime_config(manifests, tmp_path, capsys):
    args = {
        "path": str(manifests / "kube-apiserver.yaml"),
        "runtime_config": {"scheduling.k8s.io/v1alpha2": "true"},
        "backup_dir": str(tmp_path / "backup"),
        "validate_version": "1.37",
        "_ansible_check_mode": True,
    }
    rc, out = run_module(static_pod_flags.main, args, capsys)
    assert rc == 1 and "scheduling.k8s.io/v1alpha2 that has not been registered" in out["msg"]


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


def test_module_refuses_runtime_config_outside_the_apiserver(manifests, tmp_path, capsys):
    args = {
        "path": str(manifests / "kube-scheduler.yaml"),
        "runtime_config": {"scheduling.k8s.io/v1beta1": "true"},
        "backup_dir": str(tmp_path / "backup"),
    }
    rc, out = run_module(static_pod_flags.main, args, capsys)
    assert rc == 1 and "kube-apiserver only" in out["msg"]


# ---------------------------------------------------------------------------------------------
# k3s / rke2: merging into gpusplit's drop-in, and what the other config files do to it

HEADER = "Written by gpusplit"


def test_merge_into_no_dropin_is_the_rendered_one():
    gates, rc = (
        {"GenericWorkload": True, "DRAPartitionableDevices": True},
        {"scheduling.k8s.io/v1beta1": True},
    )
    merged = cpf.merge_rancher_dropin(None, gates, rc, header=HEADER)
    assert merged["text"] == cpf.render_rancher_dropin(gates, rc, header=HEADER)
    assert merged["changed"] is True and merged["before"] == {}
    assert merged["after"]["kube-apiserver"] == {
        "feature_gates": {"DRAPartitionableDevices": True, "GenericWorkload": True},
        "runtime_config": {"scheduling.k8s.io/v1beta1": "true"},
    }
    assert merged["after"]["kube-scheduler"]["runtime_config"] == {}


def test_merge_keeps_gates_an_earlier_run_wrote():
    earlier = cpf.render_rancher_dropin(
        {"DRAPartitionableDevices": True, "GenericWorkload": False},
        {"resource.k8s.io/v1beta2": "true"},
        header=HEADER,
    )
    merged = cpf.merge_rancher_dropin(
        earlier,
        {"GenericWorkload": True, "DRADeviceTaints": True},
        {"scheduling.k8s.io/v1beta1": "true"},
        header=HEADER,
    )
    assert merged["text"] == (
        "# Written by gpusplit\n"
        "kube-apiserver-arg+:\n"
        # same name replaced in place, the others kept, new names appended sorted
        "  - feature-gates=DRAPartitionableDevices=true,GenericWorkload=true,DRADeviceTaints=true\n"
        "  - runtime-config=resource.k8s.io/v1beta2=true,scheduling.k8s.io/v1beta1=true\n"
        "kube-scheduler-arg+:\n"
        "  - feature-gates=DRAPartitionableDevices=true,GenericWorkload=true,DRADeviceTaints=true\n"
        "kube-controller-manager-arg+:\n"
        "  - feature-gates=DRAPartitionableDevices=true,GenericWorkload=true,DRADeviceTaints=true\n"
    )
    assert merged["before"]["kube-scheduler"]["feature_gates"] == {
        "DRAPartitionableDevices": True,
        "GenericWorkload": False,
    }
    # the same request again changes nothing, byte for byte
    again = cpf.merge_rancher_dropin(
        merged["text"], {"GenericWorkload": True}, {"scheduling.k8s.io/v1beta1": "true"}, header=HEADER
    )
    assert again["changed"] is False and again["text"] == merged["text"]


def test_merge_keeps_other_args_and_the_key_form():
    existing = (
        "# an older header\n"
        "kube-scheduler-arg:\n"
        "  - v=2\n"
        "  - --feature-gates=A=true\n"
        "  - feature-gates=C=false\n"
        "kube-apiserver-arg+: feature-gates=A=true\n"
    )
    merged = cpf.merge_rancher_dropin(existing, {"B": True, "A": False}, remove_feature_gates=["C"])
    assert merged["text"] == (
        "kube-apiserver-arg+:\n"
        "  - feature-gates=A=false,B=true\n"
        "kube-scheduler-arg:\n"
        "  - v=2\n"
        "  - feature-gates=A=false,B=true\n"
        "kube-controller-manager-arg+:\n"
        "  - feature-gates=A=false,B=true\n"
    )
    # a gate removed until nothing is left takes the component's entry with it
    emptied = cpf.merge_rancher_dropin(
        "kube-controller-manager-arg+:\n  - feature-gates=A=true\n", {}, remove_feature_gates=["A"]
    )
    assert emptied["text"] == "" and emptied["changed"] is True


@pytest.mark.parametrize(
    ("text", "said"),
    [
        (
            "token: s3cret\nkube-apiserver-arg+: [feature-gates=A=true]\n",
            "holds 'token', which gpusplit does not write",
        ),
        ("kubelet-arg+: [feature-gates=A=true]\n", "holds 'kubelet-arg+'"),
        (
            "kube-apiserver-arg: [v=2]\nkube-apiserver-arg+: [feature-gates=A=true]\n",
            "sets both 'kube-apiserver-arg' and 'kube-apiserver-arg+'",
        ),
        ("kube-apiserver-arg+:\n  - {feature-gates: A=true}\n", "every item must be a 'flag=value' string"),
        ("kube-apiserver-arg+:\n  - feature-gates=A=maybe\n", "invalid value of A=maybe: not a boolean"),
        ("- kube-apiserver-arg+\n", "must be a YAML map of k3s/rke2 options, not a list"),
        ("kube-apiserver-arg+: [a\n", "is not valid YAML"),
    ],
    ids=["other-key", "kubelet", "both-forms", "nested-item", "bad-bool", "not-a-map", "bad-yaml"],
)
def test_merge_refuses_a_dropin_it_cannot_rewrite_safely(text, said):
    with pytest.raises(cpf.FlagEditError, match="50-gpusplit.yaml") as exc:
        cpf.merge_rancher_dropin(text, {"GenericWorkload": True}, what="50-gpusplit.yaml")
    assert said in str(exc.value)


def test_merge_refuses_an_unknown_component():
    with pytest.raises(cpf.FlagEditError, match="unknown control-plane component.*kubelet"):
        cpf.merge_rancher_dropin(None, {"A": True}, components=("kube-apiserver", "kubelet"))


def test_dropin_problems_name_the_file_that_undoes_it():
    ours = cpf.render_rancher_dropin({"GenericWorkload": True}, {"scheduling.k8s.io/v1beta1": "true"})
    name = "config.yaml.d/50-gpusplit-feature-gates.yaml"
    main = ("config.yaml", "kube-apiserver-arg:\n  - feature-gates=GenericWorkload=false\n  - v=2\n")
    # config.yaml is read first: the drop-in's later value wins there, nothing to report
    assert cpf.rancher_dropin_problems([main], name, ours, {"GenericWorkload": True}) == []
    later_plain = ("config.yaml.d/90-site.yaml", "kube-scheduler-arg:\n  - v=4\n")
    later_gate = (
        "config.yaml.d/70-site.yaml",
        "kube-apiserver-arg+:\n  - runtime-config=scheduling.k8s.io/v1beta1=false\n",
    )
    earlier = (
        "config.yaml.d/10-site.yaml",
        "kube-controller-manager-arg:\n  - feature-gates=GenericWorkload=false\n",
    )
    problems = cpf.rancher_dropin_problems(
        [later_plain, earlier, main, later_gate, (name, "stale")],
        name,
        ours,
        {"GenericWorkload": True},
        {"scheduling.k8s.io/v1beta1": "true"},
    )
    assert problems == [
        "kube-apiserver would run with runtime-config scheduling.k8s.io/v1beta1=false instead of true: "
        f"config.yaml.d/70-site.yaml (read after {name}) sets scheduling.k8s.io/v1beta1=false for "
        "kube-apiserver, and the later value wins",
        "kube-scheduler would run with feature-gates GenericWorkload=(unset) instead of true: "
        f"config.yaml.d/90-site.yaml (read after {name}) sets 'kube-scheduler-arg' without '+', which "
        "replaces the args of the files before it",
    ]


def test_rancher_read_order_and_errors_name_the_file():
    files = [("config.yaml.d/b.yml", ""), ("config.yaml", ""), ("config.yaml.d/a.yaml", "")]
    assert [n for n, _t in cpf.rancher_read_order(files)] == [
        "config.yaml",
        "config.yaml.d/a.yaml",
        "config.yaml.d/b.yml",
    ]
    with pytest.raises(cpf.FlagEditError, match="config.yaml.d/b.yml is not valid YAML"):
        cpf.rancher_component_flags(["", "a: [b\n"], ["config.yaml", "config.yaml.d/b.yml"])


# ---------------------------------------------------------------------------------------------
# module gpusplit.k8s.static_pod_flags: restore_from (the rollback)


def manifest_dir_names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def test_module_restore_puts_the_backup_back_through_a_dot_file(manifests, tmp_path, capsys, monkeypatch):
    path = manifests / "kube-apiserver.yaml"
    before = read(path)
    rc, out = run_module(
        static_pod_flags.main, dict(APISERVER_ARGS, path=str(path), backup_dir=str(tmp_path / "b")), capsys
    )
    assert rc == 0 and out["changed"] is True
    backup, edited = out["backup_file"], read(path)

    # check mode: the diff, and nothing written
    args = {"path": str(path), "restore_from": backup}
    rc, out = run_module(
        static_pod_flags.main, dict(args, _ansible_check_mode=True, _ansible_diff=True), capsys
    )
    assert rc == 0 and out["changed"] is True
    assert out["diff"]["before"] == edited and out["diff"]["after"] == before and read(path) == edited

    # the real run: every file that ever appears in the manifest directory starts with a dot
    seen = []
    real_mkstemp = static_pod_flags.write_atomic.__globals__["tempfile"].mkstemp

    def spy(*a, **kw):
        fd, name = real_mkstemp(*a, **kw)
        seen.append(name)
        return fd, name

    monkeypatch.setattr(static_pod_flags.write_atomic.__globals__["tempfile"], "mkstemp", spy)
    rc, out = run_module(static_pod_flags.main, args, capsys)
    assert rc == 0 and out["changed"] is True and out["restored_from"] == backup
    assert out["previous_feature_gates"] == {"GenericWorkload": True} and out["feature_gates"] == {}
    assert read(path) == before
    assert seen and all(Path(n).parent == manifests and Path(n).name.startswith(".") for n in seen)
    assert manifest_dir_names(manifests) == sorted(f"{c}.yaml" for c in COMPONENTS)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    rc, out = run_module(static_pod_flags.main, args, capsys)
    assert rc == 0 and out["changed"] is False


def test_module_restore_repairs_a_broken_manifest_and_a_missing_one(manifests, tmp_path, capsys):
    path = manifests / "kube-scheduler.yaml"
    backup = tmp_path / "kube-scheduler.yaml.bak"
    shutil.copy2(path, backup)
    good = read(path)
    path.write_text("spec: [broken\n")
    rc, out = run_module(static_pod_flags.main, {"path": str(path), "restore_from": str(backup)}, capsys)
    assert rc == 0 and out["changed"] is True and read(path) == good
    path.unlink()
    rc, out = run_module(static_pod_flags.main, {"path": str(path), "restore_from": str(backup)}, capsys)
    assert rc == 0 and read(path) == good and stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert manifest_dir_names(manifests) == sorted(f"{c}.yaml" for c in COMPONENTS)


@pytest.mark.parametrize("case", ["other-component", "with-gates", "missing", "not-a-pod", "in-manifest-dir"])
def test_module_restore_refusals_change_nothing(manifests, tmp_path, capsys, case):
    path = manifests / "kube-apiserver.yaml"
    before = read(path)
    backup = tmp_path / "backup.yaml"
    args = {"path": str(path), "restore_from": str(backup)}
    said = {
        "other-component": "runs kube-scheduler but",
        "with-gates": "restore_from puts a whole manifest back; drop feature_gates",
        "missing": "does not exist or is not a file",
        "not-a-pod": "is no static-pod manifest (not a Pod manifest)",
        "in-manifest-dir": "lies in the manifest directory",
    }[case]
    if case == "other-component":
        shutil.copy(manifests / "kube-scheduler.yaml", backup)
    elif case == "with-gates":
        shutil.copy(path, backup)
        args["feature_gates"] = {"GenericWorkload": True}
    elif case == "not-a-pod":
        backup.write_text("kind: ConfigMap\n")
    elif case == "in-manifest-dir":
        args["restore_from"] = str(manifests / "kube-scheduler.yaml")
    rc, out = run_module(static_pod_flags.main, args, capsys)
    assert rc == 1 and said in out["msg"], out["msg"]
    assert read(path) == before


# ---------------------------------------------------------------------------------------------
# module gpusplit.k8s.rancher_config_dropin


@pytest.fixture
def k3s_dir(tmp_path):
    directory = tmp_path / "etc-rancher-k3s"
    directory.mkdir()
    (directory / "config.yaml").write_text("write-kubeconfig-mode: '0600'\nkube-apiserver-arg:\n  - v=2\n")
    return directory


def dropin_args(k3s_dir, tmp_path, **kw):
    return {
        "config_dir": str(k3s_dir),
        "backup_dir": str(tmp_path / "backups"),
        "header": HEADER,
        **kw,
    }


def test_rancher_module_writes_merges_and_is_idempotent(k3s_dir, tmp_path, capsys):
    dropin = k3s_dir / "config.yaml.d" / "50-gpusplit-feature-gates.yaml"
    first = dropin_args(k3s_dir, tmp_path, feature_gates={"DRAPartitionableDevices": True})
    rc, out = run_module(
        rancher_config_dropin.main, dict(first, _ansible_check_mode=True, _ansible_diff=True), capsys
    )
    assert rc == 0 and out["changed"] is True and out["existed"] is False
    assert out["diff"]["before"] == "" and "DRAPartitionableDevices=true" in out["diff"]["after"]
    assert not dropin.exists() and not (tmp_path / "backups").exists()

    rc, out = run_module(rancher_config_dropin.main, first, capsys)
    assert rc == 0 and out["changed"] is True and "backup_file" not in out
    assert read(dropin) == cpf.render_rancher_dropin({"DRAPartitionableDevices": True}, header=HEADER)
    assert stat.S_IMODE(os.stat(dropin).st_mode) == 0o600
    earlier = read(dropin)

    # a second run with another gate keeps the first one
    second = dropin_args(
        k3s_dir,
        tmp_path,
        feature_gates={"GenericWorkload": True},
        runtime_config={"scheduling.k8s.io/v1beta1": "true"},
    )
    rc, out = run_module(rancher_config_dropin.main, second, capsys)
    assert rc == 0 and out["changed"] is True and out["existed"] is True
    assert read(Path(out["backup_file"])) == earlier
    assert out["effective_flags"]["kube-apiserver"] == {
        "feature_gates": {"DRAPartitionableDevices": True, "GenericWorkload": True},
        "runtime_config": {"scheduling.k8s.io/v1beta1": "true"},
    }
    assert out["flags"]["kube-scheduler"]["feature_gates"] == {
        "DRAPartitionableDevices": True,
        "GenericWorkload": True,
    }
    assert manifest_dir_names(dropin.parent) == [dropin.name]  # no temporary file left
    rc, out = run_module(rancher_config_dropin.main, second, capsys)
    assert rc == 0 and out["changed"] is False and "backup_file" not in out
    assert len(list((tmp_path / "backups").iterdir())) == 1


def test_rancher_module_refuses_a_dropin_that_a_later_file_undoes(k3s_dir, tmp_path, capsys):
    (k3s_dir / "config.yaml.d").mkdir()
    (k3s_dir / "config.yaml.d" / "90-site.yml").write_text("kube-controller-manager-arg:\n  - v=3\n")
    rc, out = run_module(
        rancher_config_dropin.main,
        dropin_args(k3s_dir, tmp_path, feature_gates={"GenericWorkload": True}),
        capsys,
    )
    assert rc == 1
    assert "would not take effect, nothing was written" in out["msg"]
    assert (
        "config.yaml.d/90-site.yml (read after config.yaml.d/50-gpusplit-feature-gates.yaml) sets "
        "'kube-controller-manager-arg' without '+'" in out["msg"]
    )
    assert manifest_dir_names(k3s_dir / "config.yaml.d") == ["90-site.yml"]


def test_rancher_module_rollbacks(k3s_dir, tmp_path, capsys):
    dropin = k3s_dir / "config.yaml.d" / "50-gpusplit-feature-gates.yaml"
    rc, out = run_module(
        rancher_config_dropin.main,
        dropin_args(k3s_dir, tmp_path, feature_gates={"GenericWorkload": False}),
        capsys,
    )
    assert rc == 0 and out["existed"] is False
    earlier = read(dropin)
    rc, out = run_module(
        rancher_config_dropin.main, dropin_args(k3s_dir, tmp_path, feature_gates={"NoSuchGate": True}), capsys
    )
    backup = out["backup_file"]
    # put back: the same bytes, through a dot-file; a second restore changes nothing
    restore = {"config_dir": str(k3s_dir), "restore_from": backup, "_ansible_diff": True}
    rc, out = run_module(rancher_config_dropin.main, restore, capsys)
    assert rc == 0 and out["changed"] is True and read(dropin) == earlier
    assert "NoSuchGate=true" in out["diff"]["before"] and out["flags"]["kube-apiserver"]["feature_gates"] == {
        "GenericWorkload": False
    }
    assert manifest_dir_names(dropin.parent) == [dropin.name]
    rc, out = run_module(rancher_config_dropin.main, restore, capsys)
    assert rc == 0 and out["changed"] is False
    # removed (there was none before), check mode first
    absent = {"config_dir": str(k3s_dir), "state": "absent"}
    rc, out = run_module(rancher_config_dropin.main, dict(absent, _ansible_check_mode=True), capsys)
    assert rc == 0 and out["changed"] is True and dropin.exists()
    rc, out = run_module(rancher_config_dropin.main, absent, capsys)
    assert rc == 0 and out["changed"] is True and not dropin.exists()
    assert out["effective_flags"] == {}
    rc, out = run_module(rancher_config_dropin.main, absent, capsys)
    assert rc == 0 and out["changed"] is False


@pytest.mark.parametrize(
    "case", ["restore-missing", "restore-with-gates", "backup-inside", "bad-name", "foreign-key"]
)
def test_rancher_module_refusals_change_nothing(k3s_dir, tmp_path, capsys, case):
    dropins = k3s_dir / "config.yaml.d"
    dropins.mkdir()
    dropin = dropins / "50-gpusplit-feature-gates.yaml"
    dropin.write_text(cpf.render_rancher_dropin({"GenericWorkload": False}))
    before = read(dropin)
    args = dropin_args(k3s_dir, tmp_path, feature_gates={"GenericWorkload": True})
    if case == "restore-missing":
        args = {"config_dir": str(k3s_dir), "restore_from": str(tmp_path / "nope")}
        said = "does not exist or is not a file"
    elif case == "restore-with-gates":
        args["restore_from"] = str(dropin)
        said = "restore_from puts a whole drop-in back; drop feature_gates"
    elif case == "backup-inside":
        args["backup_dir"] = str(dropins / "bak")
        said = "k3s/rke2 read the files there"
    elif case == "bad-name":
        args["name"] = "50-gpusplit.conf"
        said = "must be a file name ending in .yaml or .yml"
    else:
        dropin.write_text(before + "token: s3cret\n")
        before = read(dropin)
        said = "holds 'token', which gpusplit does not write there"
    rc, out = run_module(rancher_config_dropin.main, args, capsys)
    assert rc == 1 and said in out["msg"], out["msg"]
    assert read(dropin) == before and manifest_dir_names(dropins) == [dropin.name]
