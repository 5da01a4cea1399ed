"""Run a few tasks with ansible-playbook on this machine (the local connection): each task's registered result
comes back, with the run's output and its remote temporary folder."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent

# the ways ansible-core sends a module to a host, as environments of run_play: on stdin with pipelining on; as a
# file in the remote temporary folder with it off; and so with become (sudo, this machine's user to itself)
ROUTES = {
    "pipelining": {"ANSIBLE_PIPELINING": "1"},
    "file": {"ANSIBLE_PIPELINING": "0"},
    "file-with-become": {"ANSIBLE_PIPELINING": "0", "ANSIBLE_BECOME": "1", "ANSIBLE_BECOME_METHOD": "sudo"},
}


def skip_without_sudo(route):
    """Skip the become route where this machine's user cannot sudo to itself without a password."""
    import shutil

    import pytest

    if "ANSIBLE_BECOME" in ROUTES[route]:
        sudo = shutil.which("sudo")
        if not sudo or subprocess.run([sudo, "-n", "true"], capture_output=True).returncode != 0:
            pytest.skip("sudo without a password is needed for the become route")


def run_play(tmp_path, tasks, name="Tasks", options=("-vvv",), interpreter=sys.executable, **env):
    """``(results, output, remote)``: every task's registered result by its ``register`` name, ansible-playbook's
    output, and the folder given as the remote temporary folder. ``options`` go to ansible-playbook, ``env`` to
    its environment; ``interpreter`` is the host's ``ansible_python_interpreter`` (None: none, so that ansible-core
    discovers one)."""
    results = tmp_path / "results.json"
    keep = {
        "name": "Keep the results",
        "ansible.builtin.copy": {
            "content": "{{ {"
            + ", ".join(f"'{t['register']}': {t['register']}" for t in tasks)
            + "} | to_json }}",
            "dest": str(results),
            "mode": "0644",
        },
    }
    play = [{"name": name, "hosts": "localhost", "gather_facts": False, "tasks": [*tasks, keep]}]
    (tmp_path / "play.yml").write_text(json.dumps(play))
    remote = tmp_path / "remote"
    remote.mkdir(exist_ok=True)
    run_env = dict(
        os.environ,
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_REMOTE_TMP=str(remote),
        **env,
    )
    done = subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", "localhost,", "-c", "local",
         *(["-e", f"ansible_python_interpreter={interpreter}"] if interpreter else []),
         *options, str(tmp_path / "play.yml")],
        cwd=ROOT, env=run_env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    return json.loads(results.read_text()), done.stdout, remote
