"""A fleet plan made for other GPUs than gpus.json lists, or a report of another plan, is not read; decided by
the files' content (the report's plan_digest, the plan's GPUs), whatever the files' modification times."""

from __future__ import annotations

import json
import os

import pytest

from ansible_collections.gpusplit.k8s.plugins.plugin_utils.fleet_outputs import read_outputs, stale_reason
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.output_digest import json_digest
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.role_steps import StepContext, run_step

T = 1_800_000_000  # 2027-01-15 08:00:00 UTC
AGAIN = "run playbooks/verify.yml again (it discovers, plans and verifies)"
UUID_A, UUID_B = "GPU-aaaaaaaa-0000-0000-0000-000000000001", "GPU-bbbbbbbb-0000-0000-0000-000000000002"


def gpus(health_b="ok", uuid_b=UUID_B):
    return {
        "node-a": {
            "backend": "nvml",
            "gpus": [
                {"uuid": UUID_A, "health": {"status": "ok", "reasons": []}, "index": 0},
                {"uuid": uuid_b, "health": {"status": health_b, "reasons": []}, "index": 1},
            ],
        },
        "not-planned": {"backend": "nvml", "gpus": []},
    }


def plan():
    return {
        "nodes": {
            "node-a": {
                "mode": "device_plugin",
                "gpus": [
                    {"uuid": UUID_A, "health": "ok", "share": "host"},
                    {"uuid": UUID_B, "health": "ok", "share": "kubernetes"},
                ],
            }
        },
        "summary": {"hosts": 1},
        "warnings": [],
    }


def report(of=None):
    return {
        "nodes": [{"name": "node-a", "verdict": "OK"}],
        "ok": True,
        "plan_digest": json_digest(of or plan()),
    }


def outputs(**given):
    files = {"gpus.json": gpus(), "fleet-plan.json": plan(), "fleet-report.json": report()}
    files.update({k.replace("_", "-") + ".json": v for k, v in given.items()})
    return files


def write(out_dir, files, times=None):
    """The files as the playbooks write them (indented JSON, the plan's keys in the planner's order)."""
    for name, data in files.items():
        if data is not None:
            (out_dir / name).write_text(json.dumps(data, indent=2) + "\n")
            if times:
                os.utime(out_dir / name, (times[name], times[name]))


def test_outputs_of_one_run_belong_together():
    assert stale_reason(outputs()) == ""
    assert stale_reason(outputs(gpus=None)) == ""  # no discovery file: nothing to compare the plan with


@pytest.mark.parametrize(
    "times",
    [
        # a re-run rewrote gpus.json (its content changed) but not the plan or the report (theirs did not)
        {"gpus.json": T + 30, "fleet-plan.json": T + 10, "fleet-report.json": T + 20},
        # the report older than the plan: the plan file was touched, copied or restored from a backup
        {"gpus.json": T, "fleet-plan.json": T + 10, "fleet-report.json": T + 5},
        # all written in the same second
        {"gpus.json": T, "fleet-plan.json": T, "fleet-report.json": T},
    ],
)
def test_the_files_times_do_not_matter(tmp_path, times):
    files = outputs()
    files["gpus.json"]["node-a"]["driver_version"] = "570.1"  # rediscovered: other content, same GPUs
    write(tmp_path, files, times)
    read, unreadable = read_outputs(str(tmp_path))
    assert unreadable == ""
    assert stale_reason(read) == ""
    assert run_step("fleet_outputs_stale", {"dir": str(tmp_path)}, StepContext())["reason"] == ""


def test_the_plan_digest_is_the_same_for_the_file_read_back(tmp_path):
    reordered = dict(reversed(list(plan().items())))
    (tmp_path / "fleet-plan.json").write_text(json.dumps(reordered, indent=4, ensure_ascii=True))
    assert json_digest(json.loads((tmp_path / "fleet-plan.json").read_text())) == json_digest(plan())
    other = plan()
    other["nodes"]["node-a"]["gpus"][1]["share"] = "host"
    assert json_digest(other) != json_digest(plan())


def test_a_report_of_another_plan_is_stale():
    other = plan()
    other["nodes"]["node-a"]["mode"] = "dra"
    reason = stale_reason(outputs(fleet_report=report(of=other)))
    assert reason.startswith(
        "fleet-report.json verified another plan than fleet-plan.json (plan_digest sha256:"
    )
    assert reason.endswith(AGAIN)


def test_a_report_that_names_no_plan_is_stale():
    old = report()
    del old["plan_digest"]
    assert stale_reason(outputs(fleet_report=old)) == (
        f"fleet-report.json does not say which plan it verified (no plan_digest); {AGAIN}"
    )


@pytest.mark.parametrize(
    "found",
    [
        gpus(uuid_b="GPU-cccccccc-0000-0000-0000-000000000003"),  # another GPU in the slot
        gpus(health_b="lost"),  # a GPU that went bad after the plan
        {"not-planned": {"gpus": []}},  # the planned host not discovered
        {"node-a": {"backend": "nvml", "msg": "no driver"}},  # no GPU list
    ],
)
def test_a_plan_for_other_gpus_is_stale(found):
    reason = stale_reason(outputs(gpus=found))
    assert reason.startswith(
        "fleet-plan.json was made for other GPUs than gpus.json lists (node-a): the GPUs were discovered again "
        "after the plan was made"
    )
    assert reason.endswith(AGAIN)


def test_a_removed_plan_or_report_is_named():
    assert stale_reason(outputs(fleet_plan=None)).startswith(
        "there is no fleet-plan.json (a refused plan removes it)"
    )
    assert stale_reason(outputs(fleet_report=None)).startswith("there is no fleet-report.json")


def test_the_step_reads_the_folder(tmp_path):
    write(tmp_path, {"gpus.json": gpus(), "fleet-plan.json": plan()})
    assert run_step("fleet_outputs_stale", {"dir": str(tmp_path)}, StepContext())["reason"].startswith(
        "there is no fleet-report.json"
    )
    (tmp_path / "fleet-report.json").write_text("{not json")
    reason = run_step("fleet_outputs_stale", {"dir": str(tmp_path)}, StepContext())["reason"]
    assert reason.startswith("fleet-report.json cannot be read as JSON (Expecting property name")


@pytest.mark.parametrize("value", [None, 3, ""])
def test_the_step_refuses_what_is_no_folder(value):
    out = run_step("fleet_outputs_stale", {"dir": value}, StepContext())
    assert out["msg"].startswith("gpusplit fleet_outputs_stale refused:\n- dir: expected the output folder")
