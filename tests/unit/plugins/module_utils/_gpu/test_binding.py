"""The NVML binding's install inside the discovery's call (module_utils/_gpu/binding.py and the module's
install_binding): pip only where the binding is missing and the install is asked for, one module call,
check mode installs nothing, and each pip failure says what to do."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ansible_collections.gpusplit.k8s.plugins.module_utils._gpu import binding, facts
from ansible_collections.gpusplit.k8s.plugins.module_utils._gpu.deadline import GpuTimeout
from ansible_collections.gpusplit.k8s.plugins.module_utils._gpu.schema import GpuFactsError
from ansible_collections.gpusplit.k8s.tests.unit.plugins.module_utils._gpu.gpu_fakes import (
    FIXTURES,
    ROOT,
    FakeHost,
    params,
)


def test_the_default_version_is_the_pinned_one():
    # (read as text: these tests also run under the Pythons before 3.11, which have no tomllib)
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert f'"nvidia-ml-py=={binding.DEFAULT_VERSION}"' in pyproject
    assert facts.ARGUMENT_SPEC["binding_version"]["default"] == binding.DEFAULT_VERSION


def test_pip_runs_as_that_python_with_the_pinned_requirement():
    argv = binding.pip_argv("/opt/py/bin/python3", "13.615.71")
    assert argv[:4] == ["/opt/py/bin/python3", "-m", "pip", "install"]
    assert "nvidia-ml-py==13.615.71" in argv and "--break-system-packages" not in argv
    assert (
        binding.pip_argv("/usr/bin/python3", "1.0", break_system_packages=True)[-1]
        == "--break-system-packages"
    )


@pytest.mark.parametrize("version", ["", "  ", "13.615.71 --index-url http://x", None, 13])
def test_a_bad_version_is_refused_before_pip_runs(version):
    with pytest.raises(GpuFactsError, match="binding_version must be one version of nvidia-ml-py"):
        binding.pip_argv("/usr/bin/python3", version)


@pytest.mark.parametrize(
    ("stderr", "todo"),
    [
        ("/usr/bin/python3: No module named pip", "Install pip for that Python"),
        ("error: externally-managed-environment\n\nThis environment is externally managed", "--break"),
        ("ERROR: Could not find a version that satisfies the requirement", "reaches the package index"),
    ],
)
def test_a_failed_install_says_what_to_do(stderr, todo):
    def run(argv, timeout):
        return 1, "", stderr

    with pytest.raises(GpuFactsError) as caught:
        binding.install(run, "/usr/bin/python3", "13.615.71")
    text = str(caught.value)
    assert "pip could not install nvidia-ml-py==13.615.71 into /usr/bin/python3" in text
    assert "(exit code 1)" in text and stderr.strip().splitlines()[-1].strip() in text
    assert (todo if todo != "--break" else "gpusplit_nvml_binding_break_system_packages: true") in text


def test_a_pip_that_hangs_is_reported_as_pip_not_as_a_wedged_gpu():
    def run(argv, timeout):
        raise GpuTimeout(
            f"{' '.join(argv)} did not finish within {timeout:g} s (timeout) and was killed; a wedged GPU"
        )

    with pytest.raises(GpuFactsError) as caught:
        binding.install(run, "/usr/bin/python3", "13.615.71", timeout=5)
    text = str(caught.value)
    assert "did not finish within 5 s" in text and "package index" in text and "wedged" not in text


def test_pip_with_nothing_to_do_is_no_install():
    assert (
        binding.install(lambda argv, t: (0, "Requirement already satisfied: nvidia-ml-py", ""), "p", "1")
        is False
    )
    assert binding.install(lambda argv, t: (0, "Successfully installed nvidia-ml-py-1", ""), "p", "1") is True


def test_install_runs_a_real_python_without_pip_and_fails_with_the_hint(tmp_path):
    """A real interpreter without pip (a venv made --without-pip) through the module's own runner."""
    venv = tmp_path / "nopip"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, capture_output=True
    )
    from ansible_collections.gpusplit.k8s.plugins.module_utils._gpu.deadline import run_command

    with pytest.raises(GpuFactsError, match="No module named pip.*Install pip for that Python"):
        binding.install(run_command, str(venv / "bin" / "python"), "13.615.71", timeout=60)


class InstallingHost(FakeHost):
    """A host whose Python lacks the binding until pip (here: a recorded call) installs it."""

    def __init__(
        self,
        fixture_path,
        pip_output="Successfully installed nvidia-ml-py-13.615.71",
        fail=None,
        installs=True,
        check_mode=False,
    ):
        super().__init__(fixture_path, nvml=None)
        self.pip_calls = []
        self.pip_output = pip_output
        self.fail = fail
        self.installs = installs
        self.check_mode = check_mode

    def install_binding(self, version, break_system_packages):
        self.pip_calls.append((version, break_system_packages))
        if self.fail:
            raise GpuFactsError(self.fail)
        if self.installs:
            self.nvml = "fake"
        return "Successfully installed" in self.pip_output


def gather(host, monkeypatch, **changes):
    monkeypatch.setenv("GPUSPLIT_FAKE_NVML_FIXTURE", host.fixture_path)
    return facts.gather(params(**changes), host)


@pytest.mark.parametrize("backend", ["auto", "nvml"])
def test_a_missing_binding_is_installed_and_nvml_read_in_the_same_call(monkeypatch, backend):
    host = InstallingHost(FIXTURES / "h200.json")
    result = gather(host, monkeypatch, backend=backend, install_binding=True, binding_version="13.615.71")
    assert host.pip_calls == [("13.615.71", False)]
    assert result["ansible_facts"]["nvidia_gpu_backend"] == "nvml"
    assert result["nvml_binding"]["importable"] is True and result["nvml_binding"]["installed"] == "13.615.71"
    assert not any("not importable" in warning for warning in result["warnings"])
    assert host.commands == []  # nvidia-smi never ran


def test_without_install_binding_pip_never_runs(monkeypatch):
    host = InstallingHost(FIXTURES / "h200.json")
    result = gather(host, monkeypatch, install_binding=False)
    assert host.pip_calls == [] and result["ansible_facts"]["nvidia_gpu_backend"] == "nvidia-smi"
    assert result["nvml_binding"]["importable"] is False and result["nvml_binding"]["installed"] is None


def test_where_the_binding_imports_pip_never_runs(monkeypatch):
    host = InstallingHost(FIXTURES / "h200.json")
    host.nvml = "fake"
    result = gather(host, monkeypatch, install_binding=True)
    assert host.pip_calls == [] and result["nvml_binding"]["installed"] is None
    assert result["ansible_facts"]["nvidia_gpu_backend"] == "nvml"


def test_check_mode_installs_nothing_and_says_what_it_would_install(monkeypatch):
    host = InstallingHost(FIXTURES / "h200.json", check_mode=True)
    result = gather(host, monkeypatch, install_binding=True, binding_version="13.615.71")
    assert host.pip_calls == []
    assert result["nvml_binding"]["would_install"] == "nvidia-ml-py==13.615.71"
    assert result["ansible_facts"]["nvidia_gpu_backend"] == "nvidia-smi"  # what the host has now


def test_a_failed_install_fails_the_host(monkeypatch):
    host = InstallingHost(FIXTURES / "h200.json", fail="pip could not install nvidia-ml-py==1 (exit code 1)")
    with pytest.raises(GpuFactsError, match="pip could not install"):
        gather(host, monkeypatch, install_binding=True)


def test_an_install_that_still_does_not_import_is_refused_with_the_reason(monkeypatch):
    host = InstallingHost(FIXTURES / "h200.json", installs=False)
    with pytest.raises(GpuFactsError, match="still does not import there .*No module named 'pynvml'"):
        gather(host, monkeypatch, install_binding=True)
