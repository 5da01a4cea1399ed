"""tools/find_python.sh: the venvs' Python is one that runs, not one whose name fits.

pyenv's shims (python3.12, python3.13 on PATH) exist for every version pyenv knows and fail when
pyenv's global version is another: the script runs each candidate, skips the ones that fail or
report another version, and looks under pyenv's versions too.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tools" / "find_python.sh"


def fake(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return path


def run(tmp_path: Path, *wanted: str) -> subprocess.CompletedProcess:
    # only the fakes and the few tools the script uses: no Python of the machine's is on this PATH
    tools = tmp_path / "tools"
    tools.mkdir(exist_ok=True)
    for name in ("ls", "sort", "awk"):
        if not (tools / name).exists():
            (tools / name).symlink_to(shutil.which(name))
    env = {
        "PATH": f"{tmp_path / 'bin'}:{tools}",
        "HOME": str(tmp_path / "home"),
        "PYENV_ROOT": str(tmp_path / "pyenv"),
    }
    return subprocess.run(
        [shutil.which("bash"), str(SCRIPT), *wanted],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        cwd=tmp_path,
    )


def test_a_failing_shim_is_passed_over_for_pyenvs_own_install(tmp_path):
    fake(tmp_path / "bin" / "python3.13", "echo 'pyenv: python3.13: command not found' >&2; exit 127")
    fake(tmp_path / "bin" / "python3.12", "echo 3.11")  # named 3.12, is not
    old = fake(tmp_path / "pyenv" / "versions" / "3.12.1" / "bin" / "python3.12", "echo 3.12")
    new = fake(tmp_path / "pyenv" / "versions" / "3.12.10" / "bin" / "python3.12", "echo 3.12")

    done = run(tmp_path, "3.13", "3.12")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(new)  # the newest 3.12 pyenv has (3.12.10 after 3.12.1)
    assert old != new


def test_the_order_given_is_the_preference(tmp_path):
    py312 = fake(tmp_path / "bin" / "python3.12", "echo 3.12")
    py313 = fake(tmp_path / "bin" / "python3.13", "echo 3.13")
    assert run(tmp_path, "3.13", "3.12").stdout.strip() == str(py313)
    assert run(tmp_path, "3.12", "3.13").stdout.strip() == str(py312)


def test_none_found_says_what_was_tried_and_what_to_install(tmp_path):
    fake(tmp_path / "bin" / "python3.13", "exit 1")  # e.g. no ensurepip (Debian without python3.13-venv)
    done = run(tmp_path, "3.13", "3.12")
    assert done.returncode == 1 and done.stdout == ""
    assert "no usable Python 3.13 3.12 found" in done.stderr
    assert f"tried: {tmp_path / 'bin' / 'python3.13'}" in done.stderr
    assert "pyenv install" in done.stderr and "Debian 12's apt has only python3.11" in done.stderr


def test_the_machines_choice_is_a_python_that_builds_venvs():
    done = subprocess.run([str(SCRIPT), "3.13", "3.12"], capture_output=True, text=True, check=False)
    if done.returncode != 0:  # where neither is installed, that is what the message says
        assert "no usable Python" in done.stderr
        return
    python = done.stdout.strip()
    assert os.access(python, os.X_OK)
    check = subprocess.run(
        [python, "-c", "import ensurepip, sys, venv; print('%d.%d' % sys.version_info[:2])"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert check.stdout.strip() in ("3.13", "3.12")
