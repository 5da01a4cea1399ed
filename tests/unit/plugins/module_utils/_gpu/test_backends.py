"""nvidia_gpu_facts end to end without GPUs: both backends on every fixture, and every way it can fail.

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

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpusplit.k8s.plugins.module_utils._gpu import facts as gf
from ansible_collections.gpusplit.k8s.plugins.module_utils._gpu import ids
from ansible_collections.gpusplit.k8s.plugins.module_utils._gpu import nvml as gpu_nvml
from ansible_collections.gpusplit.k8s.plugins.module_utils._gpu import smi as gpu_smi
from ansible_collections.gpusplit.k8s.plugins.modules import nvidia_gpu_facts as module

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
    return module.gather(params(backend=backend, **kwargs), host), host


def by_index(result):
    return {gpu["index"]: gpu for gpu in result["ansible_facts"]["nvidia_gpus"]}


# --- schema and agreement on every fixture -------------------------------------------------------


def check_schema(result):
    facts = result["ansible_facts"]
    assert set(facts) == {
        "nvidia_gpus",
        "nvidia_driver_version",
        "nvidia_cuda_driver_version",
        "nvidia_gpu_backend",
    }
    gpus = facts["nvidia_gpus"]
    assert gpus == gf.sort_gpus(gpus)
    assert [gpu["pci_bus_id"] for gpu in gpus] == sorted(gpu["pci_bus_id"] for gpu in gpus)
    for gpu in gpus:
        assert tuple(gpu) == gf.GPU_KEYS
        assert UUID_RE.match(gpu["uuid"])
        assert BUS_RE.match(gpu["pci_bus_id"])
        assert isinstance(gpu["index"], int)
        assert gpu["memory_total_mib"] is None or isinstance(gpu["memory_total_mib"], int)
        assert set(gpu["mig_mode"]) == {"current", "pending"}
        assert {gpu["mig_mode"]["current"], gpu["mig_mode"]["pending"]} <= {"enabled", "disabled", None}
        for mig in gpu["mig_devices"]:
            assert tuple(mig) == gf.MIG_DEVICE_KEYS
            assert MIG_UUID_RE.match(mig["uuid"])
        if gpu["ecc"] is not None:
            assert set(gpu["ecc"]) == {"mode_current", "uncorrected_volatile", "uncorrected_aggregate"}
        if gpu["remapped_rows"] is not None:
            assert set(gpu["remapped_rows"]) == {"correctable", "uncorrectable", "pending", "failure"}
        if gpu["retired_pages"] is not None:
            assert set(gpu["retired_pages"]) == {"double_bit_pending", "double_bit_count"}
        assert gpu["persistence_mode"] in (True, False, None)
        for process in gpu["processes"] or []:
            assert tuple(process) == gf.PROCESS_KEYS
        assert gpu["health"]["status"] in ("ok", "degraded", "lost")
        assert (gpu["health"]["status"] == "ok") == (gpu["health"]["reasons"] == [])
    json.dumps(result)  # facts must serialise as they are


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", ALL_FIXTURES)
def test_gpu_schema_on_every_fixture(name, backend, monkeypatch):
    result, _ = gather(name, backend, monkeypatch)
    check_schema(result)
    expected = fixture(name)
    assert len(result["ansible_facts"]["nvidia_gpus"]) == len(expected["gpus"])
    if expected["gpus"]:
        assert result["ansible_facts"]["nvidia_gpu_backend"] == backend
        assert result["ansible_facts"]["nvidia_driver_version"] == expected["driver_version"]
        assert result["ansible_facts"]["nvidia_cuda_driver_version"] == gf.cuda_version_string(
            expected["cuda_driver_version"]
        )


AGREE = ("uuid", "index", "minor_number", "pci_bus_id", "name", "memory_total_mib", "mig_mode", "mig_devices")
ALSO_AGREE = ("ecc", "remapped_rows", "retired_pages", "persistence_mode", "health")


@pytest.mark.parametrize("name", GPU_FIXTURES)
def test_gpu_backends_agree(name, monkeypatch):
    nvml, _ = gather(name, "nvml", monkeypatch)
    smi, _ = gather(name, "nvidia-smi", monkeypatch)
    nvml_gpus = nvml["ansible_facts"]["nvidia_gpus"]
    smi_gpus = smi["ansible_facts"]["nvidia_gpus"]
    assert [[gpu[key] for key in AGREE] for gpu in nvml_gpus] == [
        [gpu[key] for key in AGREE] for gpu in smi_gpus
    ]
    for left, right in zip(nvml_gpus, smi_gpus, strict=True):
        for key in ALSO_AGREE:
            if key == "health":
                assert left["health"]["status"] == right["health"]["status"], left["uuid"]
            else:
                assert left[key] == right[key], (left["uuid"], key)
        if left["processes"] is not None and right["processes"] is not None:
            assert left["processes"] == right["processes"]


SAME_AS_FIXTURE = AGREE + ("ecc", "remapped_rows", "retired_pages", "persistence_mode")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", GPU_FIXTURES)
def test_gpu_facts_match_fixture(name, backend, monkeypatch):
    result, _ = gather(name, backend, monkeypatch)
    gpus = by_index(result)
    for expected in fixture(name)["gpus"]:
        if expected["lost"]:
            continue
        got = gpus[expected["index"]]
        mig_on = (expected["mig_mode"] or {}).get("current") == "enabled"
        for key in SAME_AS_FIXTURE:
            want = expected[key]
            if key == "mig_mode" and want is None:
                want = {"current": None, "pending": None}
            if key == "mig_devices" and not mig_on:
                want = []
            assert got[key] == want, (name, backend, expected["index"], key)


# --- what each fixture is there for --------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_gpu_dgx_h100(backend, monkeypatch):
    result, _ = gather("dgx-h100.json", backend, monkeypatch, files=_sysfs_numa("dgx-h100.json"))
    gpus = result["ansible_facts"]["nvidia_gpus"]
    assert [gpu["pci_bus_id"][9:11] for gpu in gpus] == ["18", "2A", "3A", "5D", "9A", "AB", "BA", "DB"]
    assert {gpu["name"] for gpu in gpus} == {"NVIDIA H100 80GB HBM3"}
    assert [gpu["numa_node"] for gpu in gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert all(gpu["health"]["status"] == "ok" for gpu in gpus)
    assert result["msg"].startswith("8 NVIDIA GPU(s) through")
    assert "570.172.08" in result["msg"] and "CUDA 12.8" in result["msg"] and "8 ok" in result["msg"]
    assert result["warnings"] == []
    host = gpus[0]["processes"]
    assert host == [
        {
            "pid": 2841,
            "used_memory_mib": 1024,
            "name": "/usr/bin/python3",
            "in_container": False,
            "container_id": None,
        }
    ]
    container = gpus[4]["processes"][0]
    assert container["in_container"] is True
    assert (
        container["container_id"] == (PROC / "48213" / "cgroup").read_text().split("cri-containerd-")[1][:64]
    )
    other = gpus[5]["processes"][0]
    assert other["pid"] == 48377
    in_container, container_id = gf.classify_cgroup(
        FakeHost(FIXTURES).read_text(str(PROC / "48377" / "cgroup"))
    )
    assert (other["in_container"], other["container_id"]) == (in_container, container_id)
    assert gpus[1]["processes"] == []


@pytest.mark.parametrize("backend", BACKENDS)
def test_gpu_processes_without_cgroup_files(backend, monkeypatch, tmp_path):
    """Processes whose cgroup file cannot be read (exited, other namespace) are neither host nor container."""
    result, _ = gather("dgx-h100.json", backend, monkeypatch, proc_root=str(tmp_path))
    processes = [process for gpu in result["ansible_facts"]["nvidia_gpus"] for process in gpu["processes"]]
    assert [process["pid"] for process in processes] == [2841, 48213, 48377]
    assert all(process["in_container"] is None and process["container_id"] is None for process in processes)


def _sysfs_numa(name, root="/nonexistent-sysfs"):
    """sysfs numa_node files for the nvidia-smi backend, from the fixture."""
    files = {}
    for gpu in fixture(name)["gpus"]:
        value = gpu["numa_node"] if gpu["numa_node"] is not None else -1
        files[f"{root}/bus/pci/devices/{ids.sysfs_pci_address(gpu['pci_bus_id'])}/numa_node"] = f"{value}\n"
    return files


@pytest.mark.parametrize("backend", BACKENDS)
def test_gpu_a100_mig(backend, monkeypatch):
    result, _ = gather("a100-mig.json", backend, monkeypatch)
    gpus = by_index(result)
    assert [gpu["pci_bus_id"] for gpu in result["ansible_facts"]["nvidia_gpus"]] == [
        "00000000:07:00.0",
        "00000000:0F:00.0",
        "00000000:47:00.0",
        "00000000:4E:00.0",
    ]
    assert [mig["profile"] for mig in gpus[0]["mig_devices"]] == ["3g.40gb", "3g.40gb"]
    assert [mig["profile"] for mig in gpus[1]["mig_devices"]] == ["3g.40gb", "1g.10gb", "1g.10gb", "1g.10gb"]
    assert [mig["gpu_instance_id"] for mig in gpus[1]["mig_devices"]] == [1, 7, 8, 9]
    assert [mig["memory_total_mib"] for mig in gpus[1]["mig_devices"]] == [40192, 9728, 9728, 9728]
    assert gpus[2]["mig_mode"] == {"current": "disabled", "pending": "enabled"}
    assert gpus[2]["mig_devices"] == []
    assert gpus[0]["remapped_rows"] is None and gpus[3]["remapped_rows"] is not None
    process = gpus[1]["processes"][0]
    assert process["pid"] == 51077 and process["in_container"] is True and len(process["container_id"]) == 64
    # This fixture's binding has no nvmlDeviceGetNumaNodeId and no sysfs is mounted: null, no warning.
    assert all(gpu["numa_node"] is None for gpu in gpus.values())
    assert result["warnings"] == []


@pytest.mark.parametrize("backend", BACKENDS)
def test_gpu_workstation_minor_numbers_are_not_indices(backend, monkeypatch):
    result, _ = gather("workstation.json", backend, monkeypatch)
    gpus = result["ansible_facts"]["nvidia_gpus"]
    assert [(gpu["index"], gpu["minor_number"]) for gpu in gpus] == [(0, 1), (1, 0)]
    rtx4090, a6000 = gpus
    assert rtx4090["ecc"] is None and rtx4090["mig_mode"] == {"current": None, "pending": None}
    assert rtx4090["remapped_rows"] is None and rtx4090["persistence_mode"] is False
    assert a6000["ecc"] == {
        "mode_current": "disabled",
        "uncorrected_volatile": None,
        "uncorrected_aggregate": None,
    }
    assert rtx4090["processes"][0]["in_container"] is False
    assert rtx4090["processes"][0]["name"] == "/usr/local/bin/ollama"


@pytest.mark.parametrize("backend", BACKENDS)
def test_gpu_h200(backend, monkeypatch):
    result, _ = gather("h200.json", backend, monkeypatch)
    (gpu,) = result["ansible_facts"]["nvidia_gpus"]
    assert (gpu["name"], gpu["memory_total_mib"], gpu["pci_bus_id"]) == (
        "NVIDIA H200",
        143771,
        "00000000:1B:00.0",
    )


@pytest.mark.parametrize("backend", BACKENDS)
def test_gpu_lost_and_degraded(backend, monkeypatch):
    result, _ = gather("gpu-lost.json", backend, monkeypatch)
    gpus = by_index(result)
    expected = fixture("gpu-lost.json")["gpus"]
    lost = gpus[2]
    assert lost["health"]["status"] == "lost"
    needle = "NVML_ERROR_GPU_IS_LOST" if backend == "nvml" else "[GPU requires reset]"
    assert needle in lost["health"]["reasons"][0]
    assert (lost["uuid"], lost["pci_bus_id"], lost["minor_number"]) == (
        expected[2]["uuid"],
        expected[2]["pci_bus_id"],
        expected[2]["minor_number"],
    )
    assert lost["memory_total_mib"] is None and lost["ecc"] is None and lost["processes"] is None
    assert gpus[0]["health"] == {"status": "ok", "reasons": []}
    assert gpus[0]["processes"][0]["in_container"] is True
    assert gpus[1]["health"]["status"] == "degraded"
    assert len(gpus[1]["health"]["reasons"]) == 2
    assert "2 uncorrected ECC" in gpus[1]["health"]["reasons"][0]
    assert "pending" in gpus[1]["health"]["reasons"][1]
    assert gpus[3]["health"]["status"] == "degraded"
    assert "remapping failed" in gpus[3]["health"]["reasons"][0]
    assert "2 ok" not in result["msg"] and "1 ok, 2 degraded, 1 lost" in result["msg"]
    if backend == "nvidia-smi":
        assert any("exited with code 15" in warning for warning in result["warnings"])


@pytest.mark.parametrize("backend", BACKENDS)
def test_gpu_lost_before_a_handle(backend, monkeypatch, tmp_path):
    """A GPU that cannot even be opened: NVML has no handle, nvidia-smi prints no row, only a complaint."""
    data = fixture("gpu-lost.json")
    data["gpus"][2]["lost_hidden"] = True
    path = tmp_path / "lost-hidden.json"
    path.write_text(json.dumps(data))
    monkeypatch.setenv(ENV, str(path))
    result = module.gather(params(backend=backend), FakeHost(path))
    gpus = result["ansible_facts"]["nvidia_gpus"]
    assert len(gpus) == 4
    lost = [gpu for gpu in gpus if gpu["health"]["status"] == "lost"]
    assert len(lost) == 1 and lost[0]["uuid"] is None
    if backend == "nvml":
        assert gpus[-1] is lost[0]  # no bus id: sorted last
        assert lost[0]["index"] == 2 and lost[0]["pci_bus_id"] is None
        assert "nvmlDeviceGetHandleByIndex" in lost[0]["health"]["reasons"][0]
    else:
        assert gpus[2] is lost[0]  # nvidia-smi named its bus id
        assert lost[0]["index"] is None and lost[0]["pci_bus_id"] == "00000000:4C:00.0"
        assert "cannot open this GPU (GPU is lost." in lost[0]["health"]["reasons"][0]


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


def _refuse_handle(data, how):
    gpu = data["gpus"][2]
    if how in ("no_permission", "unsupported"):
        gpu[how] = ["nvmlDeviceGetHandleByIndex"]
    elif how == "lost_at_handle":
        gpu["lost_at_handle"] = True
    else:
        gpu["handle_error"] = how


def _gather_refused(how, backend, monkeypatch, tmp_path):
    """The gpu-lost host with only GPU 2's handle call failing ``how``; (fixture, module result)."""
    data = fixture("gpu-lost.json")
    data["gpus"][2]["lost"] = False  # only the handle call fails
    _refuse_handle(data, how)
    path = tmp_path / "refused.json"
    path.write_text(json.dumps(data))
    monkeypatch.setenv(ENV, str(path))
    return data, module.gather(params(backend=backend), FakeHost(path))


@pytest.mark.parametrize("how", sorted(HANDLE_FAILURES))
def test_gpu_nvml_refuses_one_handle(how, monkeypatch, tmp_path):
    """nvmlDeviceGetHandleByIndex fails for GPU 2 only: it is reported by index with the NVML error named
    and what to do; the other GPUs are read as usual and the module does not fail."""
    status, name, text, advice = HANDLE_FAILURES[how]
    data, result = _gather_refused(how, "nvml", monkeypatch, tmp_path)
    gpus = result["ansible_facts"]["nvidia_gpus"]
    assert [gpu["index"] for gpu in gpus] == [0, 1, 3, 2]  # no bus id: last
    refused = gpus[-1]
    assert tuple(refused) == gf.GPU_KEYS
    opened = dict(result, ansible_facts=dict(result["ansible_facts"], nvidia_gpus=gpus[:3]))
    check_schema(opened)
    assert refused["uuid"] is None and refused["pci_bus_id"] is None and refused["processes"] is None
    assert refused["health"]["status"] == status
    (reason,) = refused["health"]["reasons"]
    assert reason.startswith(f"NVML cannot open GPU 2: nvmlDeviceGetHandleByIndex returned {name} ({text}); ")
    assert advice in reason
    assert f"GPU 2: nvmlDeviceGetHandleByIndex returned {name}" in " ".join(result["warnings"])
    assert [gpu["uuid"] for gpu in gpus[:3]] == [data["gpus"][i]["uuid"] for i in (0, 1, 3)]
    assert gpus[0]["health"]["status"] == "ok" and gpus[1]["health"]["status"] == "degraded"
    counts = {"ok": 1, "degraded": 2, "lost": 0}
    counts[status] += 1
    verdict = ", ".join(f"{counts[key]} {key}" for key in ("ok", "degraded", "lost") if counts[key])
    assert result["msg"].endswith(verdict), result["msg"]


def test_gpu_fake_binding_refuses_handle_like_the_real_one(monkeypatch, tmp_path):
    """The fake's handle call raises the real binding's NVMLError_<Name> classes for the fixture's errors."""
    real = importlib.import_module("pynvml")
    data = fixture("workstation.json")
    data["gpus"][0]["no_permission"] = ["nvmlDeviceGetHandleByIndex"]
    data["gpus"][1]["unsupported"] = ["nvmlDeviceGetHandleByIndex"]
    path = tmp_path / "refused.json"
    path.write_text(json.dumps(data))
    monkeypatch.setenv(ENV, str(path))
    fake = load_fake_nvml()
    fake.nvmlInit()
    try:
        for index, class_name in ((0, "NVMLError_NoPermission"), (1, "NVMLError_NotSupported")):
            with pytest.raises(fake.NVMLError) as caught:
                fake.nvmlDeviceGetHandleByIndex(index)
            assert type(caught.value).__name__ == class_name and hasattr(real, class_name)
            assert caught.value.value == getattr(real, class_name)().value
            with pytest.raises(getattr(fake, class_name)):
                fake.nvmlDeviceGetHandleByUUID(data["gpus"][index]["uuid"])
    finally:
        fake.nvmlShutdown()


def test_gpu_real_binding_errors_at_handle(monkeypatch):
    """The real nvidia-ml-py's error objects (not the fake's) at the handle call, NVML itself stubbed."""
    monkeypatch.delitem(sys.modules, "pynvml", raising=False)
    real = importlib.import_module("pynvml")
    refusals = {0: real.NVMLError_NoPermission(), 1: real.NVMLError_GpuIsLost()}

    def handle(index):
        raise refusals[index]

    for function, value in (
        ("nvmlInit", lambda: None),
        ("nvmlShutdown", lambda: None),
        ("nvmlSystemGetDriverVersion", lambda: "570.172.08"),
        ("nvmlSystemGetCudaDriverVersion", lambda: 12080),
        ("nvmlDeviceGetCount", lambda: 2),
        ("nvmlDeviceGetHandleByIndex", handle),
    ):
        monkeypatch.setattr(real, function, value)
    data = gpu_nvml.collect(real)
    health = [gpu["health"] for gpu in data["gpus"]]
    assert [h["status"] for h in health] == ["degraded", "lost"]
    assert "returned NVML_ERROR_NO_PERMISSION (Insufficient Permissions)" in health[0]["reasons"][0]
    assert "returned NVML_ERROR_GPU_IS_LOST (GPU is lost)" in health[1]["reasons"][0]
    assert len(data["warnings"]) == 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_gpu_v100_retired_pages(backend, monkeypatch):
    result, _ = gather("v100-legacy.json", backend, monkeypatch)
    gpus = by_index(result)
    assert gpus[1]["retired_pages"] == {"double_bit_pending": True, "double_bit_count": 2}
    assert gpus[1]["health"]["status"] == "degraded"
    assert "page retirement pending" in gpus[1]["health"]["reasons"][0]
    assert gpus[0]["retired_pages"] == {"double_bit_pending": False, "double_bit_count": 0}
    assert result["ansible_facts"]["nvidia_cuda_driver_version"] == "11.4"
    if backend == "nvml":
        assert gpus[1]["processes"] is None
        assert any("insufficient permissions" in warning for warning in result["warnings"])
    else:
        dropped = [warning for warning in result["warnings"] if "does not know the query field" in warning]
        assert len(dropped) == 4


@pytest.mark.parametrize("backend", BACKENDS)
def test_gpu_nogpu_host(backend, monkeypatch):
    result, _ = gather("nogpu.json", backend, monkeypatch)
    assert result["ansible_facts"]["nvidia_gpus"] == []
    assert "loaded but reports no GPU" in result["msg"]
    with pytest.raises(gf.GpuFactsError, match="required=true"):
        gather("nogpu.json", backend, monkeypatch, required=True)


# --- no driver -----------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["auto", "nvml", "nvidia-smi"])
def test_gpu_nodriver_not_required(backend, monkeypatch):
    result, _ = gather("nodriver.json", backend, monkeypatch)
    assert result["ansible_facts"] == module._empty_facts()
    assert result["msg"].startswith("No NVIDIA driver on this host")
    if backend != "nvidia-smi":
        assert "Driver Not Loaded" in result["msg"]
    if backend != "nvml":
        assert "couldn't communicate with the NVIDIA driver" in result["msg"]
    if backend == "auto":
        assert any("using nvidia-smi instead" in warning for warning in result["warnings"])


@pytest.mark.parametrize("backend", ["auto", "nvml", "nvidia-smi"])
def test_gpu_nodriver_required(backend, monkeypatch):
    with pytest.raises(gf.GpuFactsError) as caught:
        gather("nodriver.json", backend, monkeypatch, required=True)
    assert str(caught.value).startswith("No NVIDIA driver on this host")
    assert str(caught.value).endswith("(required=true)")


def test_gpu_library_missing_counts_as_no_driver(monkeypatch, tmp_path):
    data = fixture("nodriver.json")
    data["nvml_init_error"] = "NVML_ERROR_LIBRARY_NOT_FOUND"
    path = tmp_path / "nolib.json"
    path.write_text(json.dumps(data))
    monkeypatch.setenv(ENV, str(path))
    result = module.gather(params(backend="nvml"), FakeHost(path))
    assert "NVML Shared Library Not Found" in result["msg"]


def test_gpu_auto_without_binding_or_smi(monkeypatch):
    result, _ = gather("nodriver.json", "auto", monkeypatch, nvml=None, smi=None)
    assert result["msg"] == "No NVIDIA driver on this host: nvidia-smi: not found on PATH"
    assert "pynvml" in result["warnings"][0] and "using nvidia-smi instead" in result["warnings"][0]
    with pytest.raises(gf.GpuFactsError, match="required=true"):
        gather("nodriver.json", "auto", monkeypatch, nvml=None, smi=None, required=True)


def test_gpu_real_binding_on_this_host(monkeypatch):
    """The real nvidia-ml-py: without a driver NVML fails to start and auto falls back cleanly."""
    monkeypatch.delitem(sys.modules, "pynvml", raising=False)
    real = importlib.import_module("pynvml")
    assert not hasattr(real, "FIXTURE_ENV"), "the fake binding shadows nvidia-ml-py here"
    host = FakeHost(FIXTURES / "nodriver.json", nvml=real, smi=None)
    result = module.gather(params(), host)
    check_schema(result)
    if result["ansible_facts"]["nvidia_gpus"]:
        assert result["ansible_facts"]["nvidia_gpu_backend"] == "nvml"
    else:
        assert result["msg"].startswith(("No NVIDIA driver on this host", "The NVIDIA driver"))
        with pytest.raises(gpu_nvml.NvmlInitError) as caught:
            gpu_nvml.collect(real)
        assert caught.value.no_driver
        assert isinstance(caught.value, gf.GpuFactsError)


def test_gpu_real_binding_falls_back_to_smi(monkeypatch):
    """What the lab sees when PYTHONPATH does not name the fake: real nvidia-ml-py, fake nvidia-smi."""
    monkeypatch.delitem(sys.modules, "pynvml", raising=False)
    real = importlib.import_module("pynvml")
    monkeypatch.setenv(ENV, str(FIXTURES / "h200.json"))
    result = module.gather(params(), FakeHost(FIXTURES / "h200.json", nvml=real))
    check_schema(result)
    if result["ansible_facts"]["nvidia_gpu_backend"] == "nvidia-smi":  # no libnvidia-ml on this machine
        assert result["ansible_facts"]["nvidia_gpus"][0]["name"] == "NVIDIA H200"
        assert any("NVML is not usable (nvmlInit failed:" in warning for warning in result["warnings"])


# --- backend selection and errors ----------------------------------------------------------------


def test_gpu_auto_prefers_nvml(monkeypatch):
    result, host = gather("h200.json", "auto", monkeypatch)
    assert result["ansible_facts"]["nvidia_gpu_backend"] == "nvml"
    assert host.commands == []


def test_gpu_auto_falls_back_to_smi_without_binding(monkeypatch):
    result, host = gather("h200.json", "auto", monkeypatch, nvml=None)
    assert result["ansible_facts"]["nvidia_gpu_backend"] == "nvidia-smi"
    assert "pynvml" in result["warnings"][0] and "nvidia-ml-py" in result["warnings"][0]
    assert [command[1] for command in host.commands] == [
        host.commands[0][1],
        "--query-compute-apps=gpu_uuid,pid,process_name,used_memory",
        "-L",
        "-q",
    ]
    assert host.commands[0][1].startswith("--query-gpu=index,uuid,name,pci.bus_id,memory.total,")


def test_gpu_nvml_backend_without_binding_fails(monkeypatch):
    with pytest.raises(gf.GpuFactsError, match="nvidia-ml-py"):
        gather("h200.json", "nvml", monkeypatch, nvml=None)


def test_gpu_smi_backend_without_binary_fails(monkeypatch):
    with pytest.raises(gf.GpuFactsError, match="backend=nvidia-smi but nvidia-smi was not found on PATH"):
        gather("h200.json", "nvidia-smi", monkeypatch, smi=None)


def test_gpu_smi_path_that_does_not_exist(monkeypatch, tmp_path):
    missing = str(tmp_path / "bin" / "nvidia-smi")
    with pytest.raises(gf.GpuFactsError, match=f"nvidia_smi_path {re.escape(missing)} does not exist"):
        gather("h200.json", "nvidia-smi", monkeypatch, nvidia_smi_path=missing)


def test_gpu_smi_path_is_used(monkeypatch):
    result, host = gather("h200.json", "nvidia-smi", monkeypatch, smi=None, nvidia_smi_path=str(FAKE_SMI))
    assert result["ansible_facts"]["nvidia_gpu_backend"] == "nvidia-smi"
    assert host.commands[0][0] == str(FAKE_SMI)


def scripted(outputs):
    """A runner answering each nvidia-smi invocation from {first argument prefix: (rc, out, err)}."""

    def run(argv):
        for prefix, answer in outputs.items():
            if argv[1].startswith(prefix):
                return answer
        raise AssertionError(f"unexpected command {argv}")

    return run


def real_outputs(name):
    host = FakeHost(FIXTURES / name)
    header = "--query-gpu=" + ",".join(gf.SMI_REQUIRED_FIELDS + gf.SMI_OPTIONAL_FIELDS)
    return {
        "--query-gpu": host.run([str(FAKE_SMI), header, "--format=csv"]),
        "--query-compute-apps": host.run(
            [str(FAKE_SMI), "--query-compute-apps=gpu_uuid,pid,process_name,used_memory", "--format=csv"]
        ),
        "-L": host.run([str(FAKE_SMI), "-L"]),
        "-q": host.run([str(FAKE_SMI), "-q", "-x"]),
    }


def smi_gather(outputs, monkeypatch):
    return gather("h200.json", "nvidia-smi", monkeypatch, run=scripted(outputs))[0]


def test_gpu_smi_garbage_wrong_columns(monkeypatch):
    outputs = real_outputs("dgx-h100.json")
    rc, out, err = outputs["--query-gpu"]
    lines = out.splitlines()
    lines[3] = ", ".join(lines[3].split(", ")[:-2])
    outputs["--query-gpu"] = (0, "\n".join(lines) + "\n", "")
    with pytest.raises(gf.SmiParseError) as caught:
        smi_gather(outputs, monkeypatch)
    assert "expected 18 columns, got 16" in str(caught.value)
    assert lines[3] in str(caught.value)


def test_gpu_smi_garbage_not_a_number(monkeypatch):
    outputs = real_outputs("dgx-h100.json")
    rc, out, err = outputs["--query-gpu"]
    outputs["--query-gpu"] = (0, out.replace("81559 MiB", "81.5 GiB", 1), "")
    with pytest.raises(
        gf.SmiParseError, match=r"memory.total is '81.5 GiB', expected a number, in line '0, GPU-"
    ):
        smi_gather(outputs, monkeypatch)


def test_gpu_smi_garbage_compute_apps(monkeypatch):
    outputs = real_outputs("dgx-h100.json")
    outputs["--query-compute-apps"] = (
        0,
        "gpu_uuid, pid, process_name, used_gpu_memory [MiB]\nGPU-x, twelve, python, 5 MiB\n",
        "",
    )
    with pytest.raises(gf.SmiParseError, match="pid 'twelve' is not a number in line 'GPU-x, twelve"):
        smi_gather(outputs, monkeypatch)


def test_gpu_smi_garbage_xml(monkeypatch):
    outputs = real_outputs("dgx-h100.json")
    outputs["-q"] = (0, "Timestamp : Mon Nov 24\nDriver Version : 570.172.08\n", "")
    with pytest.raises(gf.SmiParseError, match="'Timestamp : Mon Nov 24'"):
        smi_gather(outputs, monkeypatch)


def test_gpu_smi_xml_failure_is_only_a_warning(monkeypatch):
    outputs = real_outputs("dgx-h100.json")
    outputs["-q"] = (255, "", "Unknown Error\n")
    result = smi_gather(outputs, monkeypatch)
    gpus = result["ansible_facts"]["nvidia_gpus"]
    assert len(gpus) == 8 and all(gpu["minor_number"] is None for gpu in gpus)
    assert result["ansible_facts"]["nvidia_cuda_driver_version"] is None
    assert any("-q -x failed with exit code 255: Unknown Error" in warning for warning in result["warnings"])


def test_gpu_smi_compute_apps_failure_is_only_a_warning(monkeypatch):
    outputs = real_outputs("dgx-h100.json")
    outputs["--query-compute-apps"] = (4, "", "Insufficient Permissions\n")
    result = smi_gather(outputs, monkeypatch)
    assert all(gpu["processes"] is None for gpu in result["ansible_facts"]["nvidia_gpus"])
    assert any("processes are null" in warning for warning in result["warnings"])


def test_gpu_smi_driver_library_mismatch(monkeypatch):
    outputs = real_outputs("dgx-h100.json")
    outputs["--query-gpu"] = (18, "Failed to initialize NVML: Driver/library version mismatch\n", "")
    with pytest.raises(
        gpu_smi.SmiError, match="exit code 18: Failed to initialize NVML: Driver/library version"
    ):
        smi_gather(outputs, monkeypatch)


def test_gpu_smi_rejected_required_field(monkeypatch):
    outputs = real_outputs("dgx-h100.json")
    outputs["--query-gpu"] = (2, 'Field "pci.bus_id" is not a valid field to query.\n\n', "")
    with pytest.raises(gpu_smi.SmiError, match='Field "pci.bus_id" is not a valid field'):
        smi_gather(outputs, monkeypatch)


def test_gpu_nvml_shutdown_always(monkeypatch):
    monkeypatch.setenv(ENV, str(FIXTURES / "dgx-h100.json"))
    fake = load_fake_nvml()
    calls = []
    original = fake.nvmlShutdown
    original_count = fake.nvmlDeviceGetCount

    def count_devices():
        raise fake.NVMLError(fake.NVML_ERROR_UNKNOWN)

    def shutdown():
        calls.append("shutdown")
        original()

    monkeypatch.setattr(fake, "nvmlDeviceGetCount", count_devices)
    monkeypatch.setattr(fake, "nvmlShutdown", shutdown)
    with pytest.raises(gpu_nvml.NvmlCollectError, match="Unknown Error"):
        gpu_nvml.collect(fake)
    assert calls == ["shutdown"]
    monkeypatch.setattr(fake, "nvmlDeviceGetCount", original_count)
    assert len(gpu_nvml.collect(fake)["gpus"]) == 8
    assert calls == ["shutdown", "shutdown"]


def test_gpu_fake_binding_error_hierarchy(monkeypatch):
    """The fake raises what the real binding raises, so `except` clauses mean the same thing."""
    fake = load_fake_nvml()
    real = importlib.import_module("pynvml")
    for name in (
        "GpuIsLost",
        "NotSupported",
        "NoPermission",
        "LibraryNotFound",
        "DriverNotLoaded",
        "Uninitialized",
    ):
        fake_class = getattr(fake, f"NVMLError_{name}")
        real_class = getattr(real, f"NVMLError_{name}")
        assert issubclass(fake_class, fake.NVMLError)
        error = fake.NVMLError(real_class().value)
        assert type(error) is fake_class and str(error) == str(real_class())
    with pytest.raises(fake.NVMLError_Uninitialized):
        fake.nvmlDeviceGetCount()
    for name in dir(fake):
        if name.startswith("NVML_ERROR_"):
            assert getattr(fake, name) == getattr(real, name), name


def test_gpu_fake_binding_types(monkeypatch):
    monkeypatch.setenv(ENV, str(FIXTURES / "a100-mig.json"))
    fake = load_fake_nvml()
    assert not hasattr(fake, "nvmlDeviceGetNumaNodeId")
    fake.nvmlInit()
    try:
        handle = fake.nvmlDeviceGetHandleByIndex(0)
        assert isinstance(fake.nvmlDeviceGetUUID(handle), str)
        assert fake.nvmlDeviceGetPciInfo(handle).busId == b"0000:07:00.0"
        assert fake.nvmlDeviceGetMigMode(handle) == [1, 1]
        with pytest.raises(fake.NVMLError_NotSupported):
            fake.nvmlDeviceGetRemappedRows(handle)
        with pytest.raises(fake.NVMLError_NotFound):
            fake.nvmlDeviceGetMigDeviceHandleByIndex(handle, 6)
    finally:
        fake.nvmlShutdown()


# --- the module itself ---------------------------------------------------------------------------


def run_main(args, monkeypatch, capsys, fake_nvml=None):
    if fake_nvml is not None:
        monkeypatch.setitem(sys.modules, "pynvml", fake_nvml)
    with patch_module_args(args), pytest.raises(SystemExit) as caught:
        module.main()
    return caught.value.code, json.loads(capsys.readouterr().out)


def test_gpu_module_rejects_unknown_backend(monkeypatch, capsys):
    code, result = run_main({"backend": "dcgm"}, monkeypatch, capsys)
    assert code == 1 and result["failed"] is True
    assert "value of backend must be one of: auto, nvml, nvidia-smi, got: dcgm" in result["msg"]


def test_gpu_module_check_mode(monkeypatch, capsys):
    monkeypatch.setenv(ENV, str(FIXTURES / "workstation.json"))
    args = {"proc_root": str(PROC), "_ansible_check_mode": True}
    code, result = run_main(args, monkeypatch, capsys, fake_nvml=load_fake_nvml())
    assert code == 0 and result["changed"] is False
    assert result["ansible_facts"]["nvidia_gpu_backend"] == "nvml"
    assert len(result["ansible_facts"]["nvidia_gpus"]) == 2


def test_gpu_module_fails_with_message(monkeypatch, capsys):
    monkeypatch.setenv(ENV, str(FIXTURES / "nodriver.json"))
    monkeypatch.setenv("PATH", "/nonexistent")
    code, result = run_main({"required": True}, monkeypatch, capsys, fake_nvml=load_fake_nvml())
    assert code == 1 and result["failed"] is True
    assert result["msg"].startswith("No NVIDIA driver on this host: NVML: nvmlInit failed: Driver Not Loaded")


def test_gpu_module_warnings_reach_the_result(tmp_path):
    # Run as Ansible runs a module: its own process (in-process, once controller code such as a
    # filter plugin has been imported, ansible-core routes warnings elsewhere).
    args = tmp_path / "args.json"
    args.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {}}))
    env = {
        **os.environ,
        ENV: str(FIXTURES / "nodriver.json"),
        "PATH": "/nonexistent",
        "PYTHONPATH": os.pathsep.join([str(ROOT / "tests" / "fakes"), str(ROOT / ".collections")]),
    }
    proc = subprocess.run(
        [sys.executable, module.__file__, str(args)], capture_output=True, text=True, env=env, timeout=60
    )
    result = json.loads(proc.stdout)
    assert proc.returncode == 0 and result["ansible_facts"]["nvidia_gpus"] == []
    # ansible-core 2.19 ships warnings to the controller as structured events; the text is inside.
    assert "using nvidia-smi instead" in json.dumps(result["warnings"])


def test_gpu_fixture_uuids_are_real_format():
    for name in GPU_FIXTURES:
        data = fixture(name)
        for gpu in data["gpus"]:
            assert UUID_RE.match(gpu["uuid"]), (name, gpu["uuid"])
            assert gpu["pci_bus_id"] == ids.require_pci_bus_id(gpu["pci_bus_id"])
            for mig in gpu["mig_devices"]:
                assert MIG_UUID_RE.match(mig["uuid"])


SMI_HANDLE_FAILURES = {
    # how the fixture refuses the GPU: (health, what nvidia-smi prints, part of the advice)
    "no_permission": ("degraded", "Insufficient Permissions", "run the task as root"),
    "unsupported": ("degraded", "Not Supported", "install a driver that supports it"),
    "NVML_ERROR_RESET_REQUIRED": ("lost", "GPU requires reset", "reset it or reboot the host"),
    "NVML_ERROR_INSUFFICIENT_POWER": ("degraded", "Insufficient External Power", "power cables"),
    "lost_at_handle": ("lost", "GPU is lost", "reset it or reboot the host"),
}


@pytest.mark.parametrize("how", sorted(SMI_HANDLE_FAILURES))
def test_gpu_smi_names_why_it_cannot_open_a_gpu(how, monkeypatch, tmp_path):
    """The nvidia-smi backend reports a GPU it cannot open with the same verdict and advice as NVML."""
    status, text, advice = SMI_HANDLE_FAILURES[how]
    data, result = _gather_refused(how, "nvidia-smi", monkeypatch, tmp_path)
    gpus = result["ansible_facts"]["nvidia_gpus"]
    [refused] = [g for g in gpus if g["uuid"] is None]
    assert refused["pci_bus_id"] == ids.require_pci_bus_id(data["gpus"][2]["pci_bus_id"])
    assert refused["health"]["status"] == status
    [reason] = refused["health"]["reasons"]
    assert reason.startswith(f"nvidia-smi cannot open this GPU ({text}")
    assert advice in reason
    assert sum(1 for g in gpus if g["uuid"]) == 3


def test_smi_cause_texts_map_to_nvml_errors():
    assert gf.smi_unopened_cause("Insufficient Permissions") == "NVML_ERROR_NO_PERMISSION"
    assert (
        gf.smi_unopened_cause("GPU is lost.  Reboot the system to recover this GPU")
        == "NVML_ERROR_GPU_IS_LOST"
    )
    assert gf.smi_unopened_cause("Unknown Error") == "NVML_ERROR_GPU_IS_LOST"  # unknown: treated as lost
    health = gf.unopened_health("NVML_ERROR_NO_PERMISSION", "x")
    assert health["status"] == "degraded" and "become: true" in health["reasons"][0]
    assert gf.unopened_health("NVML_ERROR_RESET_REQUIRED", "x")["status"] == "lost"
