"""Build the collection tarball (`make dist`): gpusplit-k8s-<version>.tar.gz.

The build runs `ansible-galaxy collection build` on a copy of the checkout's files as a fresh
clone has them (tools/collection_tree.py), so local state never reaches the tarball; galaxy.yml's
build_ignore leaves out what only serves development. Prints the tarball's path.

    python tools/dist.py [OUTPUT_DIR]     # default: the checkout root
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from collection_tree import ROOT, copy_tree

BIN = Path(sys.executable).parent


def build(output_dir: Path) -> Path:
    output_dir = output_dir.resolve()
    output_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="gpusplit-dist-") as tmp:
        tree = copy_tree(Path(tmp) / "k8s")
        run = subprocess.run(
            [str(BIN / "ansible-galaxy"), "collection", "build", "--force", "--output-path", str(output_dir)],
            cwd=tree,
            capture_output=True,
            text=True,
        )
    if run.returncode != 0:
        raise SystemExit(f"ansible-galaxy collection build failed:\n{run.stdout}{run.stderr}")
    # "Created collection for gpusplit.k8s at <path>"
    return Path(run.stdout.strip().splitlines()[-1].rsplit(" at ", 1)[1])


if __name__ == "__main__":
    print(build(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT))
