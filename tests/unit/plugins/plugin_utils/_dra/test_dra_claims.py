"""Claims and tolerations (plugins/plugin_utils/_dra/claims.py): refusals. The rendered claims: tests/unit/plugins/plugin_utils/_dra/test_dra_render.py."""

from __future__ import annotations

import pytest

from ansible_collections.gpusplit.k8s.plugins.module_utils._dra.names import DraError
from ansible_collections.gpusplit.k8s.plugins.plugin_utils._dra.claims import claim_context


@pytest.mark.parametrize(
    "bad",
    [
        {"operator": "Sometimes"},
        {"key": "a", "operator": "Exists", "value": "x"},
        {"operator": "Equal", "value": "x"},
        {"key": "bad key!"},
        {"key": "a", "effect": "PreferNoSchedule"},
        {"key": "a", "effect": "NoSchedule", "tolerationSeconds": 5},
        {"key": "a", "colour": "red"},
        "a",
    ],
)
def test_bad_tolerations_are_refused(bad):
    with pytest.raises(DraError):
        claim_context("c", "ns", tolerations=[bad])


def test_bad_claims_are_refused():
    for kwargs in ({"count": 0}, {"count": True}, {"kind": "Pod"}):
        with pytest.raises(DraError):
            claim_context("c", "ns", **kwargs)
