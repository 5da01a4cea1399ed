"""The shared reference folder (the upstream charts and the ClusterPolicy CRD) that lab tests read.

Without it those tests skip, naming this file, and this file fails once, saying where the folder was
looked for and how to point at it (GPUSPLIT_REFERENCE_DIR). In CI (CI=true) a skip fails the run too.
"""

from __future__ import annotations

import pytest
import real_charts


def test_the_reference_folder_holds_what_the_lab_tests_read():
    problem = real_charts.missing_reference(real_charts.REFERENCE_DIR)
    if problem:
        pytest.fail(problem, pytrace=False)


def test_the_folder_is_the_variable_else_beside_the_checkout(tmp_path):
    root = tmp_path / "clone"
    assert real_charts.reference_dir({}, root) == tmp_path / "shared" / "reference"
    assert (
        real_charts.reference_dir({"GPUSPLIT_REFERENCE_DIR": ""}, root) == tmp_path / "shared" / "reference"
    )
    assert (
        real_charts.reference_dir({"GPUSPLIT_REFERENCE_DIR": str(tmp_path / "ref")}, root) == tmp_path / "ref"
    )


def test_a_missing_folder_is_named_with_the_variable_and_what_it_lacks(tmp_path):
    unset = real_charts.missing_reference(tmp_path / "nowhere", {})
    assert f"the reference folder {tmp_path / 'nowhere'} (GPUSPLIT_REFERENCE_DIR is not set" in unset
    assert all(rel in unset for rel in real_charts.NEEDED), unset
    ref = tmp_path / "ref"
    for rel in real_charts.NEEDED[:-1]:
        (ref / rel).parent.mkdir(parents=True, exist_ok=True)
        (ref / rel).write_text("x")
    partial = real_charts.missing_reference(ref, {"GPUSPLIT_REFERENCE_DIR": str(ref)})
    assert f"(GPUSPLIT_REFERENCE_DIR={ref})" in partial
    assert f"lacks {real_charts.NEEDED[-1]}," in partial and "charts/gpu-operator" not in partial
    (ref / real_charts.NEEDED[-1]).parent.mkdir(parents=True)
    (ref / real_charts.NEEDED[-1]).write_text("x")
    assert real_charts.missing_reference(ref, {"GPUSPLIT_REFERENCE_DIR": str(ref)}) == ""


def test_a_missing_chart_skips_pointing_here(monkeypatch, tmp_path):
    monkeypatch.setattr(real_charts, "CHARTS", tmp_path)
    with pytest.raises(pytest.skip.Exception, match="test_reference_folder.py"):
        real_charts.chart("dra-driver-nvidia-gpu")
    (tmp_path / "dra-driver-nvidia-gpu").mkdir()
    (tmp_path / "dra-driver-nvidia-gpu" / "Chart.yaml").write_text("name: x\n")
    assert real_charts.chart("dra-driver-nvidia-gpu") == tmp_path / "dra-driver-nvidia-gpu"
