"""The chart check of the dra_driver and gpu_operator roles: a local chart of another name or version is refused.

kubernetes.core.helm installs a local chart whatever its Chart.yaml says (helm ignores ``--version`` for a path),
so each role reads the chart with ``helm show chart`` and refuses, naming both, before anything is installed
(docs/dra.md, "The chart"). The two tasks of each role run here as they are in its task file, with ansible-playbook
and the project's helm, on charts made in the test: a folder and a packaged .tgz.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from ansible_collections.gpusplit.k8s.tests.unit.playbook_run import BIN, run_play

ROOT = Path(__file__).resolve().parents[3]
DEFAULT_HELM = ROOT / ".venv" / "bin" / "helm"

ROLES = {
    "dra_driver": {
        "file": "chart_check.yml",
        "tasks": (
            "Read the local chart's Chart.yaml (nothing is installed here)",
            "Refuse a chart or a release that is not the pinned one",
        ),
        "vars": ("dra_driver_local", "dra_driver_duration_re"),
        "path": "gpusplit_dra_chart_path",
        "settings": {
            "gpusplit_dra_chart_name": "dra-driver-nvidia-gpu",
            "gpusplit_dra_chart_version": "0.4.1",
            "gpusplit_dra_release_name": "dra-driver-nvidia-gpu",
            "gpusplit_dra_namespace": "dra-driver-nvidia-gpu",
            "gpusplit_dra_helm_timeout": "10m0s",
        },
        "name": "dra-driver-nvidia-gpu",
        "version": "0.4.1",
        "timeout": "gpusplit_dra_helm_timeout",
        "pin": "gpusplit_dra_chart_version",
    },
    "gpu_operator": {
        "file": "operator.yml",
        "tasks": ("Read the local chart's Chart.yaml", "Refuse a chart that is not the pinned one"),
        "vars": ("gpu_operator_local", "gpu_operator_duration_re"),
        "path": "gpusplit_operator_chart_path",
        "settings": {
            "gpusplit_operator_chart": "gpu-operator",
            "gpusplit_operator_chart_version": "v26.7.0",
            "gpusplit_operator_release": "gpu-operator",
            "gpusplit_operator_namespace": "gpu-operator",
            "gpusplit_operator_helm_timeout": "10m0s",
            "gpu_operator_config": {"helm": True},
        },
        "name": "gpu-operator",
        "version": "v26.7.0",
        "timeout": "gpusplit_operator_helm_timeout",
        "pin": "gpusplit_operator_chart_version",
    },
}


def chart(tmp_path: Path, name: str, version: str, app_version: str = "1.0") -> Path:
    folder = tmp_path / "charts" / f"{name}-{version}" / name
    (folder / "templates").mkdir(parents=True)
    (folder / "Chart.yaml").write_text(
        yaml.safe_dump({"apiVersion": "v2", "name": name, "version": version, "appVersion": app_version})
    )
    return folder


def role_tasks(role: str, case: str, settings: dict) -> list[dict]:
    """The role's two tasks, with the case's settings and the role's own vars; the refusal's result kept."""
    spec = ROLES[role]
    tasks = yaml.safe_load((ROOT / "roles" / role / "tasks" / spec["file"]).read_text())
    named = {task.get("name"): task for task in tasks}
    role_vars = yaml.safe_load((ROOT / "roles" / role / "vars" / "main.yml").read_text())
    case_vars = {**{name: role_vars[name] for name in spec["vars"]}, **spec["settings"], **settings}
    read, refuse = (dict(named[name]) for name in spec["tasks"])
    read["vars"] = case_vars
    refuse["vars"] = {**refuse.get("vars", {}), **case_vars}
    refuse.update(register=case, ignore_errors=True)
    return [read, refuse]


@pytest.fixture(scope="module")
def helm():
    """This venv's helm, else the one on PATH, else the default leg's (the other legs' venvs have none)."""
    found = shutil.which("helm", path=os.pathsep.join([str(BIN), os.environ.get("PATH", "")]))
    found = found or (str(DEFAULT_HELM) if DEFAULT_HELM.is_file() else None)
    if not found:
        pytest.fail(f"the project's helm is missing: {DEFAULT_HELM} (make venv installs it)", pytrace=False)
    return found


@pytest.mark.parametrize("role", sorted(ROLES))
def test_a_local_chart_of_another_name_or_version_is_refused_naming_both(tmp_path, helm, role):
    spec = ROLES[role]
    name, version = spec["name"], spec["version"]
    bare = version.lstrip("v")
    good = chart(tmp_path, name, bare)  # a leading v aside, the pinned version
    package = tmp_path / "package"
    subprocess.run([helm, "package", str(good), "-d", str(package)], check=True, capture_output=True)
    [tgz] = package.glob("*.tgz")
    other = chart(tmp_path, "other-chart", "1.0.0")
    newer = chart(tmp_path, name, "99.0.0")
    devel = chart(tmp_path, name, "v1.0.0-devel", "main-latest")
    cases = {
        "folder": {spec["path"]: str(good)},
        "tgz": {spec["path"]: str(tgz)},
        "registry": {spec["path"]: ""},
        "other_name": {spec["path"]: str(other)},
        "other_version": {spec["path"]: str(newer)},
        "devel": {spec["path"]: str(devel)},
        "unpinned": {spec["path"]: "", spec["pin"]: "", spec["timeout"]: "ten minutes"},
        "seconds": {spec["path"]: "", spec["timeout"]: 600},
    }
    tasks = [task for case, settings in cases.items() for task in role_tasks(role, case, settings)]
    results, _, _ = run_play(tmp_path, tasks, options=("-e", f"gpusplit_helm_binary={helm}"))
    said = {case: " ".join(str(results[case].get("msg", "")).split()) for case in cases}
    failed = {case for case in cases if results[case].get("failed")}
    assert failed == {"other_name", "other_version", "devel", "unpinned"}, said
    assert (
        f"is other-chart 1.0.0, but gpusplit was built for {name} {version}: give the {name} chart"
        in said["other_name"]
    )
    assert (
        f"{newer} is {name} 99.0.0, but gpusplit was built for {name} {version}: give the {version} chart "
        "(or change the version pin only after checking gpusplit's values against the new chart)"
    ) in said["other_version"]
    assert (
        f"{devel} is {name} v1.0.0-devel (appVersion main-latest), an unreleased source checkout"
        in said["devel"]
    )
    assert f"helm package {devel} --version {version} --app-version {version}" in said["devel"]
    assert "is empty: gpusplit installs pinned chart versions only" in said["unpinned"]
    assert "timeout ten minutes is not a duration such as 10m0s or 600s" in said["unpinned"]
