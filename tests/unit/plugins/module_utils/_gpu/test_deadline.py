"""Time limits of nvidia_gpu_facts (plugins/module_utils/_gpu/deadline.py) and the GPU-count cross-check
of the nvidia-smi backend (issue 18 case 4).

The hangs are real: the stand-in nvidia-smi (tests/fakes/bin/nvidia-smi) and the fake NVML binding
(tests/fakes/pynvml.py) sleep forever where the fixture says so, and the module is run through main()
with its real HostIO. Nothing here asserts how fast anything is; the limits are only made short.
"""

import json
import sys
import time
from pathlib import Path

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpusplit.k8s.plugins.module_utils._gpu import deadline, facts, smi
from ansible_collections.gpusplit.k8s.plugins.module_utils._gpu.schema import GpuFactsError
from ansible_collections.gpusplit.k8s.plugins.modules import nvidia_gpu_facts as module
from ansible_collections.gpusplit.k8s.tests.unit.host_module import ansible_module
from ansible_collections.gpusplit.k8s.tests.unit.plugins.module_utils._gpu.gpu_fakes import (
    ENV,
    FAKE_SMI,
    FIXTURES,
    PROC,
    FakeHost,
    fixture,
    gather,
    load_fake_nvml,
    params,
)

DGX_BUS = [
    "00000000:18:00.0",
    "00000000:2A:00.0",
    "00000000:3A:00.0",
    "00000000:5D:00.0",
    "00000000:9A:00.0",
    "00000000:AB:00.0",
    "00000000:BA:00.0",
    "00000000:DB:00.0",
]


def write_fixture(tmp_path, name, **changes):
    data = fixture(name)
    data.update(changes)
    path = tmp_path / f"changed-{name}"
    path.write_text(json.dumps(data))
    return path


def run_main(args, monkeypatch, capsys, fake_nvml=None):
    if fake_nvml is None:
        monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml -> ImportError
    else:
        monkeypatch.setitem(sys.modules, "pynvml", fake_nvml)
    with patch_module_args(args), pytest.raises(SystemExit) as caught:
        module.main()
    return caught.value.code, json.loads(capsys.readouterr().out)


# --- deadline.py ---------------------------------------------------------------------------------


def test_run_command_returns_what_the_command_printed():
    argv = [sys.executable, "-c", "import sys; print('x'); sys.exit(3)"]
    rc, out, err = deadline.run_command(ansible_module(), argv, 60)
    assert (rc, out, err) == (3, "x\n", "")


def test_run_command_kills_a_command_past_its_limit(tmp_path):
    pid_file = tmp_path / "pid"
    argv = [
        sys.executable,
        "-c",
        f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(3600)",
    ]
    with pytest.raises(deadline.GpuTimeout) as caught:
        deadline.run_command(ansible_module(), argv, 2)
    assert str(caught.value).startswith(
        f"{' '.join(argv)} did not finish within 2 s (timeout) and was killed; "
    )
    # the command itself is killed with the child that ran it (its own session's process group)
    stat = Path(f"/proc/{int(pid_file.read_text())}/stat")
    for _ in range(200):
        if (
            not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] == "Z"
        ):  # gone, or dead unreaped
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"the command ({stat.parent.name}) outlived its limit")


def test_run_command_names_a_missing_binary(tmp_path):
    with pytest.raises(GpuFactsError, match=r"cannot run .*/nope: No such file or directory"):
        deadline.run_command(ansible_module(), [str(tmp_path / "nope")], 5)


def test_call_in_child_returns_the_result_and_the_refusal():
    assert deadline.call_in_child(lambda progress: {"a": [1, None]}, 60, "thing") == {"a": [1, None]}

    def refuse(progress):
        raise GpuFactsError("no")

    with pytest.raises(GpuFactsError, match="^no$"):
        deadline.call_in_child(refuse, 60, "thing")

    def crash(progress):
        raise KeyError("k")

    with pytest.raises(GpuFactsError, match=r"^thing failed: KeyError: 'k'$"):
        deadline.call_in_child(crash, 60, "thing")


def test_call_in_child_names_the_step_that_hung():
    def hang(progress):
        import time

        progress("first")
        progress("nvmlSlowCall")
        time.sleep(3600)

    with pytest.raises(deadline.GpuTimeout) as caught:
        deadline.call_in_child(hang, 0.5, "NVML")
    assert str(caught.value).startswith(
        "NVML did not answer within 0.5 s (timeout) (it hung in nvmlSlowCall); "
    )


@pytest.mark.parametrize("bad", [0, -1, "30", True, None, float("nan"), float("inf"), 1e300, 86400.5])
def test_timeout_must_be_positive(bad):
    """issue 43: nan, inf and 1e300 were taken (only "not above 0" was refused) and failed later."""
    with pytest.raises(
        GpuFactsError, match="timeout: expected a number of seconds above 0 and at most 86400, got "
    ):
        deadline.check_timeout(bad)


def test_the_longest_timeout_is_a_day():
    assert deadline.check_timeout(86400) == 86400.0
    assert deadline.check_timeout(0.001) == 0.001


# --- the module, with a hanging nvidia-smi or NVML ------------------------------------------------


@pytest.mark.parametrize("hang", ["--query-gpu", "-L", "-q"])
def test_module_fails_the_host_when_nvidia_smi_hangs(hang, tmp_path, monkeypatch, capsys):
    path = write_fixture(tmp_path, "h200.json", smi_hangs_on=[hang])
    monkeypatch.setenv(ENV, str(path))
    # the calls before the hanging one must finish in time even on a loaded machine: 4 s each
    args = {"backend": "auto", "nvidia_smi_path": str(FAKE_SMI), "timeout": 4, "proc_root": str(PROC)}
    code, result = run_main(args, monkeypatch, capsys)
    assert code == 1 and result["failed"] is True
    assert result["msg"].startswith(f"{FAKE_SMI} {hang}"), result["msg"]
    assert "did not finish within 4 s (timeout) and was killed" in result["msg"]
    assert "dmesg" in result["msg"]


def test_module_fails_the_host_when_nvml_init_hangs(tmp_path, monkeypatch, capsys):
    path = write_fixture(tmp_path, "h200.json", nvml_hangs_in=["nvmlInit"])
    monkeypatch.setenv(ENV, str(path))
    args = {"nvidia_smi_path": str(FAKE_SMI), "timeout": 1, "proc_root": str(PROC)}
    code, result = run_main(args, monkeypatch, capsys, fake_nvml=load_fake_nvml())
    assert code == 1
    assert result["msg"].startswith(
        "NVML (the pynvml binding) did not answer within 1 s (timeout) (it hung in nvmlInit); "
    )


def test_a_hang_after_nvml_init_names_that_call(tmp_path, monkeypatch, capsys):
    path = write_fixture(tmp_path, "dgx-h100.json", nvml_hangs_in=["nvmlDeviceGetHandleByIndex"])
    monkeypatch.setenv(ENV, str(path))
    code, result = run_main({"timeout": 1.5}, monkeypatch, capsys, fake_nvml=load_fake_nvml())
    assert code == 1 and "within 1.5 s (timeout) (it hung in nvmlDeviceGetHandleByIndex)" in result["msg"]


def test_module_within_its_limit_reports_the_binding(monkeypatch, capsys):
    monkeypatch.setenv(ENV, str(FIXTURES / "h200.json"))
    code, result = run_main({"backend": "nvidia-smi", "nvidia_smi_path": str(FAKE_SMI)}, monkeypatch, capsys)
    assert code == 0 and len(result["ansible_facts"]["nvidia_gpus"]) == 1
    assert result["nvml_binding"] == {
        "importable": None,
        "python": sys.executable,
        "error": None,
        "pip": None,
    }


def test_fallback_warning_can_be_left_to_the_fleet_summary(monkeypatch):
    result, _ = gather("h200.json", "auto", monkeypatch, nvml=None, fallback_warning=False)
    assert result["ansible_facts"]["nvidia_gpu_backend"] == "nvidia-smi"
    assert not any("pynvml" in warning for warning in result["warnings"])
    assert result["nvml_binding"]["importable"] is False
    assert "pynvml" in result["nvml_binding"]["error"]
    result, _ = gather("h200.json", "auto", monkeypatch, nvml=None)
    assert any("not importable" in warning for warning in result["warnings"])


@pytest.mark.parametrize("backend", ["auto", "nvml"])
def test_binding_missing_fail_stops_either_backend_and_keeps_the_binding_report(backend, monkeypatch):
    """binding_missing=fail: the rescue of the role gpu_discovery tells this failure from others by the
    failed result's nvml_binding (importable false, pip)."""
    with pytest.raises(GpuFactsError) as caught:
        gather("h200.json", backend, monkeypatch, nvml=None, binding_missing="fail")
    assert f"backend={backend} needs the Python module pynvml" in str(caught.value)
    binding = caught.value.result["nvml_binding"]
    assert binding["importable"] is False and "pynvml" in binding["error"]
    assert binding["pip"] in (True, False)


@pytest.mark.parametrize("backend", ["auto", "nvml"])
def test_binding_missing_return_gives_no_gpus_and_the_reason(backend, monkeypatch):
    result, _ = gather("h200.json", backend, monkeypatch, nvml=None, binding_missing="return")
    assert result["ansible_facts"]["nvidia_gpus"] == []
    assert result["nvml_binding"]["importable"] is False and "pynvml" in result["msg"]


def test_binding_missing_unset_lets_the_backend_decide(monkeypatch):
    result, _ = gather("h200.json", "auto", monkeypatch, nvml=None, binding_missing=None)
    assert result["ansible_facts"]["nvidia_gpu_backend"] == "nvidia-smi"
    with pytest.raises(GpuFactsError) as caught:
        gather("h200.json", "nvml", monkeypatch, nvml=None, binding_missing=None)
    assert caught.value.result["nvml_binding"]["importable"] is False


def test_binding_missing_fail_answers_with_the_binding_report(monkeypatch, capsys):
    """The failed answer itself (fail_on_refusal) carries nvml_binding beside msg."""
    monkeypatch.setenv(ENV, str(FIXTURES / "h200.json"))
    code, result = run_main({"binding_missing": "fail"}, monkeypatch, capsys)
    assert code == 1 and result["failed"] and "needs the Python module pynvml" in result["msg"]
    assert result["nvml_binding"]["importable"] is False and "pynvml" in result["nvml_binding"]["error"]


# --- GPU counts across the nvidia-smi outputs (issue 18 case 4) -----------------------------------


def test_query_gpu_missing_a_gpu_is_named_by_bus_id(tmp_path, monkeypatch):
    path = write_fixture(tmp_path, "dgx-h100.json", smi_query_gpu_omits=[DGX_BUS[3]])
    monkeypatch.setenv(ENV, str(path))
    result = facts.gather(params(backend="nvidia-smi"), FakeHost(path))
    assert len(result["ansible_facts"]["nvidia_gpus"]) == 7
    (warning,) = [w for w in result["warnings"] if "different GPU counts" in w]
    assert "nvidia-smi --query-gpu 7, nvidia-smi -L 8, nvidia-smi -q -x 8" in warning
    assert f"missing: {DGX_BUS[3]}." in warning


def test_query_gpu_with_only_its_header_is_not_no_gpu(tmp_path, monkeypatch):
    path = write_fixture(tmp_path, "dgx-h100.json", smi_query_gpu_omits="all")
    monkeypatch.setenv(ENV, str(path))
    result = facts.gather(params(backend="nvidia-smi"), FakeHost(path))
    assert result["ansible_facts"]["nvidia_gpus"] == []
    assert result["msg"].startswith(
        "nvidia-smi --query-gpu reports no GPU, but other nvidia-smi outputs list 8: "
    )
    assert all(bus in result["msg"] for bus in DGX_BUS)
    assert any("missing: " + ", ".join(DGX_BUS) in w for w in result["warnings"])


def test_consistent_outputs_warn_about_nothing(monkeypatch):
    for name in ("dgx-h100.json", "gpu-lost.json", "a100-mig.json", "workstation.json"):
        result, _ = gather(name, "nvidia-smi", monkeypatch)
        assert not any("different GPU counts" in w for w in result["warnings"]), name


def test_cross_check_names_a_uuid_when_no_output_has_its_bus_id():
    """Sibling: -L lists a GPU that neither --query-gpu nor -q -x knows (no bus id anywhere)."""
    gpus = [{"pci_bus_id": "00000000:18:00.0", "uuid": "GPU-a"}]
    listed = {"GPU-a": [], "GPU-b": []}
    xml = {"attached_gpus": None, "gpus": {"00000000:18:00.0": {"uuid": "GPU-a"}}}
    warnings, missing = smi.cross_check(gpus, listed, [], xml)
    assert missing == ["GPU-b"]
    assert "nvidia-smi --query-gpu 1, nvidia-smi -L 2, nvidia-smi -q -x 1" in warnings[0]


def test_cross_check_counts_attached_gpus_it_cannot_name():
    """Sibling: -q -x says attached_gpus 2 but prints one <gpu>; -L failed."""
    gpus = [{"pci_bus_id": "00000000:18:00.0", "uuid": "GPU-a"}]
    xml = {"attached_gpus": 2, "gpus": {"00000000:18:00.0": {"uuid": "GPU-a"}}}
    warnings, missing = smi.cross_check(gpus, {}, [], xml)
    assert missing == []
    assert "missing: none of them named by bus id" in warnings[0]
    assert "nvidia-smi -q -x 2" in warnings[0]


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), 1e300, -1])
def test_pod_resources_timeout_is_checked_before_anything_runs(bad):
    """issue 43: nan passed read_pod_resources' "<= 0" check and crashed the module in the socket layer."""
    params = {
        "timeout": 30,
        "pod_resources_socket": "/nonexistent/kubelet.sock",
        "pod_resources_timeout": bad,
    }
    with pytest.raises(
        GpuFactsError, match="pod_resources_timeout: expected a number of seconds above 0 and at most"
    ):
        facts.execute(params, None)
