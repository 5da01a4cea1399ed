"""Verification verdicts from plain data (the lab proves them end to end in test_split_lab.py)."""

from __future__ import annotations

from ansible_collections.gpusplit.k8s.plugins.module_utils._split import verify
from ansible_collections.gpusplit.k8s.plugins.module_utils._split.planner import plan_fleet

UUIDS = [f"GPU-0000000{i}-1111-2222-3333-444444444444" for i in range(4)]


def facts(processes=None):
    out = []
    for i, uuid in enumerate(UUIDS):
        out.append(
            {
                "uuid": uuid,
                "index": i,
                "minor_number": i,
                "pci_bus_id": f"00000000:{0x18 + i:02X}:00.0",
                "name": "NVIDIA H100 80GB HBM3",
                "memory_total_mib": 81559,
                "mig_mode": {"current": "disabled", "pending": "disabled"},
                "mig_devices": [],
                "health": {"status": "ok", "reasons": []},
                "processes": (processes or {}).get(i, []),
            }
        )
    return out


def plan(mode="device_plugin", split=None):
    return plan_fleet({"n1": {"facts": facts(), "mode": mode, "split": split or {"host_count": 1}}})


def node(allocatable):
    return {"metadata": {"name": "n1"}, "status": {"allocatable": {"nvidia.com/gpu": str(allocatable)}}}


def plugin_pod(
    name, ours=True, image="nvcr.io/nvidia/k8s-device-plugin:v0.20.0", container="nvidia-device-plugin-ctr"
):
    labels = {"app.kubernetes.io/name": "gpusplit-device-plugin"} if ours else {}
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {"nodeName": "n1", "containers": [{"name": container, "image": image}]},
        "status": {"phase": "Running"},
    }


def test_ok_when_allocatable_equals_the_share_and_the_plugin_runs():
    report = verify.verify_fleet(plan(), [node(3)], [plugin_pod("dp")], {"n1": facts()})
    assert report["nodes"][0]["verdict"] == verify.OK and report["ok"]


def test_more_advertised_than_planned_fails():
    entry = verify.verify_fleet(plan(), [node(4)], [plugin_pod("dp")], {})["nodes"][0]
    assert entry["verdict"] == verify.FAIL
    assert "advertises 4 nvidia.com/gpu but the Kubernetes share is 3" in entry["reasons"][0]


def test_fewer_advertised_or_no_plugin_is_drift():
    entry = verify.verify_fleet(plan(), [node(2)], [], {})["nodes"][0]
    assert entry["verdict"] == verify.DRIFT
    assert any("fewer than the planned 3" in r for r in entry["reasons"])
    assert any("split device-plugin pod is not running" in r for r in entry["reasons"])


def test_missing_node_fails():
    entry = verify.verify_fleet(plan(), [], [], {})["nodes"][0]
    assert entry["verdict"] == verify.FAIL and "not registered" in entry["reasons"][0]


def test_two_plugins_fail_but_gpu_feature_discovery_is_no_plugin():
    gfd = plugin_pod("gfd", ours=False, container="gpu-feature-discovery")
    assert (
        verify.verify_fleet(plan(), [node(3)], [plugin_pod("dp"), gfd], {})["nodes"][0]["verdict"]
        == verify.OK
    )
    stock = plugin_pod("stock", ours=False)
    entry = verify.verify_fleet(plan(), [node(3)], [plugin_pod("dp"), stock], {})["nodes"][0]
    assert entry["verdict"] == verify.FAIL and "2 device plugins run on the node" in entry["reasons"][0]


def test_processes_on_the_wrong_share_fail():
    host_proc = {"pid": 11, "name": "python", "used_memory_mib": 10, "in_container": False}
    pod_proc = {"pid": 12, "name": "python", "used_memory_mib": 10, "in_container": True}
    # GPU 0 is the host's (host_count 1), GPUs 1-3 Kubernetes'
    gpus = facts({0: [pod_proc], 1: [host_proc]})
    entry = verify.verify_fleet(plan(), [node(3)], [plugin_pod("dp")], {"n1": gpus})["nodes"][0]
    assert entry["verdict"] == verify.FAIL
    assert f"host process pid 11 (python) runs on Kubernetes GPU {UUIDS[1]}" in entry["reasons"]
    assert f"container process pid 12 (python) runs on host GPU {UUIDS[0]}" in entry["reasons"]


def test_mode_none_skips_process_checks_and_expects_nothing_advertised():
    gpus = facts({0: [{"pid": 12, "name": "x", "in_container": True}]})
    entry = verify.verify_fleet(plan("none", {}), [node(0)], [], {"n1": gpus})["nodes"][0]
    assert entry["verdict"] == verify.OK
    entry = verify.verify_fleet(plan("none", {}), [node(0)], [plugin_pod("stock", ours=False)], {})["nodes"][
        0
    ]
    assert (
        entry["verdict"] == verify.FAIL and "device plugin runs on a node in mode none" in entry["reasons"][0]
    )


def test_table_counts_verdicts():
    report = verify.verify_fleet(plan(), [node(4)], [plugin_pod("dp")], {})
    assert report["counts"] == {"OK": 0, "DRIFT": 0, "FAIL": 1}
    assert "1 node(s): 0 OK, 0 DRIFT, 1 FAIL" in verify.report_table(report)


def test_more_advertised_while_the_split_plugin_rolls_out_is_drift():
    old = plugin_pod("dp-old")
    old["spec"]["containers"][0]["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": ",".join(UUIDS)}]
    entry = verify.verify_fleet(plan(), [node(4)], [old], {})["nodes"][0]
    assert entry["verdict"] == verify.DRIFT and "rolling out" in entry["reasons"][0]
    new = plugin_pod("dp-new")
    new["spec"]["containers"][0]["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": ",".join(UUIDS[1:])}]
    assert verify.verify_fleet(plan(), [node(4)], [new], {})["nodes"][0]["verdict"] == verify.FAIL


def mig_plan():
    """GPU 0 of an A100 host with MIG on (two 1g.10gb, one 3g.40gb) plus GPU 1 whole, mixed strategy."""
    gpus = facts()[:2]
    gpus[0]["mig_mode"] = {"current": "enabled", "pending": "enabled"}
    gpus[0]["mig_devices"] = [
        {"uuid": f"MIG-aaaaaaaa-0000-4000-8000-00000000000{i}", "profile": p, "gpu_instance_id": i}
        for i, p in enumerate(("1g.10gb", "1g.10gb", "3g.40gb"))
    ]
    entry = {"facts": gpus, "mode": "device_plugin", "split": {"host_count": 0}, "mig_strategy": "mixed"}
    return plan_fleet({"n1": entry})


def mig_node(**allocatable):
    return {
        "metadata": {"name": "n1"},
        "status": {"allocatable": {k: str(v) for k, v in allocatable.items()}},
    }


def test_mixed_mig_every_resource_is_compared():
    p = mig_plan()
    assert p["nodes"]["n1"]["resources"] == {
        "nvidia.com/gpu": 1,
        "nvidia.com/mig-1g.10gb": 2,
        "nvidia.com/mig-3g.40gb": 1,
    }
    right = mig_node(**{"nvidia.com/gpu": 1, "nvidia.com/mig-1g.10gb": 2, "nvidia.com/mig-3g.40gb": 1})
    entry = verify.verify_fleet(p, [right], [plugin_pod("dp")], {})["nodes"][0]
    assert entry["verdict"] == verify.OK, entry
    assert entry["resources"] == entry["expected_resources"]
    assert "mig-1g.10gb 2/2" in verify.report_table(
        {"nodes": [entry], "counts": {"OK": 1, "DRIFT": 0, "FAIL": 0}}
    )


def test_mixed_mig_a_profile_advertised_beyond_the_plan_fails():
    # nvidia.com/gpu is right; a MIG profile has one device more than planned
    extra = mig_node(**{"nvidia.com/gpu": 1, "nvidia.com/mig-1g.10gb": 3, "nvidia.com/mig-3g.40gb": 1})
    entry = verify.verify_fleet(mig_plan(), [extra], [plugin_pod("dp")], {})["nodes"][0]
    assert entry["verdict"] == verify.FAIL
    assert entry["reasons"] == [
        "node advertises 3 nvidia.com/mig-1g.10gb but the Kubernetes share is 2: pods can be given host "
        "GPUs (is a privileged or unsplit device plugin running there?)"
    ]


def test_a_mig_resource_the_plan_does_not_have_fails_and_a_missing_one_drifts():
    stray = mig_node(**{"nvidia.com/gpu": 1, "nvidia.com/mig-1g.10gb": 2, "nvidia.com/mig-2g.20gb": 1})
    entry = verify.verify_fleet(mig_plan(), [stray], [plugin_pod("dp")], {})["nodes"][0]
    assert entry["verdict"] == verify.FAIL
    assert any(
        "advertises 1 nvidia.com/mig-2g.20gb but the Kubernetes share is 0" in r for r in entry["reasons"]
    )
    assert "node advertises 0 nvidia.com/mig-3g.40gb, fewer than the planned 1" in entry["reasons"]


def test_whole_gpu_plan_fails_on_any_advertised_mig_resource():
    leaked = {
        "metadata": {"name": "n1"},
        "status": {"allocatable": {"nvidia.com/gpu": "3", "nvidia.com/mig-1g.10gb": "7"}},
    }
    entry = verify.verify_fleet(plan(), [leaked], [plugin_pod("dp")], {})["nodes"][0]
    assert entry["verdict"] == verify.FAIL
    assert entry["expected_resources"] == {"nvidia.com/gpu": 3}


def test_a_node_plan_without_what_verify_reads_is_refused_naming_each_field():
    import pytest

    from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError

    bad = plan()
    node_plan = bad["nodes"]["n1"]
    del node_plan["node"]
    node_plan["kubernetes_uuids"] = "GPU-1,GPU-2"
    node_plan["excluded"] = [{"pci_bus_id": "0000:18:00.0"}]
    with pytest.raises(GpusplitError) as err:
        verify.verify_fleet(bad, [node(3)], [], {"n1": [{"uuid": "GPU-1"}, "GPU-2"]})
    assert err.value.errors == [
        "plan.nodes.n1.node: missing; expected the Kubernetes node name (a string) "
        "(is this a node plan of the gpu_plan role?)",
        "plan.nodes.n1.kubernetes_uuids: expected a list of GPU UUIDs, got string",
        "plan.nodes.n1.excluded: expected a list of GPUs, each with uuid, item 0 has no uuid",
        "facts.n1: expected a list of GPUs (nvidia_gpus), each a mapping, item 1 is string",
    ]


def test_verify_inputs_keep_every_read_and_decide_the_same():
    """The action plugin of fleet_verify sends the module only NODE_PLAN_READS of each node plan and
    GPU_FACT_READS of each GPU: verify_fleet given whole inputs reads nothing else, and decides the same on
    the cut ones, for every verdict."""
    from ansible_collections.gpusplit.k8s.tests.unit.fieldreads import recorded, uncovered

    fleet = plan_fleet(
        {
            "n1": {"facts": facts(), "mode": "device_plugin", "split": {"host_count": 1}},
            "n2": {"facts": facts(), "mode": "device_plugin", "split": {"host_count": 2}},
            "n3": {"facts": facts(), "mode": "none", "split": {}},
        }
    )
    host_proc = {"pid": 11, "name": "python", "used_memory_mib": 10, "in_container": False}
    pod_proc = {"pid": 12, "name": "python", "used_memory_mib": 10, "in_container": True, "container_id": "c"}
    gpu_facts = {"n1": facts({1: [host_proc]}), "n2": facts({0: [pod_proc]}), "n3": facts({2: [host_proc]})}
    nodes = [
        {"metadata": {"name": name}, "status": {"allocatable": {"nvidia.com/gpu": str(count)}}}
        for name, count in (("n1", 3), ("n2", 4))  # n2: more than planned; n3 is not registered
    ]
    pods = [plugin_pod("dp1"), {**plugin_pod("dp2"), "spec": {**plugin_pod("x")["spec"], "nodeName": "n2"}}]

    watched_plans, plan_reads = recorded(list(fleet["nodes"].values()))
    watched_gpus, gpu_reads = recorded([gpu for gpus in gpu_facts.values() for gpu in gpus])
    watched_plan = {**fleet, "nodes": dict(zip(fleet["nodes"], watched_plans, strict=True))}
    watched_facts = {host: watched_gpus[4 * i : 4 * i + 4] for i, host in enumerate(gpu_facts)}
    whole = verify.verify_fleet(watched_plan, nodes, pods, watched_facts)
    assert [n["verdict"] for n in whole["nodes"]] == [verify.FAIL, verify.FAIL, verify.FAIL]
    assert uncovered(plan_reads, list(verify.NODE_PLAN_READS)) == []
    assert uncovered(gpu_reads, list(verify.GPU_FACT_READS)) == []

    cut_plan, cut_facts = verify.verify_inputs(fleet, gpu_facts)
    assert verify.verify_fleet(cut_plan, nodes, pods, cut_facts) == whole
    assert set(cut_plan) == {"nodes"} and "mig_strategy" not in cut_plan["nodes"]["n1"]
    assert set(cut_plan["nodes"]["n1"]["gpus"][0]) == {"uuid", "share"}
    assert set(cut_facts["n1"][0]) == {"uuid", "processes"}


def test_verify_inputs_pass_bad_shapes_on_for_the_same_refusal():
    import pytest

    from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError

    bad = plan()
    node_plan = bad["nodes"]["n1"]
    del node_plan["node"]
    node_plan["kubernetes_uuids"] = "GPU-1,GPU-2"
    node_plan["gpus"] = "GPU-0"
    node_plan["excluded"] = [{"pci_bus_id": "0000:18:00.0"}]
    bad_facts = {"n1": [{"uuid": "GPU-1", "name": "x"}, "GPU-2"], "n2": "GPU-3"}
    with pytest.raises(GpusplitError) as whole:
        verify.verify_fleet(bad, [node(3)], [], bad_facts)
    cut_plan, cut_facts = verify.verify_inputs(bad, bad_facts)
    with pytest.raises(GpusplitError) as cut:
        verify.verify_fleet(cut_plan, [node(3)], [], cut_facts)
    assert cut.value.errors == whole.value.errors and len(whole.value.errors) == 6
    assert verify.verify_inputs("no plan", None) == ("no plan", None)
    assert verify.verify_inputs({"nodes": []}, []) == ({"nodes": []}, [])


class FakeClock:
    """The clock and the sleep of verify.wait_for_fleet: only sleeping moves the time on."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def fleet_of(count):
    """A plan of ``count`` device-plugin nodes (n0, n1, ...), each with 3 of its 4 GPUs for Kubernetes."""
    return plan_fleet(
        {
            f"n{i}": {"facts": facts(), "mode": "device_plugin", "split": {"host_count": 1}}
            for i in range(count)
        }
    )


def cluster_at(count, right):
    """The nodes and plugin pods of a fleet of ``count`` nodes whose first ``right`` nodes advertise their share
    (the others still 0, their plugin pod not there yet)."""
    nodes, pods = [], []
    for i in range(count):
        name = f"n{i}"
        nodes.append(
            {
                "metadata": {"name": name},
                "status": {"allocatable": {"nvidia.com/gpu": "3" if i < right else "0"}},
            }
        )
        if i < right:
            pod = plugin_pod(f"dp-{name}")
            pod["spec"]["nodeName"] = name
            pods.append(pod)
    return nodes, pods


def reader(plan_, clock, right_at):
    """read_report for wait_for_fleet: the fleet as it is at the clock's time, ``right_at(t)`` nodes right."""
    count = len(plan_["nodes"])

    def read_report():
        nodes, pods = cluster_at(count, right_at(clock()))
        return verify.verify_fleet(plan_, nodes, pods, {})

    return read_report


def test_the_wait_goes_on_while_nodes_keep_coming_right():
    # a big fleet's first run: the controller-manager brings one node's plugin up every 6 s, longer between
    # two nodes than wait_seconds but never stopping; all 10 nodes are waited for
    clock, plan_ = FakeClock(), fleet_of(10)
    report, waited, reads = verify.wait_for_fleet(
        reader(plan_, clock, lambda t: min(10, int(t // 6))), 8, clock=clock, sleep=clock.sleep
    )
    assert report["ok"], report["counts"]
    assert report["counts"] == {verify.OK: 10, verify.DRIFT: 0, verify.FAIL: 0}
    assert waited == 60.0 and reads == 31  # far past the 8 s that a wait counted from the start would stop at


def test_the_wait_ends_wait_seconds_after_the_last_node_came_right():
    # two nodes come right at 4 s and 10 s, the third never (a plugin that does not start)
    clock, plan_ = FakeClock(), fleet_of(3)
    report, waited, _ = verify.wait_for_fleet(
        reader(plan_, clock, lambda t: 0 if t < 4 else 1 if t < 10 else 2), 8, clock=clock, sleep=clock.sleep
    )
    assert report["counts"] == {verify.OK: 2, verify.DRIFT: 1, verify.FAIL: 0}
    assert [e["verdict"] for e in report["nodes"]] == [verify.OK, verify.OK, verify.DRIFT]
    assert waited == 18.0  # the last progress at 10 s, then 8 s


def test_a_node_that_drifts_again_does_not_extend_the_wait():
    # 2 nodes right, then one falls back and comes right again, over and over: no fewer nodes in DRIFT than the
    # lowest count seen, so the wait ends wait_seconds after that count was first read
    clock, plan_ = FakeClock(), fleet_of(3)
    report, waited, _ = verify.wait_for_fleet(
        reader(plan_, clock, lambda t: 0 if t < 2 else (2 if int(t // 2) % 2 else 1)),
        10,
        clock=clock,
        sleep=clock.sleep,
    )
    assert report["counts"][verify.DRIFT] >= 1
    assert waited == 12.0


def test_no_wait_reads_once():
    clock, plan_ = FakeClock(), fleet_of(2)
    report, waited, reads = verify.wait_for_fleet(
        reader(plan_, clock, lambda t: 1), 0, clock=clock, sleep=clock.sleep
    )
    assert (report["counts"][verify.DRIFT], waited, reads) == (1, 0.0, 1)


def test_a_fail_without_drift_is_reported_once_it_held_for_the_settle_time():
    clock = FakeClock()
    plan_ = fleet_of(1)

    def read_report():  # 4 GPUs advertised where the share is 3, from the start
        return verify.verify_fleet(plan_, [node(4) | {"metadata": {"name": "n0"}}], [], {})

    report, waited, _ = verify.wait_for_fleet(read_report, 60, clock=clock, sleep=clock.sleep)
    assert report["counts"][verify.FAIL] == 1
    # the first read at or past the settle time (reads every 2 s)
    assert waited == verify.FAIL_SETTLE_SECONDS + 1
    clock = FakeClock()
    _, waited, _ = verify.wait_for_fleet(read_report, 4, clock=clock, sleep=clock.sleep)
    assert waited == 4.0  # within a shorter wait
