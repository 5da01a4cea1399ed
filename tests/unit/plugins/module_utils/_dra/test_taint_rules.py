"""Many DeviceTaintRules in one step (module_utils/_dra/taint_rules.py, the module device_taint_rule).

A simulated apiserver with a simulated kube-controller-manager: a rule's EvictionInProgress condition
for its present generation appears a few polls after the rule was written, and a NoExecute eviction
ends a few polls later. The clock is simulated too, so that the tests count the polls (the waits of
many rules overlap) instead of sleeping.
"""

from __future__ import annotations

import copy

import pytest

from ansible_collections.gpusplit.k8s.plugins.module_utils._dra import taint_rules
from ansible_collections.gpusplit.k8s.plugins.module_utils._dra.names import DraError

OPTS = {
    "state": "present",
    "wait": True,
    "wait_eviction": False,
    "wait_timeout": 30,
    "refresh": False,
    "report_first": True,
    "field_manager": "gpusplit",
}


class FakeClock:
    def __init__(self):
        self.t = 1000.0
        self.sleeps = 0

    def now(self):
        return self.t

    def sleep(self, seconds):
        self.sleeps += 1
        self.t += seconds


class FakeApi:
    """The rules by name. The controller reports on a generation ``report_after`` reads of the rule after
    it was written (never, for the names in ``silent``); a NoExecute eviction ends ``evict_after`` reads
    after its report."""

    def __init__(self, rules=(), report_after=2, evict_after=2, silent=()):
        self.rules = {r["metadata"]["name"]: copy.deepcopy(r) for r in rules}
        self.reads_since_write = dict.fromkeys(self.rules, 99)
        self.report_after, self.evict_after, self.silent = report_after, evict_after, set(silent)
        self.log = []

    def _controller(self, name):
        rule = self.rules[name]
        reads = self.reads_since_write[name]
        if name in self.silent or reads < self.report_after:
            return
        effect = rule["spec"]["taint"]["effect"]
        evicting = effect == "NoExecute" and reads < self.report_after + self.evict_after
        rule["status"] = {
            "conditions": [
                {
                    "type": "EvictionInProgress",
                    "status": "True" if evicting else "False",
                    "observedGeneration": rule["metadata"]["generation"],
                    "message": "1 published device selected. 0 allocated devices selected.",
                }
            ]
        }

    def get(self, name):
        self.log.append(("get", name))
        if name not in self.rules:
            return None
        self.reads_since_write[name] += 1
        self._controller(name)
        return copy.deepcopy(self.rules[name])

    def apply(self, definition, field_manager, dry_run=False):
        name = definition["metadata"]["name"]
        self.log.append(("apply-dry" if dry_run else "apply", name, definition["spec"]["taint"]["effect"]))
        old = self.rules.get(name)
        new = copy.deepcopy(definition)
        new["metadata"]["generation"] = (old["metadata"]["generation"] + 1) if old else 1
        new["status"] = copy.deepcopy((old or {}).get("status") or {})
        if not dry_run:
            self.rules[name] = new
            self.reads_since_write[name] = 0
        return copy.deepcopy(new)

    def delete(self, rule, dry_run=False):
        name = rule["metadata"]["name"]
        self.log.append(("delete-dry" if dry_run else "delete", name))
        if not dry_run:
            del self.rules[name]

    def writes(self):
        return [entry for entry in self.log if entry[0] in ("apply", "delete")]


def rule(name, effect="NoSchedule"):
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceTaintRule",
        "metadata": {"name": name},
        "spec": {
            "deviceSelector": {"device": "gpu-0"},
            "taint": {"key": "gpusplit.io/moving", "effect": effect},
        },
    }


def params(**over):
    return {"definition": None, "definitions": None, "name": None, **OPTS, **over}


def run(api, definitions, clock=None, check_mode=False, **over):
    opts = {**OPTS, **over}
    requests = taint_rules.checked(params(definitions=definitions, state=opts["state"]))
    return taint_rules.run_rules(api, requests, opts, check_mode=check_mode, clock=clock or FakeClock())


def test_many_rules_report_first_then_their_effect_with_the_waits_overlapping():
    api, clock = FakeApi(report_after=3), FakeClock()
    names = [f"moving-node-{i}-gpu-0" for i in range(10)]
    results = run(api, [rule(n) for n in names], clock)
    assert [r["name"] for r in results] == names
    assert all(r["action"] == "created" and r["changed"] for r in results)
    assert all(r["first_report"]["effect"] == "None" and r["first_report"]["current"] for r in results)
    assert all(r["report"]["effect"] == "NoSchedule" and r["report"]["current"] for r in results)
    # every probe (effect None) was written before the first effect asked for, and each rule twice
    writes = api.writes()
    assert [w[2] for w in writes] == ["None"] * 10 + ["NoSchedule"] * 10
    # two waits of three polls each, for all ten rules together: not ten times that
    assert clock.sleeps == 6


def test_an_unchanged_rule_is_not_written_and_not_awaited():
    live = rule("r1")
    api = FakeApi([dict(live, metadata={"name": "r1", "generation": 1})])
    api.get("r1")  # the controller has reported on it
    api.log.clear()
    clock = FakeClock()
    results = run(api, [rule("r1")], clock)
    assert results[0]["action"] == "unchanged" and not results[0]["changed"]
    assert api.writes() == [] and clock.sleeps == 0
    assert results[0]["first_report"] is None


def test_a_silent_controller_fails_naming_every_rule_it_did_not_report_on_and_keeps_the_effect_back():
    api, clock = FakeApi(silent={"b", "c"}), FakeClock()
    with pytest.raises(taint_rules.RuleWaitError) as failed:
        run(api, [rule("a"), rule("b"), rule("c")], clock)
    result = failed.value.result
    assert result["msg"] == (
        "DeviceTaintRules b, c were created with effect None to report first, but kube-controller-manager has not "
        "reported within 30s; effect NoSchedule was not applied (does it run the device-taint-eviction controller?)"
    )
    assert "effect NoSchedule was not applied" in result["msg"]
    assert result["changed"] is True
    assert [r["name"] for r in result["rules"]] == ["a", "b", "c"]
    # no effect other than None was written, on any rule
    assert {w[2] for w in api.writes()} == {"None"}


def test_wait_eviction_waits_until_the_eviction_of_every_rule_is_over():
    api, clock = FakeApi(report_after=1, evict_after=3), FakeClock()
    results = run(api, [rule("a", "NoExecute"), rule("b", "NoExecute")], clock, wait_eviction=True)
    assert all(r["report"]["status"] == "False" and r["report"]["current"] for r in results)


def test_a_rule_that_keeps_evicting_fails_with_the_reports_so_far():
    api, clock = FakeApi(report_after=1, evict_after=10**6), FakeClock()
    with pytest.raises(taint_rules.RuleWaitError) as failed:
        run(api, [rule("a", "NoExecute")], clock, wait_eviction=True, report_first=False, wait_timeout=5)
    result = failed.value.result
    assert result["msg"] == (
        "DeviceTaintRule a was created, but kube-controller-manager has not finished evicting within 5s "
        "(does it run the device-taint-eviction controller?)"
    )
    assert result["rules"][0]["report"]["status"] == "True"


def test_check_mode_dry_runs_every_rule_and_waits_for_nothing():
    api, clock = FakeApi(), FakeClock()
    results = run(api, [rule("a"), rule("b", "NoExecute")], clock, check_mode=True)
    assert [r["action"] for r in results] == ["created", "created"]
    assert api.writes() == [] and clock.sleeps == 0
    assert [e for e in api.log if e[0] == "apply-dry"] == [
        ("apply-dry", "a", "NoSchedule"),
        ("apply-dry", "b", "NoExecute"),
    ]


def test_absent_deletes_the_rules_there_and_waits_until_they_are_gone():
    api = FakeApi([dict(rule("a"), metadata={"name": "a", "generation": 1})])
    results = run(api, [rule("a"), rule("gone")], state="absent")
    assert [(r["name"], r["action"], r["changed"]) for r in results] == [
        ("a", "deleted", True),
        ("gone", "absent", False),
    ]
    assert "a" not in api.rules


def test_refresh_recreates_a_rule_that_is_already_as_asked():
    api = FakeApi([dict(rule("a"), metadata={"name": "a", "generation": 4})])
    results = run(api, [rule("a")], refresh=True)
    assert results[0]["action"] == "recreated"
    assert [w[0] for w in api.writes()] == ["delete", "apply"]


@pytest.mark.parametrize(
    ("definitions", "errors"),
    [
        ([rule("a"), rule("a")], ["definitions[1]: rule a is also definitions[0]"]),
        (
            [rule("a", "Evict"), "b", {"kind": "DeviceTaintRule"}],
            [
                "definitions[0]: nothing was applied: spec.taint.effect 'Evict' is not one of None, NoSchedule, "
                "NoExecute",
                "definitions[1]: expected a mapping, got string",
                "definitions[2]: give name, or a definition with metadata.name",
            ],
        ),
        ("a", ["definitions: expected a list, got string"]),
    ],
)
def test_every_bad_rule_is_refused_before_any_request(definitions, errors):
    with pytest.raises(DraError) as refused:
        taint_rules.checked(params(definitions=definitions))
    assert refused.value.errors == errors


def test_definitions_and_definition_are_not_both_taken():
    with pytest.raises(DraError, match="give definitions, or definition/name, not both"):
        taint_rules.checked(params(definitions=[rule("a")], definition=rule("b")))


def test_an_empty_list_changes_nothing_and_reads_nothing():
    assert run(None, []) == []
