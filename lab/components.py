"""The lab control plane's components and their flags: the one place they are defined.

The three control-plane components are written out as kubeadm-style static-pod manifests under
`.lab/manifests/` the first time the lab starts; from then on the lab supervisor (a stand-in for
the kubelet's static-pod handling) runs each component from the `command` of its manifest, and
restarts it when that command changes. So the control-plane role and `static_pod_flags` edit the
lab exactly as they edit a kubeadm node.

etcd and kwok are not static pods here; their flags are defined below too.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
# The lab's state (PKI, etcd data, manifests, logs, kubeconfig, the hosts' scratch roots, the SSH
# host's keys). GPUSPLIT_LAB_DIR (with its own GPUSPLIT_LAB_HOST) runs a second lab from the same
# checkout: the tests give each pytest-xdist worker past the first its own (tests/conftest.py).
LAB = Path(os.environ.get("GPUSPLIT_LAB_DIR") or ROOT / ".lab").resolve()
# the binaries lab/build.sh builds: one copy for every lab of the checkout (the default Kubernetes
# release's here, every other release's in BIN/<version>/: kube_bin)
BIN = ROOT / ".lab" / "bin"
PKI = LAB / "pki"
DATA = LAB / "data"
LOGS = LAB / "logs"
MANIFESTS = LAB / "manifests"
KUBECONFIG = LAB / "kubeconfig"
HOSTS_ROOT = LAB / "hosts"
# where the playbooks run against inventory/lab write (its gpusplit_out_dir)
OUT = Path(os.environ.get("GPUSPLIT_OUT_DIR") or ROOT / "out").resolve()
KWOK_STAGES_TEMPLATE = ROOT / "lab" / "kwok-stages.yaml.tmpl"
KWOK_STAGES = LAB / "kwok-stages.yaml"


def shown(path: Path) -> str:
    """A lab path as messages show it: relative to the checkout where it is inside it."""
    try:
        return str(path.relative_to(ROOT))
    except ValueError:
        return str(path)


# The loopback address the lab binds to. GPUSPLIT_LAB_HOST (another 127.x address) lets a second
# checkout run its own lab beside this one on the same ports; the default is what docs and tests use.
HOST = os.environ.get("GPUSPLIT_LAB_HOST") or "127.0.0.1"


def wait_scale() -> float:
    """How many times a test's bound on a lab wait is stretched: waits are bounds, not measurements, and CI
    runs the lab groups beside the core legs on one busy machine. GPUSPLIT_LAB_WAIT_SCALE (a positive
    number), else 3 where CI=true, else 1."""
    given = os.environ.get("GPUSPLIT_LAB_WAIT_SCALE", "").strip()
    if given:
        try:
            value = float(given)
        except ValueError:
            value = float("nan")
        if not value > 0 or value == float("inf"):
            raise ValueError(f"GPUSPLIT_LAB_WAIT_SCALE must be a positive number, not {given!r}")
        return value
    return 3.0 if os.environ.get("CI", "").lower() in ("1", "true", "yes") else 1.0


PORTS = {
    "etcd": 2379,
    "etcd-peer": 2380,
    "kube-apiserver": 6443,
    "kube-scheduler": 10259,
    "kube-controller-manager": 10257,
    "kwok": 10247,
}

# Feature gates and API groups the lab starts with. GenericWorkload stays at its 1.37 default
# (off): enabling it is the control-plane role's job, and the tests prove that.
LAB_FEATURE_GATES: dict[str, bool] = {}
LAB_RUNTIME_CONFIG: dict[str, str] = {}

STATIC_COMPONENTS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")


def control_plane_endpoints(host: str | None = None) -> dict[str, dict]:
    """The health and metrics endpoints of the lab's control plane, on the lab's own address.

    The same as inventory/lab's ``gpusplit_cp_endpoints``; the role's defaults name 127.0.0.1,
    which is another lab's control plane when GPUSPLIT_LAB_HOST is set.
    """
    host = host or HOST
    out = {}
    for component in STATIC_COMPONENTS:
        base = f"https://{host}:{PORTS[component]}"
        if component == "kube-apiserver":
            out[component] = {
                "health_url": f"{base}/readyz",
                "metrics_url": f"{base}/metrics",
                "validate_certs": True,
                "tls_server_name": "kubernetes",
            }
        else:
            out[component] = {
                "health_url": f"{base}/healthz",
                "metrics_url": f"{base}/metrics",
                "validate_certs": False,
            }
    return out


def versions() -> dict[str, str]:
    out = {}
    for line in (ROOT / "lab" / "versions.env").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, value = line.split("=", 1)
            out[key] = value
    return out


# --------------------------------------------------------------------------- Kubernetes releases
# The lab runs any release of KUBE_VERSIONS (lab/versions.env); KUBE_VERSION is the default, and
# GPUSPLIT_KUBE_VERSION (`make lab-up K8S=<version>`) asks for another. The release a lab runs is the
# tag of its static-pod manifests' images, as on a kubeadm node: the supervisor runs each component
# from that release's binaries, so editing the image of a manifest upgrades that component.

KUBE_VERSION_ENV = "GPUSPLIT_KUBE_VERSION"
_IMAGE_TAG = re.compile(r"registry\.k8s\.io/(?P<name>[a-z-]+):v(?P<version>\d+\.\d+\.\d+)")


def kube_versions() -> tuple[str, ...]:
    """The Kubernetes releases the lab runs, the default first."""
    pins = versions()
    listed = [v.strip() for v in pins.get("KUBE_VERSIONS", "").split(",") if v.strip()]
    default = pins["KUBE_VERSION"]
    return (default, *[v for v in listed if v != default])


def check_kube_version(version: str, what: str = "Kubernetes") -> str:
    """The version when the lab runs it; otherwise a ValueError naming the releases it runs."""
    supported = kube_versions()
    if version not in supported:
        raise ValueError(
            f"{what} {version!r} is not a release the lab runs; lab/versions.env KUBE_VERSIONS: {', '.join(supported)}"
        )
    return version


def requested_kube_version() -> str:
    """The release asked for: GPUSPLIT_KUBE_VERSION (K8S= in the Makefile), else the default."""
    asked = os.environ.get(KUBE_VERSION_ENV, "").strip().removeprefix("v")
    return check_kube_version(asked, f"{KUBE_VERSION_ENV}") if asked else versions()["KUBE_VERSION"]


def kube_bin(version: str) -> Path:
    """Where lab/build.sh puts a release's binaries: .lab/bin for the default, .lab/bin/<version> else."""
    return BIN if version == versions()["KUBE_VERSION"] else BIN / version


def manifest_version(path: Path) -> str | None:
    """The release a static-pod manifest runs (its image's tag), None when it names none."""
    try:
        doc = yaml.safe_load(path.read_text())
        image = doc["spec"]["containers"][0].get("image") or ""
    except (OSError, KeyError, IndexError, TypeError, AttributeError, yaml.YAMLError):
        return None
    match = _IMAGE_TAG.fullmatch(image)
    return match.group("version") if match else None


def lab_kube_version() -> str:
    """The release of this lab: its kube-apiserver manifest's, or the requested one before it has any."""
    return manifest_version(MANIFESTS / "kube-apiserver.yaml") or requested_kube_version()


def kubectl_dirs(version: str) -> list[Path]:
    """What to put first on PATH for a kubectl of the release (the venv's is the default's)."""
    return [] if version == versions()["KUBE_VERSION"] else [kube_bin(version)]


def _joined(d: dict) -> str:
    return ",".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in d.items())


def etcd_command() -> list[str]:
    return [
        str(BIN / "etcd"),
        "--name=lab",
        f"--data-dir={DATA / 'etcd'}",
        f"--listen-client-urls=http://{HOST}:{PORTS['etcd']}",
        f"--advertise-client-urls=http://{HOST}:{PORTS['etcd']}",
        f"--listen-peer-urls=http://{HOST}:{PORTS['etcd-peer']}",
        f"--initial-advertise-peer-urls=http://{HOST}:{PORTS['etcd-peer']}",
        f"--initial-cluster=lab=http://{HOST}:{PORTS['etcd-peer']}",
        "--unsafe-no-fsync=true",
        "--quota-backend-bytes=4294967296",
        "--log-level=warn",
    ]


def render_kwok_stages(template: str, kube_version: str) -> str:
    """The kwok stages with the pinned Kubernetes version filled in (the nodes' kubeletVersion)."""
    if not re.fullmatch(r"\d+\.\d+\.\d+", kube_version or ""):
        raise ValueError(f"KUBE_VERSION {kube_version!r} in lab/versions.env is not a version like 1.37.2")
    text = template.replace("@KUBE_VERSION@", kube_version)
    left = sorted(set(re.findall(r"@[A-Z_]+@", text)))
    if left:
        raise ValueError(f"{KWOK_STAGES_TEMPLATE.name}: unknown placeholder(s) {', '.join(left)}")
    return text


def write_kwok_stages() -> Path:
    """Render the kwok stages into .lab/ (written only when the template or the pin changed)."""
    text = render_kwok_stages(KWOK_STAGES_TEMPLATE.read_text(), lab_kube_version())
    if not KWOK_STAGES.is_file() or KWOK_STAGES.read_text() != text:
        LAB.mkdir(parents=True, exist_ok=True)
        tmp = KWOK_STAGES.with_name(f".{KWOK_STAGES.name}.{os.getpid()}")
        tmp.write_text(text)
        tmp.replace(KWOK_STAGES)
    return KWOK_STAGES


def kwok_command() -> list[str]:
    # kwok stands in for the kubelets of the simulated GPU nodes: it keeps their Ready condition
    # and leases fresh and moves bound pods to Running. It manages only nodes carrying the
    # annotation below, i.e. the lab's simulated nodes.
    return [
        str(BIN / "kwok"),
        f"--kubeconfig={KUBECONFIG}",
        f"--config={write_kwok_stages()}",
        "--manage-all-nodes=false",
        "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
        "--cidr=10.0.0.1/24",
        f"--node-ip={HOST}",
        f"--server-address={HOST}:{PORTS['kwok']}",
        "--node-lease-duration-seconds=40",
    ]


def _component_flags(name: str) -> list[str]:
    common_gates = [f"--feature-gates={_joined(LAB_FEATURE_GATES)}"] if LAB_FEATURE_GATES else []
    if name == "kube-apiserver":
        flags = [
            f"--advertise-address={HOST}",
            f"--bind-address={HOST}",
            f"--secure-port={PORTS['kube-apiserver']}",
            f"--etcd-servers=http://{HOST}:{PORTS['etcd']}",
            f"--client-ca-file={PKI / 'ca.crt'}",
            f"--tls-cert-file={PKI / 'apiserver.crt'}",
            f"--tls-private-key-file={PKI / 'apiserver.key'}",
            f"--service-account-key-file={PKI / 'sa.pub'}",
            f"--service-account-signing-key-file={PKI / 'sa.key'}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            "--service-cluster-ip-range=10.96.0.0/16",
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NodeRestriction",
            "--allow-privileged=true",
            "--endpoint-reconciler-type=none",
            "--profiling=false",
        ]
        if LAB_RUNTIME_CONFIG:
            flags.append(f"--runtime-config={_joined(LAB_RUNTIME_CONFIG)}")
        return flags + common_gates
    kubeconfig = LAB / f"{name}.kubeconfig"
    flags = [
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        f"--bind-address={HOST}",
        f"--secure-port={PORTS[name]}",
        "--leader-elect=false",
    ]
    if name == "kube-controller-manager":
        flags += [
            f"--service-account-private-key-file={PKI / 'sa.key'}",
            f"--root-ca-file={PKI / 'ca.crt'}",
            f"--cluster-signing-cert-file={PKI / 'ca.crt'}",
            f"--cluster-signing-key-file={PKI / 'ca.key'}",
            "--use-service-account-credentials=true",
            # every controller but the TTL controller, which annotates each node with the kubelet's cache
            # TTL for the cluster's size (node.alpha.kubernetes.io/ttl: 0 up to 100 nodes, 15 past that) on
            # the node's next update: the fleet bench takes the lab past 100 nodes and back, and those writes
            # on the lab's own nodes fell into a re-run's count of writes; kwok's kubelets read no ConfigMap
            "--controllers=*,-ttl",
        ]
    return flags + common_gates


def static_pod_manifest(name: str, version: str | None = None) -> dict:
    """A kubeadm-shaped static Pod for one control-plane component of a release (the requested one)."""
    version = version or requested_kube_version()
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "kube-system",
            "labels": {"component": name, "tier": "control-plane"},
        },
        "spec": {
            "hostNetwork": True,
            "priorityClassName": "system-node-critical",
            "containers": [
                {
                    "name": name,
                    "image": f"registry.k8s.io/{name}:v{version}",
                    "command": [name, *_component_flags(name)],
                }
            ],
        },
    }


def write_manifests(force: bool = False) -> list[Path]:
    """Write the static-pod manifests unless they exist (edits made to them are kept)."""
    MANIFESTS.mkdir(parents=True, exist_ok=True)
    written = []
    for name in STATIC_COMPONENTS:
        path = MANIFESTS / f"{name}.yaml"
        if force or not path.exists():
            path.write_text(yaml.safe_dump(static_pod_manifest(name), sort_keys=False))
            written.append(path)
    return written


def command_from_manifest(path: Path) -> list[str]:
    """The argv to run for a static-pod manifest: its container command, the binary of its image's release."""
    doc = yaml.safe_load(path.read_text())
    try:
        container = doc["spec"]["containers"][0]
        command = list(container.get("command") or []) + list(container.get("args") or [])
    except (KeyError, IndexError, TypeError) as exc:
        raise ValueError(f"{path.name}: not a static Pod with spec.containers[0].command") from exc
    if not command:
        raise ValueError(f"{path.name}: spec.containers[0].command is empty")
    binary = Path(command[0]).name
    version = manifest_version(path)
    where = kube_bin(check_kube_version(version, f"{path.name}: the image's release")) if version else BIN
    return [str(where / binary), *command[1:]]
