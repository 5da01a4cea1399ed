"""Run a module file the way Ansible runs it (its own process, its arguments from a file), and the lean
runner's program the way its action plugin runs it (its own process, on stdin or as a file)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

# the host side's constant (standard library only): the other Pythons' test runs import this file too
from ansible_collections.gpusplit.k8s.plugins.module_utils._lean.bootstrap import STDIN_LOADER


def run_module_file(module_file, args, folder, env, timeout=120):
    """``(exit status, answer)`` of the module ``module_file`` run by this Python with ``args``, written to
    ``folder``/args.json; ``env`` is the process's whole environment (its PYTHONPATH must reach the collection)."""
    path = Path(folder) / "args.json"
    path.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    done = subprocess.run(
        [sys.executable, str(module_file), str(path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )
    assert done.stdout.strip(), done.stderr
    return done.returncode, json.loads(done.stdout)


def run_program(program, env, python=sys.executable, cwd=None, as_file=None):
    """``(exit status, answer)`` of the lean runner's ``program`` run by ``python``: on stdin (read by the runner's
    one-line loader, as the action plugin sends it), or from the file ``as_file``."""
    argv = [python, str(as_file)] if as_file else [python, "-c", STDIN_LOADER]
    if as_file:
        Path(as_file).write_text(program)
    done = subprocess.run(
        argv,
        input=None if as_file else program,
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=120,
    )
    assert done.stdout.strip(), done.stderr
    return done.returncode, json.loads(done.stdout)
