"""The collection's files as a fresh clone has them, copied out of the checkout.

tools/sanity.py and tools/dist.py work on such a copy: it holds what git tracks (and untracked
files git does not ignore), so local state (.venv, .lab, out, caches, the .collections link) never
reaches ansible-test or the tarball, whatever the checkout holds.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NAMESPACE, NAME = "gpusplit", "k8s"


def checkout_files(root: Path = ROOT) -> list[str]:
    """Paths (relative to root) of the files git tracks or would track, symlinks left out."""
    out = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=root, capture_output=True, check=True
    ).stdout.decode()
    return [
        rel
        for rel in filter(None, out.split("\0"))
        if (root / rel).is_file() and not (root / rel).is_symlink()
    ]


def copy_tree(dest: Path, root: Path = ROOT) -> Path:
    """Copy the checkout's files to dest (emptied first); returns dest."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    for rel in checkout_files(root):
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / rel, target)
    return dest


def lay_out(top: Path, root: Path = ROOT) -> Path:
    """Copy the checkout to <top>/ansible_collections/gpusplit/k8s, where ansible-test looks."""
    return copy_tree(top / "ansible_collections" / NAMESPACE / NAME, root)
