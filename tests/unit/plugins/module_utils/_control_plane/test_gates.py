"""Feature-gate catalog, validation and upgrade preflight (plugins/module_utils/_control_plane/gates.py),
and the feature_gate_preflight module."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
from pathlib import Path

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpusplit.k8s.plugins.module_utils._control_plane import (
    gate_data as feature_gate_data,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._control_plane import gates as fg
from ansible_collections.gpusplit.k8s.plugins.module_utils._control_plane.flags import parse_static_pod
from ansible_collections.gpusplit.k8s.plugins.modules import feature_gate_preflight

FIXTURES = Path(__file__).resolve().parents[4] / "fixtures" / "kubeadm"
STALE_136 = FIXTURES / "v1beta4-1.36-gates"


# ---------------------------------------------------------------------------------------------
# catalog shape


def test_gpusplit_gates_are_kubernetes_gates():
    for name, extra in fg.GPUSPLIT_GATES.items():
        assert fg.is_kubernetes_gate(name), f"{name} is in no covered release's generated gate list"
        for minor in extra.get("runtime_config", {}):
            assert fg.known_in(name, minor), f"{name} has runtime_config for {minor}, which lacks the gate"
        assert set(extra.get("components", ())) <= {
            fg.APISERVER,
            fg.SCHEDULER,
            fg.CONTROLLER_MANAGER,
            fg.KUBELET,
        }
        if extra.get("merged_into"):
            assert fg.removed_in(name), f"{name} has merged_into but is not removed"


def test_generated_data_is_consistent():
    for minor, gates in fg.KNOWN_GATES.items():
        assert minor in fg.SUPPORTED_MINORS
        for name, gate in gates.items():
            for dep in gate["depends_on"]:
                assert dep in gates, f"{minor}: {name} depends on {dep}, which {minor} lacks"
            versions = [tuple(map(int, spec[0].split("."))) for spec in gate["specs"]]
            assert versions == sorted(versions), (minor, name)
            assert {spec[2] for spec in gate["specs"]} <= {
                fg.ALPHA,
                fg.BETA,
                fg.GA,
                fg.DEPRECATED,
                fg.PREALPHA,
            }
        # the defaults of a release are consistent: a component started without --feature-gates runs
        assert fg.validate_gates(minor, {}) == ([], [], {}), minor
    assert len(fg.KNOWN_GATES["1.37"]) > 200  # the whole release, not a hand-picked list


def test_catalog_holds_the_gates_gpusplit_needs():
    needed = {
        "GenericWorkload",
        "GangScheduling",
        "WorkloadAwarePreemption",
        "CompositePodGroup",
        "DynamicResourceAllocation",
        "DRADeviceTaints",
        "DRADeviceTaintRules",
        "DRAExtendedResource",
        "DRAPrioritizedList",
        "DRAAdminAccess",
        "DRAPartitionableDevices",
        "DRAConsumableCapacity",
        "DRAResourceClaimDeviceStatus",
    }
    assert needed <= set(fg.GPUSPLIT_GATES)
    ga_locked_137 = [r for r in fg.catalog_rows("1.37") if r["known"] and r["stage"] == fg.GA and r["locked"]]
    assert len(ga_locked_137) >= 5


@pytest.mark.parametrize(
    ("minor", "stage", "runtime_config"),
    [
        ("1.35", fg.ALPHA, {"scheduling.k8s.io/v1alpha1": "true"}),
        ("1.36", fg.ALPHA, {"scheduling.k8s.io/v1alpha2": "true"}),
        ("1.37", fg.BETA, {"scheduling.k8s.io/v1beta1": "true"}),
    ],
)
def test_generic_workload_per_release(minor, stage, runtime_config):
    spec = fg.spec_at("GenericWorkload", minor)
    assert spec["stage"] == stage
    assert spec["default"] is False  # beta in 1.37 but still off
    assert spec["locked"] is False
    assert spec["runtime_config"] == runtime_config
    assert set(spec["components"]) == {fg.APISERVER, fg.SCHEDULER, fg.CONTROLLER_MANAGER}


def test_gates_that_come_and_go():
    assert fg.spec_at("GangScheduling", "1.35")["depends_on"] == ("GenericWorkload",)
    assert fg.spec_at("GangScheduling", "1.36") is not None
    assert fg.spec_at("GangScheduling", "1.37") is None
    assert fg.spec_at("WorkloadAwarePreemption", "1.35") is None
    assert fg.spec_at("WorkloadAwarePreemption", "1.36")["depends_on"] == ("GangScheduling",)
    assert fg.spec_at("WorkloadAwarePreemption", "1.37") is None
    assert fg.unknown_reason("GangScheduling", "1.37") == "removed in 1.37, merged into GenericWorkload"
    assert fg.unknown_reason("CompositePodGroup", "1.36") == "introduced in 1.37"
    cpg = fg.spec_at("CompositePodGroup", "1.37")
    assert cpg["stage"] == fg.ALPHA
    assert cpg["runtime_config"] == {"scheduling.k8s.io/v1alpha3": "true"}
    assert "removed in 1.37 (GA since 1.34, always on)" == fg.unknown_reason(
        "JobPodReplacementPolicy", "1.37"
    )


def test_device_taints_per_release():
    rules = {m: fg.spec_at("DRADeviceTaintRules", m) for m in fg.SUPPORTED_MINORS}
    assert (rules["1.35"]["stage"], rules["1.35"]["default"]) == (fg.ALPHA, False)
    assert (rules["1.36"]["stage"], rules["1.36"]["default"]) == (fg.BETA, False)
    assert (rules["1.37"]["stage"], rules["1.37"]["default"], rules["1.37"]["locked"]) == (fg.GA, True, False)
    assert rules["1.35"]["runtime_config"] == {"resource.k8s.io/v1alpha3": "true"}
    assert rules["1.36"]["runtime_config"] == {"resource.k8s.io/v1beta2": "true"}
    assert rules["1.37"]["runtime_config"] == {}
    taints = fg.spec_at("DRADeviceTaints", "1.36")
    assert (taints["stage"], taints["default"]) == (fg.BETA, True)
    dra = fg.spec_at("DynamicResourceAllocation", "1.35")
    assert (dra["stage"], dra["default"], dra["locked"]) == (fg.GA, True, True)


@pytest.mark.parametrize(
    ("text", "minor"),
    [
        ("v1.37.2", "1.37"),
        ("1.36", "1.36"),
        ("1.35.4", "1.35"),
        ("v1.37.2+k3s1", "1.37"),
        ("v1.37.2-eks-1a2b", "1.37"),
    ],
)
def test_minor_of(text, minor):
    assert fg.minor_of(text) == minor


@pytest.mark.parametrize("bad", ["", "latest", "stable-1", "1"])
def test_minor_of_refuses_garbage(bad):
    with pytest.raises(fg.CatalogError):
        fg.minor_of(bad)


# ---------------------------------------------------------------------------------------------
# validate_gates: every refusal the catalog knows


def test_generic_workload_on_137_needs_beta_api():
    errors, warnings, rc = fg.validate_gates("1.37.2", {"GenericWorkload": True})
    assert errors == [] and warnings == []
    assert rc == {"scheduling.k8s.io/v1beta1": "true"}


def test_values_are_go_booleans():
    errors, _w, rc = fg.validate_gates("1.37", {"GenericWorkload": "True"})
    assert errors == [] and rc
    errors, _w, _rc = fg.validate_gates("1.37", {"GenericWorkload": "yes"})
    assert errors == ["invalid value of GenericWorkload=yes: not a boolean"]


@pytest.mark.parametrize("version", ["1.34", "1.38.0", "v2.0.0"])
def test_unsupported_versions_are_refused(version):
    errors, _w, _rc = fg.validate_gates(version, {"GenericWorkload": True})
    assert len(errors) == 1 and "not covered by the gpusplit feature-gate catalog" in errors[0]


def test_removed_gate_names_the_merge():
    errors, _w, _rc = fg.validate_gates("1.37", {"GenericWorkload": True, "GangScheduling": True})
    assert errors == [
        "unrecognized feature gate: GangScheduling (Kubernetes 1.37: removed in 1.37, merged into "
        "GenericWorkload); every component given this gate exits at start"
    ]
    errors, _w, _rc = fg.validate_gates("1.37", {"WorkloadAwarePreemption": False})
    assert "removed in 1.37, merged into GenericWorkload" in errors[0]


def test_gate_from_the_future_is_unrecognized():
    errors, _w, _rc = fg.validate_gates("1.36", {"GenericWorkload": True, "CompositePodGroup": True})
    assert errors == [
        "unrecognized feature gate: CompositePodGroup (Kubernetes 1.36: introduced in 1.37); every "
        "component given this gate exits at start"
    ]


def test_uncatalogued_names_are_refused_unless_allowed():
    errors, warnings, _rc = fg.validate_gates("1.37", {"NoSuchGate": True})
    assert errors == [
        "NoSuchGate is not in the gpusplit feature-gate catalog: no component of Kubernetes 1.35, 1.36 "
        "or 1.37 registers it (gate list generated from the Go source). Refusing it on Kubernetes 1.37: "
        "an unknown name stops the component with 'unrecognized feature gate: NoSuchGate' "
        "(allow_uncatalogued passes it, for builds that register gates of their own)"
    ]
    errors, warnings, _rc = fg.validate_gates("1.37", {"NoSuchGate": True}, allow_uncatalogued=True)
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
    errors, _w, _rc = fg.validate_gates("1.37", {typo: True, "GenericWorkload": True})
    assert len(errors) == 1
    assert errors[0].startswith(f"{typo} is not in the gpusplit feature-gate catalog: ")
    assert f"Did you mean {meant}? Refusing it on Kubernetes 1.37" in errors[0]
    issues, _rc = fg.check_gates("1.37", {typo: True})
    assert [(i["severity"], i["kind"]) for i in issues] == [("error", "uncatalogued")]
    assert fg.unknown_reason(typo, "1.37").endswith(f"; did you mean {meant}?")


def test_suggestions_come_from_the_target_release():
    # GangScheduling is gone in 1.37: a slip of its name is pointed at nothing there
    assert fg.suggest("GangSchedulng", "1.36") == "GangScheduling"
    assert fg.suggest("GangSchedulng", "1.37") is None


@pytest.mark.parametrize("minor", ["1.35", "1.36", "1.37"])
def test_gates_outside_gpusplits_own_list_are_accepted(minor):
    # ContextualLogging (component-base logs), NativeHistograms (component-base metrics, 1.36+),
    # APIServerIdentity (apiserver), InOrderInformers (client-go): registered by every component
    gates = {"ContextualLogging": True, "APIServerIdentity": True, "InOrderInformers": True}
    if minor != "1.35":
        gates["NativeHistograms"] = False
    errors, warnings, rc = fg.validate_gates(minor, gates)
    assert errors == [] and rc == {}
    spec = fg.spec_at("ContextualLogging", minor)
    assert (spec["stage"], spec["default"], spec["locked"]) == (fg.BETA, True, False)
    assert "component-base" in spec["src"]


def test_contextual_logging_accepted_on_137():
    assert fg.validate_gates("1.37", {"ContextualLogging": True, "GenericWorkload": True}) == (
        [],
        [],
        {"scheduling.k8s.io/v1beta1": "true"},
    )
    flags = {"kube-scheduler": {"feature_gates": "ContextualLogging=true,GenericWorkload=true"}}
    assert [f for f in fg.upgrade_preflight(flags, "1.37") if f["severity"] == "error"] == []


def test_removed_kubernetes_gates_are_known_as_removed():
    assert fg.removed_in("SchedulerQueueingHints") == "1.37"
    assert fg.removed_in("SchedulerQueueingHints", "1.36") is None
    assert fg.spec_at("SchedulerQueueingHints", "1.36")["stage"] == fg.GA
    assert fg.spec_at("SchedulerQueueingHints", "1.37") is None
    assert fg.unknown_reason("JobSuccessPolicy", "1.37").startswith("removed in 1.37 (GA since ")
    # a gate 1.36 dropped is unknown to 1.36 and 1.37 alike
    gone = sorted(set(fg.KNOWN_GATES["1.35"]) - set(fg.KNOWN_GATES["1.36"]))
    assert gone
    for name in gone:
        assert fg.removed_in(name) == "1.36"
        errors, _w, _rc = fg.validate_gates("1.37", {name: True})
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
    errors, _w, _rc = fg.validate_gates(minor, {gate: value})
    assert len(errors) == 1
    assert errors[0].startswith(f"cannot set feature gate {gate} to false, feature is locked to {locked_to}")


def test_locked_gate_at_its_default_is_only_a_warning():
    errors, warnings, _rc = fg.validate_gates("1.37", {"DynamicResourceAllocation": True})
    assert errors == []
    assert "GA in 1.37" in warnings[0] and "remove completely in 1.38" in warnings[0]


def test_not_yet_locked_gate_may_be_turned_off_before_lock():
    # DRAExtendedResource is beta (on) in 1.36 and GA+locked in 1.37
    assert fg.validate_gates("1.36", {"DRAExtendedResource": False})[0] == []
    assert fg.validate_gates("1.37", {"DRAExtendedResource": False})[0] != []


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
    errors, _w, _rc = fg.validate_gates(minor, gates)
    assert message in errors


def test_all_alpha_enables_unset_alpha_gates_for_the_dependency_check():
    errors, warnings, _rc = fg.validate_gates("1.36", {"AllAlpha": True, "GenericWorkload": False})
    assert "GangScheduling is enabled, but depends on features that are disabled: [GenericWorkload]" in errors
    assert any(w.startswith("AllAlpha=true") for w in warnings)
    errors, _w, rc = fg.validate_gates("1.36", {"AllAlpha": True})
    assert errors == [] and rc == {"scheduling.k8s.io/v1alpha2": "true"}


def test_full_gang_scheduling_sets_are_clean():
    assert fg.validate_gates("1.35", {"GenericWorkload": True, "GangScheduling": True})[0] == []
    errors, _w, rc = fg.validate_gates(
        "1.36", {"GenericWorkload": True, "GangScheduling": True, "WorkloadAwarePreemption": True}
    )
    assert errors == [] and rc == {"scheduling.k8s.io/v1alpha2": "true"}
    errors, _w, rc = fg.validate_gates(
        "1.37", {"GenericWorkload": True, "TopologyAwareWorkloadScheduling": True, "CompositePodGroup": True}
    )
    assert errors == []
    assert rc == {"scheduling.k8s.io/v1beta1": "true", "scheduling.k8s.io/v1alpha3": "true"}


def test_device_taint_rules_runtime_config():
    assert fg.validate_gates("1.35", {"DRADeviceTaints": True, "DRADeviceTaintRules": True})[2] == {
        "resource.k8s.io/v1alpha3": "true"
    }
    assert fg.validate_gates("1.36", {"DRADeviceTaintRules": True})[2] == {"resource.k8s.io/v1beta2": "true"}
    assert fg.validate_gates("1.37", {})[2] == {}


# ---------------------------------------------------------------------------------------------
# runtime-config and upgrade preflight


def test_runtime_config_problems():
    problems = fg.runtime_config_problems(
        "1.37",
        {"scheduling.k8s.io/v1alpha2": "true", "scheduling.k8s.io/v1beta1": "true", "foo.example/v9": "true"},
    )
    assert [key for key, _m in problems] == ["scheduling.k8s.io/v1alpha2"]
    assert problems[0][1].startswith("group version scheduling.k8s.io/v1alpha2 that has not been registered")
    assert fg.runtime_config_problems("1.36", {"scheduling.k8s.io/v1alpha2": "true"}) == []
    assert (
        fg.runtime_config_problems(
            "1.37", {"api/all": "true", "resource.k8s.io/v1beta2/devicetaintrules": ""}
        )
        == []
    )
    assert (
        fg.runtime_config_problems("1.37", {"scheduling.k8s.io/v1beta1": "maybe"})[0][0]
        == "scheduling.k8s.io/v1beta1"
    )


def test_runtime_config_enables():
    assert fg.runtime_config_enables({"scheduling.k8s.io/v1beta1": ""}, "scheduling.k8s.io/v1beta1")
    assert fg.runtime_config_enables({"api/beta": "true"}, "scheduling.k8s.io/v1beta1")
    assert not fg.runtime_config_enables({"api/alpha": "true"}, "scheduling.k8s.io/v1beta1")
    assert fg.runtime_config_enables({"api/all": "true"}, "scheduling.k8s.io/v1alpha3")
    assert not fg.runtime_config_enables(
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
    on_136 = fg.upgrade_preflight(flags, "1.36.3")
    assert on_136 and {f["severity"] for f in on_136} == {"warning"}  # alpha gates, nothing fatal
    findings = fg.upgrade_preflight(flags, "1.37.2")
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
    findings = fg.upgrade_preflight(
        {"kubelet": {"feature_gates": "SidecarContainers=true,ExecProbeTimeout=true"}}, "1.37"
    )
    assert [(f["name"], f["severity"]) for f in findings] == [
        ("ExecProbeTimeout", "warning"),
        ("SidecarContainers", "error"),
    ]
    assert "removed in 1.37" in findings[1]["message"]


def test_upgrade_preflight_runtime_config_outside_the_apiserver():
    findings = fg.upgrade_preflight(
        {"kube-scheduler": {"runtime_config": "scheduling.k8s.io/v1beta1=true"}}, "1.37"
    )
    assert [(f["kind"], f["severity"]) for f in findings] == [("runtime-config", "error")]


def test_upgrade_preflight_uncatalogued():
    flags = {"kube-scheduler": {"feature_gates": {"SomethingElse": True}}}
    assert fg.upgrade_preflight(flags, "1.37")[0]["severity"] == "error"
    assert fg.upgrade_preflight(flags, "1.37", allow_uncatalogued=True)[0]["severity"] == "warning"


def test_migrate_to_137():
    flags = _fixture_flags(STALE_136)["kube-apiserver"]
    gates, notes = fg.migrate_gates(flags["feature_gates"], "1.37")
    assert gates == {"GenericWorkload": True}
    assert len(notes) == 2
    rc, rc_notes = fg.migrate_runtime_config(flags["runtime_config"], "1.37", gates)
    assert rc == {"scheduling.k8s.io/v1beta1": "true"}
    assert (
        fg.upgrade_preflight({"kube-apiserver": {"feature_gates": gates, "runtime_config": rc}}, "1.37") == []
    )
    only_gang, _n = fg.migrate_gates({"GangScheduling": True}, "1.37")
    assert only_gang == {"GenericWorkload": True}
    explicit_off, _n = fg.migrate_gates({"GangScheduling": True, "GenericWorkload": False}, "1.37")
    assert explicit_off == {"GenericWorkload": False}


# ---------------------------------------------------------------------------------------------
# the generated data against the Go sources. The module cache of a machine that built the lab has
# them; elsewhere the test skips, except in CI (CI=true), where it downloads them with `go mod
# download` (the CI machine reaches the Go module proxy) and fails if that does not work.

ROOT = Path(__file__).resolve().parents[5]


def _load_generator():
    spec = importlib.util.spec_from_file_location("gen_gate_catalog", ROOT / "tools" / "gen_gate_catalog.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gen = _load_generator()


def _ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


@pytest.fixture(scope="module")
def go_extracted():
    missing = gen.missing_modules()
    if missing:
        if not _ci():
            pytest.skip(f"Go modules not in the module cache: {', '.join(missing)}")
        gen.download()  # raises SourceError (the test fails) when the proxy cannot deliver them
    return gen.extract()


def test_generator_covers_the_supported_releases():
    assert tuple(gen.RELEASES) == fg.SUPPORTED_MINORS
    assert gen.RELEASES == feature_gate_data.RELEASES


@pytest.mark.parametrize("minor", ["1.35", "1.36", "1.37"])
def test_catalog_matches_go_source(go_extracted, minor):
    extracted = go_extracted[minor]
    data = fg.KNOWN_GATES[minor]
    assert set(data) == set(extracted), (
        f"{minor}: regenerate with tools/gen_gate_catalog.py; only in the data: "
        f"{sorted(set(data) - set(extracted))}, only in the Go source: {sorted(set(extracted) - set(data))}"
    )
    for name in extracted:
        assert data[name]["specs"] == extracted[name]["specs"], (minor, name)
        assert data[name]["depends_on"] == extracted[name]["depends_on"], (minor, name)
    assert (
        gen.render(go_extracted)
        == (ROOT / "plugins" / "module_utils" / "_control_plane" / "gate_data.py").read_text()
    )


_ENTRY = re.compile(r"\{([^{}]*Version: version\.MustParse\(\"(\d+\.\d+)\"\)[^{}]*)\}")


@pytest.mark.parametrize("minor", ["1.35", "1.36", "1.37"])
def test_generator_agrees_with_a_plain_reading_of_kube_features(go_extracted, minor):
    """A second, independent reading of k8s.io/kubernetes pkg/features/kube_features.go (line-based
    regexes instead of the generator's parser) for the gates gpusplit enables, and the entry count."""
    release = gen.RELEASES[minor]
    source = (
        gen.module_dir("k8s.io/kubernetes", f"v{release}") / "pkg/features/kube_features.go"
    ).read_text()
    versioned = source[source.index("var defaultVersionedKubernetesFeatureGates") :]
    versioned = versioned[: versioned.index("\n}\n")]
    keys = re.findall(r"^\t([\w.]+): \{$", versioned, re.M)
    from_kube_file = [n for n, g in fg.KNOWN_GATES[minor].items() if "k8s.io/kubernetes@" in g["src"]]
    assert len(keys) == len(from_kube_file)
    lines = source.splitlines()
    for name in fg.GPUSPLIT_GATES:
        block = re.search(rf"^\t{name}: \{{\n(.*?)\n\t\}},", source, re.M | re.S)
        deps = re.search(rf"^\t{name}: \{{([A-Za-z, ]*)\}},", source, re.M)
        spec = fg.spec_at(name, minor)
        if block is None:
            assert spec is None, f"{name} is not in {minor}'s kube_features.go but the catalog knows it"
            continue
        assert spec is not None, f"{name} is in {minor}'s kube_features.go but the catalog does not know it"
        history = []
        for body, version in _ENTRY.findall(block.group(1)):
            if "MinCompatibilityVersion" in body:
                continue
            default = re.search(r"Default: (true|false)", body).group(1) == "true"
            stage = re.search(r"PreRelease: featuregate\.(\w+)", body).group(1).lower()
            locked = re.search(r"LockToDefault: (true|false)", body)
            history.append((version, default, stage, bool(locked and locked.group(1) == "true")))
        applicable = [
            h for h in history if tuple(map(int, h[0].split("."))) <= tuple(map(int, minor.split(".")))
        ]
        _since, default, stage, locked = applicable[-1]
        assert (spec["default"], spec["stage"], spec["locked"]) == (default, stage, locked), name
        go_deps = tuple(d.strip() for d in deps.group(1).split(",") if d.strip()) if deps else ()
        assert spec["depends_on"] == go_deps, name
        line = int(spec["src"].rsplit(":", 1)[1])
        assert lines[line - 1] == f"\t{name}: {{", f"{name}: src line {line} is not its spec list"


def test_generator_refuses_what_it_cannot_read(tmp_path):
    with pytest.raises(gen.SourceError, match="cannot read the version"):
        gen.parse_spec("Version: version.MustParse(v), Default: true, PreRelease: featuregate.Beta", "x.go:1")
    with pytest.raises(gen.SourceError, match="unexpected spec fields"):
        gen.parse_spec('Version: version.MustParse("1.2"), Default: true, Stage: x', "x.go:1")
    with pytest.raises(gen.SourceError, match="not in the Go module cache"):
        gen.extract_release("1.37.2", cache=tmp_path)


# ---------------------------------------------------------------------------------------------
# module gpusplit.k8s.feature_gate_preflight


def run_module(main, args, capsys):
    with patch_module_args(args), pytest.raises(SystemExit) as exc:
        main()
    out = json.loads(capsys.readouterr().out)
    return exc.value.code, out


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


def test_docs_embed_the_current_catalog_table():
    doc = (Path(__file__).resolve().parents[5] / "docs" / "feature-gates.md").read_text()
    begin = doc.index("<!-- catalog:begin")
    start = doc.index("\n", begin) + 1
    end = doc.index("<!-- catalog:end -->")
    assert doc[start:end] == fg.markdown_table(), "re-render the table in docs/feature-gates.md"
    counts = [str(len(fg.KNOWN_GATES[m])) for m in fg.SUPPORTED_MINORS]
    assert f"({', '.join(fg.SUPPORTED_MINORS)}: {', '.join(counts[:-1])} and {counts[-1]} gates)" in doc
    removed_137 = set(fg.KNOWN_GATES["1.36"]) - set(fg.KNOWN_GATES["1.37"])
    assert f"... {len(removed_137)} in all)" in doc
