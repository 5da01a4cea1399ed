"""Feature-gate catalog (plugins/module_utils/_control_plane/gates.py, generated gate_data.py and
tools/gen_gate_catalog.py)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from ansible_collections.gpusplit.k8s.plugins.module_utils._control_plane import gate_data
from ansible_collections.gpusplit.k8s.plugins.module_utils._control_plane.components import (
    APISERVER,
    CONTROLLER_MANAGER,
    KUBELET,
    SCHEDULER,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._control_plane.gate_preflight import (
    validate_gates,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._control_plane.gates import (
    ALPHA,
    BETA,
    DEPRECATED,
    GA,
    GPUSPLIT_GATES,
    KNOWN_GATES,
    PREALPHA,
    SUPPORTED_MINORS,
    CatalogError,
    catalog_rows,
    is_kubernetes_gate,
    known_in,
    markdown_table,
    removed_in,
    spec_at,
    supported_minor,
    unknown_reason,
)
from ansible_collections.gpusplit.k8s.tests.unit.plugins.module_utils._control_plane.cp_testdata import (
    ROOT,
)
from ansible_collections.gpusplit.k8s.tests.unit.tool_module import load_tool

# ---------------------------------------------------------------------------------------------
# catalog shape


def test_gpusplit_gates_are_kubernetes_gates():
    for name, extra in GPUSPLIT_GATES.items():
        assert is_kubernetes_gate(name), f"{name} is in no covered release's generated gate list"
        for minor in extra.get("runtime_config", {}):
            assert known_in(name, minor), f"{name} has runtime_config for {minor}, which lacks the gate"
        assert set(extra.get("components", ())) <= {
            APISERVER,
            SCHEDULER,
            CONTROLLER_MANAGER,
            KUBELET,
        }
        if extra.get("merged_into"):
            assert removed_in(name), f"{name} has merged_into but is not removed"


def test_generated_data_is_consistent():
    for minor, gates in KNOWN_GATES.items():
        assert minor in SUPPORTED_MINORS
        for name, gate in gates.items():
            for dep in gate["depends_on"]:
                assert dep in gates, f"{minor}: {name} depends on {dep}, which {minor} lacks"
            versions = [tuple(map(int, spec[0].split("."))) for spec in gate["specs"]]
            assert versions == sorted(versions), (minor, name)
            assert {spec[2] for spec in gate["specs"]} <= {
                ALPHA,
                BETA,
                GA,
                DEPRECATED,
                PREALPHA,
            }
        # the defaults of a release are consistent: a component started without --feature-gates runs
        assert validate_gates(minor, {}) == ([], [], {}), minor
    assert len(KNOWN_GATES["1.37"]) > 200  # the whole release, not a hand-picked list


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
    assert needed <= set(GPUSPLIT_GATES)
    ga_locked_137 = [r for r in catalog_rows("1.37") if r["known"] and r["stage"] == GA and r["locked"]]
    assert len(ga_locked_137) >= 5


@pytest.mark.parametrize(
    ("minor", "stage", "runtime_config"),
    [
        ("1.35", ALPHA, {"scheduling.k8s.io/v1alpha1": "true"}),
        ("1.36", ALPHA, {"scheduling.k8s.io/v1alpha2": "true"}),
        ("1.37", BETA, {"scheduling.k8s.io/v1beta1": "true"}),
    ],
)
def test_generic_workload_per_release(minor, stage, runtime_config):
    spec = spec_at("GenericWorkload", minor)
    assert spec["stage"] == stage
    assert spec["default"] is False  # beta in 1.37 but still off
    assert spec["locked"] is False
    assert spec["runtime_config"] == runtime_config
    assert set(spec["components"]) == {APISERVER, SCHEDULER, CONTROLLER_MANAGER}


def test_gates_that_come_and_go():
    assert spec_at("GangScheduling", "1.35")["depends_on"] == ("GenericWorkload",)
    assert spec_at("GangScheduling", "1.36") is not None
    assert spec_at("GangScheduling", "1.37") is None
    assert spec_at("WorkloadAwarePreemption", "1.35") is None
    assert spec_at("WorkloadAwarePreemption", "1.36")["depends_on"] == ("GangScheduling",)
    assert spec_at("WorkloadAwarePreemption", "1.37") is None
    assert unknown_reason("GangScheduling", "1.37") == "removed in 1.37, merged into GenericWorkload"
    assert unknown_reason("CompositePodGroup", "1.36") == "introduced in 1.37"
    cpg = spec_at("CompositePodGroup", "1.37")
    assert cpg["stage"] == ALPHA
    assert cpg["runtime_config"] == {"scheduling.k8s.io/v1alpha3": "true"}
    assert "removed in 1.37 (GA since 1.34, always on)" == unknown_reason("JobPodReplacementPolicy", "1.37")


def test_device_taints_per_release():
    rules = {m: spec_at("DRADeviceTaintRules", m) for m in SUPPORTED_MINORS}
    assert (rules["1.35"]["stage"], rules["1.35"]["default"]) == (ALPHA, False)
    assert (rules["1.36"]["stage"], rules["1.36"]["default"]) == (BETA, False)
    assert (rules["1.37"]["stage"], rules["1.37"]["default"], rules["1.37"]["locked"]) == (GA, True, False)
    assert rules["1.35"]["runtime_config"] == {"resource.k8s.io/v1alpha3": "true"}
    assert rules["1.36"]["runtime_config"] == {"resource.k8s.io/v1beta2": "true"}
    assert rules["1.37"]["runtime_config"] == {}
    taints = spec_at("DRADeviceTaints", "1.36")
    assert (taints["stage"], taints["default"]) == (BETA, True)
    dra = spec_at("DynamicResourceAllocation", "1.35")
    assert (dra["stage"], dra["default"], dra["locked"]) == (GA, True, True)


@pytest.mark.parametrize("bad", ["", "latest", "1"])
def test_supported_minor_refuses_garbage_as_a_catalog_error(bad):
    with pytest.raises(CatalogError, match="cannot read a Kubernetes version"):
        supported_minor(bad)


# ---------------------------------------------------------------------------------------------
# the generated data against the Go sources. The module cache of a machine that built the lab has
# them; elsewhere the test skips, except in CI (CI=true), where it downloads them with `go mod
# download` (the CI machine reaches the Go module proxy) and fails if that does not work.


gen = load_tool("gen_gate_catalog")


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
    assert tuple(gen.RELEASES) == SUPPORTED_MINORS
    assert gen.RELEASES == gate_data.RELEASES


@pytest.mark.parametrize("minor", ["1.35", "1.36", "1.37"])
def test_catalog_matches_go_source(go_extracted, minor):
    extracted = go_extracted[minor]
    data = KNOWN_GATES[minor]
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
    from_kube_file = [n for n, g in KNOWN_GATES[minor].items() if "k8s.io/kubernetes@" in g["src"]]
    assert len(keys) == len(from_kube_file)
    lines = source.splitlines()
    for name in GPUSPLIT_GATES:
        block = re.search(rf"^\t{name}: \{{\n(.*?)\n\t\}},", source, re.M | re.S)
        deps = re.search(rf"^\t{name}: \{{([A-Za-z, ]*)\}},", source, re.M)
        spec = spec_at(name, minor)
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


def test_docs_embed_the_current_catalog_table():
    doc = (Path(__file__).resolve().parents[5] / "docs" / "dev" / "gate-catalog.md").read_text()
    begin = doc.index("<!-- catalog:begin")
    start = doc.index("\n", begin) + 1
    end = doc.index("<!-- catalog:end -->")
    assert doc[start:end] == markdown_table(), "re-render the table in docs/dev/gate-catalog.md"
    counts = [str(len(KNOWN_GATES[m])) for m in SUPPORTED_MINORS]
    assert f"({', '.join(SUPPORTED_MINORS)}: {', '.join(counts[:-1])} and {counts[-1]} gates)" in doc
    removed_137 = set(KNOWN_GATES["1.36"]) - set(KNOWN_GATES["1.37"])
    assert f"... {len(removed_137)} in all)" in doc
