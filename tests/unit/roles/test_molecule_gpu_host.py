"""The molecule scenario molecule/default (role gpu_host on localhost, scratch root): converge,
idempotence and verify. About a minute; needs nothing but the venv and the collection link."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
BIN = Path(sys.executable).parent
MOLECULE = BIN / "molecule"
COLLECTION_LINK = ROOT / ".collections" / "ansible_collections" / "gpusplit" / "k8s"


@pytest.mark.skipif(
    not MOLECULE.exists() and shutil.which("molecule") is None, reason="molecule not installed"
)
@pytest.mark.skipif(not COLLECTION_LINK.exists(), reason="run `make venv` first (collection link)")
def test_molecule_default_scenario():
    env = dict(os.environ)
    env["ANSIBLE_CONFIG"] = str(ROOT / "ansible.cfg")
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["NO_COLOR"] = "1"
    env["ANSIBLE_NOCOLOR"] = "1"
    env["ANSIBLE_FORCE_COLOR"] = "0"
    env.pop("MOLECULE_GLOB", None)
    molecule = str(MOLECULE) if MOLECULE.exists() else shutil.which("molecule")
    result = subprocess.run(
        [molecule, "test", "-s", "default"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-20000:]
    for step in ("converge", "idempotence", "verify"):
        assert f"{step}: Executed: Successful" in output, output[-20000:]
