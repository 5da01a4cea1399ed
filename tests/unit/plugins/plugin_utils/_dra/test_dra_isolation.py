"""Isolating a faulty GPU (plugins/plugin_utils/_dra/isolation.py): locating it, the targets of a run,
the planner input without it."""

from __future__ import annotations

import copy

import pytest

from ansible_collections.gpusplit.k8s.plugins.module_utils._dra.names import DraError
from ansible_collections.gpusplit.k8s.plugins.module_utils._gpu.health import compute_health
from ansible_collections.gpusplit.k8s.plugins.module_utils._split.planner import PlanError, plan_fleet
from ansible_collections.gpusplit.k8s.plugins.plugin_utils._dra.isolation import (
    isolate_facts,
    isolation_findings,
    isolation_fleet_input,
    isolation_targets,
    locate_gpu,
)
from ansible_collections.gpusplit.k8s.tests.unit.plugins.module_utils._dra.dra_testdata import (
    fixture,
    fleet_input,
)


def test_locate_gpu():
    fi = fleet_input()
    uuid = fi["gpu-b"]["facts"][1]["uuid"]
    found = locate_gpu(fi, uuid.upper().replace("GPU-", "gpu-"))
    assert found["host"] == "gpu-b" and found["node"] == "node-b.example.com" and found["mode"] == "dra"
    assert found["device"] == "gpu-6" and found["uuid"] == uuid
    with pytest.raises(DraError, match=r"not on any host .*gpu-a, gpu-b"):
        locate_gpu(fi, "GPU-00000000-0000-0000-0000-000000000000")
    with pytest.raises(DraError, match="MIG"):
        locate_gpu(fi, "MIG-12345678-1234-1234-1234-123456789abc")
    fi["gpu-c"] = copy.deepcopy(fi["gpu-b"])
    with pytest.raises(DraError, match="several hosts"):
        locate_gpu(fi, uuid)


def test_isolation_replans_without_the_gpu_and_leaves_the_input_alone():
    fi = fleet_input()
    before = copy.deepcopy(fi)
    victim = fi["gpu-a"]["facts"][2]["uuid"]  # in the Kubernetes share
    normal = plan_fleet({"gpu-a": fi["gpu-a"]})["nodes"]["gpu-a"]
    isolated = plan_fleet(isolation_fleet_input(fi, "gpu-a", victim, "xid 79"))["nodes"]["gpu-a"]
    assert fi == before
    assert normal["kubernetes_count"] == 3 and isolated["kubernetes_count"] == 2
    assert victim in normal["kubernetes_uuids"] and victim not in isolated["kubernetes_uuids"]
    assert isolated["host_uuids"] == normal["host_uuids"]
    [excluded] = isolated["excluded"]
    assert excluded["uuid"] == victim and "isolated by isolate_gpu.yml (xid 79)" in excluded["reason"]
    assert isolated["resources"]["nvidia.com/gpu"] == 2


def test_isolation_of_a_gpu_the_split_names_for_kubernetes_is_refused_by_the_planner():
    fi = fleet_input()
    victim = fi["gpu-a"]["facts"][1]["uuid"]
    fi["gpu-a"]["split"] = {"uuids": [victim]}
    with pytest.raises(PlanError, match="lost"):
        plan_fleet(isolation_fleet_input(fi, "gpu-a", victim))
    with pytest.raises(DraError):
        isolate_facts(fi["gpu-a"]["facts"], "GPU-00000000-0000-0000-0000-000000000000")
    with pytest.raises(DraError):
        isolation_fleet_input(fi, "gpu-z", victim)


def test_isolation_findings_follow_the_facts():
    doc = fixture("gpu-lost")
    for g in doc["gpus"]:
        g["health"] = compute_health(g, ["GPU is lost"] if g.get("lost") else [])
    found = {g["minor_number"]: isolation_findings(g) for g in doc["gpus"]}
    assert found[0] == []
    assert found[1] == ["2 uncorrected ECC error(s) since the driver loaded"]
    assert found[2] == ["GPU is lost"]
    assert found[3] == ["row remapping failed: the GPU cannot repair its memory any more"]
    # pending repairs and corrected errors alone are not a reason
    pending = {
        **doc["gpus"][0],
        "remapped_rows": {"pending": True, "failure": False},
        "ecc": {"uncorrected_volatile": 0},
    }
    assert isolation_findings(pending) == []


def test_isolation_targets_by_uuid_or_by_health():
    doc = fixture("gpu-lost")
    for g in doc["gpus"]:  # as the facts module reports them
        g["health"] = compute_health(g, ["GPU is lost"] if g.get("lost") else [])
    fi = {
        "sick": {"facts": doc["gpus"], "mode": "dra", "split": {"host_count": 0}},
        "well": {
            "facts": fixture("workstation")["gpus"],
            "mode": "device_plugin",
            "split": {"host_count": 1},
        },
    }
    targets = isolation_targets(fi, unhealthy=True)
    assert [t["minor_number"] for t in targets] == [1, 2, 3]
    assert {t["host"] for t in targets} == {"sick"}
    assert all(t["why"] for t in targets)
    [one] = isolation_targets(fi, uuid=doc["gpus"][0]["uuid"])
    assert one["minor_number"] == 0 and "named by gpusplit_isolate_uuid" in one["why"][0]
    with pytest.raises(DraError, match="one of the two"):
        isolation_targets(fi)
    with pytest.raises(DraError, match="one of the two"):
        isolation_targets(fi, uuid=doc["gpus"][0]["uuid"], unhealthy=True)
    assert isolation_targets({"well": fi["well"]}, unhealthy=True) == []


def test_isolating_several_gpus_of_one_host_excludes_each():
    fi = fleet_input()
    victims = [fi["gpu-a"]["facts"][2]["uuid"], fi["gpu-a"]["facts"][3]["uuid"]]
    isolated = plan_fleet(isolation_fleet_input(fi, "gpu-a", victims, "ecc"))["nodes"]["gpu-a"]
    assert isolated["kubernetes_count"] == 1
    assert sorted(e["uuid"] for e in isolated["excluded"]) == sorted(victims)
