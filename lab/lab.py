"""The lab: a real Kubernetes control plane on 127.0.0.1, for the demo and the integration tests.

    python -m lab.lab up        start (or find running) and wait until every component is healthy
    python -m lab.lab down      stop exactly the lab's processes
    python -m lab.lab status    health of each component and of the real node lab-node-01, as JSON
    python -m lab.lab reset     stop, and remove the cluster (etcd data, manifests) to start afresh

The Kubernetes release is GPUSPLIT_KUBE_VERSION's (`make lab-up K8S=1.36.3`), else lab/versions.env
KUBE_VERSION; KUBE_VERSIONS lists the releases the lab runs. A lab folder holds one release's cluster:
`up` for another release refuses until `reset` has removed it.

`up` starts a small supervisor in the background. It runs etcd and kwok, and runs the three
control-plane components from their static-pod manifests in .lab/manifests, restarting one when
its manifest's command changes and backing off when one crashes, as the kubelet does for static
pods. Its state is in .lab/state.json, each component's output in .lab/logs/<name>.log.

`up` also starts the lab's SSH host (lab/sshd.py): a real sshd on the lab's address, port
sshd.PORT, that one host of inventory/lab is reached through; `down` stops it too.

What is simulated, and only this: kwok plays the kubelets of the GPU nodes (heartbeats, leases,
pod status), lab.deviceplugin plays the NVIDIA device plugin (what each node advertises as
nvidia.com/gpu) and lab.podresources the kubelet's device manager (which pod holds which device)
and its pod-resources API (a gRPC server per node on .lab/hosts/<node>/var/lib/kubelet/pod-resources/
kubelet.sock). etcd, kube-apiserver, kube-scheduler and kube-controller-manager are real.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from lab import components as C
from lab import pki, sshd

STATE = C.LAB / "state.json"
PIDFILE = C.LAB / "supervisor.pid"
ORDER = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
MAX_BACKOFF = 10.0
# what kubectl and clients say while the lab's apiserver restarts (tests retry on these)
TRANSIENT_ERRORS = (
    "connection refused",
    "Connection refused",
    "was refused",
    "TLS handshake timeout",
    "EOF",
    "ServiceUnavailable",
)


def log_tail(name: str, lines: int = 25) -> str:
    path = C.LOGS / f"{name}.log"
    if not path.exists():
        return "(no log)"
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


# --------------------------------------------------------------------------- supervisor


class Component:
    def __init__(self, name: str):
        self.name = name
        self.proc: subprocess.Popen | None = None
        self.argv: list[str] | None = None
        self.started = 0.0
        self.restarts = 0
        self.generation = 0
        self.last_exit: int | None = None
        self.backoff = 1.0
        self.not_before = 0.0
        self.error: str | None = None

    def desired(self) -> list[str] | None:
        if self.name == "etcd":
            return C.etcd_command()
        if self.name == "kwok":
            return C.kwok_command()
        manifest = C.MANIFESTS / f"{self.name}.yaml"
        if not manifest.exists():
            self.error = "manifest removed"
            return None
        try:
            argv = C.command_from_manifest(manifest)
            self.error = None
            return argv
        except (ValueError, OSError, Exception) as exc:  # a broken manifest is reported, not fatal
            self.error = f"invalid manifest: {exc}"
            return None

    def start(self, argv: list[str]) -> None:
        C.LOGS.mkdir(parents=True, exist_ok=True)
        out = open(C.LOGS / f"{self.name}.log", "ab")  # noqa: SIM115 - handed to the child
        out.write(f"\n===== start {time.strftime('%H:%M:%S')} {' '.join(argv[:1])}\n".encode())
        out.flush()
        self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        out.close()
        self.argv = argv
        self.started = time.time()

    def stop(self, timeout: float = 10.0) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def step(self) -> None:
        argv = self.desired()
        running = self.proc is not None and self.proc.poll() is None
        if argv is None:
            if running:
                self.stop()
            return
        if running and argv != self.argv:
            # the manifest changed: restart with the new command, as the kubelet does
            self.stop()
            self.generation += 1
            self.backoff, self.not_before = 1.0, 0.0
            self.start(argv)
            return
        if running:
            if time.time() - self.started > 30:
                self.backoff = 1.0
            return
        if self.proc is not None:  # it exited on its own
            self.last_exit = self.proc.returncode
            self.proc = None
            self.restarts += 1
            self.not_before = time.time() + self.backoff
            self.backoff = min(self.backoff * 2, MAX_BACKOFF)
        if time.time() >= self.not_before:
            if argv != self.argv:
                self.generation += 1
            self.start(argv)

    def state(self) -> dict:
        running = self.proc is not None and self.proc.poll() is None
        return {
            "pid": self.proc.pid if running else None,
            "running": running,
            "restarts": self.restarts,
            "generation": self.generation,
            "last_exit_code": self.last_exit,
            "started_at": self.started,
            "command_sha256": command_hash(self.argv or []),
            "error": self.error,
        }


def supervise() -> None:
    comps = [Component(n) for n in ORDER]
    stopping = False

    def on_term(signum, frame):
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    PIDFILE.write_text(str(os.getpid()))
    plugin = None
    try:
        from lab.deviceplugin import DevicePluginSimulator

        plugin = DevicePluginSimulator()
    except Exception as exc:  # the simulator is optional for the control plane itself
        print(f"device plugin simulator unavailable: {exc}", flush=True)
    podresources = None
    try:
        import grpc  # noqa: F401 - the stand-in serves with grpcio

        from lab.podresources import PodResourcesSimulator

        podresources = PodResourcesSimulator()
    except Exception as exc:  # optional like the device plugin simulator
        print(f"pod-resources simulator unavailable: {exc}", flush=True)
    by_name = {c.name: c for c in comps}
    apiserver_seen = None
    try:
        while not stopping:
            for comp in comps:
                comp.step()
            # kwok (the simulated kubelets) can keep a dead pod watch after the apiserver went away
            # and never start the pods bound afterwards; a real kubelet relists. Start kwok afresh
            # whenever the apiserver was restarted, as a kubelet would resync.
            api = by_name["kube-apiserver"]
            now_seen = (api.generation, api.restarts)
            if apiserver_seen is not None and now_seen != apiserver_seen:
                print("lab: kube-apiserver restarted; restarting kwok to resync its watches", flush=True)
                by_name["kwok"].stop()
            apiserver_seen = now_seen
            tmp = STATE.with_suffix(".tmp")
            tmp.write_text(json.dumps({c.name: c.state() for c in comps}, indent=1))
            tmp.replace(STATE)
            if plugin is not None:
                plugin.tick()
            if podresources is not None:
                podresources.tick()
            time.sleep(0.5)
    finally:
        if podresources is not None:
            podresources.stop()
        for comp in reversed(comps):
            comp.stop()
        STATE.unlink(missing_ok=True)
        PIDFILE.unlink(missing_ok=True)


# --------------------------------------------------------------------------- health


def _ssl_context(client: bool) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(C.PKI / "ca.crt"))
    if client:
        import base64
        import tempfile

        import yaml

        user = yaml.safe_load(C.KUBECONFIG.read_text())["users"][0]["user"]
        with tempfile.TemporaryDirectory() as tmp:
            cert, key = Path(tmp, "c"), Path(tmp, "k")
            cert.write_bytes(base64.b64decode(user["client-certificate-data"]))
            key.write_bytes(base64.b64decode(user["client-key-data"]))
            ctx.load_cert_chain(str(cert), str(key))
    else:
        # scheduler and controller-manager serve self-signed certificates of their own
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def probe(url: str, ctx: ssl.SSLContext | None = None, timeout: float = 2.0) -> tuple[bool, str]:
    try:
        with urllib.request.urlopen(url, context=ctx, timeout=timeout) as resp:
            body = resp.read().decode(errors="replace")
            return resp.status == 200, body.strip()[:200]
    except urllib.error.HTTPError as exc:
        return False, f"HTTP {exc.code}: {exc.read().decode(errors='replace')[:300]}"
    except (OSError, ssl.SSLError) as exc:
        return False, str(exc)


def health() -> dict[str, dict]:
    host = C.HOST
    out: dict[str, dict] = {}
    checks = {
        "etcd": (f"http://{host}:{C.PORTS['etcd']}/health", None),
        "kube-apiserver": (f"https://{host}:{C.PORTS['kube-apiserver']}/readyz", "client"),
        "kube-scheduler": (f"https://{host}:{C.PORTS['kube-scheduler']}/healthz", "insecure"),
        "kube-controller-manager": (
            f"https://{host}:{C.PORTS['kube-controller-manager']}/healthz",
            "insecure",
        ),
        "kwok": (f"http://{host}:{C.PORTS['kwok']}/healthz", None),
    }
    for name, (url, kind) in checks.items():
        ctx = None
        if kind == "client":
            ctx = _ssl_context(client=True) if C.KUBECONFIG.exists() else None
        elif kind == "insecure":
            ctx = _ssl_context(client=False)
        ok, detail = probe(url, ctx)
        out[name] = {"healthy": ok, "url": url, "detail": detail}
    return out


def read_state() -> dict:
    try:
        return json.loads(STATE.read_text())
    except (OSError, ValueError):
        return {}


def supervisor_pid() -> int | None:
    try:
        pid = int(PIDFILE.read_text())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except (OSError, ValueError):
        return None
    return pid if "lab.lab" in cmdline and "supervise" in cmdline else None


# --------------------------------------------------------------------------- commands


def missing_binaries(version: str | None = None) -> list[str]:
    """The lab's binaries lab/build.sh has not built: etcd, kwok and the release's control plane."""
    version = version or C.lab_kube_version()
    where = C.kube_bin(version)
    missing = [n for n in ("etcd", "kwok") if not (C.BIN / n).exists()]
    missing += [C.shown(where / n) for n in C.STATIC_COMPONENTS if not (where / n).exists()]
    return missing


def version_conflict(requested: str) -> str | None:
    """Why the lab cannot start the requested release: its folder holds another release's cluster."""
    have = C.manifest_version(C.MANIFESTS / "kube-apiserver.yaml")
    if have is None or have == requested:
        return None
    how = "`make lab-down`, then `make lab-reset`" if supervisor_pid() else "`make lab-reset`"
    return (
        f"the lab in {C.shown(C.LAB)} holds a Kubernetes {have} cluster (its static-pod manifests), not {requested}: "
        f"{how} removes it (etcd data and manifests), or give this release a lab folder of its own (GPUSPLIT_LAB_DIR)"
    )


def command_hash(argv: list[str]) -> str:
    return hashlib.sha256("\0".join(argv).encode()).hexdigest()[:16]


def running_current_manifests() -> bool:
    """Every static component runs the command its manifest has now (a manifest edited a moment
    ago may not have been picked up yet, and the old process still answers its health check)."""
    state = read_state()
    for name in C.STATIC_COMPONENTS:
        try:
            want = command_hash(C.command_from_manifest(C.MANIFESTS / f"{name}.yaml"))
        except (OSError, ValueError):
            continue
        if state.get(name, {}).get("command_sha256") != want:
            return False
    return True


def wait_healthy(timeout: float, quiet: bool = False) -> dict:
    started = time.time()
    deadline = started + timeout
    last = {}
    while time.time() < deadline:
        last = health()
        if all(v["healthy"] for v in last.values()) and running_current_manifests():
            return last
        if not supervisor_pid() and time.time() > started + 10:
            break
        time.sleep(1)
    return last


def report_unhealthy(h: dict) -> str:
    state = read_state()
    lines = []
    for name, v in h.items():
        if v["healthy"]:
            continue
        st = state.get(name, {})
        lines.append(
            f"{name}: not healthy ({v['detail']}); running={st.get('running')} "
            f"restarts={st.get('restarts')} last_exit={st.get('last_exit_code')} {st.get('error') or ''}"
        )
        lines.append("  --- log tail ---")
        lines.extend("  " + line for line in log_tail(name).splitlines())
    return "\n".join(lines)


def up(timeout: float = 180.0) -> int:
    try:
        version = C.requested_kube_version()
    except ValueError as exc:
        print(f"lab: {exc}", file=sys.stderr)
        return 2
    conflict = version_conflict(version)
    if conflict:
        print(f"lab: {conflict}", file=sys.stderr)
        return 2
    missing = missing_binaries(version)
    if missing:
        k8s = "" if version == C.versions()["KUBE_VERSION"] else f" K8S={version}"
        print(
            f"lab binaries missing: {', '.join(missing)}; run `make lab-build{k8s}` (lab/build.sh)",
            file=sys.stderr,
        )
        return 2
    for d in (C.LAB, C.DATA, C.LOGS):
        d.mkdir(parents=True, exist_ok=True)
    if pki.ensure():
        print("lab: generated certificates, service-account keys and kubeconfigs")
    for path in C.write_manifests():
        print(f"lab: wrote static-pod manifest {C.shown(path)}")
    if supervisor_pid():
        print("lab: already running")
    else:
        log = open(C.LOGS / "supervisor.log", "ab")  # noqa: SIM115 - handed to the child
        subprocess.Popen(
            [sys.executable, "-m", "lab.lab", "supervise"],
            cwd=C.ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()
        print("lab: starting etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok")
    try:
        print(f"lab: {sshd.start()}")
    except sshd.SshdError as exc:
        print(f"lab: the SSH host cannot run: {exc}", file=sys.stderr)
        return 1
    h = wait_healthy(timeout)
    if not h or not all(v["healthy"] for v in h.values()):
        print("lab: not healthy in time:\n" + report_unhealthy(h or health()), file=sys.stderr)
        return 1
    from lab import nodes

    created = nodes.ensure_nodes()
    print(
        f"lab: Kubernetes {version} healthy; kubeconfig {C.shown(C.KUBECONFIG)}; nodes: {', '.join(created)}"
    )
    for where in C.kubectl_dirs(version):
        print(f"lab: kubectl {version} is {C.shown(where / 'kubectl')} (put {C.shown(where)} first on PATH)")
    from lab import node as real_node  # the real node: containerd and a kubelet (lab/node.py)

    ok, said = real_node.lab_up()
    print(f"lab: {said}", file=sys.stdout if ok else sys.stderr)
    return 0


def reset() -> int:
    """Stop the lab and remove its cluster: etcd's data and the static-pod manifests (PKI and hosts stay)."""
    import shutil

    down()
    for path in (C.DATA / "etcd", C.MANIFESTS, STATE):
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
    print(f"lab: removed the cluster in {C.shown(C.LAB)} (etcd data, static-pod manifests)")
    return 0


def down() -> int:
    from lab import node as real_node  # first the real node: its kubelet, pods, containerd, mounts

    for said in real_node.down():
        print(f"lab: {real_node.NAME}: {said}")
    pid = supervisor_pid()
    state = read_state()
    if pid:
        os.kill(pid, signal.SIGTERM)
        deadline = time.time() + 30
        while time.time() < deadline and supervisor_pid():
            time.sleep(0.2)
    # anything the supervisor could not stop: only pids it recorded, and only lab binaries
    for name, st in state.items():
        child = st.get("pid")
        if not child:
            continue
        try:
            cmdline = Path(f"/proc/{child}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if str(C.BIN) in cmdline:
            os.kill(child, signal.SIGKILL)
            print(f"lab: killed leftover {name} ({child})")
    print(f"lab: {sshd.stop()}")
    from lab.podresources import remove_sockets

    for path in remove_sockets():  # what a killed supervisor left
        print(f"lab: removed {C.shown(path)}")
    print("lab: stopped" if pid else "lab: was not running")
    return 0


def real_node_report(state: dict, expected: bool) -> dict:
    """What `lab status` says of the real node, from lab.node.status()'s ``state``: containerd and the
    kubelet running, the node Ready, the kubelet's release. ``expected``: `lab up` started it (it is
    then part of the lab's health); a node left out is reported, healthy or not, without counting."""
    running = {name: state.get(f"{name}_pid") is not None for name in ("containerd", "kubelet")}
    healthy = all(running.values()) and state.get("ready") is True
    release = state.get("kubelet_release")
    parts = [f"containerd {'up' if running['containerd'] else 'down'}"]
    parts.append(f"kubelet {release + ' ' if release else ''}{'up' if running['kubelet'] else 'down'}")
    parts.append("Ready" if state.get("ready") else "not Ready")
    detail = ", ".join(parts)
    if not expected:
        detail += " (not started by lab up: GPUSPLIT_LAB_REAL_NODE=0 or never up)"
    elif state.get("error"):
        detail += f"; lab up recorded: {state['error']}"
    return {
        "node": state.get("node"),
        "expected": expected,
        "healthy": healthy,
        "detail": detail,
        "containerd_pid": state.get("containerd_pid"),
        "kubelet_pid": state.get("kubelet_pid"),
        "ready": state.get("ready") is True,
        "kubelet_release": release,
        "kubelet_version": state.get("kubelet_version"),
        "error": state.get("error"),
    }


def lab_healthy(components: dict, real_node: dict) -> bool:
    """The lab's health for `lab status`: every component, and the real node where lab up started it."""
    return all(v.get("healthy") for v in components.values()) and (
        real_node["healthy"] or not real_node["expected"]
    )


def status() -> int:
    from lab import node as real_node

    h = health()
    state = read_state()
    report = {name: {**h.get(name, {}), **state.get(name, {})} for name in ORDER}
    report["sshd"] = sshd.health()
    node_report = real_node_report(real_node.status(), real_node.enabled() and real_node.started())
    summary = {
        "supervisor_pid": supervisor_pid(),
        "kubernetes_version": C.lab_kube_version(),
        "components": report,
        "real_node": node_report,
    }
    print(json.dumps(summary, indent=2))
    return 0 if lab_healthy(report, node_report) else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.lab")
    parser.add_argument("command", choices=["up", "down", "status", "supervise", "restart", "reset"])
    parser.add_argument("--timeout", type=float, default=180.0)
    args = parser.parse_args(argv)
    if args.command == "up":
        return up(args.timeout)
    if args.command == "down":
        return down()
    if args.command == "restart":
        down()
        return up(args.timeout)
    if args.command == "status":
        return status()
    if args.command == "reset":
        return reset()
    supervise()
    return 0


if __name__ == "__main__":
    sys.exit(main())
