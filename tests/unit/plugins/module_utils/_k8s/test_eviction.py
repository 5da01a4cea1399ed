"""Evicting pods (plugins/module_utils/_k8s/eviction.py): the input, which PodDisruptionBudgets
select a pod, what the apiserver's answers mean, when a pod is gone, the messages, and run()
driven with a fake API and a fake clock (the lab test drives the real apiserver)."""

from __future__ import annotations

import json

import pytest

from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s import eviction as ev

TOO_MANY = json.dumps(
    {
        "kind": "Status",
        "status": "Failure",
        "message": "Cannot evict pod as it would violate the pod's disruption budget.",
        "reason": "TooManyRequests",
        "details": {
            "causes": [
                {
                    "reason": "DisruptionBudget",
                    "message": "The disruption budget keep does not allow evicting pods currently",
                }
            ]
        },
        "code": 429,
    }
)


def pod(name, ns="team", uid=None, labels=None, node="lab-ws-01", deleting=None, phase="Running"):
    meta = {"name": name, "namespace": ns, "uid": uid or f"uid-{name}", "labels": labels or {}}
    if deleting:
        meta.update(deletionTimestamp=deleting, deletionGracePeriodSeconds=30)
    return {"metadata": meta, "spec": {"nodeName": node}, "status": {"phase": phase}}


def pdb(name, selector, ns="team", max_unavailable=None, min_available=None, allowed=0, generation=1):
    spec = {"selector": selector}
    if max_unavailable is not None:
        spec["maxUnavailable"] = max_unavailable
    if min_available is not None:
        spec["minAvailable"] = min_available
    return {
        "metadata": {"name": name, "namespace": ns, "generation": generation},
        "spec": spec,
        "status": {
            "disruptionsAllowed": allowed,
            "currentHealthy": 1,
            "desiredHealthy": 1,
            "expectedPods": 1,
            "observedGeneration": 1,
        },
    }


# --------------------------------------------------------------------------------------------
# input


def test_checked_request_keeps_namespace_name_uid_and_drops_repeats():
    request = ev.checked_request(
        [
            {"namespace": "team", "name": "a", "owner": "Job/x", "gpus": ["GPU-1"]},
            {"namespace": "team", "name": "a", "uid": "u1"},  # the same pod again, now with its uid
            {"namespace": "team", "name": "b", "uid": "u2"},
        ],
        wait_timeout=0,
        delay=0.5,
    )
    assert request == {
        "pods": [
            {"namespace": "team", "name": "a", "uid": "u1"},
            {"namespace": "team", "name": "b", "uid": "u2"},
        ],
        "wait_timeout": 0,
        "delay": 0.5,
    }


@pytest.mark.parametrize(
    ("pods", "wait_timeout", "delay", "messages"),
    [
        ("team/a", 300, 2, ["pods: expected a list of pods ({namespace, name, uid}), got string"]),
        (
            {"namespace": "team"},
            300,
            2,
            ["pods: expected a list of pods ({namespace, name, uid}), got mapping"],
        ),
        (
            ["team/a", None],
            300,
            2,
            [
                "pods[0]: expected a mapping with namespace, name and optionally uid, got string",
                "pods[1]: expected a mapping with namespace, name and optionally uid, got null",
            ],
        ),
        ([{"name": "a"}], 300, 2, ["pods[0].namespace is missing"]),
        (
            [{"namespace": 3, "name": ""}],
            300,
            2,
            [
                "pods[0].namespace: expected a non-empty string, got integer",
                "pods[0].name: expected a non-empty string, got an empty string",
            ],
        ),
        (
            [{"namespace": "t", "name": "a", "uid": ["u"]}],
            300,
            2,
            ["pods[0].uid: expected a non-empty string (or no uid), got list"],
        ),
        (
            [{"namespace": "t", "name": "a", "uid": "u1"}, {"namespace": "t", "name": "a", "uid": "u2"}],
            300,
            2,
            ["pods[1] t/a has uid u2, pods[0] names the same pod with uid u1"],
        ),
        ([], True, 2, ["wait_timeout: expected a whole number of seconds from 0 to 86400, got a boolean"]),
        (
            [],
            -1,
            0,
            [
                "wait_timeout: expected a whole number of seconds from 0 to 86400, got -1",
                "delay: expected a number of seconds above 0 and at most 86400, got 0",
            ],
        ),  # fmt: skip
        (
            [],
            "5",
            None,
            [
                "wait_timeout: expected a whole number of seconds from 0 to 86400, got '5'",
                "delay: expected a number of seconds above 0 and at most 86400, got null",
            ],
        ),  # fmt: skip
    ],
)
def test_bad_input_is_refused_naming_the_field(pods, wait_timeout, delay, messages):
    with pytest.raises(ev.EvictionError) as refused:
        ev.checked_request(pods, wait_timeout, delay)
    assert refused.value.errors == messages


# --------------------------------------------------------------------------------------------
# label selectors and budgets

LABELS = {"app": "trainer", "tier": "gpu", "team": "a"}


@pytest.mark.parametrize(
    ("selector", "matches"),
    [
        (None, False),  # no selector: nothing (policy/v1 and the eviction handler)
        ({}, True),  # empty selector: every pod of the namespace
        ({"matchLabels": {"app": "trainer"}}, True),
        ({"matchLabels": {"app": "trainer", "tier": "cpu"}}, False),
        ({"matchLabels": {"missing": ""}}, False),
        ({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["gpu", "x"]}]}, True),
        ({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["cpu"]}]}, False),
        ({"matchExpressions": [{"key": "nope", "operator": "In", "values": ["gpu"]}]}, False),
        ({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["cpu"]}]}, True),
        ({"matchExpressions": [{"key": "nope", "operator": "NotIn", "values": ["cpu"]}]}, True),
        ({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["gpu"]}]}, False),
        ({"matchExpressions": [{"key": "team", "operator": "Exists"}]}, True),
        ({"matchExpressions": [{"key": "nope", "operator": "Exists"}]}, False),
        ({"matchExpressions": [{"key": "nope", "operator": "DoesNotExist"}]}, True),
        ({"matchExpressions": [{"key": "team", "operator": "DoesNotExist"}]}, False),
        (
            {
                "matchLabels": {"app": "trainer"},
                "matchExpressions": [
                    {"key": "tier", "operator": "In", "values": ["gpu"]},
                    {"key": "team", "operator": "NotIn", "values": ["b"]},
                ],
            },
            True,
        ),
        (
            {
                "matchLabels": {"app": "trainer"},
                "matchExpressions": [{"key": "team", "operator": "In", "values": ["b"]}],
            },
            False,
        ),
        # selectors the apiserver cannot use match nothing (the eviction handler skips them)
        ({"matchExpressions": [{"key": "gpus", "operator": "Gt", "values": ["1"]}]}, False),
        ({"matchExpressions": [{"key": "tier", "operator": "In", "values": []}]}, False),
        ({"matchExpressions": [{"key": "tier", "operator": "Exists", "values": ["gpu"]}]}, False),
        ({"matchExpressions": ["tier"]}, False),
        ("app=trainer", False),
    ],
)
def test_label_selector_matches_as_the_apiserver_reads_it(selector, matches):
    assert ev.label_selector_matches(selector, LABELS) is matches


def test_budgets_selecting_a_pod_are_those_of_its_namespace_whose_selector_matches():
    target = pod("a", labels={"app": "trainer"})
    budgets = [
        pdb("z-all", {}, max_unavailable=1, allowed=1),
        pdb("keep", {"matchLabels": {"app": "trainer"}}, max_unavailable=0),
        pdb("other-app", {"matchLabels": {"app": "web"}}),
        pdb("other-ns", {"matchLabels": {"app": "trainer"}}, ns="elsewhere"),
        pdb("min", {"matchExpressions": [{"key": "app", "operator": "Exists"}]}, min_available="50%"),
    ]
    found = ev.budgets_selecting(target, budgets)
    assert [b["name"] for b in found] == ["keep", "min", "z-all"]
    assert found[0] == {
        "name": "keep",
        "namespace": "team",
        "max_unavailable": 0,
        "min_available": None,
        "disruptions_allowed": 0,
        "current_healthy": 1,
        "desired_healthy": 1,
        "expected_pods": 1,
        "processed": True,
    }
    assert ev.budget_text(found[1]) == (
        "PodDisruptionBudget team/min (minAvailable 50%, disruptionsAllowed 0, currentHealthy 1, desiredHealthy 1)"
    )


def test_a_budget_not_yet_processed_says_so():
    summary = ev.budget_summary(pdb("fresh", {}, max_unavailable=0, generation=2))
    assert summary["processed"] is False
    assert ev.budget_text(summary).endswith("not yet processed by the disruption controller)")


# --------------------------------------------------------------------------------------------
# answers, gone, messages


def test_a_429_is_refused_with_the_budgets_own_words():
    answer = ev.answer_from_error(429, "Too Many Requests", TOO_MANY)
    assert answer == {
        "outcome": "refused",
        "status": 429,
        "reason": "TooManyRequests",
        "message": "Cannot evict pod as it would violate the pod's disruption budget. "
        "(The disruption budget keep does not allow evicting pods currently)",
    }


@pytest.mark.parametrize(
    ("status", "body", "outcome", "why"),
    [
        (404, '{"message": "pods \\"a\\" not found", "reason": "NotFound"}', "gone", "not found"),
        (
            409,
            '{"message": "Operation cannot be fulfilled on Pod \\"a\\": the UID in the precondition (u1) does not '
            'match the UID in record (u2). The object might have been deleted and then recreated", "reason": "Conflict"}',
            "gone",
            "replaced: Operation cannot be fulfilled",
        ),
        (409, '{"message": "the object has been modified", "reason": "Conflict"}', "refused", None),
        (
            500,
            '{"message": "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."}',
            "refused",
            None,
        ),
        (403, b'pods "a" is forbidden: User "x" cannot create resource "pods/eviction"', "refused", None),
        (503, None, "refused", None),
    ],
)
def test_answers_other_than_429(status, body, outcome, why):
    answer = ev.answer_from_error(status, "Reason Phrase", body)
    assert answer["outcome"] == outcome and answer["status"] == status
    if why:
        assert answer["why"].startswith(why)
    assert answer["message"]  # never empty: the reason phrase at least
    if status == 403:
        assert answer["message"].startswith('pods "a" is forbidden')


@pytest.mark.parametrize(
    ("ref", "live", "why"),
    [
        ({"uid": None}, None, "not found"),
        ({"uid": "u1"}, None, "not found"),
        ({"uid": "u1"}, pod("a", uid="u2"), "replaced: the pod of that name now has uid u2"),
        ({"uid": "u1"}, pod("a", uid="u1"), None),
        ({"uid": None}, pod("a", uid="u2"), None),
        ({"uid": "u1"}, pod("a", uid="u1", deleting="2026-12-01T10:00:00Z"), None),  # still there
    ],
)
def test_gone_means_deleted_or_replaced(ref, live, why):
    assert ev.gone_reason({"namespace": "team", "name": "a", **ref}, live) == why


def test_refused_text_names_the_pod_its_node_the_answer_and_the_budgets():
    entry = {
        "namespace": "team",
        "name": "a",
        "node": "lab-ws-01",
        "status": 429,
        "reason": "TooManyRequests",
        "message": "Cannot evict pod as it would violate the pod's disruption budget.",
        "pdbs": [ev.budget_summary(pdb("keep", {}, max_unavailable=0))],
    }
    assert ev.refused_text(entry) == (
        "pod team/a on node lab-ws-01: the eviction is refused (HTTP 429 TooManyRequests): Cannot evict pod as it "
        "would violate the pod's disruption budget.; selected by PodDisruptionBudget team/keep (maxUnavailable 0, "
        "disruptionsAllowed 0, currentHealthy 1, desiredHealthy 1)"
    )
    entry.update(pdbs=[], status=403, reason="Forbidden", message="forbidden", node=None)
    assert ev.refused_text(entry) == (
        "pod team/a: the eviction is refused (HTTP 403 Forbidden): forbidden; "
        "no PodDisruptionBudget in namespace team selects it"
    )


def test_still_there_text_gives_phase_and_deletion():
    deleting = pod("a", uid="u1", deleting="2026-12-01T10:00:00Z")
    assert ev.still_there_text({"namespace": "team", "name": "a"}, deleting, 5) == (
        "pod team/a (uid u1) on node lab-ws-01 is still there after 5 s: phase Running, "
        "being deleted since 2026-12-01T10:00:00Z (grace period 30 s)"
    )
    assert ev.still_there_text(
        {"namespace": "team", "name": "b"}, pod("b", phase="Pending", node=None), 0
    ) == ("pod team/b (uid uid-b) is still there after 0 s: phase Pending, not being deleted")


# --------------------------------------------------------------------------------------------
# run() with a fake API


class Clock:
    def __init__(self):
        self.now = 1000.0
        self.sleeps = []

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += seconds


class FakeApi:
    """Pods by (namespace, name); an evicted pod stays for ``linger`` reads, then is gone.

    ``refuse`` maps a pod name to the error answers its evictions get, one per try, the last one
    repeated (dry runs and real ones alike unless ``refuse_real_only``).
    """

    def __init__(self, pods, pdbs=(), refuse=None, linger=1, refuse_real_only=False, never_gone=()):
        self.pods = {(p["metadata"]["namespace"], p["metadata"]["name"]): p for p in pods}
        self.pdbs = list(pdbs)
        self.refuse = {k: list(v) for k, v in (refuse or {}).items()}
        self.refuse_real_only = refuse_real_only
        self.linger = linger
        self.never_gone = set(never_gone)
        self.calls = []
        self.countdown = {}

    def read_pod(self, namespace, name):
        self.calls.append(("read", f"{namespace}/{name}"))
        key = (namespace, name)
        if key in self.countdown:
            if self.countdown[key] <= 0 and name not in self.never_gone:
                self.pods.pop(key, None)
                del self.countdown[key]
            else:
                self.countdown[key] -= 1
        return self.pods.get(key)

    def evict(self, ref, dry_run):
        self.calls.append(("dry-run" if dry_run else "evict", f"{ref['namespace']}/{ref['name']}"))
        answers = self.refuse.get(ref["name"])
        if answers and not (dry_run and self.refuse_real_only):
            answer = answers.pop(0) if len(answers) > 1 else answers[0]
            if answer is not None:
                return answer
        key = (ref["namespace"], ref["name"])
        live = self.pods.get(key)
        if live is None:
            return ev.answer_from_error(404, "Not Found", '{"reason": "NotFound", "message": "not found"}')
        if not dry_run:
            live["metadata"].update(deletionTimestamp="2026-12-01T10:00:00Z", deletionGracePeriodSeconds=30)
            self.countdown[key] = self.linger
        return {"outcome": "ok", "status": 201, "reason": "", "message": ""}

    def list_pdbs(self, namespace):
        self.calls.append(("list-pdbs", namespace))
        return [b for b in self.pdbs if b["metadata"]["namespace"] == namespace]

    def real_evictions(self):
        return [what for kind, what in self.calls if kind == "evict"]


REFUSED_429 = ev.answer_from_error(429, "Too Many Requests", TOO_MANY)


def evict(api, pods, check_mode=False, wait_timeout=30, delay=1):
    clock = Clock()
    result = ev.new_result()
    request = ev.checked_request(pods, wait_timeout, delay)
    try:
        ev.run(api, request, check_mode, result, clock, clock.sleep)
    except ev.EvictionError as exc:
        return result, exc, clock
    return result, None, clock


def refs(*names, ns="team"):
    return [{"namespace": ns, "name": n} for n in names]


def test_one_pod_of_two_is_evicted_and_waited_for():
    api = FakeApi([pod("a"), pod("b")], linger=2)
    result, error, clock = evict(api, refs("a"))
    assert error is None
    assert result["changed"] is True
    assert result["evicted"] == [{"namespace": "team", "name": "a", "uid": "uid-a", "node": "lab-ws-01"}]
    assert api.real_evictions() == ["team/a"]
    assert ("team", "b") in api.pods and ("team", "a") not in api.pods
    assert result["waited_seconds"] == 2 and clock.sleeps == [1, 1]
    # the dry run came before the eviction
    assert [c for c in api.calls if c[0] != "read"][:2] == [("dry-run", "team/a"), ("list-pdbs", "team")]


def test_a_budget_blocks_everything_and_is_named():
    budget = pdb("keep", {"matchLabels": {"app": "trainer"}}, max_unavailable=0)
    api = FakeApi(
        [pod("a", labels={"app": "trainer"}), pod("b", labels={"app": "web"})],
        pdbs=[budget],
        refuse={"a": [REFUSED_429]},
    )
    result, error, _clock = evict(api, refs("b", "a"))
    assert api.real_evictions() == []  # not even b, whose dry run passed
    assert result["changed"] is False and result["evicted"] == []
    assert [b["name"] for b in result["blocked"]] == ["a"]
    assert [p["name"] for p in result["blocked"][0]["pdbs"]] == ["keep"]
    assert error.errors[0] == (
        "nothing was evicted: the apiserver refuses the eviction of 1 of the 2 pod(s) still there "
        "(server-side dry run of each eviction)"
    )
    assert error.errors[1].startswith(
        "pod team/a on node lab-ws-01: the eviction is refused (HTTP 429 TooManyRequests)"
    )
    assert "The disruption budget keep does not allow evicting pods currently" in error.errors[1]
    assert (
        "selected by PodDisruptionBudget team/keep (maxUnavailable 0, disruptionsAllowed 0" in error.errors[1]
    )


# the apiserver's answer to an Eviction in a namespace being deleted (NamespaceLifecycle admission)
NAMESPACE_GOING = (
    '{"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": "pods \\"a\\" is forbidden: '
    'unable to create new content in namespace team because it is being terminated", "reason": "Forbidden", '
    '"details": {"name": "a", "kind": "pods", "causes": [{"reason": "NamespaceTerminating", '
    '"message": "namespace team is being terminated", "field": "metadata.namespace"}]}, "code": 403}'
)


@pytest.mark.parametrize(
    "body",
    [
        NAMESPACE_GOING,
        # the cause alone, or the message alone, says it
        '{"message": "forbidden", "details": {"causes": [{"reason": "NamespaceTerminating"}]}}',
        '{"message": "unable to create new content in namespace team because it is being terminated"}',
    ],
)
def test_a_namespace_being_deleted_means_the_pod_is_leaving(body):
    assert ev.answer_from_error(403, "Forbidden", body)["outcome"] == "terminating"
    # the same words from another status, or a cause of another reason, are a refusal
    assert ev.answer_from_error(500, "Internal Server Error", body)["outcome"] == "refused"
    other = '{"message": "forbidden", "details": {"causes": [{"reason": "FieldValueForbidden"}]}}'
    assert ev.answer_from_error(403, "Forbidden", other)["outcome"] == "refused"


@pytest.mark.parametrize("check_mode", [False, True])
def test_a_pod_whose_namespace_is_being_deleted_is_waited_for_not_refused(check_mode):
    going = ev.answer_from_error(403, "Forbidden", NAMESPACE_GOING)
    api = FakeApi([pod("a"), pod("b")], refuse={"a": [going]})
    api.countdown[("team", "a")] = 1  # the namespace's deletion removes it
    result, error, _clock = evict(api, refs("a", "b"), check_mode=check_mode)
    assert error is None
    assert [p["name"] for p in result["terminating"]] == ["a"]
    assert [p["name"] for p in result["would_evict"]] == ["b"]
    assert api.real_evictions() == ([] if check_mode else ["team/b"])
    if not check_mode:
        assert ("team", "a") not in api.pods and ("team", "b") not in api.pods


def test_check_mode_makes_only_dry_runs():
    api = FakeApi([pod("a"), pod("b")])
    result, error, clock = evict(api, refs("a", "b"), check_mode=True)
    assert error is None and result["changed"] is False
    assert [p["name"] for p in result["would_evict"]] == ["a", "b"] and result["evicted"] == []
    assert api.real_evictions() == [] and clock.sleeps == []
    assert {kind for kind, _what in api.calls} == {"read", "dry-run", "list-pdbs"}


def test_gone_and_replaced_pods_are_fine_and_change_nothing():
    api = FakeApi([pod("a", uid="new")])
    result, error, _clock = evict(api, [*refs("gone"), {"namespace": "team", "name": "a", "uid": "old"}])
    assert error is None and result["changed"] is False
    assert result["already_gone"] == [
        {"namespace": "team", "name": "gone", "uid": None, "why": "not found"},
        {
            "namespace": "team",
            "name": "a",
            "uid": "old",
            "why": "replaced: the pod of that name now has uid new",
        },
    ]
    assert api.real_evictions() == [] and ("dry-run", "team/a") not in api.calls


def test_a_pod_that_goes_between_the_read_and_the_eviction_is_already_gone():
    gone = ev.answer_from_error(404, "Not Found", '{"reason": "NotFound"}')
    api = FakeApi([pod("a")], refuse={"a": [None, gone]})  # the dry run passes, the eviction finds nothing
    result, error, _clock = evict(api, refs("a"))
    assert error is None and result["changed"] is False and result["evicted"] == []
    assert result["already_gone"][0]["why"] == "not found"


def test_a_terminating_pod_is_waited_for_not_evicted():
    api = FakeApi([pod("a", deleting="2026-12-01T10:00:00Z")])
    api.countdown[("team", "a")] = 1
    result, error, _clock = evict(api, refs("a"))
    assert error is None and result["changed"] is False
    assert [p["name"] for p in result["terminating"]] == ["a"]
    assert api.real_evictions() == [] and ("dry-run", "team/a") not in api.calls
    assert ("team", "a") not in api.pods


def test_a_real_429_is_retried_until_the_budget_allows_it():
    budget = pdb("one-at-a-time", {"matchLabels": {"app": "trainer"}}, max_unavailable=1, allowed=1)
    api = FakeApi(
        [pod("a", labels={"app": "trainer"}), pod("b", labels={"app": "trainer"})],
        pdbs=[budget],
        refuse={"b": [None, REFUSED_429, REFUSED_429, None]},  # dry run ok, then twice 429, then ok
        refuse_real_only=False,
    )
    result, error, clock = evict(api, refs("a", "b"))
    assert error is None and result["changed"] is True
    assert [p["name"] for p in result["evicted"]] == ["a", "b"]
    assert api.real_evictions() == ["team/a", "team/b", "team/b", "team/b"]
    assert len(result["warnings"]) == 1
    assert result["warnings"][0].startswith(
        "PodDisruptionBudget team/one-at-a-time (maxUnavailable 1, disruptionsAllowed 1, currentHealthy 1, "
        "desiredHealthy 1) selects 2 of the pods to evict (team/a, team/b) and allows 1 disruption(s) now"
    )


def test_a_real_429_until_the_deadline_fails_naming_what_was_evicted():
    api = FakeApi(
        [pod("a"), pod("b", labels={"app": "trainer"})],
        pdbs=[pdb("keep", {"matchLabels": {"app": "trainer"}})],
        refuse={"b": [REFUSED_429]},
        refuse_real_only=True,
    )
    result, error, _clock = evict(api, refs("a", "b"), wait_timeout=3)
    assert result["changed"] is True and [p["name"] for p in result["evicted"]] == ["a"]
    assert error.errors[0] == (
        "the evictions stopped: 1 eviction(s) still refused after 3 s (wait_timeout); evicted before that: team/a"
    )
    assert error.errors[1].startswith("pod team/b on node lab-ws-01: the eviction is refused (HTTP 429")
    assert [p["name"] for p in result["blocked"][0]["pdbs"]] == ["keep"]


def test_another_refusal_of_a_real_eviction_stops_at_once():
    forbidden = ev.answer_from_error(403, "Forbidden", '{"reason": "Forbidden", "message": "no"}')
    api = FakeApi([pod("a"), pod("b")], refuse={"b": [forbidden]}, refuse_real_only=True)
    result, error, clock = evict(api, refs("a", "b"))
    assert result["changed"] is True and clock.sleeps == []
    assert error.errors == [
        "the evictions stopped: pod team/b on node lab-ws-01: the eviction is refused (HTTP 403 Forbidden): no; "
        "no PodDisruptionBudget in namespace team selects it; evicted before that: team/a"
    ]


def test_pods_still_there_at_the_deadline_are_named_with_phase_and_deletion():
    api = FakeApi([pod("a"), pod("b")], never_gone={"a"})
    result, error, clock = evict(api, refs("a", "b"), wait_timeout=4, delay=2)
    assert result["changed"] is True and result["waited_seconds"] == 4
    assert error.errors == [
        "1 of the 2 evicted or terminating pod(s) are still there after 4 s (wait_timeout 4 s)",
        "pod team/a (uid uid-a) on node lab-ws-01 is still there after 4 s: phase Running, "
        "being deleted since 2026-12-01T10:00:00Z (grace period 30 s)",
    ]


def test_no_pods_no_requests():
    api = FakeApi([])
    result, error, _clock = evict(api, [])
    assert error is None and api.calls == [] and result == ev.new_result()
