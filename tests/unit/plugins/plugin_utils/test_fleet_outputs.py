"""A fleet plan older than gpus.json, or a report older than its plan, is not read (issue 18, case 6)."""

from __future__ import annotations

import pytest

from ansible_collections.gpusplit.k8s.plugins.plugin_utils.fleet_outputs import mtimes_of, stale_reason
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.role_steps import StepContext, run_step

T = 1_800_000_000  # 2027-01-15 08:00:00 UTC


def times(gpus=T, plan=T + 10, report=T + 20):
    return {"gpus.json": gpus, "fleet-plan.json": plan, "fleet-report.json": report}


def test_outputs_of_one_run_belong_together():
    assert stale_reason(times()) == ""
    assert stale_reason(times(gpus=None)) == ""  # written by an older release: nothing to compare
    assert stale_reason(times(plan=T, report=T)) == ""


def test_a_plan_older_than_the_gpus_is_stale_with_the_reason():
    reason = stale_reason(times(gpus=T + 30))
    assert reason.startswith(
        "fleet-plan.json (2027-01-15 08:00:10 UTC) is older than gpus.json (2027-01-15 08:00:30 UTC): "
        "the GPUs were discovered again after the plan was made"
    )
    assert reason.endswith("run playbooks/verify.yml again (it discovers, plans and verifies)")


def test_a_report_of_an_earlier_plan_is_stale():
    assert stale_reason(times(report=T + 5)).startswith(
        "fleet-report.json (2027-01-15 08:00:05 UTC) is older than fleet-plan.json (2027-01-15 08:00:10 UTC): "
        "it verified an earlier plan"
    )


def test_a_removed_plan_or_report_is_named():
    assert stale_reason(times(plan=None)).startswith(
        "there is no fleet-plan.json (a refused plan removes it)"
    )
    assert stale_reason(times(report=None)).startswith("there is no fleet-report.json")


def test_the_step_reads_a_stat_loop(tmp_path):
    results = [
        {"item": "gpus.json", "stat": {"exists": True, "mtime": T + 30}},
        {"item": "fleet-plan.json", "stat": {"exists": True, "mtime": T + 10}},
        {"item": "fleet-report.json", "stat": {"exists": False}},
    ]
    assert mtimes_of(results) == {"gpus.json": T + 30, "fleet-plan.json": T + 10, "fleet-report.json": None}
    stale = run_step("fleet_outputs_stale", {"stats": results}, StepContext())["reason"]
    assert stale.startswith("there is no fleet-report.json")


@pytest.mark.parametrize(
    ("results", "msg"),
    [
        ("gpus.json", "expected the results of a stat loop (a list), got string"),
        (
            [{"item": "gpus.json"}],
            "[0]: expected a stat result with item (the file name) and stat, got mapping",
        ),
        ([3], "[0]: expected a stat result with item (the file name) and stat, got integer"),
    ],
)
def test_the_step_refuses_what_is_no_stat_loop(results, msg):
    out = run_step("fleet_outputs_stale", {"stats": results}, StepContext())
    assert out["msg"] == f"gpusplit fleet_outputs_stale refused:\n- {msg}"
