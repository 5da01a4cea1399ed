"""nvidia_gpu_facts changes nothing on the host: run twice through ansible-playbook (every way ansible-core sends a
module: pipelined, as a file, with become), with every option that reads something of the host pointed into a
host root, it leaves the host root and the remote temporary folder as they were, and says changed=false. No lab:
the host is this machine over the local connection, its GPUs the fake NVML binding's."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ansible_collections.gpusplit.k8s.tests.unit.playbook_run import ROUTES, run_play, skip_without_sudo

ROOT = Path(__file__).resolve().parents[4]
FAKES = ROOT / "tests" / "fakes"
FIXTURE = ROOT / "tests" / "fixtures" / "gpus" / "dgx-h100.json"
PROC = ROOT / "tests" / "fixtures" / "proc"


def snapshot(*folders):
    """Every entry under ``folders``: its path, kind, mode, size and modification time."""
    seen = {}
    for folder in folders:
        for dirpath, dirnames, filenames in os.walk(folder):
            for name in dirnames + filenames:
                path = os.path.join(dirpath, name)
                info = os.lstat(path)
                seen[path] = (info.st_mode, info.st_size, info.st_mtime_ns)
        seen[str(folder)] = os.lstat(folder).st_mode
    return seen


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_two_runs_of_the_facts_module_write_nothing_on_the_host(route, tmp_path):
    skip_without_sudo(route)
    host = tmp_path / "host"
    (host / "etc" / "gpusplit").mkdir(parents=True)
    (host / "etc" / "gpusplit" / "host-state.json").write_text('{"digest": "d", "files": {}}\n')
    (host / "var" / "lib" / "kubelet" / "pod-resources").mkdir(parents=True)
    args = {
        "backend": "auto",
        "proc_root": str(PROC),
        "sysfs_root": str(host / "sys"),
        "nvidia_smi_path": str(FAKES / "bin" / "nvidia-smi"),
        "pod_resources_socket": str(host / "var" / "lib" / "kubelet" / "pod-resources" / "kubelet.sock"),
        "host_state_path": str(host / "etc" / "gpusplit" / "host-state.json"),
    }
    environment = {"PYTHONPATH": str(FAKES), "GPUSPLIT_FAKE_NVML_FIXTURE": str(FIXTURE)}
    tasks = [
        {"name": name, "gpusplit.k8s.nvidia_gpu_facts": args, "environment": environment, "register": name}
        for name in ("first", "second")
    ]
    remote = tmp_path / "remote"
    remote.mkdir()
    before = snapshot(host, remote)
    results, output, remote = run_play(tmp_path, tasks, options=(), **ROUTES[route])
    assert snapshot(host, remote) == before, output
    for name in ("first", "second"):
        result = results[name]
        assert result["changed"] is False and not result.get("failed"), result
        assert len(result["ansible_facts"]["nvidia_gpus"]) == 8
        assert "host_state" in result  # the record was read (this one holds no files: no readable record)
        assert result["pod_resources"]["available"] is False  # no kubelet: nothing is made for it either
