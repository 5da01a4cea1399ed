"""Gang scheduling (PodGroups): quorum, missing group, a group that cannot be placed."""

from __future__ import annotations

from ansible_collections.gpusplit.k8s.plugins.module_utils._diagnose.messages import parse_gang_message
from ansible_collections.gpusplit.k8s.plugins.module_utils._diagnose.report import diagnose
from ansible_collections.gpusplit.k8s.plugins.module_utils._diagnose.rules import GANG, SHORTAGE, TAINT
from ansible_collections.gpusplit.k8s.tests.unit.plugins.module_utils._diagnose.diagnose_scene import (
    PRIVATE_TOL,
    ROLE_A,
    ROLE_B,
    event,
    fixture,
    member,
    only,
    pod,
    podgroup,
    scene_nodes,
)


def test_gang_quorum_not_present_from_objects_alone():
    pods = [member(f"trio-{i}", "trio", selector=ROLE_A) for i in range(2)]
    e = only(diagnose(pods, scene_nodes(), podgroups=[podgroup("trio", 3)]), "trio-0")
    assert e["class"] == GANG
    assert e["summary"].startswith("gang diag/trio: 2 of minCount 3 pods present (0 bound)")
    assert "create the 1 missing member pod(s)" in e["next"]
    assert e["message"] is None


def test_gang_group_missing():
    e = only(diagnose([member("m", "nope", selector=ROLE_A)], scene_nodes(), podgroups=[]), "m")
    assert e["class"] == GANG
    assert "PodGroup diag/nope does not exist" in e["summary"]


def test_gang_api_not_served_falls_back_to_the_pod():
    e = only(
        diagnose(
            [member("m", "trio", selector=ROLE_A, tolerations=[PRIVATE_TOL])], scene_nodes(), podgroups=None
        ),
        "m",
    )
    assert e["class"] == TAINT
    assert e["gang"] == {"group": "trio", "api_served": False}


def test_gang_quorum_present_but_unplaceable():
    said = fixture("gang-cannot-satisfy")
    assert parse_gang_message(said)["final"] is True
    holder = pod("holder", node_name="diag-b")
    pair = [
        member(f"pair-{i}", "pair", selector=ROLE_B, message=fixture("insufficient-gpu")) for i in range(2)
    ]
    report = diagnose(
        [holder, *pair], scene_nodes(), events=[event(pair[1], said)], podgroups=[podgroup("pair", 2)]
    )
    for i in range(2):
        e = only(report, f"pair-{i}")
        assert e["class"] == GANG
        assert e["cause"] == SHORTAGE
        assert e["summary"].startswith(
            f"gang diag/pair: 2 pods present (minCount 2), 0 bound, the group cannot be placed ({said})"
        )


def test_gang_podgroup_condition_alone():
    said = fixture("gang-podgroup-condition")
    cond = {
        "type": "PodGroupInitiallyScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": said,
    }
    holder = pod("holder", node_name="diag-b")
    pair = [member(f"pair-{i}", "pair", selector=ROLE_B) for i in range(2)]
    report = diagnose([holder, *pair], scene_nodes(), podgroups=[podgroup("pair", 2, conditions=[cond])])
    e = only(report, "pair-0")
    assert e["class"] == GANG and e["cause"] == SHORTAGE
    assert f"the group cannot be placed ({said})" in e["summary"]
    assert e["gang"]["condition"] == {"status": "False", "reason": "Unschedulable", "message": said}


def test_gang_basic_policy_is_an_ordinary_pod():
    pg = {"metadata": {"name": "b", "namespace": "diag"}, "spec": {"schedulingPolicy": {"basic": {}}}}
    e = only(
        diagnose(
            [member("m", "b", selector=ROLE_A, tolerations=[PRIVATE_TOL])], scene_nodes(), podgroups=[pg]
        ),
        "m",
    )
    assert e["class"] == TAINT
