"""CHANGELOG.md from the changelog fragments: a preview any time, the real thing when a release is cut.

`antsibull-changelog release` folds changelogs/fragments/ into changelogs/changelog.yaml, writes
CHANGELOG.md (changelogs/config.yaml) and deletes the fragments. It runs in a copy of the checkout
laid out as ansible_collections/gpusplit/k8s (antsibull-changelog lists the new modules and plugins
through ansible-doc there):

    python tools/changelog.py out/CHANGELOG.md   # make changelog: what the release would write; the checkout is left alone
    python tools/changelog.py --release          # make release: changelog.yaml and CHANGELOG.md back into the checkout,
                                                 # the folded fragments removed from it

The version is galaxy.yml's, the date today's.
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
FRAGMENTS = Path("changelogs") / "fragments"


def release_in_copy(tmp: Path) -> Path:
    """The laid-out copy after `antsibull-changelog release` of galaxy.yml's version."""
    version = yaml.safe_load((ROOT / "galaxy.yml").read_text())["version"]
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    for name in ("ANSIBLE_CONFIG", "ANSIBLE_COLLECTIONS_PATH"):
        env.pop(name, None)
    tree = lay_out(tmp)
    run = subprocess.run(
        [str(BIN / "antsibull-changelog"), "release", "--version", str(version)],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
    )
    if run.returncode != 0:
        raise SystemExit(f"antsibull-changelog release failed:\n{run.stdout}{run.stderr}")
    return tree


def render(output: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="gpusplit-changelog-") as tmp:
        tree = release_in_copy(Path(tmp))
        output.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(tree / "CHANGELOG.md", output)


def release() -> None:
    with tempfile.TemporaryDirectory(prefix="gpusplit-changelog-") as tmp:
        tree = release_in_copy(Path(tmp))
        for rel in (Path("CHANGELOG.md"), Path("changelogs") / "changelog.yaml"):
            shutil.copyfile(tree / rel, ROOT / rel)
        for fragment in sorted((ROOT / FRAGMENTS).glob("*.yml")):
            if not (tree / FRAGMENTS / fragment.name).exists():
                fragment.unlink()
                print(f"folded into changelogs/changelog.yaml: {FRAGMENTS / fragment.name}")


if __name__ == "__main__":
    if sys.argv[1:] == ["--release"]:
        release()
    elif len(sys.argv) == 2 and not sys.argv[1].startswith("-"):
        render(Path(sys.argv[1]))
    else:
        raise SystemExit("usage: python tools/changelog.py OUTPUT (e.g. out/CHANGELOG.md) | --release")
