"""nvidia_gpu_facts without GPUs: no driver, the choice of backend, every way a backend can fail, the module.

The host is made of fixtures (gpu_fakes.py).
"""

import importlib
import importlib.util
import json
import os
import re
import sys

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpusplit.k8s.plugins.module_utils._gpu import (
    facts,
    schema,
    smi_parse,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._gpu import nvml as gpu_nvml
from ansible_collections.gpusplit.k8s.plugins.module_utils._gpu import smi as gpu_smi
from ansible_collections.gpusplit.k8s.plugins.modules import nvidia_gpu_facts as module
from ansible_collections.gpusplit.k8s.tests.unit.module_run import run_module_file
from ansible_collections.gpusplit.k8s.tests.unit.plugins.module_utils._gpu.gpu_fakes import (
    ENV,
    FAKE_SMI,
    FIXTURES,
    PROC,
    ROOT,
    FakeHost,
    check_schema,
    fixture,
    gather,
    load_fake_nvml,
    params,
)

# --- no driver -----------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["auto", "nvml", "nvidia-smi"])
def test_gpu_nodriver_not_required(backend, monkeypatch):
    result, _ = gather("nodriver.json", backend, monkeypatch)
    assert result["ansible_facts"] == facts.empty_facts()
    assert result["msg"].startswith("No NVIDIA driver on this host")
    if backend != "nvidia-smi":
        assert "Driver Not Loaded" in result["msg"]
    if backend != "nvml":
        assert "couldn't communicate with the NVIDIA driver" in result["msg"]
    if backend == "auto":
        assert any("using nvidia-smi instead" in warning for warning in result["warnings"])


@pytest.mark.parametrize("backend", ["auto", "nvml", "nvidia-smi"])
def test_gpu_nodriver_required(backend, monkeypatch):
    with pytest.raises(schema.GpuFactsError) as caught:
        gather("nodriver.json", backend, monkeypatch, required=True)
    assert str(caught.value).startswith("No NVIDIA driver on this host")
    assert str(caught.value).endswith("(required=true)")


def test_gpu_library_missing_counts_as_no_driver(monkeypatch, tmp_path):
    data = fixture("nodriver.json")
    data["nvml_init_error"] = "NVML_ERROR_LIBRARY_NOT_FOUND"
    path = tmp_path / "nolib.json"
    path.write_text(json.dumps(data))
    monkeypatch.setenv(ENV, str(path))
    result = facts.gather(params(backend="nvml"), FakeHost(path))
    assert "NVML Shared Library Not Found" in result["msg"]


def test_gpu_auto_without_binding_or_smi(monkeypatch):
    result, _ = gather("nodriver.json", "auto", monkeypatch, nvml=None, smi=None)
    assert result["msg"] == "No NVIDIA driver on this host: nvidia-smi: not found on PATH"
    assert "pynvml" in result["warnings"][0] and "using nvidia-smi instead" in result["warnings"][0]
    with pytest.raises(schema.GpuFactsError, match="required=true"):
        gather("nodriver.json", "auto", monkeypatch, nvml=None, smi=None, required=True)


def test_gpu_real_binding_on_this_host(monkeypatch):
    """The real nvidia-ml-py: without a driver NVML fails to start and auto falls back cleanly."""
    monkeypatch.delitem(sys.modules, "pynvml", raising=False)
    real = importlib.import_module("pynvml")
    assert not hasattr(real, "FIXTURE_ENV"), "the fake binding shadows nvidia-ml-py here"
    host = FakeHost(FIXTURES / "nodriver.json", nvml=real, smi=None)
    result = facts.gather(params(), host)
    check_schema(result)
    if result["ansible_facts"]["nvidia_gpus"]:
        assert result["ansible_facts"]["nvidia_gpu_backend"] == "nvml"
    else:
        assert result["msg"].startswith(("No NVIDIA driver on this host", "The NVIDIA driver"))
        with pytest.raises(gpu_nvml.NvmlInitError) as caught:
            gpu_nvml.collect(real)
        assert caught.value.no_driver
        assert isinstance(caught.value, schema.GpuFactsError)


def test_gpu_real_binding_falls_back_to_smi(monkeypatch):
    """What the lab sees when PYTHONPATH does not name the fake: real nvidia-ml-py, fake nvidia-smi."""
    monkeypatch.delitem(sys.modules, "pynvml", raising=False)
    real = importlib.import_module("pynvml")
    monkeypatch.setenv(ENV, str(FIXTURES / "h200.json"))
    result = facts.gather(params(), FakeHost(FIXTURES / "h200.json", nvml=real))
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
    with pytest.raises(schema.GpuFactsError, match="nvidia-ml-py"):
        gather("h200.json", "nvml", monkeypatch, nvml=None)


def test_gpu_smi_backend_without_binary_fails(monkeypatch):
    with pytest.raises(schema.GpuFactsError, match="backend=nvidia-smi but nvidia-smi was not found on PATH"):
        gather("h200.json", "nvidia-smi", monkeypatch, smi=None)


def test_gpu_smi_path_that_does_not_exist(monkeypatch, tmp_path):
    missing = str(tmp_path / "bin" / "nvidia-smi")
    with pytest.raises(schema.GpuFactsError, match=f"nvidia_smi_path {re.escape(missing)} does not exist"):
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
    header = "--query-gpu=" + ",".join(smi_parse.SMI_REQUIRED_FIELDS + smi_parse.SMI_OPTIONAL_FIELDS)
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
    with pytest.raises(smi_parse.SmiParseError) as caught:
        smi_gather(outputs, monkeypatch)
    assert "expected 18 columns, got 16" in str(caught.value)
    assert lines[3] in str(caught.value)


def test_gpu_smi_garbage_not_a_number(monkeypatch):
    outputs = real_outputs("dgx-h100.json")
    rc, out, err = outputs["--query-gpu"]
    outputs["--query-gpu"] = (0, out.replace("81559 MiB", "81.5 GiB", 1), "")
    with pytest.raises(
        smi_parse.SmiParseError, match=r"memory.total is '81.5 GiB', expected a number, in line '0, GPU-"
    ):
        smi_gather(outputs, monkeypatch)


def test_gpu_smi_garbage_compute_apps(monkeypatch):
    outputs = real_outputs("dgx-h100.json")
    outputs["--query-compute-apps"] = (
        0,
        "gpu_uuid, pid, process_name, used_gpu_memory [MiB]\nGPU-x, twelve, python, 5 MiB\n",
        "",
    )
    with pytest.raises(smi_parse.SmiParseError, match="pid 'twelve' is not a number in line 'GPU-x, twelve"):
        smi_gather(outputs, monkeypatch)


def test_gpu_smi_garbage_xml(monkeypatch):
    outputs = real_outputs("dgx-h100.json")
    outputs["-q"] = (0, "Timestamp : Mon Nov 24\nDriver Version : 570.172.08\n", "")
    with pytest.raises(smi_parse.SmiParseError, match="'Timestamp : Mon Nov 24'"):
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
    env = {
        **os.environ,
        ENV: str(FIXTURES / "nodriver.json"),
        "PATH": "/nonexistent",
        "PYTHONPATH": os.pathsep.join([str(ROOT / "tests" / "fakes"), *sys.path]),
    }
    rc, result = run_module_file(module.__file__, {}, tmp_path, env, timeout=60)
    assert rc == 0 and result["ansible_facts"]["nvidia_gpus"] == []
    # ansible-core 2.19 ships warnings to the controller as structured events; the text is inside.
    assert "using nvidia-smi instead" in json.dumps(result["warnings"])
