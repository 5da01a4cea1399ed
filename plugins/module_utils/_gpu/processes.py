# Copyright: gpusplit contributors
# Apache-2.0
"""Which GPU processes run in a container, read from /proc/<pid>/cgroup. Private to the collection.

The file is read through a callable handed in by the module, so that tests can feed fixtures.
"""

from __future__ import annotations

import re

_CONTAINER_ID_RE = re.compile(r"(?<![0-9a-f])([0-9a-f]{64})(?![0-9a-f])")
_CONTAINER_MARKERS = ("kubepods", "docker", "containerd", "crio", "cri-o", "libpod", "podman")


def classify_cgroup(text):
    """Read /proc/<pid>/cgroup text: (in_container, container_id).

    Recognised: Kubernetes pods (kubepods, cgroupfs or systemd drivers), containerd
    ('cri-containerd-<id>.scope'), Docker ('docker-<id>.scope', '/docker/<id>'), CRI-O ('crio-<id>.scope')
    and Podman ('libpod-<id>.scope'). The container id is the innermost 64-hex id on the path.
    None text (no such file: the process is gone or not ours to read) -> (None, None).
    """
    if text is None:
        return None, None
    in_container = False
    container_id = None
    for line in text.splitlines():
        parts = line.strip().split(":", 2)
        if len(parts) != 3:
            continue
        path = parts[2].lower()
        ids = _CONTAINER_ID_RE.findall(path)
        if ids or any(marker in path for marker in _CONTAINER_MARKERS):
            in_container = True
            if ids and container_id is None:
                container_id = ids[-1]
    return in_container, container_id


def annotate_processes(gpus, read_text, proc_root):
    """Fill in_container/container_id of every process from <proc_root>/<pid>/cgroup."""
    cache = {}
    root = (proc_root or "/proc").rstrip("/") or "/"
    for gpu in gpus:
        for process in gpu.get("processes") or []:
            pid = process.get("pid")
            if pid is None:
                continue
            if pid not in cache:
                cache[pid] = classify_cgroup(read_text(f"{root}/{pid}/cgroup"))
            process["in_container"], process["container_id"] = cache[pid]
    return gpus
