"""The lab of each pytest-xdist worker: the environment that gives a worker past the first a lab of its own.

Read by tests/conftest.py before it imports lab.components (which reads GPUSPLIT_LAB_DIR and
GPUSPLIT_LAB_HOST once); docs/dev/lab.md, "Tests". Imports nothing of the lab.
"""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path


def worker_lab(environ, root: Path) -> dict[str, str]:
    """The environment of this pytest-xdist worker's own lab; {} for the first worker or no xdist.

    The lab tests are split into groups (LAB_GROUP_B in tests/conftest.py) that run on different workers at the same
    time, so every worker past the first gets a lab of its own: its state under .lab/workers/<worker>,
    its own loopback address (127.0.0.1 + <n> * 65536: gw1 -> 127.1.0.1) on the usual ports, and its
    own output folder. lab/components.py and inventory/lab read these variables; so does every command
    a test starts, which inherits them. A second checkout's lab (GPUSPLIT_LAB_HOST) moves with it.
    """
    match = re.fullmatch(r"gw(\d+)", environ.get("PYTEST_XDIST_WORKER", ""))
    if not match or match.group(1) == "0":
        return {}
    worker = match.group(0)
    base = ipaddress.ip_address(environ.get("GPUSPLIT_LAB_HOST") or "127.0.0.1")
    host = ipaddress.ip_address(int(base) + int(match.group(1)) * 65536)
    if not host.is_loopback:
        raise ValueError(f"no loopback address for the lab of pytest-xdist worker {worker} (base {base})")
    lab_dir = Path(environ.get("GPUSPLIT_LAB_DIR") or root / ".lab")
    out_dir = Path(environ.get("GPUSPLIT_OUT_DIR") or root / "out")
    return {
        "GPUSPLIT_LAB_HOST": str(host),
        "GPUSPLIT_LAB_DIR": str(lab_dir / "workers" / worker),
        "GPUSPLIT_OUT_DIR": str(out_dir / "workers" / worker),
    }
