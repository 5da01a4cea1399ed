"""nvidia_gpu_facts end to end without GPUs: both backends on every fixture, and what each fixture is for.

The host is made of fixtures (gpu_fakes.py); test_facts_backend_errors.py has the failures and the module itself.
"""

import importlib
import importlib.util
import json
import sys

import pytest

from ansible_collections.gpusplit.k8s.plugins.module_utils._gpu import (
    facts,
    health,
    ids,
    processes,
    schema,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._gpu import nvml as gpu_nvml
from ansible_collections.gpusplit.k8s.tests.unit.plugins.module_utils._gpu.gpu_fakes import (
    ALL_FIXTURES,
    BACKENDS,
    ENV,
    FIXTURES,
    GPU_FIXTURES,
    HANDLE_FAILURES,
    MIG_UUID_RE,
    PROC,
    UUID_RE,
    FakeHost,
    by_index,
    check_schema,
    fixture,
    gather,
    gather_refused,
    load_fake_nvml,
    params,
)

# --- schema and agreement on every fixture -------------------------------------------------------


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
        assert result["ansible_facts"]["nvidia_cuda_driver_version"] == gpu_nvml.cuda_version_string(
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
    assert len(nvml_gpus) == len(smi_gpus)
    for left, right in zip(nvml_gpus, smi_gpus):  # noqa: B905 - runs on 3.8+, lengths checked above
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
    in_container, container_id = processes.classify_cgroup(
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
    result = facts.gather(params(backend=backend), FakeHost(path))
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


@pytest.mark.parametrize("how", sorted(HANDLE_FAILURES))
def test_gpu_nvml_refuses_one_handle(how, monkeypatch, tmp_path):
    """nvmlDeviceGetHandleByIndex fails for GPU 2 only: it is reported by index with the NVML error named
    and what to do; the other GPUs are read as usual and the module does not fail."""
    status, name, text, advice = HANDLE_FAILURES[how]
    data, result = gather_refused(how, "nvml", monkeypatch, tmp_path)
    gpus = result["ansible_facts"]["nvidia_gpus"]
    assert [gpu["index"] for gpu in gpus] == [0, 1, 3, 2]  # no bus id: last
    refused = gpus[-1]
    assert tuple(refused) == schema.GPU_KEYS
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
    with pytest.raises(schema.GpuFactsError, match="required=true"):
        gather("nogpu.json", backend, monkeypatch, required=True)


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
    data, result = gather_refused(how, "nvidia-smi", monkeypatch, tmp_path)
    gpus = result["ansible_facts"]["nvidia_gpus"]
    [refused] = [g for g in gpus if g["uuid"] is None]
    assert refused["pci_bus_id"] == ids.require_pci_bus_id(data["gpus"][2]["pci_bus_id"])
    assert refused["health"]["status"] == status
    [reason] = refused["health"]["reasons"]
    assert reason.startswith(f"nvidia-smi cannot open this GPU ({text}")
    assert advice in reason
    assert sum(1 for g in gpus if g["uuid"]) == 3


def test_smi_cause_texts_map_to_nvml_errors():
    assert health.smi_unopened_cause("Insufficient Permissions") == "NVML_ERROR_NO_PERMISSION"
    assert (
        health.smi_unopened_cause("GPU is lost.  Reboot the system to recover this GPU")
        == "NVML_ERROR_GPU_IS_LOST"
    )
    assert health.smi_unopened_cause("Unknown Error") == "NVML_ERROR_GPU_IS_LOST"  # unknown: treated as lost
    verdict = health.unopened_health("NVML_ERROR_NO_PERMISSION", "x")
    assert verdict["status"] == "degraded" and "become: true" in verdict["reasons"][0]
    assert health.unopened_health("NVML_ERROR_RESET_REQUIRED", "x")["status"] == "lost"
