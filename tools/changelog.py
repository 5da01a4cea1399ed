"""Render CHANGELOG.md from the changelog fragments, before a release is cut.

`antsibull-changelog release` folds changelogs/fragments/ into changelogs/changelog.yaml and writes
CHANGELOG.md (changelogs/config.yaml); it deletes the fragments, so it is run once, when a version
is released. Until then this script renders what that release would write, from a copy of the
checkout laid out as ansible_collections/gpusplit/k8s (antsibull-changelog lists the new modules
and plugins through ansible-doc there), and leaves the checkout's fragments alone:

    python tools/changelog.py CHANGELOG.md      # the version in galaxy.yml, dated today
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml
from collection_tree import ROOT, lay_out

BIN = Path(sys.executable).parent


def render(output: Path) -> None:
    version = yaml.safe_load((ROOT / "galaxy.yml").read_text())["version"]
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    for name in ("ANSIBLE_CONFIG", "ANSIBLE_COLLECTIONS_PATH"):
        env.pop(name, None)
    with tempfile.TemporaryDirectory(prefix="gpusplit-changelog-") as tmp:
        tree = lay_out(Path(tmp))
        run = subprocess.run(
            [str(BIN / "antsibull-changelog"), "release", "--version", str(version)],
            cwd=tree,
            env=env,
            capture_output=True,
            text=True,
        )
        if run.returncode != 0:
            raise SystemExit(f"antsibull-changelog release failed:\n{run.stdout}{run.stderr}")
        shutil.copyfile(tree / "CHANGELOG.md", output)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python tools/changelog.py OUTPUT (e.g. CHANGELOG.md)")
    render(Path(sys.argv[1]))
