"""Run a module file the way Ansible runs it (its own process, its arguments from a file)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


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
