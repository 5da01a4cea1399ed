"""Bad input as a user runs the playbooks on the lab: a playbook with no extra variables, one machine in the
inventory twice, and out/ files whose times say nothing about which run wrote them."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from ansible_output import ansible_playbook, changed_tasks, inventory_copy

ROOT = Path(__file__).resolve().parents[2]
INVENTORY = ROOT / "inventory" / "lab"
WORKSTATION = ROOT / "tests" / "fixtures" / "gpus" / "workstation.json"

pytestmark = pytest.mark.integration


def test_guard_yml_with_no_extra_variables_succeeds(lab):
    """As a user runs it: the role's own defaults pass its own argument spec. The guard it installs covers
    every namespace but the allowed ones, so it is taken away again: later tests start pods that set
    NVIDIA_VISIBLE_DEVICES (stand-in device plugins) in namespace default."""
    try:
        proc = ansible_playbook("guard.yml", INVENTORY)
        assert proc.returncode == 0, proc.stdout[-4000:]
        assert "Validating arguments against arg spec 'main'" in proc.stdout
        assert "must be one of" not in proc.stdout
    finally:
        gone = ansible_playbook("guard.yml", INVENTORY, "-e", "gpusplit_guard_state=absent")
    assert gone.returncode == 0, gone.stdout[-4000:]


def test_one_machine_in_the_inventory_twice_is_refused_before_any_change(lab, tmp_path):
    def edit(hosts):
        hosts["lab-ws-01.example.com"] = dict(hosts["lab-ws-01"])

    out = tmp_path / "out"
    proc = ansible_playbook(
        "split.yml",
        inventory_copy(tmp_path, edit),
        "-e",
        "gpusplit_hosts=lab-ws-01,lab-ws-01.example.com",
        "-e",
        "gpusplit_distinct_gpu_uuids=true",
        "-e",
        f"gpusplit_out_dir={out}",
    )
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0, text[-4000:]
    uuid = json.loads(WORKSTATION.read_text())["gpus"][0]["uuid"].lower().replace("gpu-", "GPU-")
    assert "lab-ws-01: GPU " in text and "also reported by lab-ws-01.example.com" in text, text[-4000:]
    assert uuid in text, (uuid, text[-4000:])
    assert not (out / "fleet-plan.json").exists()
    # nothing changed but the discovery's own file on the controller
    assert [t for t in changed_tasks(proc.stdout) if "gpus.json" not in t] == [], changed_tasks(proc.stdout)


def picture_line(proc):
    return next(line for line in proc.stdout.splitlines() if "fleet picture:" in line)


def test_site_then_verify_then_diagnose_draws_the_picture_whatever_the_times(lab, tmp_path):
    out = tmp_path / "out"
    out_dir = ("-e", f"gpusplit_out_dir={out}")
    for playbook in ("site.yml", "verify.yml"):
        proc = ansible_playbook(playbook, INVENTORY, *out_dir, timeout=900)
        assert proc.returncode == 0, (playbook, proc.stdout[-4000:])
    proc = ansible_playbook("diagnose.yml", INVENTORY, *out_dir)
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert "fleet picture: " in picture_line(proc) and "no fleet picture" not in proc.stdout

    # times that say the opposite of the runs: the report oldest, the discovery newest
    for name, when in (("fleet-report.json", 1_000_000_000), ("fleet-plan.json", 1_500_000_000)):
        os.utime(out / name, (when, when))
    os.utime(out / "gpus.json", None)
    proc = ansible_playbook("diagnose.yml", INVENTORY, *out_dir)
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert "no fleet picture" not in proc.stdout, picture_line(proc)

    # a plan that is not the one the report verified: named, not drawn
    plan = json.loads((out / "fleet-plan.json").read_text())
    plan["nodes"]["lab-ws-01"]["mode"] = "none"
    (out / "fleet-plan.json").write_text(json.dumps(plan, indent=2) + "\n")
    proc = ansible_playbook("diagnose.yml", INVENTORY, *out_dir)
    assert "no fleet picture: fleet-report.json verified another plan than fleet-plan.json" in proc.stdout, (
        picture_line(proc)
    )
