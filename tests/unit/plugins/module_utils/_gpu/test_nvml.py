"""plugins/module_utils/_gpu/nvml.py: what NVML hands back, as the facts spell it."""

import pytest

from ansible_collections.gpusplit.k8s.plugins.module_utils._gpu import nvml


@pytest.mark.parametrize(
    ("value", "expected"), [(12080, "12.8"), (12020, "12.2"), (11040, "11.4"), (13000, "13.0"), (0, None)]
)
def test_cuda_version_string(value, expected):
    assert nvml.cuda_version_string(value) == expected


def test_bytes_to_mib_floors():
    assert nvml.bytes_to_mib(81559 * nvml.MIB + 393216) == 81559
    assert nvml.bytes_to_mib(None) is None


def test_mig_profile_from_name():
    assert nvml.mig_profile_from_name("NVIDIA A100-SXM4-80GB MIG 1g.10gb") == "1g.10gb"
    assert nvml.mig_profile_from_name(b"NVIDIA H100 80GB HBM3 MIG 1g.10gb+me") == "1g.10gb+me"
    assert nvml.mig_profile_from_name("NVIDIA A100-SXM4-80GB") is None
