"""What the nvidia_gpu_facts tests run against: the GPU fixtures, the fake NVML binding and the stand-in
nvidia-smi, a host made of them (FakeHost) and the checks every result must pass.

NVML is the fake binding tests/fakes/pynvml.py, nvidia-smi the stand-in tests/fakes/bin/nvidia-smi run as
a real subprocess; both read the fixture named by GPUSPLIT_FAKE_NVML_FIXTURE.
"""

import importlib
import importlib.util
import itertools
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from ansible_collections.gpusplit.k8s.plugins.module_utils._gpu import facts, schema

ROOT = Path(__file__).resolve().parents[5]
FIXTURES = ROOT / "tests" / "fixtures" / "gpus"
PROC = ROOT / "tests" / "fixtures" / "proc"
FAKE_PYNVML = ROOT / "tests" / "fakes" / "pynvml.py"
FAKE_SMI = ROOT / "tests" / "fakes" / "bin" / "nvidia-smi"
ENV = "GPUSPLIT_FAKE_NVML_FIXTURE"

ALL_FIXTURES = sorted(path.name for path in FIXTURES.glob("*.json"))
GPU_FIXTURES = [name for name in ALL_FIXTURES if json.loads((FIXTURES / name).read_text())["gpus"]]
BACKENDS = ["nvml", "nvidia-smi"]

UUID_RE = re.compile(r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
MIG_UUID_RE = re.compile(r"^MIG-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
BUS_RE = re.compile(r"^[0-9A-F]{8}:[0-9A-F]{2}:[0-9A-F]{2}\.[0-7]$")
_counter = itertools.count()


def fixture(name):
    return json.loads((FIXTURES / name).read_text())


def load_fake_nvml():
    """A fresh copy of the fake binding (it reads nvml_missing_functions at import, like a real old one)."""
    spec = importlib.util.spec_from_file_location(f"gpusplit_fake_pynvml_{next(_counter)}", FAKE_PYNVML)
    fake = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fake)
    return fake


class FakeHost:
    """module.HostIO with the host replaced by fixtures (same methods, same contracts)."""

    def __init__(self, fixture_path, nvml="fake", smi=str(FAKE_SMI), run=None, files=None):
        self.fixture_path = str(fixture_path)
        self.nvml = nvml
        self.smi = smi
        self._run = run
        self.files = files or {}
        self.commands = []

    def import_nvml(self):
        if self.nvml is None:
            raise ImportError("No module named 'pynvml'")
        if self.nvml == "fake":
            return load_fake_nvml()
        return self.nvml

    def which(self, name):
        assert name == "nvidia-smi"
        return self.smi

    def is_executable(self, path):
        return os.path.isfile(path) and os.access(path, os.X_OK)

    def run(self, argv):
        self.commands.append(list(argv))
        if self._run is not None:
            return self._run(argv)
        env = dict(os.environ, **{ENV: self.fixture_path, "LC_ALL": "C"})
        done = subprocess.run(
            [sys.executable, *argv], capture_output=True, text=True, env=env, check=False, timeout=60
        )
        return done.returncode, done.stdout, done.stderr

    def read_text(self, path):
        if path in self.files:
            return self.files[path]
        try:
            with open(path, encoding="utf-8") as handle:
                return handle.read()
        except OSError:
            return None


def params(**changes):
    base = {
        "backend": "auto",
        "required": False,
        "nvidia_smi_path": None,
        "proc_root": str(PROC),
        "sysfs_root": "/nonexistent-sysfs",
    }
    base.update(changes)
    return base


def gather(name, backend, monkeypatch, **kwargs):
    path = FIXTURES / name
    monkeypatch.setenv(ENV, str(path))
    host_kwargs = {key: kwargs.pop(key) for key in ("nvml", "smi", "run", "files") if key in kwargs}
    host = FakeHost(path, **host_kwargs)
    return facts.gather(params(backend=backend, **kwargs), host), host


def by_index(result):
    return {gpu["index"]: gpu for gpu in result["ansible_facts"]["nvidia_gpus"]}


def check_schema(result):
    facts = result["ansible_facts"]
    assert set(facts) == {
        "nvidia_gpus",
        "nvidia_driver_version",
        "nvidia_cuda_driver_version",
        "nvidia_gpu_backend",
    }
    gpus = facts["nvidia_gpus"]
    assert gpus == schema.sort_gpus(gpus)
    assert [gpu["pci_bus_id"] for gpu in gpus] == sorted(gpu["pci_bus_id"] for gpu in gpus)
    for gpu in gpus:
        assert tuple(gpu) == schema.GPU_KEYS
        assert UUID_RE.match(gpu["uuid"])
        assert BUS_RE.match(gpu["pci_bus_id"])
        assert isinstance(gpu["index"], int)
        assert gpu["memory_total_mib"] is None or isinstance(gpu["memory_total_mib"], int)
        assert set(gpu["mig_mode"]) == {"current", "pending"}
        assert {gpu["mig_mode"]["current"], gpu["mig_mode"]["pending"]} <= {"enabled", "disabled", None}
        for mig in gpu["mig_devices"]:
            assert tuple(mig) == schema.MIG_DEVICE_KEYS
            assert MIG_UUID_RE.match(mig["uuid"])
        if gpu["ecc"] is not None:
            assert set(gpu["ecc"]) == {"mode_current", "uncorrected_volatile", "uncorrected_aggregate"}
        if gpu["remapped_rows"] is not None:
            assert set(gpu["remapped_rows"]) == {"correctable", "uncorrectable", "pending", "failure"}
        if gpu["retired_pages"] is not None:
            assert set(gpu["retired_pages"]) == {"double_bit_pending", "double_bit_count"}
        assert gpu["persistence_mode"] in (True, False, None)
        for process in gpu["processes"] or []:
            assert tuple(process) == schema.PROCESS_KEYS
        assert gpu["health"]["status"] in ("ok", "degraded", "lost")
        assert (gpu["health"]["status"] == "ok") == (gpu["health"]["reasons"] == [])
    json.dumps(result)  # facts must serialise as they are


# What the fixture says about GPU 2's handle call -> (status, NVML error name, its text, advice).
HANDLE_FAILURES = {
    "no_permission": (
        "degraded",
        "NVML_ERROR_NO_PERMISSION",
        "Insufficient Permissions",
        "run the task as root",
    ),
    "unsupported": (
        "degraded",
        "NVML_ERROR_NOT_SUPPORTED",
        "Not Supported",
        "install a driver that supports",
    ),
    "lost_at_handle": ("lost", "NVML_ERROR_GPU_IS_LOST", "GPU is lost", "reset it or reboot the host"),
    "NVML_ERROR_RESET_REQUIRED": (
        "lost",
        "NVML_ERROR_RESET_REQUIRED",
        "GPU requires restart",
        "needs a reset",
    ),
    "NVML_ERROR_INSUFFICIENT_POWER": (
        "degraded",
        "NVML_ERROR_INSUFFICIENT_POWER",
        "Insufficient External Power",
        "power cables",
    ),
    "NVML_ERROR_UNKNOWN": ("degraded", "NVML_ERROR_UNKNOWN", "Unknown Error", "kernel log (dmesg)"),
}


def refuse_handle(data, how):
    gpu = data["gpus"][2]
    if how in ("no_permission", "unsupported"):
        gpu[how] = ["nvmlDeviceGetHandleByIndex"]
    elif how == "lost_at_handle":
        gpu["lost_at_handle"] = True
    else:
        gpu["handle_error"] = how


def gather_refused(how, backend, monkeypatch, tmp_path):
    """The gpu-lost host with only GPU 2's handle call failing ``how``; (fixture, module result)."""
    data = fixture("gpu-lost.json")
    data["gpus"][2]["lost"] = False  # only the handle call fails
    refuse_handle(data, how)
    path = tmp_path / "refused.json"
    path.write_text(json.dumps(data))
    monkeypatch.setenv(ENV, str(path))
    return data, facts.gather(params(backend=backend), FakeHost(path))
