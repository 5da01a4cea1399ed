"""The real upstream Helm charts in the lab tests: where they are, and helm run against the lab.

../shared/reference/charts/ holds the three charts whole, byte for byte (its SOURCES.md):
gpu-operator (v26.7.0, Chart.yaml says v1.0.0-devel until the release job stamps it),
dra-driver-nvidia-gpu (0.4.1) and nvidia-device-plugin (0.20.0). GPUSPLIT_REFERENCE_DIR moves
the reference folder. No registry is reachable here: helm installs the folders or packages made
from them.
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
CHARTS = Path(os.environ.get("GPUSPLIT_REFERENCE_DIR") or ROOT.parent / "shared" / "reference") / "charts"
KUBECONFIG = str(C.KUBECONFIG)


def chart(name: str) -> Path:
    """The chart folder, or the test fails saying where it was looked for."""
    path = CHARTS / name
    if not (path / "Chart.yaml").is_file():
        pytest.fail(f"the real chart is missing: {path} (set GPUSPLIT_REFERENCE_DIR)", pytrace=False)
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
