"""The real upstream Helm charts in the lab tests: where they are, and helm run against the lab.

../shared/reference/charts/ holds the three charts whole, byte for byte (its SOURCES.md):
gpu-operator (v26.7.0, Chart.yaml says v1.0.0-devel until the release job stamps it),
dra-driver-nvidia-gpu (0.4.1) and nvidia-device-plugin (0.20.0). GPUSPLIT_REFERENCE_DIR moves
the reference folder. No registry is reachable here: helm installs the folders or packages made
from them. Without the folder, the tests that need it skip and test_reference_folder.py fails
once, saying where it looked.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from lab import components as C

ROOT = Path(__file__).resolve().parents[2]
ENV = "GPUSPLIT_REFERENCE_DIR"
# what the lab tests read from the reference folder
NEEDED = (
    "charts/gpu-operator/Chart.yaml",
    "charts/dra-driver-nvidia-gpu/Chart.yaml",
    "charts/nvidia-device-plugin/Chart.yaml",
    "NVIDIA_gpu-operator/nvidia.com_clusterpolicies.yaml",
)


def reference_dir(environ=os.environ, root: Path = ROOT) -> Path:
    """GPUSPLIT_REFERENCE_DIR, else ../shared/reference beside the checkout."""
    return Path(environ.get(ENV) or root.parent / "shared" / "reference")


def missing_reference(reference: Path, environ=os.environ) -> str:
    """'' when ``reference`` holds what the lab tests read; else what it lacks, where it was, how to point at it."""
    absent = [rel for rel in NEEDED if not (reference / rel).is_file()]
    if not absent:
        return ""
    where = (
        f"{ENV}={environ[ENV]}"
        if environ.get(ENV)
        else f"{ENV} is not set: ../shared/reference beside the checkout"
    )
    return (
        f"the reference folder {reference} ({where}) lacks {', '.join(absent)}, which the lab tests of the upstream "
        f"charts and the ClusterPolicy CRD read: set {ENV} to a copy of the shared reference folder (charts/, "
        "NVIDIA_gpu-operator/; its SOURCES.md says where each file comes from)"
    )


REFERENCE_DIR = reference_dir()
CHARTS = REFERENCE_DIR / "charts"
KUBECONFIG = str(C.KUBECONFIG)


def chart(name: str) -> Path:
    """The chart folder; without it the test skips, and test_reference_folder.py's one failure says why."""
    path = CHARTS / name
    if not (path / "Chart.yaml").is_file():
        pytest.skip(f"the real chart {path} is missing: see tests/integration/test_reference_folder.py")
    return path


def helm_proc(*args: str) -> subprocess.CompletedProcess:
    """helm against the lab; the finished process, whatever its exit code."""
    return subprocess.run(["helm", *args, "--kubeconfig", KUBECONFIG], capture_output=True, text=True)


def helm(*args: str, check: bool = True) -> str:
    proc = helm_proc(*args)
    if check and proc.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed: {proc.stderr}")
    return proc.stdout


def releases(namespace: str) -> list[dict]:
    return json.loads(helm("list", "-n", namespace, "-o", "json"))


def install(release: str, namespace: str, chart_dir: Path, values: dict, tmp: Path) -> dict:
    """``helm upgrade --install`` of a real chart with ``values``, as a site would run it; its row."""
    values_file = tmp / f"{release}-values.yaml"
    values_file.write_text(yaml.safe_dump(values))
    helm(
        "upgrade",
        "--install",
        release,
        str(chart_dir),
        "-n",
        namespace,
        "--create-namespace",
        "-f",
        str(values_file),
    )
    [row] = [r for r in releases(namespace) if r["name"] == release]
    return row


def uninstall(release: str, namespace: str) -> None:
    helm("uninstall", release, "-n", namespace, "--wait", check=False)
