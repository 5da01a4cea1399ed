"""The lab's device plugin after the nvidia-mig-parted stand-in changed a Kubernetes GPU's geometry: the node's
split plugin advertises the new MIG devices, and the host's GPUs, untouched in the fake NVML's fixture, never."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from ansible_collections.gpusplit.k8s.plugins.module_utils._split.planner import plan_node
from ansible_collections.gpusplit.k8s.plugins.plugin_utils import mig_apply
from ansible_collections.gpusplit.k8s.plugins.plugin_utils import split_render as render
from lab import deviceplugin as dp

ROOT = Path(__file__).resolve().parents[3]
FIXTURE = ROOT / "tests" / "fixtures" / "gpus" / "dgx-h100.json"
STANDIN = ROOT / "tests" / "fakes" / "bin" / "nvidia-mig-parted"


def test_the_split_plugin_advertises_the_new_mig_devices_and_no_host_gpu(tmp_path):
    doc = json.loads(FIXTURE.read_text())
    uuids = [g["uuid"] for g in doc["gpus"]]
    geometry = {uuids[3]: ["3g.40gb", "3g.40gb"]}
    before = plan_node(
        "gpu-a", doc["gpus"], "gpu_operator", {"host_count": 2}, "mixed", mig_geometry=geometry
    )
    got = mig_apply.decide(before, doc["gpus"])
    fixture, config = tmp_path / "dgx-h100.json", tmp_path / "config.json"
    fixture.write_text(FIXTURE.read_text())
    config.write_text(json.dumps(got["config"]))
    subprocess.run(
        [sys.executable, str(STANDIN), "apply", "-f", str(config), "-c", got["selected"]],
        env={**os.environ, "GPUSPLIT_FAKE_NVML_FIXTURE": str(fixture)},
        check=True,
        capture_output=True,
    )
    gpus = json.loads(fixture.read_text())["gpus"]
    # the next run's plan, from the GPUs as they are now (device_plugin: the geometry is what they have)
    after = plan_node("gpu-a", gpus, "device_plugin", {"host_count": 2}, "mixed", mig_geometry=geometry)
    assert after["resources"] == {"nvidia.com/gpu": 5, "nvidia.com/mig-3g.40gb": 2}
    container = render.render_split_daemonset(after, {})["spec"]["template"]["spec"]["containers"][0]
    seen = dp.visible_gpus(gpus, container)
    ids = dp.advertised_ids(seen, dp.mig_strategy(container))
    migs = [m["uuid"] for m in gpus[3]["mig_devices"]]
    assert ids["nvidia.com/mig-3g.40gb"] == migs
    assert sorted(ids["nvidia.com/gpu"]) == sorted(u for u in uuids[2:] if u != uuids[3])
    assert not {uuids[0], uuids[1]} & {i for v in ids.values() for i in v}  # the host's GPUs
    assert gpus[0] == doc["gpus"][0] and gpus[1] == doc["gpus"][1]
