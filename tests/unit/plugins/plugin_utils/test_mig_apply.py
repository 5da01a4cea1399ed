"""Applying a MIG geometry on the host: the UUID -> index re-check just before applying, the processes that stop
it, the config that lists only the Kubernetes share's GPUs, and the lab's nvidia-mig-parted stand-in applying
it to the fake NVML's state while the host GPUs stay exactly as they were."""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_collections.gpusplit.k8s.plugins.module_utils._split.planner import plan_node
from ansible_collections.gpusplit.k8s.plugins.plugin_utils import mig_apply

ROOT = Path(__file__).resolve().parents[4]
FIXTURE = ROOT / "tests" / "fixtures" / "gpus" / "dgx-h100.json"
STANDIN = ROOT / "tests" / "fakes" / "bin" / "nvidia-mig-parted"
SMI = ROOT / "tests" / "fakes" / "bin" / "nvidia-smi"
DOC = json.loads(FIXTURE.read_text())
UUIDS = [g["uuid"] for g in DOC["gpus"]]
# GPUs 0 and 1 for the host, 2..7 for Kubernetes; 2 and 3 get a geometry (GPU 0 runs a host process)
GEOMETRY = {UUIDS[3]: ["3g.40gb", "3g.40gb"], UUIDS[2]: ["1g.10gb", "1g.10gb", "2g.20gb"]}


def node_plan(geometry=GEOMETRY):
    # decide() reads only the geometry, the GPUs' shares and indices
    return plan_node(
        "gpu-a", DOC["gpus"], "device_plugin", {"host_count": 2}, mig_strategy="mixed", mig_geometry=geometry
    )


def test_the_config_lists_only_the_kubernetes_gpus_of_the_geometry_by_index():
    got = mig_apply.decide(node_plan(), DOC["gpus"])
    assert got["errors"] == []
    assert got["selected"] == "gpusplit-gpu-a"
    assert got["config"] == {
        "version": "v1",
        "mig-configs": {
            "gpusplit-gpu-a": [
                {"devices": [2], "mig-enabled": True, "mig-devices": {"1g.10gb": 2, "2g.20gb": 1}},
                {"devices": [3], "mig-enabled": True, "mig-devices": {"3g.40gb": 2}},
            ]
        },
    }
    assert [(c["uuid"], c["index"], c["now"]) for c in got["changes"]] == [
        (UUIDS[2], 2, "MIG disabled"),
        (UUIDS[3], 3, "MIG disabled"),
    ]


def test_a_gpu_that_moved_or_went_is_refused():
    gpus = copy.deepcopy(DOC["gpus"])
    gpus[2]["index"], gpus[0]["index"] = 0, 2  # GPU 2 now enumerates first: index 2 is a host GPU
    [error] = mig_apply.decide(node_plan(), gpus)["errors"]
    assert error.startswith(f"gpu-a: GPU {UUIDS[2]} moved from index 2 (this run's facts) to index 0;")
    assert error.endswith("Nothing was changed.")
    got = mig_apply.decide(node_plan(), [g for g in DOC["gpus"] if g["uuid"] != UUIDS[3]])
    assert got["errors"] == [
        f"gpu-a: GPU {UUIDS[3]} (index 3 in the plan) is not on the host any more; run gpusplit again so that "
        "the plan is made from the GPUs there are. Nothing was changed."
    ]
    assert got["changes"] == []


def test_processes_on_a_gpu_whose_geometry_changes_stop_it():
    gpus = copy.deepcopy(DOC["gpus"])
    gpus[2]["processes"] = [{"pid": 77, "name": "python", "in_container": False}]
    gpus[3]["processes"] = [{"pid": 88, "name": "python", "in_container": True}]
    host, pod = mig_apply.decide(node_plan(), gpus)["errors"]
    assert "runs host process(es) pid 77 (python)" in host and "gpusplit never stops the host's work" in host
    assert "in use by container process(es) pid 88" in pod and "gpusplit_resplit_policy" in pod
    # a GPU that already has its geometry is left alone, busy or not
    gpus[3]["mig_mode"] = {"current": "enabled", "pending": "enabled"}
    gpus[3]["mig_devices"] = [{"uuid": f"MIG-{n}", "profile": "3g.40gb"} for n in range(2)]
    assert len(mig_apply.decide(node_plan(), gpus)["errors"]) == 1


def run_standin(fixture, config, *args):
    path = fixture.parent / "config.json"
    path.write_text(json.dumps(config))
    env = {**os.environ, "GPUSPLIT_FAKE_NVML_FIXTURE": str(fixture)}
    return subprocess.run(
        [sys.executable, str(STANDIN), *args, "-f", str(path)], env=env, capture_output=True, text=True
    )


@pytest.fixture()
def fixture(tmp_path):
    path = tmp_path / "dgx-h100.json"
    path.write_text(FIXTURE.read_text())
    return path


def test_the_standin_applies_the_config_to_the_kubernetes_gpus_and_leaves_the_host_gpus_alone(fixture):
    got = mig_apply.decide(node_plan(), DOC["gpus"])
    proc = run_standin(fixture, got["config"], "apply", "-c", got["selected"])
    assert proc.returncode == 0, proc.stderr
    after = json.loads(fixture.read_text())["gpus"]
    assert len(after) == len(DOC["gpus"])
    for before, now in ((DOC["gpus"][i], after[i]) for i in range(len(after))):
        if before["uuid"] in GEOMETRY:
            assert now["mig_mode"]["current"] == "enabled"
            assert sorted(m["profile"] for m in now["mig_devices"]) == sorted(GEOMETRY[before["uuid"]])
        else:
            assert now == before  # the host's GPUs 0 and 1, and the Kubernetes GPUs without a geometry
    # what the next fact gathering sees: the stand-in nvidia-smi lists the new MIG devices
    smi = subprocess.run(
        [sys.executable, str(SMI), "-L"],
        env={**os.environ, "GPUSPLIT_FAKE_NVML_FIXTURE": str(fixture)},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert smi.count("MIG 3g.40gb") == 2 and smi.count("MIG 1g.10gb") == 2 and smi.count("MIG 2g.20gb") == 1
    # applied: the decision made from the new state changes nothing, and mig-parted's assert agrees
    assert mig_apply.decide(node_plan(), after)["changes"] == []
    assert run_standin(fixture, got["config"], "assert", "-c", got["selected"]).returncode == 0
    stamp = fixture.stat().st_mtime_ns
    assert run_standin(fixture, got["config"], "apply", "-c", got["selected"]).returncode == 0
    assert fixture.stat().st_mtime_ns == stamp  # nothing to do: the file is not written


def test_the_standin_refuses_what_mig_parted_refuses_and_changes_nothing(fixture):
    text = fixture.read_text()
    cases = [
        (
            {"version": "v2", "mig-configs": {"a": [{"devices": "all", "mig-enabled": False}]}},
            "unknown version: v2",
        ),
        ({"version": "v1", "mig-configs": {"a": [{"devices": [2], "mig-enabled": True}]}}, "'mig-devices'"),
        (
            {
                "version": "v1",
                "mig-configs": {"a": [{"devices": [2], "mig-enabled": False, "mig-devices": {"1g.10gb": 1}}]},
            },
            "MIG devices included when 'mig-enabled' is false",
        ),
        (
            {"version": "v1", "mig-configs": {"a": [{"devices": "some", "mig-enabled": False}]}},
            "invalid string",
        ),
        (
            {"version": "v1", "mig-configs": {"a": [{"devices": [2], "mig-enabled": True, "x": 1}]}},
            "unexpected field: x",
        ),
        ({"version": "v1", "mig-configs": {"a": []}}, "at least one entry in 'a' is required"),
        # GPU 0 runs a host process: busy
        (
            {
                "version": "v1",
                "mig-configs": {"a": [{"devices": [0], "mig-enabled": True, "mig-devices": {"7g.80gb": 1}}]},
            },
            "in use",
        ),
        (
            {
                "version": "v1",
                "mig-configs": {"a": [{"devices": [2], "mig-enabled": True, "mig-devices": {"3g.40gb": 3}}]},
            },
            "9 compute slices",
        ),
    ]
    for config, message in cases:
        proc = run_standin(fixture, config, "apply")
        assert proc.returncode == 1 and message in proc.stderr, (config, proc.stderr)
    two = {
        "version": "v1",
        "mig-configs": {n: [{"devices": "all", "mig-enabled": False}] for n in ("a", "b")},
    }
    assert "missing required flag 'selected-config'" in run_standin(fixture, two, "apply").stderr
    assert "selected mig-config not present: c" in run_standin(fixture, two, "apply", "-c", "c").stderr
    assert fixture.read_text() == text


def test_a_plan_of_the_wrong_shape_is_refused_by_name():
    for plan, where in (
        ({"node": "a", "gpus": [], "mig_geometry": ["1g.10gb"]}, "plan.mig_geometry: expected a mapping"),
        ({"node": "a", "gpus": "x", "mig_geometry": {"GPU-1": ["1g.10gb"]}}, "plan.gpus: expected"),
        ({"gpus": [], "mig_geometry": {"GPU-1": ["1g.10gb"]}}, "plan.node: expected"),
    ):
        got = mig_apply.decide(plan, DOC["gpus"])
        assert got["errors"][0].startswith(where) and got["changes"] == [] and got["config"] is None
    assert mig_apply.decide({**node_plan(), "mig_geometry": None}, DOC["gpus"]) == {
        "errors": [],
        "changes": [],
        "selected": None,
        "config": None,
    }
    assert mig_apply.missing_tool("gpu-a").startswith(
        "gpu-a: nvidia-mig-parted was not found on the host: install NVIDIA's nvidia-mig-parted"
    )


def test_the_host_step_keeps_the_config_and_the_boot_drop_in_and_its_command_applies_only_the_kubernetes_gpus(
    fixture, tmp_path
):
    plan = node_plan()
    assert [c["index"] for c in plan["mig_changes"]] == [2, 3]
    root = tmp_path / "root"
    got = mig_apply.host_step(plan, DOC["gpus"], str(root))

    def under_root(path):
        return Path(path).relative_to(root).as_posix()

    assert [c["index"] for c in got["gpus_to_change"]] == [2, 3]
    assert under_root(got["config_path"]) == "etc/gpusplit/mig-parted.yaml"
    assert json.loads(got["config_text"]) == mig_apply.decide(plan, DOC["gpus"])["config"]
    dropin = "etc/systemd/system/nvidia-mig-manager.service.d/zz-gpusplit.conf"
    assert under_root(got["dropin_path"]) == dropin
    # systemd reads the drop-ins in name order: gpusplit's selection comes after the package's all-disabled
    assert sorted([mig_apply.PACKAGE_DROPIN, Path(dropin).name])[-1] == "zz-gpusplit.conf"
    assert [under_root(d) for d in got["dirs"]] == ["etc/gpusplit", str(Path(dropin).parent)]
    # the drop-in names the file as the host sees it at boot, not under the scratch root
    assert 'Environment="MIG_PARTED_CONFIG_FILE=/etc/gpusplit/mig-parted.yaml"' in got["dropin_text"]
    assert 'Environment="MIG_PARTED_SELECTED_CONFIG=gpusplit-gpu-a"' in got["dropin_text"]
    assert got["argv"] == ["nvidia-mig-parted", "apply", "-f", got["config_path"], "-c", "gpusplit-gpu-a"]
    assert got["lines"] == [
        f"gpu-a: GPU 2 ({UUIDS[2]}): MIG disabled -> [1g.10gb, 1g.10gb, 2g.20gb]",
        f"gpu-a: GPU 3 ({UUIDS[3]}): MIG disabled -> [3g.40gb, 3g.40gb]",
    ]
    # the node's split plugin pods: the DaemonSet's own selector, in its namespace
    assert got["plugin_namespace"] == "kube-system"
    assert "gpusplit.io/node=gpu-a" in got["plugin_selector"].split(",")
    # the role writes the config, then runs the command: the stand-in applies it to the Kubernetes GPUs only
    Path(got["config_path"]).parent.mkdir(parents=True)
    Path(got["config_path"]).write_text(got["config_text"])
    env = {**os.environ, "GPUSPLIT_FAKE_NVML_FIXTURE": str(fixture)}
    proc = subprocess.run(
        [sys.executable, str(STANDIN), *got["argv"][1:]], env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    after = json.loads(fixture.read_text())["gpus"]
    assert after[:2] == DOC["gpus"][:2] and after[4:] == DOC["gpus"][4:]
    # the next run: the GPUs have the geometry, the plan has no change, and the step runs nothing
    assert (
        plan_node(
            "gpu-a", after, "device_plugin", {"host_count": 2}, mig_strategy="mixed", mig_geometry=GEOMETRY
        )["mig_changes"]
        == []
    )
    again = mig_apply.host_step(plan, after, str(tmp_path / "root"))
    assert again["gpus_to_change"] == [] and again["config_text"] == got["config_text"]


def test_the_host_step_refuses_with_every_message_before_anything():
    gpus = copy.deepcopy(DOC["gpus"])
    gpus[2]["processes"] = [{"pid": 77, "name": "python", "in_container": False}]
    with pytest.raises(mig_apply.MigApplyError) as exc:
        mig_apply.host_step(node_plan(), gpus)
    [message] = exc.value.errors
    assert "runs host process(es) pid 77 (python)" in message
    for args, where in (
        (("x", []), "plan: expected the node's plan"),
        ((node_plan(), None), "gpus: expected the GPUs read on the host"),
        ((node_plan(), [], "relative"), "root (gpusplit_host_root): expected an absolute path"),
    ):
        with pytest.raises(mig_apply.MigApplyError, match=re.escape(where)):
            mig_apply.host_step(*args)
    # no geometry: nothing to do, no file
    assert mig_apply.host_step({**node_plan(), "mig_geometry": None}, DOC["gpus"]) == {
        "gpus_to_change": [],
        "config_path": None,
        "argv": [],
    }
