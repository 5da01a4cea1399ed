"""One machine in the inventory twice (gpu1 and gpu1.example.com) is refused by the fleet planner before
anything changes, naming both hosts and the UUID: a GPU UUID belongs to one machine."""

from __future__ import annotations

import copy

import pytest

from ansible_collections.gpusplit.k8s.plugins.filter.split import fleet_plan
from ansible_collections.gpusplit.k8s.plugins.module_utils._split.fleet_identity import shared_gpu_problems
from ansible_collections.gpusplit.k8s.plugins.module_utils._split.planner import PlanError, plan_fleet
from ansible_collections.gpusplit.k8s.tests.unit.gpufacts import h100


def machine(machine_no, count=4):
    """The GPU facts of one machine: UUIDs of its own."""
    gpus = [h100(i) for i in range(count)]
    for g in gpus:
        g["uuid"] = g["uuid"].replace("GPU-00000001", f"GPU-{machine_no:08x}")
    return gpus


def entry(facts, mode="device_plugin", **more):
    return {"facts": facts, "mode": mode, "split": {"host_count": 1}, **more}


def refusals(hosts):
    with pytest.raises(PlanError) as exc:
        fleet_plan(hosts)
    return exc.value.errors


def test_one_machine_under_two_names_is_refused_naming_both_hosts_and_the_uuid():
    facts = machine(1, count=1)
    errors = refusals({"gpu1": entry(facts), "gpu1.example.com": entry(copy.deepcopy(facts))})
    assert errors == [
        f"gpu1: GPU {facts[0]['uuid']} is also reported by gpu1.example.com: one machine in the inventory "
        "under two names (or GPU facts copied from another host); a GPU UUID belongs to one machine, so keep "
        "one of these hosts"
    ]


def test_every_shared_uuid_is_counted_and_the_first_named():
    facts = machine(1)
    errors = refusals({"gpu1": entry(facts), "gpu1.example.com": entry(facts, mode="none")})
    uuids = sorted(g["uuid"] for g in facts)
    assert len(errors) == 1
    assert errors[0].startswith(
        f"gpu1: GPU {uuids[0]}, {uuids[1]}, {uuids[2]} and 1 more are also reported by"
    )


def test_uuids_are_compared_as_nvml_spells_them_in_any_case():
    facts = machine(7, count=2)
    shouted = machine(8, count=2)
    shouted[1]["uuid"] = facts[1]["uuid"].upper().replace("GPU-", "gpu-")
    errors = refusals({"a": entry(facts), "b": entry(shouted)})
    assert len(errors) == 1 and errors[0].startswith(f"a: GPU {facts[1]['uuid']} is also reported by b:")


def test_one_copied_gpu_among_own_ones_is_named_with_every_host():
    own = machine(2, count=2)
    copied = machine(3, count=2)
    own[1]["uuid"] = copied[0]["uuid"]
    hosts = {"c": entry(copied), "a": entry(own), "b": entry(copy.deepcopy(own))}
    errors = refusals(hosts)
    assert errors == [
        f"a: GPU {own[0]['uuid']} is also reported by b: one machine in the inventory under two names (or GPU "
        "facts copied from another host); a GPU UUID belongs to one machine, so keep one of these hosts",
        f"a: GPU {copied[0]['uuid']} is also reported by b, c: one machine in the inventory under two names (or "
        "GPU facts copied from another host); a GPU UUID belongs to one machine, so keep one of these hosts",
    ]


def test_the_refusal_comes_with_every_other_refusal_of_the_fleet():
    facts = machine(1)
    errors = refusals(
        {"gpu1": entry(facts), "gpu1.example.com": entry(facts), "bad": entry(machine(9), mode="x")}
    )
    assert [e.split(":")[0] for e in errors] == ["bad", "gpu1"]


def test_machines_with_their_own_gpus_are_planned():
    plan = fleet_plan({f"gpu{n}": entry(machine(n)) for n in range(1, 5)})
    assert sorted(plan["nodes"]) == ["gpu1", "gpu2", "gpu3", "gpu4"]
    assert shared_gpu_problems(plan["nodes"]) == []


def test_the_pure_planner_checks_when_asked():
    facts = machine(1)
    hosts = {"gpu1": entry(facts), "gpu1.example.com": entry(facts)}
    assert sorted(plan_fleet(hosts)["nodes"]) == ["gpu1", "gpu1.example.com"]
    with pytest.raises(PlanError, match="also reported by gpu1.example.com"):
        plan_fleet(hosts, distinct_gpus=True)
