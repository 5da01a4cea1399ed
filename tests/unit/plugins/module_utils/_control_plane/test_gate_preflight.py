"""Feature-gate validation, upgrade preflight and migration (plugins/module_utils/_control_plane/
gate_preflight.py), and the feature_gate_preflight module."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ansible_collections.gpusplit.k8s.plugins.module_utils._control_plane.gate_preflight import (
    check_gates,
    migrate_gates,
    migrate_runtime_config,
    runtime_config_enables,
    runtime_config_problems,
    upgrade_preflight,
    validate_gates,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._control_plane.gates import (
    BETA,
    GA,
    KNOWN_GATES,
    removed_in,
    spec_at,
    suggest,
    unknown_reason,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._control_plane.static_pod import (
    parse_static_pod,
)
from ansible_collections.gpusplit.k8s.plugins.modules import (
    feature_gate_preflight,
)
from ansible_collections.gpusplit.k8s.tests.unit.plugins.module_utils._control_plane.cp_testdata import (
    STALE_136,
    run_module,
)

# ---------------------------------------------------------------------------------------------
# validate_gates: every refusal the catalog knows


def test_generic_workload_on_137_needs_beta_api():
    errors, warnings, rc = validate_gates("1.37.2", {"GenericWorkload": True})
    assert errors == [] and warnings == []
    assert rc == {"scheduling.k8s.io/v1beta1": "true"}


def test_values_are_go_booleans():
    errors, _w, rc = validate_gates("1.37", {"GenericWorkload": "True"})
    assert errors == [] and rc
    errors, _w, _rc = validate_gates("1.37", {"GenericWorkload": "yes"})
    assert errors == ["invalid value of GenericWorkload=yes: not a boolean"]


@pytest.mark.parametrize("version", ["1.34", "1.38.0", "v2.0.0"])
def test_unsupported_versions_are_refused(version):
    errors, _w, _rc = validate_gates(version, {"GenericWorkload": True})
    assert len(errors) == 1 and "not covered by the gpusplit feature-gate catalog" in errors[0]


def test_removed_gate_names_the_merge():
    errors, _w, _rc = validate_gates("1.37", {"GenericWorkload": True, "GangScheduling": True})
    assert errors == [
        "unrecognized feature gate: GangScheduling (Kubernetes 1.37: removed in 1.37, merged into "
        "GenericWorkload); every component given this gate exits at start"
    ]
    errors, _w, _rc = validate_gates("1.37", {"WorkloadAwarePreemption": False})
    assert "removed in 1.37, merged into GenericWorkload" in errors[0]


def test_gate_from_the_future_is_unrecognized():
    errors, _w, _rc = validate_gates("1.36", {"GenericWorkload": True, "CompositePodGroup": True})
    assert errors == [
        "unrecognized feature gate: CompositePodGroup (Kubernetes 1.36: introduced in 1.37); every "
        "component given this gate exits at start"
    ]


def test_uncatalogued_names_are_refused_unless_allowed():
    errors, warnings, _rc = validate_gates("1.37", {"NoSuchGate": True})
    assert errors == [
        "NoSuchGate is not in the gpusplit feature-gate catalog: no component of Kubernetes 1.35, 1.36 "
        "or 1.37 registers it (gate list generated from the Go source). Refusing it on Kubernetes 1.37: "
        "an unknown name stops the component with 'unrecognized feature gate: NoSuchGate' "
        "(allow_uncatalogued passes it, for builds that register gates of their own)"
    ]
    errors, warnings, _rc = validate_gates("1.37", {"NoSuchGate": True}, allow_uncatalogued=True)
    assert errors == [] and "NoSuchGate is not in the gpusplit catalog" in warnings[0]


@pytest.mark.parametrize(
    ("typo", "meant"),
    [
        ("ContextualLoging", "ContextualLogging"),
        ("genericworkload", "GenericWorkload"),
        ("DRADeviceTaint", "DRADeviceTaints"),
        ("allalpha", "AllAlpha"),
    ],
)
def test_typo_is_refused_with_a_suggestion(typo, meant):
    errors, _w, _rc = validate_gates("1.37", {typo: True, "GenericWorkload": True})
    assert len(errors) == 1
    assert errors[0].startswith(f"{typo} is not in the gpusplit feature-gate catalog: ")
    assert f"Did you mean {meant}? Refusing it on Kubernetes 1.37" in errors[0]
    issues, _rc = check_gates("1.37", {typo: True})
    assert [(i["severity"], i["kind"]) for i in issues] == [("error", "uncatalogued")]
    assert unknown_reason(typo, "1.37").endswith(f"; did you mean {meant}?")


def test_suggestions_come_from_the_target_release():
    # GangScheduling is gone in 1.37: a slip of its name is pointed at nothing there
    assert suggest("GangSchedulng", "1.36") == "GangScheduling"
    assert suggest("GangSchedulng", "1.37") is None


@pytest.mark.parametrize("minor", ["1.35", "1.36", "1.37"])
def test_gates_outside_gpusplits_own_list_are_accepted(minor):
    # ContextualLogging (component-base logs), NativeHistograms (component-base metrics, 1.36+),
    # APIServerIdentity (apiserver), InOrderInformers (client-go): registered by every component
    gates = {"ContextualLogging": True, "APIServerIdentity": True, "InOrderInformers": True}
    if minor != "1.35":
        gates["NativeHistograms"] = False
    errors, warnings, rc = validate_gates(minor, gates)
    assert errors == [] and rc == {}
    spec = spec_at("ContextualLogging", minor)
    assert (spec["stage"], spec["default"], spec["locked"]) == (BETA, True, False)
    assert "component-base" in spec["src"]


def test_contextual_logging_accepted_on_137():
    assert validate_gates("1.37", {"ContextualLogging": True, "GenericWorkload": True}) == (
        [],
        [],
        {"scheduling.k8s.io/v1beta1": "true"},
    )
    flags = {"kube-scheduler": {"feature_gates": "ContextualLogging=true,GenericWorkload=true"}}
    assert [f for f in upgrade_preflight(flags, "1.37") if f["severity"] == "error"] == []


def test_removed_kubernetes_gates_are_known_as_removed():
    assert removed_in("SchedulerQueueingHints") == "1.37"
    assert removed_in("SchedulerQueueingHints", "1.36") is None
    assert spec_at("SchedulerQueueingHints", "1.36")["stage"] == GA
    assert spec_at("SchedulerQueueingHints", "1.37") is None
    assert unknown_reason("JobSuccessPolicy", "1.37").startswith("removed in 1.37 (GA since ")
    # a gate 1.36 dropped is unknown to 1.36 and 1.37 alike
    gone = sorted(set(KNOWN_GATES["1.35"]) - set(KNOWN_GATES["1.36"]))
    assert gone
    for name in gone:
        assert removed_in(name) == "1.36"
        errors, _w, _rc = validate_gates("1.37", {name: True})
        assert errors and "removed in 1.36" in errors[0], name


@pytest.mark.parametrize(
    ("minor", "gate", "value", "locked_to"),
    [
        ("1.35", "DynamicResourceAllocation", False, "true"),
        ("1.37", "DRAExtendedResource", False, "true"),
        ("1.37", "DRAPrioritizedList", False, "true"),
        ("1.36", "DRAAdminAccess", False, "true"),
        ("1.37", "DRAResourceClaimDeviceStatus", False, "true"),
        ("1.35", "ExecProbeTimeout", False, "true"),
    ],
)
def test_locked_gates(minor, gate, value, locked_to):
    errors, _w, _rc = validate_gates(minor, {gate: value})
    assert len(errors) == 1
    assert errors[0].startswith(f"cannot set feature gate {gate} to false, feature is locked to {locked_to}")


def test_locked_gate_at_its_default_is_only_a_warning():
    errors, warnings, _rc = validate_gates("1.37", {"DynamicResourceAllocation": True})
    assert errors == []
    assert "GA in 1.37" in warnings[0] and "remove completely in 1.38" in warnings[0]


def test_not_yet_locked_gate_may_be_turned_off_before_lock():
    # DRAExtendedResource is beta (on) in 1.36 and GA+locked in 1.37
    assert validate_gates("1.36", {"DRAExtendedResource": False})[0] == []
    assert validate_gates("1.37", {"DRAExtendedResource": False})[0] != []


@pytest.mark.parametrize(
    ("minor", "gates", "message"),
    [
        (
            "1.35",
            {"GangScheduling": True},
            "GangScheduling is enabled, but depends on features that are disabled: [GenericWorkload]",
        ),
        (
            "1.36",
            {"GenericWorkload": True, "WorkloadAwarePreemption": True},
            "WorkloadAwarePreemption is enabled, but depends on features that are disabled: [GangScheduling]",
        ),
        (
            "1.37",
            {"CompositePodGroup": True},
            "CompositePodGroup is enabled, but depends on features that are disabled: "
            "[GenericWorkload TopologyAwareWorkloadScheduling]",
        ),
        (
            "1.36",
            {"DRADeviceTaintRules": True, "DRADeviceTaints": False},
            "DRADeviceTaintRules is enabled, but depends on features that are disabled: [DRADeviceTaints]",
        ),
        # DRADeviceTaintRules is GA and on by default in 1.37: switching taints off alone breaks it
        (
            "1.37",
            {"DRADeviceTaints": False},
            "DRADeviceTaintRules is enabled, but depends on features that are disabled: [DRADeviceTaints]",
        ),
        (
            "1.37",
            {"DRAWorkloadResourceClaims": True},
            "DRAWorkloadResourceClaims is enabled, but depends on features that are disabled: "
            "[GenericWorkload]",
        ),
    ],
)
def test_dependencies(minor, gates, message):
    errors, _w, _rc = validate_gates(minor, gates)
    assert message in errors


def test_all_alpha_enables_unset_alpha_gates_for_the_dependency_check():
    errors, warnings, _rc = validate_gates("1.36", {"AllAlpha": True, "GenericWorkload": False})
    assert "GangScheduling is enabled, but depends on features that are disabled: [GenericWorkload]" in errors
    assert any(w.startswith("AllAlpha=true") for w in warnings)
    errors, _w, rc = validate_gates("1.36", {"AllAlpha": True})
    assert errors == [] and rc == {"scheduling.k8s.io/v1alpha2": "true"}


def test_full_gang_scheduling_sets_are_clean():
    assert validate_gates("1.35", {"GenericWorkload": True, "GangScheduling": True})[0] == []
    errors, _w, rc = validate_gates(
        "1.36", {"GenericWorkload": True, "GangScheduling": True, "WorkloadAwarePreemption": True}
    )
    assert errors == [] and rc == {"scheduling.k8s.io/v1alpha2": "true"}
    errors, _w, rc = validate_gates(
        "1.37", {"GenericWorkload": True, "TopologyAwareWorkloadScheduling": True, "CompositePodGroup": True}
    )
    assert errors == []
    assert rc == {"scheduling.k8s.io/v1beta1": "true", "scheduling.k8s.io/v1alpha3": "true"}


def test_device_taint_rules_runtime_config():
    assert validate_gates("1.35", {"DRADeviceTaints": True, "DRADeviceTaintRules": True})[2] == {
        "resource.k8s.io/v1alpha3": "true"
    }
    assert validate_gates("1.36", {"DRADeviceTaintRules": True})[2] == {"resource.k8s.io/v1beta2": "true"}
    assert validate_gates("1.37", {})[2] == {}


# ---------------------------------------------------------------------------------------------
# runtime-config and upgrade preflight


def test_runtime_config_problems():
    problems = runtime_config_problems(
        "1.37",
        {"scheduling.k8s.io/v1alpha2": "true", "scheduling.k8s.io/v1beta1": "true", "foo.example/v9": "true"},
    )
    assert [key for key, _m in problems] == ["scheduling.k8s.io/v1alpha2"]
    assert problems[0][1].startswith("group version scheduling.k8s.io/v1alpha2 that has not been registered")
    assert runtime_config_problems("1.36", {"scheduling.k8s.io/v1alpha2": "true"}) == []
    assert (
        runtime_config_problems("1.37", {"api/all": "true", "resource.k8s.io/v1beta2/devicetaintrules": ""})
        == []
    )
    assert (
        runtime_config_problems("1.37", {"scheduling.k8s.io/v1beta1": "maybe"})[0][0]
        == "scheduling.k8s.io/v1beta1"
    )


def test_runtime_config_enables():
    assert runtime_config_enables({"scheduling.k8s.io/v1beta1": ""}, "scheduling.k8s.io/v1beta1")
    assert runtime_config_enables({"api/beta": "true"}, "scheduling.k8s.io/v1beta1")
    assert not runtime_config_enables({"api/alpha": "true"}, "scheduling.k8s.io/v1beta1")
    assert runtime_config_enables({"api/all": "true"}, "scheduling.k8s.io/v1alpha3")
    assert not runtime_config_enables(
        {"api/all": "true", "scheduling.k8s.io/v1alpha3": "false"}, "scheduling.k8s.io/v1alpha3"
    )


def _fixture_flags(directory: Path) -> dict:
    flags = {}
    for component in ("kube-apiserver", "kube-scheduler", "kube-controller-manager"):
        pod = parse_static_pod((directory / f"{component}.yaml").read_text())
        flags[component] = {"feature_gates": pod["feature_gates"], "runtime_config": pod["runtime_config"]}
    return flags


def test_upgrade_preflight_on_real_136_manifests():
    flags = _fixture_flags(STALE_136)
    on_136 = upgrade_preflight(flags, "1.36.3")
    assert on_136 and {f["severity"] for f in on_136} == {"warning"}  # alpha gates, nothing fatal
    findings = upgrade_preflight(flags, "1.37.2")
    errors = {(f["component"], f["kind"], f["name"]) for f in findings if f["severity"] == "error"}
    assert errors == {
        (component, "feature-gate", gate)
        for component in ("kube-apiserver", "kube-scheduler", "kube-controller-manager")
        for gate in ("GangScheduling", "WorkloadAwarePreemption")
    } | {("kube-apiserver", "runtime-config", "scheduling.k8s.io/v1alpha2")}
    warnings = [f for f in findings if f["severity"] == "warning"]
    assert [(w["component"], w["name"]) for w in warnings] == [
        ("kube-apiserver", "scheduling.k8s.io/v1beta1")
    ]


def test_upgrade_preflight_accepts_flag_text_and_kubelet():
    findings = upgrade_preflight(
        {"kubelet": {"feature_gates": "SidecarContainers=true,ExecProbeTimeout=true"}}, "1.37"
    )
    assert [(f["name"], f["severity"]) for f in findings] == [
        ("ExecProbeTimeout", "warning"),
        ("SidecarContainers", "error"),
    ]
    assert "removed in 1.37" in findings[1]["message"]


def test_upgrade_preflight_runtime_config_outside_the_apiserver():
    findings = upgrade_preflight(
        {"kube-scheduler": {"runtime_config": "scheduling.k8s.io/v1beta1=true"}}, "1.37"
    )
    assert [(f["kind"], f["severity"]) for f in findings] == [("runtime-config", "error")]


def test_upgrade_preflight_uncatalogued():
    flags = {"kube-scheduler": {"feature_gates": {"SomethingElse": True}}}
    assert upgrade_preflight(flags, "1.37")[0]["severity"] == "error"
    assert upgrade_preflight(flags, "1.37", allow_uncatalogued=True)[0]["severity"] == "warning"


def test_migrate_to_137():
    flags = _fixture_flags(STALE_136)["kube-apiserver"]
    gates, notes = migrate_gates(flags["feature_gates"], "1.37")
    assert gates == {"GenericWorkload": True}
    assert len(notes) == 2
    rc, rc_notes = migrate_runtime_config(flags["runtime_config"], "1.37", gates)
    assert rc == {"scheduling.k8s.io/v1beta1": "true"}
    assert upgrade_preflight({"kube-apiserver": {"feature_gates": gates, "runtime_config": rc}}, "1.37") == []
    only_gang, _n = migrate_gates({"GangScheduling": True}, "1.37")
    assert only_gang == {"GenericWorkload": True}
    explicit_off, _n = migrate_gates({"GangScheduling": True, "GenericWorkload": False}, "1.37")
    assert explicit_off == {"GenericWorkload": False}


# ---------------------------------------------------------------------------------------------
# module gpusplit.k8s.feature_gate_preflight


def test_preflight_module_requested_gates(capsys):
    rc, out = run_module(
        feature_gate_preflight.main, {"version": "1.37", "feature_gates": {"GenericWorkload": True}}, capsys
    )
    assert rc == 0 and out["changed"] is False
    assert out["runtime_config"] == {"scheduling.k8s.io/v1beta1": "true"}
    assert out["gate_errors"] == [] and out["findings"] == []


def test_preflight_module_refuses_stale_manifests(tmp_path, capsys):
    manifests = tmp_path / "manifests"
    shutil.copytree(STALE_136, manifests)
    kubelet = tmp_path / "config.yaml"
    kubelet.write_text(
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
        "featureGates:\n  GangScheduling: true\n"
    )
    args = {"version": "1.37.2", "manifests_dir": str(manifests), "kubelet_config": str(kubelet)}
    rc, out = run_module(feature_gate_preflight.main, args, capsys)
    assert rc == 1 and out["failed"]
    assert "GangScheduling" in out["msg"]
    assert out["stale_gates"] == {
        "kube-apiserver": ["GangScheduling", "WorkloadAwarePreemption"],
        "kube-controller-manager": ["GangScheduling", "WorkloadAwarePreemption"],
        "kube-scheduler": ["GangScheduling", "WorkloadAwarePreemption"],
        "kubelet": ["GangScheduling"],
    }
    assert out["migrated_feature_gates"]["kube-scheduler"] == {"GenericWorkload": True}

    rc, out = run_module(feature_gate_preflight.main, dict(args, fail_on_error=False), capsys)
    assert rc == 0 and len([f for f in out["findings"] if f["severity"] == "error"]) == 8

    # on 1.36 the control plane is fine; the kubelet's lone GangScheduling breaks its dependency
    rc, out = run_module(feature_gate_preflight.main, dict(args, version="1.36"), capsys)
    assert rc == 1 and out["stale_gates"] == {}
    assert [(f["component"], f["kind"]) for f in out["findings"] if f["severity"] == "error"] == [
        ("kubelet", "dependency")
    ]
    assert (
        "GangScheduling is enabled, but depends on features that are disabled: [GenericWorkload]"
        in out["msg"]
    )


def test_preflight_module_rancher_files(tmp_path, capsys):
    base = tmp_path / "config.yaml"
    base.write_text("kube-apiserver-arg:\n  - feature-gates=GangScheduling=true,GenericWorkload=true\n")
    dropin = tmp_path / "50-gpusplit.yaml"
    dropin.write_text("kube-scheduler-arg+:\n  - feature-gates=GenericWorkload=true\n")
    args = {
        "version": "1.37",
        "rancher_config_files": [str(base), str(dropin), str(tmp_path / "absent.yaml")],
        "fail_on_error": False,
    }
    rc, out = run_module(feature_gate_preflight.main, args, capsys)
    assert rc == 0
    assert out["stale_gates"] == {"kube-apiserver": ["GangScheduling"]}
    assert out["current_flags"]["kube-scheduler"]["feature_gates"] == {"GenericWorkload": True}


def test_preflight_module_reports_removed_kubernetes_gates_as_stale(tmp_path, capsys):
    # a 1.36 control plane that also runs with ContextualLogging (still there in 1.37) and
    # SchedulerQueueingHints (GA in 1.36, gone in 1.37) on its scheduler
    manifests = tmp_path / "manifests"
    shutil.copytree(STALE_136, manifests)
    scheduler = manifests / "kube-scheduler.yaml"
    text = scheduler.read_text()
    assert "--feature-gates=GenericWorkload=true," in text
    scheduler.write_text(
        text.replace(
            "--feature-gates=GenericWorkload=true,",
            "--feature-gates=ContextualLogging=true,SchedulerQueueingHints=true,GenericWorkload=true,",
        )
    )
    # the way roles/control_plane_gates checks the upgrade target
    args = {
        "version": "1.37.2",
        "manifests_dir": str(manifests),
        "allow_uncatalogued": True,
        "fail_on_error": False,
    }
    rc, out = run_module(feature_gate_preflight.main, args, capsys)
    assert rc == 0
    assert out["stale_gates"]["kube-scheduler"] == [
        "GangScheduling",
        "SchedulerQueueingHints",
        "WorkloadAwarePreemption",
    ]
    assert out["stale_gates"]["kube-apiserver"] == ["GangScheduling", "WorkloadAwarePreemption"]
    [finding] = [f for f in out["findings"] if f["name"] == "SchedulerQueueingHints"]
    assert finding["severity"] == "error" and "removed in 1.37 (GA since" in finding["message"]
    assert not [f for f in out["findings"] if f["name"] == "ContextualLogging"]
    assert out["migrated_feature_gates"]["kube-scheduler"] == {
        "ContextualLogging": True,
        "GenericWorkload": True,
    }

    # the same manifests on their own release: nothing stale, nothing refused
    rc, out = run_module(
        feature_gate_preflight.main, dict(args, version="1.36.3", allow_uncatalogued=False), capsys
    )
    assert rc == 0 and out["stale_gates"] == {}
    assert [f for f in out["findings"] if f["severity"] == "error"] == []


def test_preflight_module_unsupported_version(capsys):
    rc, out = run_module(feature_gate_preflight.main, {"version": "1.31"}, capsys)
    assert rc == 1 and "not covered" in out["msg"]
