"""The action plugin gpusplit.k8s.nvidia_gpu_facts, run by ansible-playbook: the discovery's work goes to the host
without an AnsiballZ execution (plugin_utils/lean_module.py), with and without pipelining, and answers as the
module does (the same task run asynchronously runs the module itself). A bad option fails the task before anything
reaches the host. No lab: the host is this machine over the local connection, its GPUs the fake NVML binding's."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ansible_collections.gpusplit.k8s.plugins.module_utils._lean.bootstrap import STDIN_LOADER
from ansible_collections.gpusplit.k8s.tests.unit.playbook_run import ROUTES, run_play, skip_without_sudo

ROOT = Path(__file__).resolve().parents[4]
BIN = Path(sys.executable).parent
FAKES = ROOT / "tests" / "fakes"
FIXTURE = ROOT / "tests" / "fixtures" / "gpus" / "dgx-h100.json"
PROC = ROOT / "tests" / "fixtures" / "proc"

ARGS = {"backend": "auto", "proc_root": str(PROC), "nvidia_smi_path": str(FAKES / "bin" / "nvidia-smi")}
ENVIRONMENT = {"PYTHONPATH": str(FAKES), "GPUSPLIT_FAKE_NVML_FIXTURE": str(FIXTURE)}


def task(register, args=None, **extra):
    return {
        "name": register,
        "gpusplit.k8s.nvidia_gpu_facts": dict(ARGS if args is None else args),
        "environment": ENVIRONMENT,
        "register": register,
        **extra,
    }


def comparable(result):
    """A task's registered result without what says how it ran (an async job's keys, the stdout of a module)."""
    drop = {"ansible_job_id", "finished", "results_file", "started", "stdout", "stdout_lines", "stderr",
            "stderr_lines", "_ansible_no_log"}  # fmt: skip
    return {key: value for key, value in result.items() if key not in drop}


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_the_task_answers_as_the_module_and_leaves_nothing_on_the_host(route, tmp_path):
    skip_without_sudo(route)
    tasks = [
        task("lean"),
        task("module", async_=None),
        task("smi", {**ARGS, "backend": "nvidia-smi"}),
        task("smi_module", {**ARGS, "backend": "nvidia-smi"}, async_=None),
        # the binding missing and its install asked for, in check mode: said, not done
        task("check", {**ARGS, "install_binding": True}, check_mode=True),
        task("check_module", {**ARGS, "install_binding": True}, check_mode=True, async_=None),
    ]
    blocker = tmp_path / "no-binding"
    blocker.mkdir()
    (blocker / "pynvml.py").write_text("raise ImportError(\"No module named 'pynvml'\")\n")
    for item in tasks[-2:]:
        item["environment"] = {**ENVIRONMENT, "PYTHONPATH": str(blocker)}
    for item in tasks:  # the same task, asynchronous: the module itself runs (AnsiballZ)
        if "async_" in item:
            del item["async_"]
            item.update({"async": 60, "poll": 1})
    results, output, remote = run_play(tmp_path, tasks, "GPU facts", **ROUTES[route])
    assert results["lean"]["ansible_facts"]["nvidia_gpus"], results["lean"]
    assert comparable(results["lean"]) == comparable(results["module"])
    assert comparable(results["smi"]) == comparable(results["smi_module"])
    assert results["smi"]["ansible_facts"]["nvidia_gpu_backend"] == "nvidia-smi"
    assert results["check"]["changed"] is True
    assert results["check"]["nvml_binding"]["would_install"].startswith("nvidia-ml-py==")
    assert comparable(results["check"]) == comparable(results["check_module"])
    # -vvv shows the command: the program put as a file and run, or the one-line loader that reads it from stdin
    assert ("gpusplit_lean.py" in output) is (route == "file-with-become")
    assert (STDIN_LOADER in output) is (route != "file-with-become")
    # the program's temporary folder removed (an asynchronous task's own goes when its job ends, in the background)
    assert list(remote.rglob("gpusplit_lean.py")) == []


def test_a_bad_option_fails_before_anything_reaches_the_host(tmp_path):
    tasks = [
        task("bad_choice", {"backend": "dcgm"}, ignore_errors=True),
        task("unknown", {"bogus": 1}, ignore_errors=True),
        task("bad_type", {"timeout": "soon"}, ignore_errors=True),
    ]
    results, output, remote = run_play(
        tmp_path, tasks, "GPU facts", ANSIBLE_PIPELINING="0", ANSIBLE_KEEP_REMOTE_FILES="1"
    )
    assert results["bad_choice"]["failed"] is True
    assert (
        results["bad_choice"]["msg"] == "value of backend must be one of: auto, nvml, nvidia-smi, got: dcgm"
    )
    assert results["unknown"]["msg"].startswith(
        "Unsupported parameters for (gpusplit.k8s.nvidia_gpu_facts) module: bogus."
    )
    assert "timeout" in results["bad_type"]["msg"] and "float" in results["bad_type"]["msg"]
    # kept temporary files would be there: only the copy task's (the results) reached the host
    assert "gpusplit_lean.py" not in output
    kept = [path.name for folder in remote.iterdir() for path in folder.iterdir()]
    assert not any("nvidia_gpu_facts" in name or "gpusplit_lean" in name for name in kept), kept


def test_an_interpreter_left_to_discovery_is_discovered_and_returned_as_for_a_module(tmp_path):
    """No ansible_python_interpreter: the program runs with the interpreter ansible-core's discovery finds, and the
    task returns it as a fact as a module's task does (the program's own Python says which one ran it). The
    discovery looks along PATH for the names of INTERPRETER_PYTHON_FALLBACK: here each is this Python, in a folder
    first on PATH, so that what this machine has elsewhere does not matter."""
    from ansible import constants as C

    found = tmp_path / "bin"
    found.mkdir()
    for name in C.config.get_config_value("INTERPRETER_PYTHON_FALLBACK"):
        if "/" not in name:
            (found / name).symlink_to(sys.executable)
    path = f"{found}:/usr/bin:/bin"
    ping = {"name": "ping", "ansible.builtin.ping": {}, "register": "ping"}
    for side in ("module", "lean"):
        (tmp_path / side).mkdir()
    module_side, _output, _remote = run_play(tmp_path / "module", [ping], "Ping", interpreter=None, PATH=path)
    discovered = module_side["ping"]["ansible_facts"]["discovered_interpreter_python"]
    assert discovered.startswith(str(found)), discovered
    lean_side, _output, _remote = run_play(
        tmp_path / "lean", [task("lean")], "GPU facts", interpreter=None, PATH=path
    )
    lean = lean_side["lean"]
    assert lean["ansible_facts"]["discovered_interpreter_python"] == discovered
    assert lean["ansible_facts"]["nvidia_gpus"], lean
    assert lean["nvml_binding"]["python"] == discovered


def test_the_host_variable_names_where_the_host_keeps_the_program_compiled(tmp_path):
    """gpusplit_code_cache_dir (the roles' default: under gpusplit_host_root) reaches the program, templated and
    with its doubled slashes made one; a value that is not an absolute path fails the task before anything reaches
    the host, naming the variable."""
    host = tmp_path / "host"
    tasks = [
        task("first", vars={"gpusplit_code_cache_dir": "{{ host_root }}//var/cache/gpusplit"}),
        task("second", vars={"gpusplit_code_cache_dir": "{{ host_root }}/var/cache/gpusplit/"}),
        task("relative", vars={"gpusplit_code_cache_dir": "var/cache"}, ignore_errors=True),
    ]
    for item in tasks:
        item["vars"]["host_root"] = str(host)
    results, output, _remote = run_play(tmp_path, tasks, "GPU facts", ANSIBLE_PIPELINING="0")
    kept = sorted(path.name for path in (host / "var" / "cache" / "gpusplit").iterdir())
    assert kept == [f"_gpu.facts.{sys.implementation.cache_tag}.code"]
    assert comparable(results["first"]) == comparable(results["second"])
    assert results["first"]["ansible_facts"]["nvidia_gpus"]
    assert results["relative"]["failed"] is True
    assert results["relative"]["msg"].startswith(
        "gpusplit_code_cache_dir: 'var/cache' is not an absolute path"
    )
    relative = output.index("TASK [relative]")
    assert output[:relative].count(STDIN_LOADER) == 2  # (-vvv: the first two ran their program on the host)
    assert STDIN_LOADER not in output[relative:]
