"""Bad input to the control-plane file modules (issue 18): nothing passes silently, nothing wrong is
written, every refusal names its file or field and says what to fix, and no Python exception text
reaches the user. One test per reported case, and one per class trying a sibling the report does not
name. Also issue 13: the modules fail through missing_required_lib when PyYAML is missing."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ansible_collections.gpusplit.k8s.plugins.module_utils._control_plane import module_io
from ansible_collections.gpusplit.k8s.plugins.module_utils._control_plane.flag_values import (
    FlagEditError,
    norm_gates,
    norm_runtime_config,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._host import files as host_files
from ansible_collections.gpusplit.k8s.plugins.modules import (
    control_plane_health,
    feature_gate_preflight,
    kubeadm_config_flags,
    rancher_config_dropin,
    static_pod_flags,
)
from ansible_collections.gpusplit.k8s.tests.unit.plugins.module_utils._control_plane.cp_testdata import (
    COMPONENTS,
    ROOT,
    V1BETA4,
    configmap_cluster_configuration,
    dropin_args,
    manifest_dir_names,
    read,
    run_module,
)

# Python's own words for a bug: none of them may reach a user for bad input
PYTHON_TEXT = (
    "Traceback",
    "object has no attribute",
    "codec can't",
    "[Errno",
    "unhashable",
    "is not iterable",
    "not subscriptable",
    "unsupported operand",
    "<unicode string>",
    "KeyError",
)


def assert_named_refusal(rc, out, *names):
    """Failed, with a message that names each of ``names`` and holds no Python exception text."""
    assert rc == 1 and out["failed"] is True, out
    for name in names:
        assert str(name) in out["msg"], out["msg"]
    assert not any(text in out["msg"] for text in PYTHON_TEXT), out["msg"]


def gate_edit(path, tmp_path, **kw):
    return {"path": str(path), "backup_dir": str(tmp_path / "backups"), **kw}


# ---------------------------------------------------------------------------------------------
# case 3: static_pod_flags validates by default (validate_version: auto from the image tag)


def test_a_removed_gate_is_refused_without_validate_version(manifests, tmp_path, capsys):
    """GangScheduling (removed in 1.37, merged into GenericWorkload) into the v1.37.2 kube-apiserver."""
    path = manifests / "kube-apiserver.yaml"
    before = read(path)
    rc, out = run_module(
        static_pod_flags.main, gate_edit(path, tmp_path, feature_gates={"GangScheduling": True}), capsys
    )
    assert_named_refusal(rc, out, path, "GangScheduling", "removed in 1.37, merged into GenericWorkload")
    assert out["validated_version"] == "1.37"
    assert read(path) == before and not (tmp_path / "backups").exists()


def test_sibling_a_mistyped_gate_is_refused_by_default_with_a_suggestion(manifests, tmp_path, capsys):
    path = manifests / "kube-scheduler.yaml"
    before = read(path)
    rc, out = run_module(
        static_pod_flags.main, gate_edit(path, tmp_path, feature_gates={"GenericWorkLoad": True}), capsys
    )
    assert_named_refusal(rc, out, path, "GenericWorkLoad", "Did you mean GenericWorkload?")
    assert read(path) == before


def test_sibling_a_tag_without_version_is_refused_unless_the_check_is_turned_off(
    manifests, tmp_path, capsys, module_warnings
):
    path = manifests / "kube-controller-manager.yaml"
    path.write_text(read(path).replace(":v1.37.2", ":latest"))
    before = read(path)
    args = gate_edit(path, tmp_path, feature_gates={"GenericWorkload": True})
    rc, out = run_module(static_pod_flags.main, args, capsys)
    assert_named_refusal(
        rc, out, path, "registry.k8s.io/kube-controller-manager:latest", "validate_version=off"
    )
    assert read(path) == before
    # explicit: a version, or off (which warns)
    rc, out = run_module(
        static_pod_flags.main, dict(args, validate_version="1.37.2", _ansible_check_mode=True), capsys
    )
    assert rc == 0 and out["changed"] is True and out["validated_version"] == "1.37"
    rc, out = run_module(static_pod_flags.main, dict(args, validate_version="off"), capsys)
    assert rc == 0 and out["changed"] is True and out["validated_version"] is None
    assert "--feature-gates=GenericWorkload=true" in read(path)
    assert any(f"{path}: validate_version=off" in w for w in module_warnings)


def test_sibling_kubeadm_config_validates_by_default_against_kubernetes_version(capsys):
    text = configmap_cluster_configuration(V1BETA4)
    rc, out = run_module(
        kubeadm_config_flags.main, {"content": text, "feature_gates": {"GangScheduling": True}}, capsys
    )
    assert_named_refusal(rc, out, "content", "GangScheduling", "removed in 1.37")
    labelled = text.replace("kubernetesVersion: v1.37.2", "kubernetesVersion: stable-1")
    rc, out = run_module(
        kubeadm_config_flags.main, {"content": labelled, "feature_gates": {"GenericWorkload": True}}, capsys
    )
    assert_named_refusal(rc, out, "kubernetesVersion", "'stable-1'", "validate_version=off")


def fake_k3s(tmp_path, monkeypatch, output="k3s version v1.37.2+k3s1 (0123abcd)\ngo version go1.26.1\n"):
    """A ``k3s`` on PATH that prints what ``k3s --version`` prints (there is no k3s here)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / "k3s"
    script.write_text(f"#!/bin/sh\ncat <<'EOF'\n{output}EOF\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")


def test_sibling_rancher_dropin_validates_by_default_with_k3s_version(k3s_dir, tmp_path, capsys, monkeypatch):
    fake_k3s(tmp_path, monkeypatch)
    args = dropin_args(k3s_dir, tmp_path, feature_gates={"GangScheduling": True}, validate_version="auto")
    rc, out = run_module(rancher_config_dropin.main, args, capsys)
    assert_named_refusal(rc, out, "50-gpusplit-feature-gates.yaml", "GangScheduling", "removed in 1.37")
    assert not (k3s_dir / "config.yaml.d").exists()
    rc, out = run_module(
        rancher_config_dropin.main, dict(args, feature_gates={"GenericWorkload": True}), capsys
    )
    assert rc == 0 and out["validated_version"] == "1.37" and out["changed"] is True


def test_sibling_rancher_auto_without_a_k3s_binary_is_refused(k3s_dir, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    monkeypatch.setattr(
        rancher_config_dropin.AnsibleModule, "get_bin_path", lambda self, name, *a, **kw: None
    )
    args = dropin_args(k3s_dir, tmp_path, feature_gates={"GenericWorkload": True}, validate_version="auto")
    rc, out = run_module(rancher_config_dropin.main, args, capsys)
    assert_named_refusal(rc, out, "k3s or rke2 --version", "no such binary", "validate_version=off")
    assert not (k3s_dir / "config.yaml.d").exists()


# ---------------------------------------------------------------------------------------------
# case 3: characters that change a gate's meaning inside the flag


@pytest.mark.parametrize(
    ("gates", "said"),
    [
        ({"GenericWorkload=true,Foo": True}, "'=' separates a name from its value"),
        ({"GenericWorkload,Foo": True}, "',' separates one entry from the next"),
        ({"Generic Workload": True}, "whitespace"),
        ({'"GenericWorkload"': True}, "is taken literally"),
        ({"GenericWorkload\n- --v=9": True}, "a line break"),
        ({"": True}, "empty feature gate name"),
    ],
)
def test_gate_names_that_change_the_flag_are_refused(manifests, tmp_path, capsys, gates, said):
    path = manifests / "kube-apiserver.yaml"
    before = read(path)
    # even with the check turned off and uncatalogued names allowed
    args = gate_edit(path, tmp_path, feature_gates=gates, validate_version="off", allow_uncatalogued=True)
    rc, out = run_module(static_pod_flags.main, args, capsys)
    assert_named_refusal(rc, out, path, said)
    assert read(path) == before


@pytest.mark.parametrize(
    ("config", "said"),
    [
        ({"scheduling.k8s.io/v1beta1,api/all": "true"}, "',' separates one entry from the next"),
        ({"scheduling.k8s.io/v1beta1": "true,api/all=true"}, "',' separates"),
        ({"scheduling.k8s.io/v1beta1": "tr ue"}, "whitespace"),
    ],
)
def test_sibling_runtime_config_text_that_changes_the_flag_is_refused(config, said):
    with pytest.raises(FlagEditError, match=said):
        norm_runtime_config(config)


def test_sibling_the_other_writers_refuse_such_names_too(k3s_dir, tmp_path, capsys):
    gates = {"GenericWorkload=true,Foo": True}
    rc, out = run_module(
        rancher_config_dropin.main,
        dropin_args(k3s_dir, tmp_path, feature_gates=gates, validate_version="off"),
        capsys,
    )
    assert_named_refusal(rc, out, "'=' separates")
    assert not (k3s_dir / "config.yaml.d").exists()
    text = configmap_cluster_configuration(V1BETA4)
    rc, out = run_module(
        kubeadm_config_flags.main,
        {"content": text, "feature_gates": gates, "validate_version": "off"},
        capsys,
    )
    assert_named_refusal(rc, out, "content", "'=' separates")
    assert norm_gates({"GenericWorkload": "true"}) == {"GenericWorkload": True}


# ---------------------------------------------------------------------------------------------
# cases 8, 9, 11 and their siblings: manifests a careless hand left behind


def _apiserver_with(manifests, old, new):
    path = manifests / "kube-apiserver.yaml"
    text = read(path)
    assert old in text
    path.write_text(text.replace(old, new, 1))
    return path


@pytest.mark.parametrize(
    ("old", "new", "said"),
    [
        # case 8: a container without command
        ("  - command:\n    - kube-apiserver\n", "  - args:\n    - kube-apiserver\n", "has no command list"),
        # siblings: command as one string, command empty, a container that is a string
        (
            "  - command:\n    - kube-apiserver\n",
            "  - command: kube-apiserver\n    args:\n    - x\n",
            "not a list",
        ),
        (
            "  - command:\n    - kube-apiserver\n",
            "  - command:\n    args:\n    - kube-apiserver\n",
            "has no command list",
        ),
        ("  containers:\n", "  containers:\n  - just-a-string\n", "spec.containers[0]"),
    ],
)
def test_manifest_shapes_are_refused_naming_file_and_fix(manifests, tmp_path, capsys, old, new, said):
    path = _apiserver_with(manifests, old, new)
    before = read(path)
    rc, out = run_module(
        static_pod_flags.main, gate_edit(path, tmp_path, feature_gates={"GenericWorkload": True}), capsys
    )
    assert_named_refusal(rc, out, path, said)
    assert read(path) == before


def test_a_non_utf8_manifest_is_refused_naming_file_and_place(manifests, tmp_path, capsys):
    """case 9."""
    path = manifests / "kube-apiserver.yaml"
    raw = read(path).encode()
    line = raw[: raw.index(b"tier: control-plane")].count(b"\n") + 1
    path.write_bytes(raw.replace(b"tier: control-plane", b"tier: control-pl\xffne"))
    before = path.read_bytes()
    rc, out = run_module(
        static_pod_flags.main, gate_edit(path, tmp_path, feature_gates={"GenericWorkload": True}), capsys
    )
    assert_named_refusal(
        rc, out, path, "is not UTF-8 text", f"byte 0xff on line {line}, column 21", "save the file as UTF-8"
    )
    assert path.read_bytes() == before


def test_sibling_non_utf8_files_of_the_other_modules(manifests, k3s_dir, tmp_path, capsys):
    bad = tmp_path / "kubeadm.yaml"
    bad.write_bytes(b"kind: ClusterConfiguration\n# \xfe\n")
    rc, out = run_module(
        kubeadm_config_flags.main, {"path": str(bad), "feature_gates": {"GenericWorkload": True}}, capsys
    )
    assert_named_refusal(rc, out, bad, "byte 0xfe on line 2")
    (manifests / "kube-scheduler.yaml").write_bytes(b"\x80kind: Pod\n")
    rc, out = run_module(
        feature_gate_preflight.main, {"version": "1.37", "manifests_dir": str(manifests)}, capsys
    )
    assert_named_refusal(rc, out, manifests / "kube-scheduler.yaml", "not UTF-8")
    (k3s_dir / "config.yaml").write_bytes(b"kube-apiserver-arg:\n  - v=\xc3\n")
    rc, out = run_module(
        rancher_config_dropin.main,
        dropin_args(k3s_dir, tmp_path, feature_gates={"GenericWorkload": True}),
        capsys,
    )
    assert_named_refusal(rc, out, "config.yaml", "not UTF-8")


def test_garbage_yaml_is_refused_naming_file_and_line(manifests, tmp_path, capsys):
    """case 11 (the kubelet config of the preflight), and the same for a manifest."""
    kubelet = tmp_path / "kubelet-config.yaml"
    kubelet.write_text("kind: KubeletConfiguration\nfeatureGates: {a: [\n")
    rc, out = run_module(
        feature_gate_preflight.main, {"version": "1.37", "kubelet_config": str(kubelet)}, capsys
    )
    assert_named_refusal(rc, out, kubelet, "is not valid YAML (line 3, column 1", "fix the syntax there")
    path = manifests / "kube-apiserver.yaml"
    path.write_text("apiVersion: v1\nkind: Pod\nspec: {containers: [\n")
    rc, out = run_module(
        static_pod_flags.main, gate_edit(path, tmp_path, feature_gates={"GenericWorkload": True}), capsys
    )
    assert_named_refusal(rc, out, path, "is not valid YAML (line 4")


# ---------------------------------------------------------------------------------------------
# case 10: a directory that does not take the temporary file, and siblings


def test_a_directory_that_refuses_the_temporary_file_is_named(manifests, tmp_path, capsys, monkeypatch):
    """case 10: root ignores directory modes, so mkstemp is made to fail as on an immutable directory (the
    manifest directory only: the backup, made first, is written; issue 43: it is removed again, since the
    change it was made for did not happen, and the failed answer says changed: false)."""
    path = manifests / "kube-apiserver.yaml"
    before = read(path)
    mkstemp = host_files.tempfile.mkstemp

    def refuse(*args, **kwargs):
        if kwargs.get("dir") != str(manifests):
            return mkstemp(*args, **kwargs)
        name = os.path.join(kwargs.get("dir", ""), f"{kwargs.get('prefix', '')}abc123")
        raise PermissionError(errno.EPERM, "Operation not permitted", name)

    monkeypatch.setattr(host_files.tempfile, "mkstemp", refuse)
    args = gate_edit(path, tmp_path, feature_gates={"GenericWorkload": True})
    rc, out = run_module(static_pod_flags.main, args, capsys)
    assert out["changed"] is False and "backup_file" not in out
    assert os.listdir(args["backup_dir"]) == []
    assert_named_refusal(
        rc,
        out,
        f"cannot write {path}",
        f".kube-apiserver.yaml.gpusplit-* cannot be created in {manifests}",
        "Operation not permitted",
        "become: true",
        "The file was not changed",
    )
    assert read(path) == before and manifest_dir_names(manifests) == sorted(f"{c}.yaml" for c in COMPONENTS)


def test_sibling_a_backup_dir_that_cannot_be_made_is_named(manifests, tmp_path, capsys):
    path = manifests / "kube-apiserver.yaml"
    before = read(path)
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    args = {
        "path": str(path),
        "backup_dir": str(blocker / "backups"),
        "feature_gates": {"GenericWorkload": True},
    }
    rc, out = run_module(static_pod_flags.main, args, capsys)
    assert_named_refusal(
        rc, out, f"cannot copy {path} into backup_dir {blocker / 'backups'}", "Nothing was changed"
    )
    assert read(path) == before


def test_sibling_a_dropin_directory_that_cannot_be_made_is_named(k3s_dir, tmp_path, capsys):
    (k3s_dir / "config.yaml.d").write_text("a file where k3s expects a directory\n")
    rc, out = run_module(
        rancher_config_dropin.main,
        dropin_args(k3s_dir, tmp_path, feature_gates={"GenericWorkload": True}),
        capsys,
    )
    assert_named_refusal(rc, out, f"cannot create the directory {k3s_dir / 'config.yaml.d'}")


# ---------------------------------------------------------------------------------------------
# case 2: a preflight that reads nothing must not pass


@pytest.mark.parametrize("case", ["mistyped", "empty", "no-manifests", "kubelet-missing", "kubelet-dir"])
def test_preflight_that_would_read_nothing_is_refused_naming_the_path(manifests, tmp_path, capsys, case):
    args = {"version": "1.37"}
    if case == "mistyped":
        args["manifests_dir"] = named = str(manifests) + "-typo"
    elif case == "empty":
        args["manifests_dir"], named = "", "manifests_dir is empty"
    elif case == "no-manifests":
        empty = tmp_path / "elsewhere"
        empty.mkdir()
        (empty / "README").write_text("x")
        args["manifests_dir"] = named = str(empty)
    elif case == "kubelet-missing":
        args["kubelet_config"] = named = str(tmp_path / "var-lib-kubelet" / "config.yaml")
    else:
        args["kubelet_config"] = named = str(tmp_path)
    rc, out = run_module(feature_gate_preflight.main, args, capsys)
    assert_named_refusal(rc, out, named)
    assert "current_flags" not in out


def test_preflight_still_finds_the_stale_gate_in_the_right_directory(tmp_path, capsys):
    manifests = tmp_path / "manifests"
    shutil.copytree(ROOT / "tests" / "fixtures" / "kubeadm" / "v1beta4-1.36-gates", manifests)
    rc, out = run_module(
        feature_gate_preflight.main, {"version": "1.37", "manifests_dir": str(manifests)}, capsys
    )
    assert rc == 1 and "GangScheduling" in out["msg"]
    assert out["stale_gates"]["kube-apiserver"] == ["GangScheduling", "WorkloadAwarePreemption"]


def test_sibling_preflight_rancher_files_of_which_none_exists_and_nothing_at_all(
    tmp_path, capsys, module_warnings
):
    files = [
        str(tmp_path / "etc-rancher-k3s" / "config.yaml"),
        str(tmp_path / "etc-rancher-k3s" / "config.yaml.d" / "a.yaml"),
    ]
    # a default k3s install has no config.yaml: said, not passed over in silence
    rc, out = run_module(
        feature_gate_preflight.main, {"version": "1.37", "rancher_config_files": files}, capsys
    )
    assert rc == 0 and out["current_flags"] == {}
    assert any(f"none of {files[0]}, {files[1]} exists" in w for w in module_warnings)
    rc, out = run_module(
        feature_gate_preflight.main, {"version": "1.37", "rancher_config_files": [files[0], ""]}, capsys
    )
    assert_named_refusal(rc, out, "rancher_config_files holds an empty path")
    rc, out = run_module(feature_gate_preflight.main, {"version": "1.37"}, capsys)
    assert_named_refusal(rc, out, "nothing to check")


def test_sibling_preflight_warns_for_a_missing_component_manifest(manifests, capsys, module_warnings):
    (manifests / "kube-scheduler.yaml").unlink()
    rc, out = run_module(
        feature_gate_preflight.main, {"version": "1.37", "manifests_dir": str(manifests)}, capsys
    )
    assert rc == 0 and sorted(out["current_flags"]) == ["kube-apiserver", "kube-controller-manager"]
    assert any("holds no kube-scheduler.yaml" in w for w in module_warnings)


# ---------------------------------------------------------------------------------------------
# a version given as banana: said once


def test_an_unreadable_version_is_said_once(manifests, tmp_path, capsys):
    sentence = "cannot read a Kubernetes version from 'banana'"
    path = manifests / "kube-apiserver.yaml"
    rc, out = run_module(
        static_pod_flags.main,
        gate_edit(path, tmp_path, feature_gates={"GenericWorkload": True}, validate_version="banana"),
        capsys,
    )
    assert_named_refusal(rc, out, path, sentence)
    assert out["msg"].count(sentence) == 1 and len(out["errors"]) == 1
    # sibling: kubeadm checks three sections, and says it once too; the preflight likewise
    rc, out = run_module(
        kubeadm_config_flags.main,
        {
            "content": configmap_cluster_configuration(V1BETA4),
            "feature_gates": {"GenericWorkload": True},
            "validate_version": "banana",
        },
        capsys,
    )
    assert_named_refusal(rc, out, sentence)
    assert out["msg"].count(sentence) == 1
    rc, out = run_module(
        feature_gate_preflight.main, {"version": "banana", "feature_gates": {"GenericWorkload": True}}, capsys
    )
    assert_named_refusal(rc, out, "version: " + sentence)
    assert out["msg"].count(sentence) == 1


# ---------------------------------------------------------------------------------------------
# every entry point, every option, malformed values of every JSON type: a refusal or a result,
# never a Python error


MALFORMED = [
    None,
    True,
    7,
    1.5,
    "",
    "a=b,c",
    [],
    ["x", None],
    {"x": None},
    {"GenericWorkload": {"a": 1}},
    {"GenericWorkload=true,Foo": True},
    {"kube-apiserver": {"feature_gates": [1]}},
]


def _base_args(module, manifests, k3s_dir, tmp_path):
    gates = {"feature_gates": {"GenericWorkload": True}}
    return {
        static_pod_flags: dict(
            gate_edit(manifests / "kube-apiserver.yaml", tmp_path, **gates), _ansible_check_mode=True
        ),
        kubeadm_config_flags: dict(content=configmap_cluster_configuration(V1BETA4), **gates),
        rancher_config_dropin: dict(dropin_args(k3s_dir, tmp_path, **gates), _ansible_check_mode=True),
        feature_gate_preflight: {"version": "1.37", "manifests_dir": str(manifests)},
        # a port nothing listens on; no time to wait
        control_plane_health: {
            "components": ["kube-apiserver"],
            "endpoints": {"kube-apiserver": {"health_url": "http://127.0.0.1:9/readyz"}},
            "timeout": 0,
            "probe_timeout": 0.2,
        },
    }[module]


def _options(module):
    spec = {}

    class Capture(Exception):
        pass

    def capture(self, argument_spec, **kwargs):
        spec.update(argument_spec)
        raise Capture

    original = module.AnsibleModule.__init__
    module.AnsibleModule.__init__ = capture
    try:
        module.main()
    except Capture:
        pass
    finally:
        module.AnsibleModule.__init__ = original
    return sorted(spec)


SKIP = {control_plane_health: {"timeout", "interval", "stable_probes", "probe_timeout"}}


@pytest.mark.parametrize(
    "module",
    [
        static_pod_flags,
        kubeadm_config_flags,
        rancher_config_dropin,
        feature_gate_preflight,
        control_plane_health,
    ],
    ids=lambda m: m.__name__.rsplit(".", 1)[-1],
)
def test_every_option_with_malformed_values_gives_no_python_error(
    module, manifests, k3s_dir, tmp_path, capsys
):
    before = {p.name: p.read_bytes() for p in manifests.iterdir()}
    bad = []
    for option in _options(module):
        if option in SKIP.get(module, ()):
            continue
        for value in MALFORMED:
            args = dict(_base_args(module, manifests, k3s_dir, tmp_path), **{option: value})
            try:
                _rc, out = run_module(module.main, args, capsys)
            except Exception as exc:  # a module that raises: exactly what must not happen
                bad.append(f"{option}={value!r}: {type(exc).__name__}: {exc}")
                continue
            msg = str(out.get("msg", ""))
            if "not healthy after" in msg:  # the probe's own report of the closed port, not of the input
                continue
            if any(text in msg for text in PYTHON_TEXT):
                bad.append(f"{option}={value!r}: {msg[:300]}")
    assert not bad, "\n".join(bad)
    assert {p.name: p.read_bytes() for p in manifests.iterdir()} == before


# ---------------------------------------------------------------------------------------------
# issue 13: without PyYAML, missing_required_lib with the install hint


@pytest.mark.parametrize(
    "module",
    [
        static_pod_flags,
        kubeadm_config_flags,
        rancher_config_dropin,
        feature_gate_preflight,
        control_plane_health,
    ],
    ids=lambda m: m.__name__.rsplit(".", 1)[-1],
)
def test_without_pyyaml_every_module_says_missing_required_lib(
    module, manifests, k3s_dir, tmp_path, capsys, monkeypatch
):
    monkeypatch.setattr(
        module_io, "YAML_IMPORT_ERROR", "Traceback ...\nModuleNotFoundError: No module named 'yaml'\n"
    )
    rc, out = run_module(module.main, _base_args(module, manifests, k3s_dir, tmp_path), capsys)
    assert rc == 1
    assert "Failed to import the required Python library (PyYAML)" in out["msg"]
    assert "python3-yaml" in out["msg"] and "pip install PyYAML" in out["msg"]


def test_without_pyyaml_for_real_in_a_python_that_cannot_import_it(manifests, tmp_path):
    """The import guard itself: a Python whose ``import yaml`` fails runs the module to that message."""
    code = (
        "import sys, json\n"
        "sys.modules['yaml'] = None\n"  # import yaml -> ImportError, as on a host without PyYAML
        f"sys.path[:0] = {sys.path!r}\n"  # where this test found the collection, whatever the layout
        "from ansible.module_utils.testing import patch_module_args\n"
        "from ansible_collections.gpusplit.k8s.plugins.modules import static_pod_flags\n"
        f"with patch_module_args({{'path': {str(manifests / 'kube-apiserver.yaml')!r}}}):\n"
        "    static_pod_flags.main()\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    out = json.loads(proc.stdout)
    assert proc.returncode == 1 and out["failed"] is True, proc.stderr
    assert "Failed to import the required Python library (PyYAML)" in out["msg"]


def test_documentation_names_the_requirement():
    for module in (
        static_pod_flags,
        kubeadm_config_flags,
        rancher_config_dropin,
        feature_gate_preflight,
        control_plane_health,
    ):
        doc = yaml.safe_load(module.DOCUMENTATION)
        assert any("PyYAML" in r for r in doc["requirements"]), module.__name__
        if "validate_version" in doc["options"]:
            assert doc["options"]["validate_version"]["default"] == "auto"


# ---------------------------------------------------------------------------------------------
# issue 43: backups and links


def linked_manifest(manifests, tmp_path):
    """kube-apiserver.yaml in the manifest directory as a link to a file elsewhere."""
    real = tmp_path / "real" / "kube-apiserver.yaml"
    real.parent.mkdir()
    path = manifests / "kube-apiserver.yaml"
    shutil.move(str(path), str(real))
    path.symlink_to(real)
    return path, real


def test_a_linked_manifest_is_judged_from_the_links_own_directory(manifests, tmp_path, capsys):
    """issue 43: with the manifest a link, the manifest directory was taken from the link's target, so that a
    backup_dir in the kubelet's manifest directory passed, and the kubelet would run the backup; the refusal also
    said changed: true."""
    path, real = linked_manifest(manifests, tmp_path)
    before = read(real)
    args = dict(gate_edit(path, tmp_path, feature_gates={"GenericWorkload": True}), backup_dir=str(manifests))
    rc, out = run_module(static_pod_flags.main, args, capsys)
    assert_named_refusal(rc, out, f"backup_dir {manifests} is the manifest directory {manifests}")
    assert out["changed"] is False
    assert read(real) == before and manifest_dir_names(manifests) == sorted(f"{c}.yaml" for c in COMPONENTS)


def test_a_linked_manifest_is_not_written_through_unless_followed(manifests, tmp_path, capsys):
    path, real = linked_manifest(manifests, tmp_path)
    before = read(real)
    args = gate_edit(path, tmp_path, feature_gates={"GenericWorkload": True})
    rc, out = run_module(static_pod_flags.main, args, capsys)
    assert_named_refusal(rc, out, f"{path} is a symbolic link to {real}", "follow: true")
    assert out["changed"] is False and read(real) == before and not os.path.exists(args["backup_dir"])
    rc, out = run_module(static_pod_flags.main, dict(args, follow=True), capsys)
    assert rc == 0 and out["changed"] is True and path.is_symlink()
    assert oct(os.stat(real).st_mode & 0o777) == "0o600"  # the target keeps its mode
    assert read(Path(out["backup_file"])) == before


def test_a_refused_backup_dir_reports_no_change(manifests, tmp_path, capsys):
    """issue 43: the refusal of a backup_dir inside the manifest directory said changed: true."""
    path = manifests / "kube-apiserver.yaml"
    args = dict(
        gate_edit(path, tmp_path, feature_gates={"GenericWorkload": True}), backup_dir=str(manifests / "b")
    )
    rc, out = run_module(static_pod_flags.main, args, capsys)
    assert_named_refusal(rc, out, "is the manifest directory")
    assert out["changed"] is False


def test_a_refused_kubeadm_config_write_takes_its_backup_back(tmp_path, capsys, monkeypatch):
    config = tmp_path / "kubeadm.yaml"
    config.write_text(configmap_cluster_configuration(V1BETA4))
    before = config.read_text()

    def refuse(module, src, dest):
        raise OSError(28, "No space left on device", dest)

    monkeypatch.setattr(host_files, "move", refuse)
    args = {"path": str(config), "backup": True, "feature_gates": {"GenericWorkload": True}}
    rc, out = run_module(kubeadm_config_flags.main, args, capsys)
    assert_named_refusal(rc, out, "No space left on device")
    assert (
        out["changed"] is False and config.read_text() == before and os.listdir(tmp_path) == ["kubeadm.yaml"]
    )
