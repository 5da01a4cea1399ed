"""Control-plane flag editing (plugins/module_utils/control_plane_flags.py) on real kubeadm output,
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

from ansible_collections.gpusplit.k8s.plugins.module_utils import control_plane_flags as cpf
from ansible_collections.gpusplit.k8s.plugins.modules import kubeadm_config_flags, static_pod_flags

ROOT = Path(__file__).resolve().parent.parent.parent
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
