"""The unsplit's waits are bounded by seconds of wall clock, however long each read of the cluster takes, and its
verify says settled only when every node advertises what the unsplit leaves (plugins/plugin_utils/unsplit.py
poll_until and verify_report, the step unsplit_wait)."""

from __future__ import annotations

import pytest

from ansible_collections.gpusplit.k8s.plugins.plugin_utils import unsplit
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.role_steps import StepContext, run_step
from ansible_collections.gpusplit.k8s.tests.unit.plugins.plugin_utils.test_unsplit import live


class SlowCluster:
    """A clock that reads of the cluster and sleeps advance: each read takes ``read_seconds`` and answers the next
    of ``answers`` (the last one again once they run out)."""

    def __init__(self, answers, read_seconds=0.0):
        self.now = 1000.0
        self.answers = list(answers)
        self.read_seconds = read_seconds
        self.reads = []
        self.sleeps = []

    def clock(self):
        return self.now

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += seconds

    def run_module(self, name, args):
        self.reads.append(self.now)
        self.now += self.read_seconds
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        return {"resources": answer}

    def context(self):
        return StepContext(run_module=self.run_module, sleep=self.sleep, clock=self.clock)


ENTRY = {"node": "a", "resource": "nvidia.com/gpu", "expected": 8, "order": "split_first"}


def nodes_with(count):
    return [live("a", allocatable={"nvidia.com/gpu": str(count)})]


# ---------------------------------------------------------------------------------------------
# poll_until: a deadline, not a number of tries


@pytest.mark.parametrize("read_seconds", [0.0, 2.7, 9.5])
def test_a_wait_ends_within_its_seconds_plus_one_read_however_slow_the_reads(read_seconds):
    cluster = SlowCluster([["a"]], read_seconds)
    start = cluster.now
    left, seconds = unsplit.poll_until(
        lambda: cluster.run_module("k8s_info", {})["resources"], 120, 5, cluster.sleep, cluster.clock
    )
    took = cluster.now - start
    assert left == ["a"]
    assert 120 <= took <= 120 + read_seconds + 1e-9
    assert seconds == round(took, 1)
    # every read began by the deadline, and no sleep ran past it
    assert all(t <= start + 120 + 1e-9 for t in cluster.reads)
    assert all(s <= 5 for s in cluster.sleeps)


def test_the_tries_a_slow_cluster_allows_follow_from_the_seconds_not_from_the_delay():
    # 120 s at a delay of 5 s: a read every 5 s on a quick cluster (at 0, 5, ... 120); with reads of 2.7 s one
    # every 7.7 s (16 of them), and one last at the deadline
    quick, slow = SlowCluster([["a"]], 0.0), SlowCluster([["a"]], 2.7)
    for cluster in (quick, slow):
        unsplit.poll_until(
            lambda cluster=cluster: cluster.run_module("x", {})["resources"],
            120,
            5,
            cluster.sleep,
            cluster.clock,
        )
    assert len(quick.reads) == 25 and len(slow.reads) == 17
    assert slow.reads[-1] - slow.reads[0] == pytest.approx(120)


def test_a_wait_stops_at_the_first_read_that_finds_nothing_left():
    cluster = SlowCluster([["a"], ["a"], []], 2.7)
    left, seconds = unsplit.poll_until(
        lambda: cluster.run_module("x", {})["resources"], 120, 5, cluster.sleep, cluster.clock
    )
    assert left == [] and len(cluster.reads) == 3 and seconds == round(3 * 2.7 + 2 * 5, 1)


def test_a_wait_of_zero_seconds_reads_once():
    cluster = SlowCluster([["a"]], 2.7)
    left, _seconds = unsplit.poll_until(
        lambda: cluster.run_module("x", {})["resources"], 0, 5, cluster.sleep, cluster.clock
    )
    assert left == ["a"] and len(cluster.reads) == 1 and cluster.sleeps == []


# ---------------------------------------------------------------------------------------------
# the step unsplit_wait, verify


def test_verify_says_settled_only_when_every_node_advertises_what_is_expected():
    cluster = SlowCluster([nodes_with(0), nodes_with(6), nodes_with(8)], 2.7)
    out = run_step(
        "unsplit_wait",
        {"nodes": [ENTRY], "until": "verify", "wait_seconds": 120, "delay": 1, "gap_before": 3.0},
        cluster.context(),
    )
    assert out["ok"] and out["failure"] == "" and "msg" not in out
    assert out["lowest"] == {"a": 0}
    assert out["summary"][0] == f'allocatable settled after {out["seconds"]}s; lowest seen: {{"a": 0}}'
    gap = round(3.0 + out["seconds"], 1)
    assert out["summary"][1].startswith("gap on a (two device plugins of one resource share one socket")
    assert out["summary"][1].endswith(f"about {gap}s until the stock plugin advertised the GPUs")


def test_verify_that_does_not_settle_fails_naming_the_node_what_it_advertises_and_what_was_expected():
    cluster = SlowCluster([nodes_with(6)], 2.7)
    out = run_step(
        "unsplit_wait",
        {"nodes": [ENTRY], "until": "verify", "wait_seconds": 120, "delay": 1},
        cluster.context(),
    )
    assert not out["ok"] and out["left"] == ["a"]
    assert 120 <= out["seconds"] <= 122.7
    assert not any("settled after" in line or "gap on" in line for line in out["summary"])
    assert "allocatable did not settle within 120s" in out["summary"][0]
    assert "a advertises 6 nvidia.com/gpu, expected 8" in out["summary"][0]
    assert (
        out["failure"]
        == f"After {out['seconds']}s allocatable did not settle: a advertises 6 nvidia.com/gpu, expected 8."
    )
    assert out["msg"] == out["failure"]
    assert out["lines"] == ["a: nvidia.com/gpu allocatable 6, expected 8 (NOT as expected)"]


def test_verify_names_only_the_nodes_left_and_a_node_gone_from_the_cluster_as_advertising_nothing():
    entries = [ENTRY, {"node": "b", "resource": "nvidia.com/gpu", "expected": 0, "order": "split_only"}]
    cluster = SlowCluster([nodes_with(8)], 1.0)
    out = run_step(
        "unsplit_wait", {"nodes": entries, "until": "verify", "wait_seconds": 10}, cluster.context()
    )
    assert out["ok"]  # b is not in the cluster: it advertises 0, as expected
    entries[1]["expected"] = 4
    out = run_step(
        "unsplit_wait", {"nodes": entries, "until": "verify", "wait_seconds": 10}, cluster.context()
    )
    assert out["left"] == ["b"] and "a advertises" not in out["failure"]
    assert "b advertises 0 nvidia.com/gpu, expected 4" in out["failure"]


# ---------------------------------------------------------------------------------------------
# the other waits, and their settings


def test_a_wait_for_the_split_plugin_to_go_that_runs_out_says_where_it_is_left():
    pod = {
        "metadata": {
            "labels": {
                "app.kubernetes.io/managed-by": "gpusplit",
                "app.kubernetes.io/name": "gpusplit-device-plugin",
            }
        },
        "spec": {"nodeName": "a"},
    }
    cluster = SlowCluster([[pod]], 2.7)
    out = run_step(
        "unsplit_wait", {"nodes": [ENTRY], "until": "split_gone", "wait_seconds": 30}, cluster.context()
    )
    assert not out["ok"] and 30 <= out["seconds"] <= 32.7
    assert out["msg"] == f"after {out['seconds']}s (limit 30s) gpusplit's split plugin pod is still on a"


@pytest.mark.parametrize("value", [-1, "soon", True, 86401])
def test_a_wait_of_no_whole_seconds_is_refused_with_the_other_settings_before_any_change(value):
    with pytest.raises(unsplit.UnsplitError) as exc:
        unsplit.check_settings("kubernetes", host_files="wipe", wait=value)
    assert len(exc.value.errors) == 2
    assert any(e.startswith(f"gpusplit_unsplit_wait_seconds: {value!r}") for e in exc.value.errors)
    out = run_step("unsplit_settings", {"to": "kubernetes", "wait": value}, StepContext())
    assert out["failed"] and "gpusplit_unsplit_wait_seconds" in out["msg"]


def test_the_wait_setting_is_read_as_ansible_gives_it():
    assert unsplit.check_settings("kubernetes", wait="300")["wait"] == 300
    assert unsplit.check_settings("kubernetes")["wait"] == 120


def test_an_unknown_wait_is_refused_naming_the_choices():
    out = run_step("unsplit_wait", {"nodes": [ENTRY], "until": "forever"}, StepContext())
    assert out["failed"] and "helm, stock, split_gone, verify" in out["msg"]
