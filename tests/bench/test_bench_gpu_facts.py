"""Benchmark: GPU facts of a DGX H100 through NVML (in-process binding) vs nvidia-smi (four subprocesses).

Off unless benchmarks are on: `pytest tests/bench --benchmark-enable` (pyproject's addopts disable them).
The fakes stand in for both libnvidia-ml and nvidia-smi, so the numbers show the cost of our own code
and of the subprocess round trips, not of a real driver. Nothing is asserted about times.
"""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_collections.gpusplit.k8s.plugins.module_utils._gpu import nvml as gpu_nvml
from ansible_collections.gpusplit.k8s.plugins.module_utils._gpu import smi as gpu_smi

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "gpus" / "dgx-h100.json"
FAKE_PYNVML = ROOT / "tests" / "fakes" / "pynvml.py"
FAKE_SMI = ROOT / "tests" / "fakes" / "bin" / "nvidia-smi"
ENV = "GPUSPLIT_FAKE_NVML_FIXTURE"

MEANS = {}


@pytest.fixture
def benchmarks_on(request):
    if not request.config.getoption("benchmark_enable", default=False):
        pytest.skip("benchmarks are off; run pytest tests/bench --benchmark-enable")


@pytest.fixture(scope="module", autouse=True)
def print_ratio(request):
    yield
    if "nvml" in MEANS and "nvidia-smi" in MEANS:
        line = (
            f"gpu facts on dgx-h100: nvidia-smi {MEANS['nvidia-smi'] * 1000:.1f} ms, "
            f"NVML {MEANS['nvml'] * 1000:.2f} ms, nvidia-smi/NVML = {MEANS['nvidia-smi'] / MEANS['nvml']:.0f}x"
        )
        plugins = request.config.pluginmanager
        reporter = plugins.get_plugin("terminalreporter")
        capture = plugins.get_plugin("capturemanager")
        if reporter is None or capture is None:
            print(line)
            return
        with capture.global_and_fixture_disabled():  # fixture teardown output is captured otherwise
            reporter.write_line("")
            reporter.write_line(line)


def fake_nvml():
    spec = importlib.util.spec_from_file_location("gpusplit_bench_fake_pynvml", FAKE_PYNVML)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_fake_smi(argv):
    env = dict(os.environ, **{ENV: str(FIXTURE), "LC_ALL": "C"})
    done = subprocess.run([sys.executable, *argv], capture_output=True, text=True, env=env, check=False)
    return done.returncode, done.stdout, done.stderr


@pytest.mark.benchmark(group="gpu-facts-dgx-h100")
@pytest.mark.parametrize("backend", ["nvml", "nvidia-smi"])
def test_bench_gpu_facts(backend, benchmark, benchmarks_on, monkeypatch):
    monkeypatch.setenv(ENV, str(FIXTURE))
    if backend == "nvml":
        nvml = fake_nvml()

        def collect():
            return gpu_nvml.collect(nvml)
    else:

        def collect():
            return gpu_smi.collect(run_fake_smi, str(FAKE_SMI))

    result = benchmark(collect)
    assert len(result["gpus"]) == 8
    if benchmark.stats is not None:
        MEANS[backend] = benchmark.stats.stats.mean
