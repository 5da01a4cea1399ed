"""The unsplit of a node whose Kubernetes share has MIG devices under strategy mixed: the plan names several
resources (nvidia.com/gpu and each nvidia.com/mig-<profile>), and the unsplit's plan takes every one back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ansible_collections.gpusplit.k8s.plugins.module_utils._split.planner import plan_node
from ansible_collections.gpusplit.k8s.plugins.plugin_utils import unsplit

ROOT = Path(__file__).resolve().parents[4]
GPUS = json.loads((ROOT / "tests" / "fixtures" / "gpus" / "a100-mig.json").read_text())["gpus"]
UUIDS = [g["uuid"] for g in sorted(GPUS, key=lambda g: g["index"])]


def mig_plan():
    node = plan_node(
        "lab-a100-01",
        GPUS,
        "device_plugin",
        {"host_count": 2},
        mig_strategy="mixed",
        mig_geometry={UUIDS[3]: ["3g.40gb", "3g.40gb"]},
    )
    assert isinstance(node["resource_name"], list) and len(node["resource_name"]) > 1  # what this is about
    return {"nodes": {"lab-a100-01": node}}


@pytest.mark.parametrize(
    ("to", "want"),
    [
        ("host", lambda names: dict.fromkeys(names, 0)),
        ("kubernetes", lambda names: {"nvidia.com/gpu": 4}),
    ],
)
def test_the_unsplit_plan_of_a_mixed_mig_node_takes_back_every_resource(to, want):
    plan = mig_plan()
    names = plan["nodes"]["lab-a100-01"]["resource_name"]
    got = unsplit.unsplit_plan(plan, to)["nodes"]["lab-a100-01"]
    assert got["resources"] == want(names)
    assert got["kubernetes_count"] == (4 if to == "kubernetes" else 0)


@pytest.mark.parametrize(
    ("name", "want"),
    [
        ("nvidia.com/gpu.shared", ["nvidia.com/gpu.shared"]),
        (None, ["nvidia.com/gpu"]),
        ([], ["nvidia.com/gpu"]),
        (["nvidia.com/mig-1g.10gb", 3], ["nvidia.com/mig-1g.10gb"]),
    ],
)
def test_the_resources_of_a_plan_whatever_the_planner_names(name, want):
    assert unsplit.resource_names({"resource_name": name}) == want
