"""The action plugin gpusplit.k8s.gpu_host_files, run by ansible-playbook: the host side is written without an
AnsiballZ execution (plugin_utils/lean_module.py), with and without pipelining, and answers as the module does
(the same task run asynchronously runs the module itself, on a twin host root). Where SELinux is on (the mount
table's stand-in, tests/fakes/mounts), the task runs the module. No lab: the host is this machine over the local
connection."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from ansible_collections.gpusplit.k8s.plugins.module_utils._lean.bootstrap import STDIN_LOADER
from ansible_collections.gpusplit.k8s.tests.unit.playbook_run import ROUTES, run_play, skip_without_sudo

ROOT = Path(__file__).resolve().parents[4]
BIN = Path(sys.executable).parent
FAKES = ROOT / "tests" / "fakes"
TOOLKIT_FIXTURE = ROOT / "tests" / "fixtures" / "nvidia-container-toolkit" / "config.toml"
MARKER = "# Managed by gpusplit (gpusplit.k8s.gpu_host)."
STAMP = re.compile(r"\.gpusplit-\d{8}T\d{6}Z(\.\d+)?\.bak")
RAN_THE_MODULE = "gpusplit.k8s.gpu_host_files: SELinux is enabled on this host"


def host_root(tmp_path, name):
    root = tmp_path / name
    toolkit = root / "etc" / "nvidia-container-runtime" / "config.toml"
    toolkit.parent.mkdir(parents=True)
    toolkit.write_text(TOOLKIT_FIXTURE.read_text())
    (root / "etc" / "systemd" / "system" / "old.service.d").mkdir(parents=True)
    (root / "etc" / "systemd" / "system" / "old.service.d" / "50-gpusplit.conf").write_text(MARKER + "\n")
    return root


def args(root):
    systemd = f"{root}/etc/systemd/system"
    return {
        "toolkit_path": f"{root}/etc/nvidia-container-runtime/config.toml",
        "env_path": f"{root}/etc/gpusplit/host-gpus.env",
        "env_content": MARKER + "\nCUDA_VISIBLE_DEVICES=GPU-1\n",
        "dropins": [{"unit": "trainer.service", "path": f"{systemd}/trainer.service.d/50-gpusplit.conf"}],
        "dropin_content": MARKER + "\n[Service]\nEnvironment=CUDA_VISIBLE_DEVICES=GPU-1\n",
        "dropin_dir": systemd,
        "dropin_marker": MARKER,
        "state_path": f"{root}/var/lib/gpusplit/host-state.json",
        "state_digest": "digest-1",
    }


def mounts(tmp_path, selinux):
    table = tmp_path / ("mounts-selinux" if selinux else "mounts")
    table.write_text(
        "proc /proc proc rw 0 0\n" + ("selinuxfs /sys/fs/selinux selinuxfs rw 0 0\n" if selinux else "")
    )
    return {"PYTHONPATH": str(FAKES / "mounts"), "GPUSPLIT_TEST_MOUNTS": str(table)}


def task(register, root, environment, **extra):
    return {
        "name": register,
        "gpusplit.k8s.gpu_host_files": args(root),
        "environment": environment,
        "register": register,
        **extra,
    }


def comparable(result, root):
    """A registered result with its host root and backup stamps written alike, without what says how it ran."""
    drop = {"ansible_job_id", "finished", "results_file", "started", "stdout", "stdout_lines", "stderr",
            "stderr_lines", "_ansible_no_log"}  # fmt: skip
    kept = {key: value for key, value in result.items() if key not in drop}
    return json.loads(STAMP.sub("<stamp>", json.dumps(kept).replace(str(root), "<root>")))


def files_of(root):
    return {
        STAMP.sub("<stamp>", str(path.relative_to(root))): STAMP.sub("<stamp>", path.read_text()).replace(
            str(root), "<root>"
        )
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_the_task_answers_as_the_module_and_leaves_nothing_on_the_host(route, tmp_path):
    skip_without_sudo(route)
    roots = {name: host_root(tmp_path, name) for name in ("lean", "module", "selinux")}
    plain, selinux = mounts(tmp_path, False), mounts(tmp_path, True)
    tasks = [
        task("check", roots["lean"], plain, check_mode=True),
        task("check_module", roots["module"], plain, check_mode=True, **{"async": 60, "poll": 1}),
        task("lean", roots["lean"], plain),
        task("module", roots["module"], plain, **{"async": 60, "poll": 1}),
        task("selinux", roots["selinux"], selinux),
        task("again", roots["lean"], plain),
    ]
    results, output, remote = run_play(tmp_path, tasks, "Host files", ("-vvv", "--diff"), **ROUTES[route])
    for name, module in (("check", "check_module"), ("lean", "module")):
        assert comparable(results[name], roots["lean"]) == comparable(results[module], roots["module"])
    assert results["check"]["changed"] is True and results["check"]["diff"]
    assert results["lean"]["changed"] is True and results["lean"]["released_units"] == ["old.service"]
    assert results["again"]["changed"] is False
    assert files_of(roots["lean"]) == files_of(roots["module"])
    # SELinux on: the program wrote nothing and the module wrote the files, with the same answer
    assert output.count(RAN_THE_MODULE) == 1
    assert comparable(results["selinux"], roots["selinux"]) == comparable(results["lean"], roots["lean"])
    assert files_of(roots["selinux"]) == files_of(roots["lean"])
    # -vvv shows the command: the program put as a file and run, or the one-line loader that reads it from stdin
    assert ("gpusplit_lean.py" in output) is (route == "file-with-become")
    assert (STDIN_LOADER in output) is (route != "file-with-become")
    assert list(remote.rglob("gpusplit_lean.py")) == []


def test_a_bad_option_fails_before_anything_reaches_the_host(tmp_path):
    root = host_root(tmp_path, "host")
    bad = dict(args(root))
    del bad["env_content"]
    tasks = [
        {"name": "bad", "gpusplit.k8s.gpu_host_files": bad, "register": "bad", "ignore_errors": True},
        {"name": "sub", "gpusplit.k8s.gpu_host_files": {"dropins": [{"path": "/x"}]}, "register": "sub",
         "ignore_errors": True},
    ]  # fmt: skip
    results, output, remote = run_play(
        tmp_path, tasks, "Host files", ANSIBLE_PIPELINING="0", ANSIBLE_KEEP_REMOTE_FILES="1"
    )
    assert results["bad"]["msg"] == "parameters are required together: env_path, env_content"
    assert results["sub"]["msg"] == "missing required arguments: unit found in dropins"
    kept = [path.name for folder in remote.iterdir() for path in folder.iterdir()]
    assert not any("gpu_host_files" in name or "gpusplit_lean" in name for name in kept), kept
    assert not (root / "etc" / "gpusplit").exists()
