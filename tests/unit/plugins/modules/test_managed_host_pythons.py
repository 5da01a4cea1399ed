"""The GPU host modules run by Ansible on a managed host whose Python is 3.8 (ansible-core 2.19 only), 3.9 or 3.10 (ansible_python_interpreter),
with the standard library only: nvidia_toolkit_config edits (and re-edits nothing), nvidia_gpu_facts reads the
stand-in nvidia-smi and gpu_pod_resources reads a real gRPC server (grpcio, in the controller's Python). Each of those Pythons that this machine has and the running ansible-core supports on targets
(tools/multi_python_tests.py finds them, pyproject.toml's support matrix names them) is used."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ansible_collections.gpusplit.k8s.tests.unit.tool_module import load_tool

ROOT = Path(__file__).resolve().parents[4]
BIN = Path(sys.executable).parent
FAKES = ROOT / "tests" / "fakes"
TOOLKIT_FIXTURE = ROOT / "tests" / "fixtures" / "nvidia-container-toolkit" / "config.toml"
GPU_FIXTURE = ROOT / "tests" / "fixtures" / "gpus" / "dgx-h100.json"


def _tool():
    return load_tool("multi_python_tests")


# the older managed-host Pythons that this venv's ansible-core supports on targets (its leg's host_python
# in pyproject.toml: 3.8 only with ansible-core 2.19, which 2.20 and later refuse)
OLDER = tuple(minor for minor in _tool().host_minors() if minor <= (3, 10))
FOUND, SKIPPED = _tool().discover(OLDER)
PARAMS = [pytest.param(FOUND[m][0], id=f"python{m[0]}.{m[1]}") for m in sorted(FOUND)] or [
    pytest.param(None, marks=pytest.mark.skip(reason=f"no Python 3.8-3.10 here: {SKIPPED}"))
]


HELD_GPU = "GPU-3d5c1f8e-6a4b-4a1e-9f0a-2b7c8d9e0f13"
HELD = [
    {
        "namespace": "ml",
        "name": "trainer-0",
        "containers": [
            {
                "name": "main",
                "devices": [{"resource_name": "nvidia.com/gpu", "device_ids": [HELD_GPU], "numa_nodes": [1]}],
                "dynamic_resources": [],
            }
        ],
    }
]


@pytest.mark.parametrize("python", PARAMS)
def test_gpu_host_modules_on_an_older_host_python(python, tmp_path):
    socket_path_obj = tmp_path / "kubelet.sock"
    socket_path = str(socket_path_obj)
    config = tmp_path / "config.toml"
    shutil.copy(TOOLKIT_FIXTURE, config)
    results = tmp_path / "results.json"
    play = [
        {
            "name": "GPU host modules under an older Python",
            "hosts": "localhost",
            "gather_facts": False,
            "tasks": [
                {
                    "name": "Harden the toolkit",
                    "gpusplit.k8s.nvidia_toolkit_config": {"path": str(config)},
                    "register": "first",
                },
                {
                    "name": "Harden it again",
                    "gpusplit.k8s.nvidia_toolkit_config": {"path": str(config)},
                    "register": "second",
                },
                {
                    "name": "Refuse a string for a boolean key",
                    "gpusplit.k8s.nvidia_toolkit_config": {
                        "path": str(config),
                        "settings": {"accept-nvidia-visible-devices-envvar-when-unprivileged": "false"},
                    },
                    "register": "refused",
                    "ignore_errors": True,
                },
                {
                    "name": "Read the GPUs",
                    "gpusplit.k8s.nvidia_gpu_facts": {
                        "backend": "auto",
                        "nvidia_smi_path": str(FAKES / "bin" / "nvidia-smi"),
                    },
                    "environment": {"GPUSPLIT_FAKE_NVML_FIXTURE": str(GPU_FIXTURE)},
                    "register": "facts",
                },
                {
                    "name": "Read who holds the GPUs (the kubelet's pod-resources API)",
                    "gpusplit.k8s.gpu_pod_resources": {"socket": socket_path},
                    "register": "held",
                },
                {
                    "name": "Keep the results",
                    "ansible.builtin.copy": {
                        "content": "{{ {'first': first, 'second': second, 'refused': refused, 'facts': facts,"
                        " 'held': held} | to_json }}",
                        "dest": str(results),
                        "mode": "0644",
                    },
                },
            ],
        }
    ]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    # a gRPC server in this (the controller's) Python, as the kubelet's; the module's client runs
    # under the host's older Python with the standard library only
    kubelet = importlib.import_module("lab.podresources").serve(socket_path_obj, lambda: HELD)
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1", PYTHONPATH="")
    try:
        done = run_play(python, tmp_path, env)
    finally:
        kubelet.stop(0)
    assert done.returncode == 0, done.stdout + done.stderr
    check_results(results, python)


def run_play(python, tmp_path, env):
    return subprocess.run(
        [
            str(BIN / "ansible-playbook"),
            "-i",
            "localhost,",
            "-c",
            "local",
            "-e",
            f"ansible_python_interpreter={python}",
            str(tmp_path / "play.yml"),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def check_results(results, python):
    got = json.loads(results.read_text())
    assert got["held"]["available"] is True and got["held"]["changed"] is False
    assert got["held"]["pods"] == HELD
    assert [h["device_id"] for h in got["held"]["holders"]] == [HELD_GPU]
    assert got["first"]["changed"] is True and got["second"]["changed"] is False
    assert got["first"]["after"] == {
        "accept-nvidia-visible-devices-envvar-when-unprivileged": False,
        "accept-nvidia-visible-devices-as-volume-mounts": True,
    }
    assert "as a boolean" in got["refused"]["msg"]
    facts = got["facts"]
    assert (
        facts["nvml_binding"]["python"] == python
        or Path(facts["nvml_binding"]["python"]).resolve() == Path(python).resolve()
    )
    assert facts["ansible_facts"]["nvidia_gpu_backend"] == "nvidia-smi"
    assert len(facts["ansible_facts"]["nvidia_gpus"]) == 8
    assert "not importable" in json.dumps(facts.get("warnings", []))
