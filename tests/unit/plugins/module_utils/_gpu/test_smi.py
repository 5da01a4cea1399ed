"""plugins/module_utils/_gpu/smi.py: what the nvidia-smi collector reads beside nvidia-smi."""

import pytest

from ansible_collections.gpusplit.k8s.plugins.module_utils._gpu import smi


@pytest.mark.parametrize(("text", "expected"), [("1\n", 1), ("-1\n", None), (None, None), ("x", None)])
def test_numa_node_from_sysfs(text, expected):
    assert smi.numa_node_from_sysfs(text) == expected
