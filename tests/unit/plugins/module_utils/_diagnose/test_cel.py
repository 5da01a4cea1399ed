"""CEL device selectors: the real library (common-expression-language) and the Kubernetes bridges."""

from __future__ import annotations

import builtins
import os
import re
from pathlib import Path

import pytest

from ansible_collections.gpusplit.k8s.plugins.module_utils._diagnose import cel as cel_module
from ansible_collections.gpusplit.k8s.plugins.module_utils._diagnose.cel import (
    CelUnsupported,
    cel_matches,
    device_view,
)

DRIVER = "gpu.nvidia.com"

# devices the way the NVIDIA DRA driver publishes them (ResourceSlice spec.devices[])
H200 = {
    "name": "gpu-0",
    "attributes": {
        "type": {"string": "gpu"},
        "uuid": {"string": "GPU-4d806f22-346a-5a1d-ac01-86b505cdf485"},
        "productName": {"string": "NVIDIA H200"},
        "architecture": {"string": "Hopper"},
        "index": {"int": 0},
        "minor": {"int": 0},
        "cudaComputeCapability": {"version": "9.0.0"},
        "driverVersion": {"version": "570.172.8"},
        "resource.kubernetes.io/pciBusID": {"string": "0000:3b:00.0"},
    },
    "capacity": {"memory": {"value": "143771Mi"}},
}
A100_OLD_DRIVER = {
    "name": "gpu-1",
    "attributes": {
        "type": {"string": "gpu"},
        "uuid": {"string": "GPU-9e6df7cb-64d4-5e53-2b1d-cee9e58aeb94"},
        "productName": {"string": "NVIDIA A100-SXM4-80GB"},
        "index": {"int": 1},
        "driverVersion": {"version": "535.104.5"},
    },
    "capacity": {"memory": {"value": "81920Mi"}},
}
MIG_1G = {
    "name": "gpu-2-mig-1g18gb-19-0",
    "attributes": {
        "type": {"string": "mig"},
        "uuid": {"string": "MIG-8949ea7d-9166-53ce-9bac-6c58262addf9"},
        "parentUUID": {"string": "GPU-0a1b2c3d-0000-0000-0000-000000000002"},
        "profile": {"string": "1g.18gb"},
        "productName": {"string": "NVIDIA H200"},
        "driverVersion": {"version": "570.172.8"},
    },
    "capacity": {"memory": {"value": "16384Mi"}, "multiprocessors": {"value": "16"}},
}
CHANNEL = {"name": "channel-0", "attributes": {"type": {"string": "channel"}, "id": {"int": 0}}}


def gpu_view(device=H200, driver=DRIVER):
    return device_view(driver, device)


# --------------------------------------------------------------------------------------------
# what the old evaluator covered: same verdicts


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ('device.driver == "gpu.nvidia.com"', True),
        ('device.driver == "gpu.nvidia.com" && device.attributes["gpusplit.io"].run == "r1"', True),
        ("device.attributes['gpusplit.io']['run'] == 'r1'", True),
        ('device.attributes["gpu.nvidia.com"].uuid == "GPU-0"', True),  # an unqualified name is the driver's
        ('device.attributes["gpu.nvidia.com"].missing == "x"', False),  # CEL: no such key -> no match
        ('device.attributes["gpu.nvidia.com"].missing == "x" || device.driver == "gpu.nvidia.com"', True),
        ('!(device.attributes["gpu.nvidia.com"].index > 3)', True),
        ('device.driver in ["a", "gpu.nvidia.com"]', True),
        ('"uuid" in device.attributes["gpu.nvidia.com"]', True),
    ],
)
def test_cel_subset(expression, expected):
    view = device_view(
        "gpu.nvidia.com",
        {
            "attributes": {
                "gpusplit.io/run": {"string": "r1"},
                "uuid": {"string": "GPU-0"},
                "index": {"int": 2},
            }
        },
    )
    assert cel_matches(expression, view) is expected


# The old evaluator refused these two; the library evaluates them as Kubernetes does: an unknown
# domain is an empty map, so `.b` is "no such key" (no match), and size() of no attributes is 0.
@pytest.mark.parametrize(
    ("expression", "expected"),
    [('device.attributes["a"].b.matches("x")', False), ("size(device.attributes) > 0", False)],
)
def test_cel_formerly_refused_now_evaluated(expression, expected):
    assert cel_matches(expression, device_view("gpu.nvidia.com", {})) is expected


@pytest.mark.parametrize(
    "expression",
    [
        'device.driver + "x"',  # a string, not a boolean
        "device.driver ==",  # does not compile
        "nosuchfunction(device.driver)",
        "device.nosuchfield == 1",  # the device has driver, attributes, capacity, allowMultipleAllocations
        'device.attributes["gpu.nvidia.com"].uuid.find("GPU-") == "GPU-"',  # regex library: not bridged
        'device.attributes["gpu.nvidia.com"].uuid > 1',  # no such overload
        "semver('570.172.08').major() == 570",  # not a strict semantic version
        "quantity('two').sign() == 1",
        "device.capacity['gpu.nvidia.com'].memory.isGreaterThan(semver('1.0.0'))",
    ],
)
def test_cel_outside_what_is_evaluated_is_refused(expression):
    with pytest.raises(CelUnsupported, match="selector"):
        cel_matches(expression, gpu_view())


# --------------------------------------------------------------------------------------------
# the DRA driver chart's DeviceClasses on the devices it publishes

CHART_SELECTORS = {
    "gpu.nvidia.com": "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'",
    "mig.nvidia.com": "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'",
    "vfio.gpu.nvidia.com": (
        "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'vfio'"
    ),
    "compute-domain-daemon.nvidia.com": (
        "device.driver == 'compute-domain.nvidia.com' && "
        "device.attributes['compute-domain.nvidia.com'].type == 'daemon'"
    ),
    "compute-domain-default-channel.nvidia.com": (
        "device.driver == 'compute-domain.nvidia.com' && "
        "device.attributes['compute-domain.nvidia.com'].type == 'channel' && "
        "device.attributes['compute-domain.nvidia.com'].id == 0"
    ),
}


@pytest.mark.parametrize(
    ("device_class", "selected"),
    [
        ("gpu.nvidia.com", {"gpu-0", "gpu-1"}),
        ("mig.nvidia.com", {"gpu-2-mig-1g18gb-19-0"}),
        ("vfio.gpu.nvidia.com", set()),
        ("compute-domain-daemon.nvidia.com", set()),
        ("compute-domain-default-channel.nvidia.com", {"channel-0"}),
    ],
)
def test_chart_device_classes_select_their_devices(device_class, selected):
    devices = [
        (DRIVER, H200),
        (DRIVER, A100_OLD_DRIVER),
        (DRIVER, MIG_1G),
        ("compute-domain.nvidia.com", CHANNEL),
    ]
    expression = CHART_SELECTORS[device_class]
    got = {dev["name"] for driver, dev in devices if cel_matches(expression, device_view(driver, dev))}
    assert got == selected


def _reference_dir():
    root = Path(__file__).resolve().parents[5]
    return Path(os.environ.get("GPUSPLIT_REFERENCE_DIR") or root.parent / "shared" / "reference")


def test_chart_selectors_above_are_the_charts():
    """The selectors above, read from the DRA driver chart's templates when the reference copy is here."""
    templates = _reference_dir() / "charts" / "dra-driver-nvidia-gpu" / "templates"
    files = sorted(templates.glob("deviceclass-*.yaml"))
    if not files:
        pytest.skip(f"no DRA driver chart under {templates}")
    found = {}
    for path in files:
        text = path.read_text()
        name = re.search(r"^\s*name:\s*(\S+)", text, re.M).group(1)
        found[name] = re.search(r'expression:\s*"(.*)"', text).group(1)
    assert found == CHART_SELECTORS


# --------------------------------------------------------------------------------------------
# Kubernetes' DRA environment: semver, quantity, strings, in, has, missing keys, cel.bind

A = "device.attributes['gpu.nvidia.com']"
C = "device.capacity['gpu.nvidia.com']"


@pytest.mark.parametrize(
    ("expression", "device", "expected"),
    [
        # productName and type
        (A + ".productName == 'NVIDIA H200' && " + A + ".type == 'gpu'", H200, True),
        (A + ".productName == 'NVIDIA H200' && " + A + ".type == 'gpu'", MIG_1G, False),
        (A + ".productName.startsWith('NVIDIA A100')", A100_OLD_DRIVER, True),
        (A + ".productName.matches('^NVIDIA H[0-9]+$')", H200, True),
        (A + ".productName.contains('H100')", H200, False),
        (A + ".productName.lowerAscii() == 'nvidia h200'", H200, True),  # strings extension
        (A + ".productName in ['NVIDIA H100', 'NVIDIA H200']", H200, True),
        # driverVersion as semver: numeric, not text order (570.172.8 < 570.172.10)
        (A + ".driverVersion.isGreaterThan(semver('550.0.0'))", H200, True),
        (A + ".driverVersion.isGreaterThan(semver('550.0.0'))", A100_OLD_DRIVER, False),
        (A + ".driverVersion.isLessThan(semver('570.172.10'))", H200, True),
        (A + ".driverVersion.compareTo(semver('570.172.8')) == 0", H200, True),
        (A + ".driverVersion == semver('570.172.8+build.1')", H200, True),  # build metadata ignored
        (A + ".cudaComputeCapability.major() >= 9", H200, True),
        (A + ".driverVersion.minor() == 172 && " + A + ".driverVersion.patch() == 8", H200, True),
        ("semver('1.0.0-alpha').isLessThan(semver('1.0.0'))", H200, True),
        ("semver('1.0.0-alpha.2').isLessThan(semver('1.0.0-alpha.10'))", H200, True),
        ("semver('v570.172', true) == semver('570.172.0')", H200, True),
        ("isSemver('570.172.08')", H200, False),
        ("isSemver('570.172.08', true)", H200, True),
        # memory capacity as quantity
        (C + ".memory.compareTo(quantity('80Gi')) >= 0", H200, True),
        (C + ".memory.compareTo(quantity('80Gi')) >= 0", A100_OLD_DRIVER, True),  # exactly 80Gi
        (C + ".memory.isGreaterThan(quantity('80Gi'))", A100_OLD_DRIVER, False),
        (C + ".memory.compareTo(quantity('80Gi')) >= 0", MIG_1G, False),
        (C + ".memory == quantity('16Gi')", MIG_1G, True),
        (C + ".memory.isLessThan(quantity('150G'))", H200, False),  # 143771Mi is 150.75 G
        (C + ".multiprocessors.asInteger() >= 14 && " + C + ".multiprocessors.isInteger()", MIG_1G, True),
        (C + ".memory.add(quantity('1Mi')).isGreaterThan(quantity('16Gi'))", MIG_1G, True),
        (C + ".memory.sub(1).isLessThan(quantity('16Gi'))", MIG_1G, True),
        ("quantity('200M').compareTo(quantity('0.2G')) == 0 && quantity('500m').sign() == 1", H200, True),
        ("quantity('1.5').asApproximateFloat() == 1.5 && !quantity('1.5').isInteger()", H200, True),
        ("isQuantity('1Gi') && !isQuantity('1 Gi')", H200, True),
        # has(), in, missing keys, unknown domains
        ("has(" + A + ".profile)", MIG_1G, True),
        ("has(" + A + ".profile)", H200, False),
        ("'profile' in " + A, H200, False),
        ("'example.com' in device.attributes", H200, False),
        ("has(device.attributes['example.com'].x)", H200, False),  # an unknown domain is an empty map
        ("size(device.capacity['example.com']) == 0", H200, True),
        ("size(device.attributes['example.com']) == 0 && !('example.com' in device.attributes)", H200, True),
        ("size(device.attributes) == 2 && size(device.attributes['example.com']) == 0", H200, True),
        (A + ".profile == '1g.18gb'", H200, False),  # no such key: not selected
        (A + ".profile == '1g.18gb' || " + A + ".type == 'gpu'", H200, True),
        ("!(" + A + ".profile == '1g.18gb')", H200, False),  # the error propagates through !
        ("device.attributes['resource.kubernetes.io'].pciBusID.startsWith('0000:3b')", H200, True),
        # numbers: Kubernetes compares int, uint and double across types
        (A + ".index < 1.5 && " + A + ".minor == 0u", H200, True),
        ("device.allowMultipleAllocations == false", H200, True),
        # cel.bind, macros
        ("cel.bind(g, " + A + ", g.type == 'gpu' && g.index == 0)", H200, True),
        ("cel.bind(g, " + A + ", cel.bind(v, g.driverVersion, v.major() == 570))", H200, True),
        ("['gpu', 'mig'].exists(t, " + A + ".type == t)", MIG_1G, True),
        ("device.attributes.exists(d, d == 'resource.kubernetes.io')", H200, True),
    ],
)
def test_kubernetes_dra_environment(expression, device, expected):
    assert cel_matches(expression, gpu_view(device)) is expected


def test_a_device_with_an_unparsable_version_cannot_be_evaluated():
    bad = {"name": "gpu-9", "attributes": {"type": {"string": "gpu"}, "driverVersion": {"version": "570.1"}}}
    with pytest.raises(CelUnsupported, match="not a semantic version"):
        cel_matches("device.driver == 'gpu.nvidia.com'", gpu_view(bad))


def test_cel_bind_is_rewritten_outside_string_literals_only():
    expand = cel_module._expand_bind
    assert expand("cel.bind(x, 1, x + 1) == 2") == "([1].map(x, x + 1)[0]) == 2"
    assert expand("d.name == 'cel.bind(a, b, c)'") == "d.name == 'cel.bind(a, b, c)'"
    assert expand("cel.bind(x, [1, 2], size(x))") == "([[1, 2]].map(x, size(x))[0])"
    assert expand("cel.bind(1, 2, 3)") == "cel.bind(1, 2, 3)"  # not a variable: left to the library


def test_unknown_domains_read_as_empty_maps_outside_string_literals_only():
    default = cel_module._default_domains
    assert default("device.attributes['a'].b == 1") == (
        "(('a') in device.attributes ? device.attributes['a'] : {}).b == 1"
    )
    assert default('device.capacity["a"].m') == '(("a") in device.capacity ? device.capacity["a"] : {}).m'
    assert default("x == 'device.attributes[0]'") == "x == 'device.attributes[0]'"
    nested = default("device.attributes[device.attributes['a'].k]")
    assert nested.count("in device.attributes ?") == 3  # the outer lookup's key, written twice, and itself


def test_each_selector_and_device_pair_is_evaluated_once(monkeypatch):
    view = gpu_view()
    expression = CHART_SELECTORS["gpu.nvidia.com"]
    assert cel_matches(expression, view) is True
    monkeypatch.setattr(cel_module, "_verdict", lambda *_: pytest.fail("evaluated again"))
    assert cel_matches(expression, view) is True
    assert expression in cel_module._PROGRAMS


def test_evaluation_errors_print_nothing(capsys):
    with pytest.raises(CelUnsupported):
        cel_matches("semver('bad').major() == 1", gpu_view())
    assert capsys.readouterr().err == ""


def test_without_the_library_selectors_are_not_evaluated_and_the_package_is_named(monkeypatch):
    real_import = builtins.__import__

    def no_cel(name, *args, **kwargs):
        if name == "cel" or name.startswith("cel."):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(cel_module, "_LIBRARY", [])
    monkeypatch.setattr(builtins, "__import__", no_cel)
    with pytest.raises(CelUnsupported, match="pip install common-expression-language==") as err:
        cel_matches(CHART_SELECTORS["gpu.nvidia.com"], gpu_view())
    assert CHART_SELECTORS["gpu.nvidia.com"] in str(err.value)
