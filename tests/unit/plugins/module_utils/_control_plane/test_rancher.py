"""k3s/rke2 drop-ins (plugins/module_utils/_control_plane/rancher.py): rendering, merging, what the other
config files do to them, and the rancher_config_dropin module."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from ansible_collections.gpusplit.k8s.plugins.module_utils._control_plane.flag_values import (
    FlagEditError,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._control_plane.rancher import (
    merge_rancher_dropin,
    rancher_component_flags,
    rancher_dropin_problems,
    rancher_read_order,
    render_rancher_dropin,
)
from ansible_collections.gpusplit.k8s.plugins.modules import (
    rancher_config_dropin,
)
from ansible_collections.gpusplit.k8s.tests.unit.plugins.module_utils._control_plane.cp_testdata import (
    HEADER,
    dropin_args,
    manifest_dir_names,
    read,
    run_module,
)

# ---------------------------------------------------------------------------------------------
# k3s / rke2


def test_rancher_dropin_rendering_for_generic_workload():
    text = render_rancher_dropin(
        {"GenericWorkload": True}, {"scheduling.k8s.io/v1beta1": "true"}, header="Written by gpusplit."
    )
    assert text == (
        "# Written by gpusplit.\n"
        "kube-apiserver-arg+:\n"
        "  - feature-gates=GenericWorkload=true\n"
        "  - runtime-config=scheduling.k8s.io/v1beta1=true\n"
        "kube-scheduler-arg+:\n"
        "  - feature-gates=GenericWorkload=true\n"
        "kube-controller-manager-arg+:\n"
        "  - feature-gates=GenericWorkload=true\n"
    )
    # what k3s ends up passing, with a config.yaml that already sets a gate of its own
    config = "kube-apiserver-arg:\n  - feature-gates=DRAPartitionableDevices=false\n"
    flags = rancher_component_flags([config, text])
    assert flags["kube-apiserver"] == {
        "feature_gates": {"DRAPartitionableDevices": False, "GenericWorkload": True},
        "runtime_config": {"scheduling.k8s.io/v1beta1": "true"},
    }
    assert flags["kube-scheduler"]["feature_gates"] == {"GenericWorkload": True}
    assert flags["kube-controller-manager"]["runtime_config"] == {}


def test_rancher_merge_semantics():
    base = "kube-apiserver-arg:\n  - audit-log-maxage=7\n  - feature-gates=Foo=true\nkube-scheduler-arg:\n  - v=2\n"
    dropin = render_rancher_dropin({"GenericWorkload": True}, {"scheduling.k8s.io/v1beta1": "true"})
    flags = rancher_component_flags([base, dropin])
    assert flags["kube-apiserver"] == {
        "feature_gates": {"Foo": True, "GenericWorkload": True},
        "runtime_config": {"scheduling.k8s.io/v1beta1": "true"},
    }
    assert flags["kube-scheduler"]["feature_gates"] == {"GenericWorkload": True}
    # a plain key in a later file replaces the whole list from config.yaml
    replaced = rancher_component_flags([base, render_rancher_dropin({"G": True}, append=False)])
    assert replaced["kube-apiserver"]["feature_gates"] == {"G": True}


# ---------------------------------------------------------------------------------------------
# k3s / rke2: merging into gpusplit's drop-in, and what the other config files do to it


def test_merge_into_no_dropin_is_the_rendered_one():
    gates, rc = (
        {"GenericWorkload": True, "DRAPartitionableDevices": True},
        {"scheduling.k8s.io/v1beta1": True},
    )
    merged = merge_rancher_dropin(None, gates, rc, header=HEADER)
    assert merged["text"] == render_rancher_dropin(gates, rc, header=HEADER)
    assert merged["changed"] is True and merged["before"] == {}
    assert merged["after"]["kube-apiserver"] == {
        "feature_gates": {"DRAPartitionableDevices": True, "GenericWorkload": True},
        "runtime_config": {"scheduling.k8s.io/v1beta1": "true"},
    }
    assert merged["after"]["kube-scheduler"]["runtime_config"] == {}


def test_merge_keeps_gates_an_earlier_run_wrote():
    earlier = render_rancher_dropin(
        {"DRAPartitionableDevices": True, "GenericWorkload": False},
        {"resource.k8s.io/v1beta2": "true"},
        header=HEADER,
    )
    merged = merge_rancher_dropin(
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
    again = merge_rancher_dropin(
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
    merged = merge_rancher_dropin(existing, {"B": True, "A": False}, remove_feature_gates=["C"])
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
    emptied = merge_rancher_dropin(
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
    with pytest.raises(FlagEditError, match="50-gpusplit.yaml") as exc:
        merge_rancher_dropin(text, {"GenericWorkload": True}, what="50-gpusplit.yaml")
    assert said in str(exc.value)


def test_merge_refuses_an_unknown_component():
    with pytest.raises(FlagEditError, match="unknown control-plane component.*kubelet"):
        merge_rancher_dropin(None, {"A": True}, components=("kube-apiserver", "kubelet"))


def test_dropin_problems_name_the_file_that_undoes_it():
    ours = render_rancher_dropin({"GenericWorkload": True}, {"scheduling.k8s.io/v1beta1": "true"})
    name = "config.yaml.d/50-gpusplit-feature-gates.yaml"
    main = ("config.yaml", "kube-apiserver-arg:\n  - feature-gates=GenericWorkload=false\n  - v=2\n")
    # config.yaml is read first: the drop-in's later value wins there, nothing to report
    assert rancher_dropin_problems([main], name, ours, {"GenericWorkload": True}) == []
    later_plain = ("config.yaml.d/90-site.yaml", "kube-scheduler-arg:\n  - v=4\n")
    later_gate = (
        "config.yaml.d/70-site.yaml",
        "kube-apiserver-arg+:\n  - runtime-config=scheduling.k8s.io/v1beta1=false\n",
    )
    earlier = (
        "config.yaml.d/10-site.yaml",
        "kube-controller-manager-arg:\n  - feature-gates=GenericWorkload=false\n",
    )
    problems = rancher_dropin_problems(
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
    assert [n for n, _t in rancher_read_order(files)] == [
        "config.yaml",
        "config.yaml.d/a.yaml",
        "config.yaml.d/b.yml",
    ]
    with pytest.raises(FlagEditError, match="config.yaml.d/b.yml is not valid YAML"):
        rancher_component_flags(["", "a: [b\n"], ["config.yaml", "config.yaml.d/b.yml"])


# ---------------------------------------------------------------------------------------------
# module gpusplit.k8s.rancher_config_dropin


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
    assert read(dropin) == render_rancher_dropin({"DRAPartitionableDevices": True}, header=HEADER)
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


def test_rancher_module_rollbacks(k3s_dir, tmp_path, capsys, module_warnings):
    dropin = k3s_dir / "config.yaml.d" / "50-gpusplit-feature-gates.yaml"
    rc, out = run_module(
        rancher_config_dropin.main,
        dropin_args(k3s_dir, tmp_path, feature_gates={"GenericWorkload": False}),
        capsys,
    )
    assert rc == 0 and out["existed"] is False
    earlier = read(dropin)
    # a gate no release knows, written unchecked (validate_version=off, as the role's lab bypass does)
    rc, out = run_module(
        rancher_config_dropin.main,
        dropin_args(k3s_dir, tmp_path, feature_gates={"NoSuchGate": True}, validate_version="off"),
        capsys,
    )
    assert rc == 0 and out["validated_version"] is None
    assert any("validate_version=off" in w for w in module_warnings)
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
    dropin.write_text(render_rancher_dropin({"GenericWorkload": False}))
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
