"""The dra-driver-nvidia-gpu chart values (plugins/plugin_utils/_dra/chart.py), against the chart's real values.yaml."""

from __future__ import annotations

import re

import pytest
import yaml

from ansible_collections.gpusplit.k8s.plugins.module_utils._dra.names import DraError
from ansible_collections.gpusplit.k8s.plugins.plugin_utils._dra.chart import (
    chart_values,
    deep_merge,
    unknown_value_paths,
)
from ansible_collections.gpusplit.k8s.tests.unit.plugins.module_utils._dra.dra_testdata import (
    DRA_REFERENCE,
    REFERENCE_DIR,
    ROOT,
)


@pytest.fixture(scope="module")
def chart_reference():
    path = DRA_REFERENCE / "values.yaml"
    if not path.is_file():
        pytest.skip(f"chart values not found ({path}); set GPUSPLIT_REFERENCE_DIR")
    return yaml.safe_load(path.read_text())


def test_chart_values_keys_exist_in_the_charts_values(chart_reference):
    for settings in (
        None,
        {"driver_root": "/run/nvidia/driver", "feature_gates": {"NVMLDeviceHealthCheck": True}},
        {
            "image_repository": "mirror.example.com/dra-driver-nvidia-gpu",
            "image_tag": "v0.4.1",
            "compute_domains": True,
        },
        {"extra_values": {"logVerbosity": "6", "kubeletPlugin": {"priorityClassName": "x"}}},
    ):
        values = chart_values(settings)
        assert unknown_value_paths(values, chart_reference) == [], settings
    assert unknown_value_paths({"kubeletPlugin": {"nodeSelectr": {}}, "bogus": 1}, chart_reference) == [
        "kubeletPlugin.nodeSelectr",
        "bogus",
    ]


def test_chart_values_pass_the_charts_own_validation_and_run_only_on_dra_nodes(chart_reference):
    values = chart_values()
    assert values["gpuResourcesEnabledOverride"] is True
    assert values["resources"]["gpus"]["enabled"] is True
    assert values["nvidiaDriverRoot"] == "/"
    # Helm merges maps and replaces lists: the effective values
    merged = deep_merge(chart_reference, values)
    # templates/validation.yaml of chart 0.4.1: both refusals must not fire
    assert not (merged["resources"]["gpus"]["enabled"] and not merged["gpuResourcesEnabledOverride"])
    assert not (merged["resources"]["computeDomains"]["enabled"] and not merged["webhook"]["enabled"])
    plugin = merged["kubeletPlugin"]
    assert plugin["nodeSelector"] == {"gpusplit.io/mode": "dra"}
    terms = plugin["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert terms == [{"matchExpressions": [{"key": "gpusplit.io/mode", "operator": "In", "values": ["dra"]}]}]
    # the chart's tolerations stay (nvidia.com/gpu NoSchedule, as gpusplit's node taint)
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in plugin["tolerations"]


def test_chart_values_settings_are_checked():
    for bad in (
        {"driver_root": "run/nvidia"},
        {"compute_domains": "yes"},
        {"feature_gates": {"X": "on"}},
        {"extra_values": []},
        {"colour": "red"},
        "x",
    ):
        with pytest.raises(DraError):
            chart_values(bad)


def test_the_chart_version_is_pinned_once_and_matches_the_reference():
    defaults = yaml.safe_load((ROOT / "roles" / "dra_driver" / "defaults" / "main.yml").read_text())
    assert defaults["gpusplit_dra_chart_name"] == "dra-driver-nvidia-gpu"
    assert defaults["gpusplit_dra_chart_repo"] == "oci://registry.k8s.io/dra-driver-nvidia/charts"
    sources = REFERENCE_DIR / "SOURCES.md"
    if not sources.is_file():
        pytest.skip("SOURCES.md not found")
    match = re.search(r"dra-driver-nvidia-gpu Helm chart \(chart version ([0-9.]+)\)", sources.read_text())
    assert match and defaults["gpusplit_dra_chart_version"] == match.group(1) == "0.4.1"
    # nowhere else
    hits = [
        p
        for p in list((ROOT / "roles").rglob("*.yml"))
        + list((ROOT / "playbooks").glob("*.yml"))
        + list((ROOT / "plugins" / "module_utils").rglob("*.py"))
        + list((ROOT / "plugins" / "plugin_utils").rglob("*.py"))
        if "0.4.1" in p.read_text()
    ]
    assert hits == [ROOT / "roles" / "dra_driver" / "defaults" / "main.yml"] or set(hits) == {
        ROOT / "roles" / "dra_driver" / "defaults" / "main.yml",
        ROOT / "roles" / "dra_driver" / "meta" / "argument_specs.yml",
    }


CHART_DIR = REFERENCE_DIR / "charts" / "dra-driver-nvidia-gpu"


def helm_template(values, tmp_path):
    """The real chart rendered by helm (no cluster): (exit code, output)."""
    import shutil
    import subprocess

    helm = shutil.which("helm")
    if not helm or not CHART_DIR.is_dir():
        pytest.skip(f"helm or the chart ({CHART_DIR}) is missing")
    values_file = tmp_path / "values.yaml"
    values_file.write_text(yaml.safe_dump(values))
    proc = subprocess.run(
        [helm, "template", "gs", str(CHART_DIR), "-n", "dra-driver-nvidia-gpu", "-f", str(values_file)]
        + ["--api-versions", "resource.k8s.io/v1"],
        capture_output=True,
        text=True,
    )
    return proc.returncode, proc.stdout + proc.stderr


def test_the_real_chart_accepts_gpusplits_values_and_renders_its_device_classes(tmp_path):
    rc, out = helm_template(chart_values({"feature_gates": {"NVMLDeviceHealthCheck": True}}), tmp_path)
    assert rc == 0, out[-2000:]
    docs = [d for d in yaml.safe_load_all(out) if d]
    classes = sorted(d["metadata"]["name"] for d in docs if d["kind"] == "DeviceClass")
    assert classes == ["gpu.nvidia.com", "mig.nvidia.com", "vfio.gpu.nvidia.com"]
    [plugin] = [d for d in docs if d["kind"] == "DaemonSet"]
    assert plugin["spec"]["template"]["spec"]["nodeSelector"] == {"gpusplit.io/mode": "dra"}


@pytest.mark.parametrize(
    "extra, said",
    [
        (
            {"gpuResourcesEnabledOverride": False},
            "resources.gpus.enabled is true without gpuResourcesEnabledOverride",
        ),
        ({"namespace": "x"}, "explicit 'namespace' value"),
        ({"nvidiaCtkPath": "/usr/bin/nvidia-ctk"}, "nvidiaCtkPath: the chart no longer supports it"),
        ({"webhook": {"enabled": True, "tls": {"mode": "vault"}}}, "webhook.tls.mode 'vault'"),
        (
            {"webhook": {"enabled": True, "tls": {"certManager": {"issuerType": "issuer"}}}},
            "issuerName is empty",
        ),
        ({"webhook": {"enabled": True, "tls": {"mode": "secret"}}}, "webhook.tls.secret.name is empty"),
    ],
)
def test_what_the_real_chart_refuses_gpusplit_refuses_first_with_the_charts_reason(extra, said, tmp_path):
    with pytest.raises(DraError) as refused:
        chart_values({"extra_values": extra})
    assert "the dra-driver-nvidia-gpu chart would refuse these values: " in str(refused.value)
    assert said in str(refused.value)
    rc, out = helm_template(deep_merge(chart_values(), extra), tmp_path)
    assert rc != 0 and "templates/validation.yaml" in out, out[-2000:]  # and so does the chart itself
