"""The lab's real node: containerd, runc, the CNI plugins and a kubelet, joined to the lab's apiserver.

    python -m lab.node up        start containerd and the kubelet (the lab must be up)
    python -m lab.node down      stop them, remove their pods, unmount what they mounted
    python -m lab.node status    what runs, as JSON; exit 1 when the node is not Ready
    python -m lab.node restart-kubelet [--release 1.36.3]
                                 run the node's kubelet at another release (pods and containerd stay)

Its kubelet is of the lab's Kubernetes release unless GPUSPLIT_LAB_NODE_KUBELET names an older one of
KUBE_VERSIONS (a kubelet joins an apiserver up to three minor releases newer): `up` starts that one.

`python -m lab.lab up` starts it after the control plane (GPUSPLIT_LAB_REAL_NODE=0 leaves it out),
`python -m lab.lab down` stops it first. Each lab (GPUSPLIT_LAB_HOST, GPUSPLIT_LAB_DIR) has its own
node `lab-node-01`: its files under `<lab>/hosts/lab-node-01` (the kubelet's root dir
`var/lib/kubelet` with its device-plugin and pod-resources sockets where a real node has them,
containerd's root and state, the CNI configuration, the CDI spec dir), its configuration and pid
files under `<lab>/node`, its logs in `<lab>/logs/{containerd,kubelet}.log`, its cgroups under a
cgroup root of its own, its pods on a bridge and subnet of its own, its kubelet on the lab's address.

The binaries are lab/build_node.sh's (.lab/bin); the pause image and the workload image are built
here from the lab's own programs (lab/images/*.c) as OCI archives and imported into containerd's
`k8s.io` namespace with `ctr images import`: no registry is reached.

Settings this machine needs, and why (docs/dev/lab.md, "The real node"):
* the process lacks CAP_SYS_RESOURCE, so containerd's CRI runs with `restrict_oom_score_adj`
  (otherwise runc fails writing /proc/self/oom_score_adj: Permission denied);
* the machine's cgroups are v1 hierarchies, so the kubelet has `failCgroupV1: false` and the
  `cgroupfs` driver (there is no systemd to be the driver);
* the kubelet cannot read filesystem stats for the root device: `localStorageCapacityIsolation` is
  off and image garbage collection never starts (the eviction manager still logs that it cannot
  read them).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import hashlib
import io
import ipaddress
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import yaml

from lab import components as C

NAME = "lab-node-01"
ROOTDIR = C.HOSTS_ROOT / NAME
KUBELET_DIR = ROOTDIR / "var" / "lib" / "kubelet"
DEVICE_PLUGIN_SOCKET = KUBELET_DIR / "device-plugins" / "kubelet.sock"
POD_RESOURCES_SOCKET = KUBELET_DIR / "pod-resources" / "kubelet.sock"
POD_LOGS = ROOTDIR / "var" / "log" / "pods"
CONTAINERD_ROOT = ROOTDIR / "var" / "lib" / "containerd"
CONTAINERD_STATE = ROOTDIR / "run" / "containerd"
CONTAINERD_SOCKET = CONTAINERD_STATE / "containerd.sock"
# the same dirs as the kubelet and containerd see them, in the node's mount namespace (FIXED_PATHS): short
# socket paths, however long the lab's path is
NS_KUBELET_DIR = Path("/var/lib/kubelet")
NS_POD_LOGS = Path("/var/log/pods")
NS_CONTAINERD_SOCKET = Path("/run/containerd/containerd.sock")
CNI_CONF_DIR = ROOTDIR / "etc" / "cni" / "net.d"
CNI_DATA = ROOTDIR / "var" / "lib" / "cni"
CDI_DIRS = (ROOTDIR / "etc" / "cdi", ROOTDIR / "var" / "run" / "cdi")
STATE = C.LAB / "node"
KUBELET_KUBECONFIG = STATE / "kubelet.kubeconfig"
CNI_BIN = C.BIN / "cni"
IMAGE_PROGRAMS = C.BIN / "images"
K8S_NAMESPACE = "k8s.io"
# the real node takes only the pods that tolerate this: the kwok nodes' pods never land on it
TAINT_KEY = "gpusplit.io/real-node"
TAINT = f"{TAINT_KEY}=true:NoSchedule"
LABELS = {"gpusplit.io/real-node": "true"}
PAUSE_IMAGE = "gpusplit.lab/pause:1"
WORKLOAD_IMAGE = "gpusplit.lab/workload:1"
# the lab's device plugin (lab/images/deviceplugin): the real device-plugin API, never named as NVIDIA's;
# its name holds `k8s-device-plugin`, as a mirror's copy of NVIDIA's image does, since that is how
# gpusplit's verify and its stock-plugin check recognise a device plugin's container
DEVICE_PLUGIN_IMAGE = "gpusplit.lab/k8s-device-plugin-standin:1"
# the GPU fixture of the node, where the lab's device plugin reads its GPUs' details (what NVML
# tells NVIDIA's plugin): in its image, since gpusplit's DaemonSet mounts nothing of the lab's
PLUGIN_FIXTURE_PATH = "/etc/gpusplit-lab/gpus.json"
# image -> (program, entrypoint, more files of the image: path in the image -> file here)
IMAGES = {
    PAUSE_IMAGE: ("pause", ["/pause"], {}),
    WORKLOAD_IMAGE: ("workload", ["/workload"], {}),
    DEVICE_PLUGIN_IMAGE: (
        "device-plugin",
        ["/device-plugin"],
        {PLUGIN_FIXTURE_PATH: C.ROOT / "tests" / "fixtures" / "gpus" / "l40s-pair.json"},
    ),
}
KUBELET_PORT = 10250
KUBELET_HEALTHZ_PORT = 10248
# what every lab's node needs of this machine (checked by `up`, named in its error)
CAPABILITIES = {0: "CAP_CHOWN", 12: "CAP_NET_ADMIN", 21: "CAP_SYS_ADMIN", 19: "CAP_SYS_PTRACE"}


class NodeError(RuntimeError):
    """The real node cannot run here; the message names what is missing."""


def log(msg: str) -> None:
    print(f"lab-node: {msg}", flush=True)


def lab_id() -> str:
    """8 hex digits naming this lab's node in what the machine shares (cgroups, network links)."""
    return hashlib.sha256(f"{C.HOST}\0{C.LAB}".encode()).hexdigest()[:8]


CGROUP_ROOT = f"/gpusplit-lab-{lab_id()}"
BRIDGE = f"gsl{lab_id()}"  # at most 15 characters (IFNAMSIZ)


def pod_subnet() -> ipaddress.IPv4Network:
    """The node's pod subnet: a /24 of 10.244.0.0/16 chosen by the lab's id, on its own bridge; pods
    talk only to each other and the node (no masquerading, no route out)."""
    n = int(lab_id(), 16) % 250
    return ipaddress.ip_network(f"10.244.{n}.0/24")


# --------------------------------------------------------------------------- checks


def missing() -> list[str]:
    """What this machine lacks for the real node, each with what to do about it."""
    out = []
    try:
        release = kubelet_release()
    except NodeError as exc:
        out.append(str(exc))
    else:
        if not kubelet_binary(release).exists():
            out.append(kubelet_missing(release))
    for name in ("containerd", "ctr", "containerd-shim-runc-v2", "runc"):
        if not (C.BIN / name).exists():
            out.append(f"{C.shown(C.BIN / name)} (run `make lab-build`: lab/build_node.sh)")
    for name in ("bridge", "loopback", "host-local"):
        if not (CNI_BIN / name).exists():
            out.append(f"{C.shown(CNI_BIN / name)} (run `make lab-build`: lab/build_node.sh)")
    for name in ("pause", "workload", "device-plugin"):
        if not (IMAGE_PROGRAMS / name).exists():
            out.append(f"{C.shown(IMAGE_PROGRAMS / name)} (run `make lab-build`: lab/build_node.sh)")
    if os.geteuid() != 0:
        out.append("root: a kubelet and containerd run as root")
    try:
        eff = int(
            next(
                x for x in Path("/proc/self/status").read_text().splitlines() if x.startswith("CapEff:")
            ).split()[1],
            16,
        )
    except (OSError, StopIteration, ValueError):
        eff = 0
    out += [f"capability {name}" for bit, name in CAPABILITIES.items() if not eff & (1 << bit)]
    if "overlay" not in Path("/proc/filesystems").read_text():
        out.append("the overlay filesystem (containerd's overlayfs snapshotter)")
    if not cgroup_mounts():
        out.append("cgroup v1 hierarchies under /sys/fs/cgroup (the kubelet runs with the cgroupfs driver)")
    for tool, package in (
        ("ip", "iproute2"),
        ("unshare", "util-linux"),
        ("nsenter", "util-linux"),
        ("mount", "mount"),
    ):
        if not shutil.which(tool):
            out.append(f"the {tool} command (Debian: {package})")
    return out


# --------------------------------------------------------------------------- cgroups and mounts


def _unescape(field: str) -> str:
    return field.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")


def mountinfo() -> list[tuple[str, str, str]]:
    """(mount point, filesystem type, super options) of every mount this process sees."""
    out = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        fields, rest = left.split(), right.split()
        if len(fields) >= 5 and len(rest) >= 3:
            out.append((_unescape(fields[4]), rest[0], rest[2]))
    return out


def cgroup_mounts() -> list[Path]:
    """The mount points of the cgroup v1 hierarchies."""
    return [Path(point) for point, fstype, _ in mountinfo() if fstype == "cgroup"]


def make_cgroup_root() -> None:
    """The node's cgroup root in every hierarchy (the kubelet checks that it exists)."""
    for mount in cgroup_mounts():
        path = mount / CGROUP_ROOT.lstrip("/")
        path.mkdir(exist_ok=True)
        for name in ("cpuset.cpus", "cpuset.mems"):  # a new cpuset cgroup starts empty
            own, parent = path / name, mount / name
            if own.exists() and not own.read_text().strip():
                own.write_text(parent.read_text())


def cgroup_dirs() -> list[Path]:
    """Every cgroup under the node's cgroup root, deepest first."""
    out = []
    for mount in cgroup_mounts():
        top = mount / CGROUP_ROOT.lstrip("/")
        if top.is_dir():
            out += [Path(d) for d, _, _ in os.walk(top)]
    return sorted(out, key=lambda p: len(p.parts), reverse=True)


def cgroup_pids() -> set[int]:
    pids: set[int] = set()
    for d in cgroup_dirs():
        with contextlib.suppress(OSError, ValueError):
            pids.update(int(x) for x in (d / "cgroup.procs").read_text().split())
    return pids


def remove_cgroups() -> list[str]:
    """Kill what is left in the node's cgroups and remove them; returns what could not be removed."""
    for pid in cgroup_pids():
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    left = []
    deadline = time.time() + 10
    for d in cgroup_dirs():
        while True:
            try:
                d.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError as exc:
                if time.time() > deadline:
                    left.append(f"{d}: {exc}")
                    break
                time.sleep(0.2)
    return left


def node_mounts() -> list[str]:
    """The mount points under the node's root and state dirs, the latest first."""
    tops = (str(ROOTDIR), str(STATE))
    return [p for p, _, _ in reversed(mountinfo()) if any(p == t or p.startswith(t + "/") for t in tops)]


def unmount_all() -> list[str]:
    """Unmount everything under the node's dirs (lazily, as `umount -l`); returns what stays mounted."""
    libc = ctypes.CDLL(None, use_errno=True)
    mnt_detach = 2
    for _ in range(5):
        points = node_mounts()
        if not points:
            return []
        for point in points:
            libc.umount2(os.fsencode(point), mnt_detach)
    return node_mounts()


# --------------------------------------------------------------------------- images


def _tar_bytes(files: dict[str, tuple[bytes, int]], dirs: list[str]) -> bytes:
    """A reproducible tar: directories and files owned by root, mtime 0."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for d in dirs:
            info = tarfile.TarInfo(d)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        for name, (data, mode) in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def oci_archive(
    name: str, program: Path, entrypoint: list[str], files: dict[str, Path] | None = None
) -> bytes:
    """An OCI image layout (tar) of one image: one uncompressed layer with the static program as
    `entrypoint[0]` and ``files`` (path in the image -> file here; their dirs must be among the
    layer's), for linux/amd64, named `name` (containerd's `io.containerd.image.name`)."""
    content = {entrypoint[0].lstrip("/"): (program.read_bytes(), 0o755)}
    content.update({path.lstrip("/"): (src.read_bytes(), 0o644) for path, src in (files or {}).items()})
    layer = _tar_bytes(content, ["dev", "etc", "etc/gpusplit-lab", "proc", "sys", "tmp"])
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {"Entrypoint": entrypoint, "Env": ["PATH=/"], "WorkingDir": "/"},
            "rootfs": {"type": "layers", "diff_ids": [_digest(layer)]},
            "history": [{"created_by": f"gpusplit lab: {C.shown(program)}"}],
        },
        sort_keys=True,
    ).encode()
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": _digest(config),
                "size": len(config),
            },
            "layers": [
                {
                    "mediaType": "application/vnd.oci.image.layer.v1.tar",
                    "digest": _digest(layer),
                    "size": len(layer),
                }
            ],
        },
        sort_keys=True,
    ).encode()
    index = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [
                {
                    "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "digest": _digest(manifest),
                    "size": len(manifest),
                    "platform": {"architecture": "amd64", "os": "linux"},
                    "annotations": {
                        "io.containerd.image.name": name,
                        "org.opencontainers.image.ref.name": name.rsplit(":", 1)[1],
                    },
                }
            ],
        },
        sort_keys=True,
    ).encode()
    files = {"oci-layout": (b'{"imageLayoutVersion": "1.0.0"}', 0o644), "index.json": (index, 0o644)}
    for blob in (layer, config, manifest):
        files[f"blobs/sha256/{hashlib.sha256(blob).hexdigest()}"] = (blob, 0o644)
    return _tar_bytes(files, ["blobs", "blobs/sha256"])


def ctr(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(C.BIN / "ctr"), "--address", containerd_address(), "--namespace", K8S_NAMESPACE, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def import_images() -> list[str]:
    """Build each image's archive (under <lab>/node/images) and import it into containerd."""
    out = []
    (STATE / "images").mkdir(parents=True, exist_ok=True)
    for name, (program, entrypoint, files) in IMAGES.items():
        archive = STATE / "images" / f"{program}.tar"
        archive.write_bytes(oci_archive(name, IMAGE_PROGRAMS / program, entrypoint, files))
        proc = ctr("images", "import", "--platform", "linux/amd64", str(archive))
        if proc.returncode != 0:
            raise NodeError(f"ctr images import {C.shown(archive)} failed: {proc.stderr.strip()}")
        out.append(name)
    return out


# --------------------------------------------------------------------------- configuration


def containerd_config() -> str:
    """containerd's configuration (version 3): its dirs under the node's root, the CRI's runtimes
    (runc, the default; nvidia, the NVIDIA container runtime), CNI and CDI."""
    cri_runtime = "plugins.'io.containerd.cri.v1.runtime'"
    runc = C.BIN / "runc"
    nvidia = C.BIN / "nvidia-container-runtime"
    return "\n".join(
        [
            "version = 3",
            f"root = '{CONTAINERD_ROOT}'",
            f"state = '{CONTAINERD_STATE}'",
            f"disabled_plugins = {json.dumps(DISABLED_PLUGINS)}",
            "[grpc]",
            f"  address = '{NS_CONTAINERD_SOCKET}'",
            "[ttrpc]",
            f"  address = '{NS_CONTAINERD_SOCKET}.ttrpc'",
            "[debug]",
            "  level = 'info'",
            "[plugins.'io.containerd.internal.v1.opt']",
            f"  path = '{ROOTDIR / 'opt' / 'containerd'}'",
            f"[{cri_runtime}]",
            # the process lacks CAP_SYS_RESOURCE: without this runc cannot lower a container's
            # oom_score_adj below containerd's own and fails with Permission denied
            "  restrict_oom_score_adj = true",
            "  netns_mounts_under_state_dir = true",
            "  enable_cdi = true",
            f"  cdi_spec_dirs = {json.dumps([str(d) for d in CDI_DIRS])}",
            f"[{cri_runtime}.containerd]",
            # the NVIDIA runtime is the node's default, as NVIDIA's device plugin expects of a GPU node
            # (`nvidia-ctk runtime configure --set-as-default`): a pod without a runtime class, the
            # device plugin's included, goes through it and its hook
            "  default_runtime_name = 'nvidia'",
            f"[{cri_runtime}.containerd.runtimes.runc]",
            "  runtime_type = 'io.containerd.runc.v2'",
            f"[{cri_runtime}.containerd.runtimes.runc.options]",
            f"  BinaryName = '{runc}'",
            "  SystemdCgroup = false",
            f"[{cri_runtime}.containerd.runtimes.nvidia]",
            "  runtime_type = 'io.containerd.runc.v2'",
            f"[{cri_runtime}.containerd.runtimes.nvidia.options]",
            f"  BinaryName = '{nvidia}'",
            "  SystemdCgroup = false",
            f"[{cri_runtime}.cni]",
            f"  bin_dirs = ['{CNI_BIN}']",
            f"  conf_dir = '{CNI_CONF_DIR}'",
            "[plugins.'io.containerd.cri.v1.images']",
            "  snapshotter = 'overlayfs'",
            "[plugins.'io.containerd.cri.v1.images'.pinned_images]",
            f"  sandbox = '{PAUSE_IMAGE}'",
            "[plugins.'io.containerd.grpc.v1.cri']",
            "  disable_tcp_service = true",
            f"  stream_server_address = '{C.HOST}'",
            "  stream_server_port = '0'",
            "",
        ]
    )


# plugins that would reach outside the node's dirs or need what the lab does not have
DISABLED_PLUGINS = [
    "io.containerd.nri.v1.nri",
    "io.containerd.snapshotter.v1.devmapper",
    "io.containerd.snapshotter.v1.zfs",
    "io.containerd.snapshotter.v1.blockfile",
    "io.containerd.snapshotter.v1.erofs",
    "io.containerd.tracing.processor.v1.otlp",
    "io.containerd.internal.v1.tracing",
]


def cni_config() -> dict:
    subnet = pod_subnet()
    return {
        "cniVersion": "1.0.0",
        "name": "gpusplit-lab",
        "plugins": [
            {
                "type": "bridge",
                "bridge": BRIDGE,
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": False,
                "ipam": {
                    "type": "host-local",
                    "dataDir": str(CNI_DATA / "networks"),
                    "ranges": [[{"subnet": str(subnet), "gateway": str(subnet.network_address + 1)}]],
                },
            }
        ],
    }


def kubelet_config() -> dict:
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": C.HOST,
        "port": KUBELET_PORT,
        "readOnlyPort": 0,
        "healthzBindAddress": C.HOST,
        "healthzPort": KUBELET_HEALTHZ_PORT,
        # the apiserver reaches the kubelet for logs and exec without a client certificate
        "authentication": {
            "anonymous": {"enabled": True},
            "webhook": {"enabled": False},
            "x509": {"clientCAFile": str(C.PKI / "ca.crt")},
        },
        "authorization": {"mode": "AlwaysAllow"},
        "containerRuntimeEndpoint": f"unix://{NS_CONTAINERD_SOCKET}",
        # cgroup v1 hierarchies, no systemd: the cgroupfs driver, under a cgroup root of this lab's
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": CGROUP_ROOT,
        "cgroupsPerQOS": True,
        "failSwapOn": False,
        "podLogsDir": str(NS_POD_LOGS),
        # no filesystem stats for the root device here: nothing may depend on them
        "localStorageCapacityIsolation": False,
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {"memory.available": "100Mi"},
        "maxPods": 30,
        "serializeImagePulls": False,
        "registerNode": True,
        "resolvConf": "",
        "clusterDomain": "cluster.local",
        "nodeStatusReportFrequency": "1m",
        "syncFrequency": "10s",
        "fileCheckFrequency": "10s",
        "shutdownGracePeriod": "0s",
    }


def write_kubelet_kubeconfig() -> None:
    """The kubelet's client certificate: CN system:node:lab-node-01, O system:nodes (what the
    apiserver's Node authorizer and NodeRestriction admission expect of a kubelet)."""
    ca_crt = C.PKI / "ca.crt"
    if KUBELET_KUBECONFIG.exists() and KUBELET_KUBECONFIG.stat().st_mtime >= ca_crt.stat().st_mtime:
        return  # made with the lab's current CA
    from cryptography.hazmat.primitives import serialization
    from cryptography.x509 import load_pem_x509_certificate

    from lab import pki

    ca_key = serialization.load_pem_private_key((C.PKI / "ca.key").read_bytes(), password=None)
    ca = load_pem_x509_certificate(ca_crt.read_bytes())
    key = pki._key()
    cert = pki._sign(
        pki._name(f"system:node:{NAME}", "system:nodes"), key.public_key(), ca.subject, ca_key, client=True
    )
    server = f"https://{C.HOST}:{C.PORTS['kube-apiserver']}"
    STATE.mkdir(parents=True, exist_ok=True)
    pki._write_kubeconfig(
        KUBELET_KUBECONFIG, server, pki._pem(ca), pki._pem(cert), key, f"system:node:{NAME}"
    )


# The NVIDIA container runtime (the `nvidia` runtime handler): the toolkit's generated config.toml,
# in legacy mode (its hook), with runc below it and the nvidia-container-cli stand-in
# (tests/fakes/bin/nvidia-container-cli, resolving against the node's GPU fixture and recording each
# call in CLI_RECORD) in place of the driver's program. The config.toml is where the toolkit keeps it
# on a host, under the node's root, which is the lab's host root of lab-node-01 (inventory/lab):
# gpusplit's gpu_host role hardens the very file the node's runtime reads.
NODE_FIXTURE = C.ROOT / "tests" / "fixtures" / "gpus" / "l40s-pair.json"
NVIDIA_CONFIG = ROOTDIR / "etc" / "nvidia-container-runtime" / "config.toml"
CLI_RECORD = STATE / "nvidia-container-cli.jsonl"
CLI_WRAPPER = STATE / "nvidia-container-cli"
HOOK_WRAPPER = STATE / "nvidia-container-runtime-hook"
# the character-device major of the NVIDIA driver's GPU nodes, /dev/nvidia<minor>
NVIDIA_MAJOR = 195

# The node's nvidia-container-cli: the stand-in, which resolves and records what the hook asks for, then
# the part of the real program's work that the lab's device plugin relies on: each selected GPU's device
# node, /dev/nvidia<minor> (major 195, the minor from the fixture), made in the container's /dev. The
# hook runs before runc switches to the container's root, so the container's root is still at the path
# the hook passes, in the container's mount namespace (`--pid`), as the real program finds it. An OCI
# hook runs with no environment: the stand-in's is set here.
_CLI_WRAPPER = """#!{python}
import json, os, subprocess, sys, tempfile
STANDIN, RECORD, FIXTURE, MAJOR = {standin!r}, {record!r}, {fixture!r}, {major}
with tempfile.NamedTemporaryFile(prefix="nvidia-container-cli.", suffix=".jsonl") as own:
    env = {{"PATH": "/usr/bin:/bin", "GPUSPLIT_FAKE_NVML_FIXTURE": FIXTURE, "GPUSPLIT_FAKE_CLI_RECORD": own.name}}
    rc = subprocess.run([STANDIN, *sys.argv[1:]], env=env).returncode
    text = open(own.name, encoding="utf-8").read()
if text:
    fd = os.open(RECORD, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(fd, text.encode())
    os.close(fd)
if rc:
    sys.exit(rc)
minors = {{g["uuid"]: g["minor_number"] for g in json.load(open(FIXTURE, encoding="utf-8"))["gpus"]}}
for call in map(json.loads, text.splitlines()):
    for uuid in call["devices"]:
        if uuid not in minors:  # a MIG device: its parent GPU is selected too
            continue
        node = os.path.join(call["rootfs"], "dev", "nvidia%d" % minors[uuid])
        made = subprocess.run(
            ["nsenter", "--mount=/proc/%s/ns/mnt" % call["pid"], "--", "sh", "-c",
             'test -e "$1" || mknod -m 0666 "$1" c "$2" "$3"', "mknod", node, str(MAJOR), str(minors[uuid])],
            capture_output=True, text=True)
        if made.returncode:
            sys.stderr.write("nvidia-container-cli: mount error: %s: %s\\n" % (node, made.stderr.strip()))
            sys.exit(1)
"""


def write_wrappers() -> None:
    """The two programs the NVIDIA runtime's config.toml names: the nvidia-container-cli and the hook."""
    STATE.mkdir(parents=True, exist_ok=True)
    CLI_WRAPPER.write_text(
        _CLI_WRAPPER.format(
            python=sys.executable,
            standin=str(C.ROOT / "tests" / "fakes" / "bin" / "nvidia-container-cli"),
            record=str(CLI_RECORD),
            fixture=str(NODE_FIXTURE),
            major=NVIDIA_MAJOR,
        )
    )
    CLI_WRAPPER.chmod(0o755)
    # and the hook finds its config.toml through this one, as the GPU Operator's installer wraps it
    HOOK_WRAPPER.write_text(
        "#!/bin/sh\n"
        f"export NVIDIA_CTK_CONFIG_FILE_PATH='{NVIDIA_CONFIG}'\n"
        f"exec '{C.BIN / 'nvidia-container-runtime-hook'}' \"$@\"\n"
    )
    HOOK_WRAPPER.chmod(0o755)


def write_nvidia_config(extra: dict[str, str] | None = None) -> Path:
    """The NVIDIA runtime's config.toml, set with the toolkit's own `nvidia-ctk config --set`
    (``extra``: more settings, such as gpusplit's hardening). Returns its path."""
    write_wrappers()
    NVIDIA_CONFIG.parent.mkdir(parents=True, exist_ok=True)
    base = STATE / "nvidia-container-runtime.default.toml"
    proc = subprocess.run([str(C.BIN / "nvidia-ctk"), "config", "default"], capture_output=True, text=True)
    if proc.returncode != 0:
        raise NodeError(f"nvidia-ctk config default failed: {proc.stderr.strip()}")
    base.write_text(proc.stdout)
    settings = {
        "nvidia-container-cli.path": str(CLI_WRAPPER),
        "nvidia-container-runtime.runtimes": str(C.BIN / "runc"),
        "nvidia-container-runtime.mode": "legacy",
        "nvidia-container-runtime.debug": str(C.LOGS / "nvidia-container-runtime.log"),
        "nvidia-container-runtime-hook.path": str(HOOK_WRAPPER),
        **(extra or {}),
    }
    argv = [str(C.BIN / "nvidia-ctk"), "config", "--config-file", str(base), "--output", str(NVIDIA_CONFIG)]
    for key, value in settings.items():
        argv += ["--set", f"{key}={value}"]
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        raise NodeError(f"nvidia-ctk config --set failed: {proc.stderr.strip()}")
    return NVIDIA_CONFIG


# The node as a GPU host of the lab's inventory, for the runs that name it (`-i inventory/lab -i
# <lab>/node/inventory.yml`): not in inventory/lab's hosts.yml, so the kwok fleet's runs and tests
# see the inventory they always saw. Its variables are inventory/lab/host_vars/lab-node-01.yml.
INVENTORY = STATE / "inventory.yml"


def inventory() -> dict:
    return {"all": {"children": {"gpu_nodes": {"hosts": {NAME: None}}}}}


def write_config() -> None:
    STATE.mkdir(parents=True, exist_ok=True)
    for d in (KUBELET_DIR, POD_LOGS, CONTAINERD_ROOT, CONTAINERD_STATE, CNI_CONF_DIR, CNI_DATA, *CDI_DIRS):
        d.mkdir(parents=True, exist_ok=True)
    (STATE / "containerd.toml").write_text(containerd_config())
    (CNI_CONF_DIR / "10-gpusplit-lab.conflist").write_text(json.dumps(cni_config(), indent=1) + "\n")
    (STATE / "kubelet.yaml").write_text(yaml.safe_dump(kubelet_config(), sort_keys=False))
    write_kubelet_kubeconfig()
    write_wrappers()
    INVENTORY.write_text(
        f"# {NAME}, the lab's real node (lab/node.py): -i inventory/lab -i {C.shown(INVENTORY)}\n"
        + yaml.safe_dump(inventory(), sort_keys=False)
    )
    if not NVIDIA_CONFIG.exists():  # kept when a test changed it (gpusplit's hardening)
        write_nvidia_config()


# --------------------------------------------------------------------------- processes


# Paths a kubelet and containerd use whatever their configuration says: the device manager's socket
# dir (/var/lib/kubelet/device-plugins, a constant of the device-plugin API, not under --root-dir), the
# kubelet's links to container logs and the shims' socket dir. The node runs in a mount namespace of its
# own where each is a bind mount of a directory under the node's root, as on a host of its own: the
# labs' kubelets would otherwise share, and clean out, one device-plugin dir.
FIXED_PATHS = {
    NS_KUBELET_DIR: KUBELET_DIR,
    NS_POD_LOGS: POD_LOGS,
    Path("/var/log/containers"): ROOTDIR / "var" / "log" / "containers",
    Path("/run/containerd"): CONTAINERD_STATE,
}
# run by unshare in the node's new mount namespace: the bind mounts, then containerd
_NAMESPACE_SCRIPT = 'set -e; while [ "$1" != -- ]; do mount --bind "$1" "$2"; shift 2; done; shift; exec "$@"'


def containerd_command() -> list[str]:
    """containerd, in a new mount namespace (private propagation) with the node's FIXED_PATHS."""
    binds = [str(p) for fixed, own in FIXED_PATHS.items() for p in (own, fixed)]
    return [
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        _NAMESPACE_SCRIPT,
        "lab-node",
        *binds,
        "--",
        str(C.BIN / "containerd"),
        "--config",
        str(STATE / "containerd.toml"),
    ]


def containerd_address() -> str:
    """containerd's socket as this process reaches it: through containerd's own root, in its namespace."""
    pid = running("containerd")
    if pid is None:
        raise NodeError("containerd does not run")
    return f"/proc/{pid}/root{NS_CONTAINERD_SOCKET}"


def in_node_namespace(argv: list[str]) -> list[str]:
    """argv run in the node's mount namespace (containerd's)."""
    pid = running("containerd")
    if pid is None:
        raise NodeError("containerd does not run: the node's mount namespace is gone")
    return ["nsenter", f"--mount=/proc/{pid}/ns/mnt", "--", *argv]


# The node's kubelet runs the lab's release (its apiserver's) unless this names an older one of
# KUBE_VERSIONS: a kubelet may join an apiserver up to three minor releases newer.
KUBELET_RELEASE_ENV = "GPUSPLIT_LAB_NODE_KUBELET"
# the kubelet-apiserver skew Kubernetes supports (kubernetes.io/releases/version-skew-policy/#kubelet)
KUBELET_MAX_MINOR_SKEW = 3


def _release(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split("."))


def kubelet_skew_problem(kubelet: str, apiserver: str, known: list[str]) -> str | None:
    """Why a kubelet of release ``kubelet`` cannot be the node's under an apiserver of ``apiserver``
    (``known``: the releases the lab builds), or None."""
    asked = f"kubelet {kubelet} ({KUBELET_RELEASE_ENV} or --release)"
    if kubelet not in known:
        return (
            f"{asked}: not a release the lab builds (KUBE_VERSIONS in lab/versions.env: {', '.join(known)})"
        )
    have, lab = _release(kubelet), _release(apiserver)
    if have > lab:
        return f"{asked}: a kubelet may not be newer than the lab's apiserver ({apiserver})"
    if lab[0] != have[0] or lab[1] - have[1] > KUBELET_MAX_MINOR_SKEW:
        return f"{asked}: at most {KUBELET_MAX_MINOR_SKEW} minor releases older than the lab's apiserver ({apiserver})"
    return None


def kubelet_release(wanted: str | None = None) -> str:
    """The release the node's kubelet runs: ``wanted``, else GPUSPLIT_LAB_NODE_KUBELET, else the lab's."""
    lab = C.lab_kube_version()
    release = wanted or os.environ.get(KUBELET_RELEASE_ENV) or lab
    problem = kubelet_skew_problem(release, lab, C.versions()["KUBE_VERSIONS"].split(","))
    if problem:
        raise NodeError(problem)
    return release


def kubelet_binary(release: str | None = None) -> Path:
    """The kubelet of ``release`` (default: kubelet_release()), built by lab/build_node.sh."""
    return C.kube_bin(release or kubelet_release()) / "kubelet"


def kubelet_missing(release: str) -> str:
    how = "make lab-build" if release == C.versions()["KUBE_VERSION"] else f"make lab-build K8S={release}"
    return f"{C.shown(kubelet_binary(release))} (run `{how}`: lab/build_node.sh)"


def release_of_binary(path: str) -> str | None:
    """The release of a lab kubelet by its path (kube_bin's layout), None for one outside the lab's bin."""
    where = Path(path).parent
    if where == C.BIN:
        return C.versions()["KUBE_VERSION"]
    return where.name if where.parent == C.BIN else None


def running_kubelet_release() -> str | None:
    """The release of the node's running kubelet (its binary's), None when none runs."""
    pid = running("kubelet")
    if pid is None:
        return None
    with contextlib.suppress(OSError):
        return release_of_binary(os.fsdecode(Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]))
    return None


def kubelet_command(release: str | None = None) -> list[str]:
    return [
        str(kubelet_binary(release)),
        f"--config={STATE / 'kubelet.yaml'}",
        f"--kubeconfig={KUBELET_KUBECONFIG}",
        f"--root-dir={NS_KUBELET_DIR}",
        f"--cert-dir={NS_KUBELET_DIR / 'pki'}",
        f"--hostname-override={NAME}",
        f"--node-ip={C.HOST}",
        f"--register-with-taints={TAINT}",
        "--node-labels=" + ",".join(f"{k}={v}" for k, v in LABELS.items()),
        "--v=1",
    ]


def child_env() -> dict[str, str]:
    """containerd finds its shim, and the shim runc, on PATH: the lab's binaries first."""
    env = dict(os.environ)
    env["PATH"] = f"{C.BIN}:{env.get('PATH', '/usr/sbin:/usr/bin:/sbin:/bin')}"
    env["NVIDIA_CTK_CONFIG_FILE_PATH"] = str(NVIDIA_CONFIG)  # the nvidia runtime handler's
    return env


def pidfile(name: str) -> Path:
    return STATE / f"{name}.pid"


def running(name: str) -> int | None:
    """The pid of the node's `name` (containerd, kubelet) when it runs (its command line checked)."""
    try:
        pid = int(pidfile(name).read_text())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (OSError, ValueError):
        return None
    if stat.rsplit(")", 1)[1].split()[0] == "Z":
        return None
    exe = os.fsdecode(cmdline[0]) if cmdline else ""
    return pid if exe.startswith(f"{C.BIN}/") and Path(exe).name == name else None


def alive(name: str) -> bool:
    """Whether the process of `name`'s pid file lives (also while unshare or nsenter run before it)."""
    try:
        stat = Path(f"/proc/{int(pidfile(name).read_text())}/stat").read_text()
    except (OSError, ValueError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def spawn(name: str, argv: list[str]) -> int:
    C.LOGS.mkdir(parents=True, exist_ok=True)
    with open(C.LOGS / f"{name}.log", "ab") as out:
        out.write(f"\n===== start {time.strftime('%H:%M:%S')} {argv[0]}\n".encode())
        out.flush()
        proc = subprocess.Popen(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=child_env(),
            start_new_session=True,
        )
    pidfile(name).write_text(str(proc.pid))
    return proc.pid


def stop_process(name: str, timeout: float = 15) -> bool:
    pid = running(name)
    if pid is None:
        pidfile(name).unlink(missing_ok=True)
        return False
    os.kill(pid, signal.SIGTERM)
    deadline = time.time() + timeout
    while time.time() < deadline and running(name):
        time.sleep(0.1)
    if running(name):
        os.kill(pid, signal.SIGKILL)
        while running(name):
            time.sleep(0.1)
    pidfile(name).unlink(missing_ok=True)
    return True


def log_tail(name: str, lines: int = 30) -> str:
    path = C.LOGS / f"{name}.log"
    if not path.exists():
        return "(no log)"
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def wait_for(what: str, check, timeout: float, log_name: str) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if check():
            return
        if not alive(log_name):
            break
        time.sleep(0.5)
    raise NodeError(
        f"{what} not ready in time; the tail of {C.shown(C.LOGS / (log_name + '.log'))}:\n{log_tail(log_name)}"
    )


def containerd_ready() -> bool:
    if not CONTAINERD_SOCKET.exists() or running("containerd") is None:
        return False
    with contextlib.suppress(subprocess.TimeoutExpired):
        return ctr("version", timeout=10).returncode == 0
    return False


# --------------------------------------------------------------------------- the CRI (for down)
# runtime.v1.RuntimeService, k8s.io/cri-api pkg/apis/runtime/v1/api.proto: ListPodSandboxResponse
# {repeated PodSandbox items = 1}, PodSandbox {string id = 1}, StopPodSandboxRequest and
# RemovePodSandboxRequest {string pod_sandbox_id = 1}.


def _fields(data: bytes):
    """(field number, wire type, value) of a protobuf message: varints as int, the rest as bytes."""
    i = 0
    while i < len(data):
        key, i = _varint(data, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(data, i)
        elif wire == 2:
            size, i = _varint(data, i)
            value, i = data[i : i + size], i + size
        elif wire == 1:
            value, i = data[i : i + 8], i + 8
        elif wire == 5:
            value, i = data[i : i + 4], i + 4
        else:
            raise ValueError(f"protobuf wire type {wire} not supported")
        yield number, wire, value


def _varint(data: bytes, i: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        b = data[i]
        i += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, i
        shift += 7


def _string_field(number: int, value: str) -> bytes:
    raw = value.encode()
    return bytes([(number << 3) | 2, len(raw)]) + raw  # ids are 64 hex digits: one-byte length


def cri_call(method: str, request: bytes, timeout: float = 30) -> bytes:
    import grpc

    with grpc.insecure_channel(f"unix:{containerd_address()}") as channel:
        call = channel.unary_unary(f"/runtime.v1.RuntimeService/{method}")
        return call(request, timeout=timeout)


def remove_pods() -> int:
    """Stop and remove every pod sandbox through containerd's CRI (its containers, its network)."""
    answer = cri_call("ListPodSandbox", b"")
    ids = []
    for number, wire, item in _fields(answer):
        if number == 1 and wire == 2:
            ids += [v.decode() for n, w, v in _fields(item) if n == 1 and w == 2]
    for sandbox in ids:
        cri_call("StopPodSandbox", _string_field(1, sandbox))
        cri_call("RemovePodSandbox", _string_field(1, sandbox))
    return len(ids)


# --------------------------------------------------------------------------- up, down, status


def enabled() -> bool:
    return os.environ.get("GPUSPLIT_LAB_REAL_NODE", "1") != "0"


def error_file() -> Path:
    return STATE / "error"


def started() -> bool:
    """Whether `up` ran since the last `down`: a pid file of its processes, or the reason it failed, is kept."""
    return any(f.exists() for f in (pidfile("containerd"), pidfile("kubelet"), error_file()))


def node_object() -> dict | None:
    proc = subprocess.run(
        ["kubectl", f"--kubeconfig={C.KUBECONFIG}", "get", "node", NAME, "-o", "json"],
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=30,
    )
    return json.loads(proc.stdout) if proc.returncode == 0 else None


def node_ready() -> bool:
    node = node_object()
    if not node:
        return False
    conditions = {c["type"]: c["status"] for c in node.get("status", {}).get("conditions", [])}
    return conditions.get("Ready") == "True"


def set_address() -> None:
    """The node's address, the lab's loopback address, in its status. The kubelet listens there but
    refuses to report a loopback address ("nodeIP can't be loopback address") and leaves the node's
    addresses as they are; without one the apiserver cannot reach the kubelet (logs, exec)."""
    addresses = [{"type": "InternalIP", "address": C.HOST}]
    proc = subprocess.run(
        ["kubectl", f"--kubeconfig={C.KUBECONFIG}", "patch", "node", NAME, "--subresource=status"]
        + ["--type=merge", "-p", json.dumps({"status": {"addresses": addresses}})],
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=30,
    )
    if proc.returncode != 0:
        raise NodeError(f"could not set the address of {NAME}: {proc.stderr.strip()}")


def up(timeout: float = 180) -> str:
    """Start containerd and the kubelet (each unless it runs), import the images, wait for Ready."""
    error_file().unlink(missing_ok=True)
    lacking = missing()
    if lacking:
        raise NodeError("this machine lacks: " + "; ".join(lacking))
    write_config()
    make_cgroup_root()
    started = []
    if not running("containerd"):
        for fixed, own in FIXED_PATHS.items():
            own.mkdir(parents=True, exist_ok=True)
            fixed.mkdir(parents=True, exist_ok=True)  # an empty mount point on the machine
        spawn("containerd", containerd_command())
        started.append("containerd")
    wait_for("containerd", containerd_ready, 60, "containerd")
    import_images()
    if not running("kubelet"):
        spawn("kubelet", in_node_namespace(kubelet_command()))
        started.append("kubelet")
    wait_for(f"{NAME} registered by its kubelet", lambda: node_object() is not None, timeout, "kubelet")
    set_address()
    release = running_kubelet_release()
    # a node object outlives its kubelet, Ready included: the running kubelet's release in its status is this kubelet's
    wait_for(
        f"the kubelet {release} of {NAME}",
        lambda: node_kubelet_version() == release and node_ready(),
        timeout,
        "kubelet",
    )
    return f"{NAME} Ready, kubelet {release} ({', '.join(started) + ' started' if started else 'already running'})"


def node_kubelet_version() -> str | None:
    """The kubelet release the node's status reports (nodeInfo.kubeletVersion, without its v)."""
    node = node_object()
    version = ((node or {}).get("status", {}).get("nodeInfo") or {}).get("kubeletVersion")
    return version.removeprefix("v") if version else None


def restart_kubelet(release: str | None = None, timeout: float = 180) -> str:
    """Run the node's kubelet at ``release`` (default: kubelet_release()); the pods and containerd stay.
    Waits until the node reports that kubelet release, Ready, with its device-plugin socket made anew."""
    release = kubelet_release(release)
    if not kubelet_binary(release).exists():
        raise NodeError("this machine lacks: " + kubelet_missing(release))
    if running("containerd") is None:
        raise NodeError(f"containerd of {NAME} does not run: start the node (python -m lab.node up)")
    was = running_kubelet_release()
    stop_process("kubelet")
    started = time.time()
    spawn("kubelet", in_node_namespace(kubelet_command(release)))

    def serving() -> bool:
        # the kubelet makes its device-plugin socket anew at start: plugins register again on it
        with contextlib.suppress(OSError):
            if DEVICE_PLUGIN_SOCKET.stat().st_mtime < started - 1:
                return False
            return node_kubelet_version() == release and node_ready()
        return False

    wait_for(f"the kubelet {release} of {NAME}", serving, timeout, "kubelet")
    set_address()
    return f"{NAME} Ready, kubelet {release} (was {was or 'not running'})"


def down() -> list[str]:
    """Stop the kubelet, remove every pod through the CRI, stop containerd and what it left, unmount
    everything under the node's dirs, remove its cgroups and bridge. Returns what was done."""
    done = []
    if stop_process("kubelet"):
        done.append("stopped the kubelet")
    if running("containerd"):
        try:
            n = remove_pods()
            done.append(f"removed {n} pod(s) through the CRI")
        except Exception as exc:  # a broken containerd: what it left is killed and unmounted below
            done.append(f"could not remove the pods through the CRI ({exc})")
    if stop_process("containerd"):
        done.append("stopped containerd")
    for pid in leftover_processes():
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
            done.append(f"killed leftover process {pid}")
    left = unmount_all()
    if left:
        done.append(f"still mounted: {', '.join(left)}")
    left = remove_cgroups()
    if left:
        done.append(f"cgroups not removed: {'; '.join(left)}")
    if Path(f"/sys/class/net/{BRIDGE}").exists():
        subprocess.run(["ip", "link", "del", BRIDGE], capture_output=True, check=False)
        done.append(f"removed the bridge {BRIDGE}")
    error_file().unlink(missing_ok=True)  # a node that failed to start is no longer expected
    # the sockets of a stopped kubelet and containerd
    for sock in (
        DEVICE_PLUGIN_SOCKET,
        POD_RESOURCES_SOCKET,
        CONTAINERD_SOCKET,
        Path(f"{CONTAINERD_SOCKET}.ttrpc"),
    ):
        sock.unlink(missing_ok=True)
    return done


def leftover_processes() -> list[int]:
    """The node's processes after containerd stopped: its shims (each works in its task's bundle dir
    under the node's containerd state dir; one of a containerd that listened on the lab's path names
    that address) and whatever still runs in its cgroups (its containers)."""
    pids = set(cgroup_pids())
    bundles = f"{CONTAINERD_STATE}/"
    address = os.fsencode(str(CONTAINERD_SOCKET))
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            if not argv[0].endswith(b"containerd-shim-runc-v2"):
                continue
            if os.readlink(proc / "cwd").startswith(bundles) or address in argv:
                pids.add(int(proc.name))
    pids.discard(os.getpid())
    return sorted(pids)


def status() -> dict:
    node = node_object() if C.KUBECONFIG.exists() else None
    conditions = {c["type"]: c["status"] for c in (node or {}).get("status", {}).get("conditions", [])}
    return {
        "node": NAME,
        "ready": conditions.get("Ready") == "True",
        "containerd_pid": running("containerd"),
        "kubelet_pid": running("kubelet"),
        "kubelet_release": running_kubelet_release(),
        "kubelet_version": ((node or {}).get("status", {}).get("nodeInfo") or {}).get("kubeletVersion"),
        "root_dir": str(KUBELET_DIR),
        "device_plugin_socket": str(DEVICE_PLUGIN_SOCKET),
        "pod_resources_socket": str(POD_RESOURCES_SOCKET),
        "containerd_socket": str(CONTAINERD_SOCKET),
        "cgroup_root": CGROUP_ROOT,
        "bridge": BRIDGE,
        "pod_subnet": str(pod_subnet()),
        "mounts": node_mounts(),
        "error": error_file().read_text() if error_file().exists() else None,
    }


def lab_up() -> tuple[bool, str]:
    """For `lab.lab up`: start the node unless GPUSPLIT_LAB_REAL_NODE=0; on failure, the reason is
    kept in <lab>/node/error (the real-node tests fail with it) and the rest of the lab stays up."""
    if not enabled():
        return True, f"{NAME} left out (GPUSPLIT_LAB_REAL_NODE=0)"
    try:
        return True, up()
    except (NodeError, OSError, subprocess.SubprocessError) as exc:
        STATE.mkdir(parents=True, exist_ok=True)
        error_file().write_text(str(exc))
        return False, f"the real node {NAME} cannot run: {exc}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.node")
    parser.add_argument("command", choices=["up", "down", "status", "restart-kubelet"])
    parser.add_argument("--timeout", type=float, default=180.0)
    parser.add_argument(
        "--release",
        help=f"restart-kubelet: the kubelet's release (default: {KUBELET_RELEASE_ENV}, else the lab's)",
    )
    args = parser.parse_args(argv)
    if args.command in ("up", "restart-kubelet"):
        try:
            log(up(args.timeout) if args.command == "up" else restart_kubelet(args.release, args.timeout))
        except NodeError as exc:
            print(f"lab-node: {exc}", file=sys.stderr)
            return 1
        return 0
    if args.command == "down":
        for line in down() or ["nothing was running"]:
            log(line)
        return 0
    report = status()
    print(json.dumps(report, indent=2))
    return 0 if report["ready"] else 1


if __name__ == "__main__":
    sys.exit(main())
