"""The unsplit takes away the split plugin's config file of a shared node with its DaemonSet."""

from __future__ import annotations

from ansible_collections.gpusplit.k8s.plugins.plugin_utils import unsplit
from ansible_collections.gpusplit.k8s.tests.unit.plugins.plugin_utils.test_unsplit import (
    STOCK_EXCLUDED,
    live,
    one_node_plan,
)


def test_the_prune_takes_the_config_maps_with_the_daemonsets():
    plan = one_node_plan()
    name = plan["nodes"]["a-dp"]["node"]
    out = unsplit.cluster_plan(plan, "kubernetes", [live(name)], [STOCK_EXCLUDED])
    assert [(p["api_version"], p["kind"]) for p in out["prune"]] == [
        ("apps/v1", "DaemonSet"),
        ("v1", "ConfigMap"),
    ]
    selectors = {p["label_selector"] for p in out["prune"]}
    assert selectors == {
        f"app.kubernetes.io/managed-by=gpusplit,app.kubernetes.io/name=gpusplit-device-plugin,gpusplit.io/node in ({name})"
    }
