"""Where a run writes its outputs by default (plugins/plugin_utils/output_dir.py, filter gpusplit.k8s.out_dir):
out/ in ansible-playbook's working directory, never next to the playbook inside the collection."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.gpusplit.k8s.plugins.filter.out_dir import FilterModule
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.output_dir import out_dir

ROOT = Path(__file__).resolve().parents[4]
BIN = Path(sys.executable).parent


@pytest.mark.parametrize("setting", [None, "", "  "])
def test_no_setting_is_out_in_the_working_directory(setting, tmp_path):
    assert out_dir(setting, cwd=tmp_path) == str(tmp_path / "out")


def test_the_default_follows_the_process_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert out_dir() == str(tmp_path / "out")


def test_a_setting_wins_relative_ones_from_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert out_dir("/srv/gpusplit/out/", cwd=tmp_path) == "/srv/gpusplit/out"
    assert out_dir("results/prod", cwd=tmp_path) == str(tmp_path / "results" / "prod")
    assert out_dir("~/gpusplit", cwd=tmp_path) == str(tmp_path / "home" / "gpusplit")


@pytest.mark.parametrize("bad", [{"path": "x"}, ["out"], 3])
def test_a_setting_that_is_no_path_is_refused_by_name(bad):
    with pytest.raises(AnsibleFilterError, match="gpusplit_out_dir: expected a directory path"):
        FilterModule().filters()["out_dir"](bad)


OUTPUT_ROLES = ("gpu_verify", "dra_driver")


@pytest.mark.parametrize("role", OUTPUT_ROLES)
def test_the_roles_that_write_outputs_default_to_the_filter(role):
    defaults = yaml.safe_load((ROOT / "roles" / role / "defaults" / "main.yml").read_text())
    assert defaults["gpusplit_out_dir"] == "{{ none | gpusplit.k8s.out_dir }}"


def test_gpu_plan_works_its_output_dir_out_once_with_the_same_filter():
    """gpu_plan has no default (its per-host argument-spec check would run the filter per host): its
    run_once tasks read gpu_plan_out_dir, gpusplit_out_dir as given or the same filter."""
    defaults = yaml.safe_load((ROOT / "roles" / "gpu_plan" / "defaults" / "main.yml").read_text()) or {}
    assert "gpusplit_out_dir" not in defaults
    found = yaml.safe_load((ROOT / "roles" / "gpu_plan" / "vars" / "main.yml").read_text())[
        "gpu_plan_out_dir"
    ]
    assert found == "{{ gpusplit_out_dir if gpusplit_out_dir is defined else (none | gpusplit.k8s.out_dir) }}"


def test_ansible_gives_out_in_the_directory_it_runs_in(tmp_path):
    """Through Ansible's own templating, run from a directory outside the collection."""
    work = tmp_path / "work"
    work.mkdir()
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
    proc = subprocess.run(
        [
            str(BIN / "ansible"),
            "localhost",
            "-i",
            "localhost,",
            "-c",
            "local",
            "-m",
            "ansible.builtin.debug",
            "-a",
            "msg={{ none | gpusplit.k8s.out_dir }}",
        ],
        capture_output=True,
        text=True,
        cwd=work,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"msg: {work / 'out'}" in proc.stdout, proc.stdout
