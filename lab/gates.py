"""Turn GenericWorkload on in the lab the way a user would: through playbooks/feature_gates.yml."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from lab.components import BIN, ROOT


def enable_generic_workload() -> str:
    """Run the control_plane_gates role on the lab; returns its output, raises when it fails."""
    venv_bin = Path(sys.executable).parent
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
        "ANSIBLE_NOCOLOR": "1",
        "PATH": f"{venv_bin}:{BIN}:{os.environ.get('PATH', '')}",
    }
    done = subprocess.run(
        [
            str(venv_bin / "ansible-playbook"),
            "-i",
            "inventory/lab",
            "playbooks/feature_gates.yml",
            "-e",
            json.dumps({"gpusplit_feature_gates": {"GenericWorkload": True}}),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if done.returncode != 0:
        raise AssertionError((done.stdout + done.stderr)[-5000:])
    return done.stdout
