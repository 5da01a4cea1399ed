"""A stand-in for the NVIDIA device plugin on the lab's simulated GPU nodes.

The real plugin advertises every GPU that NVML shows inside its own container; the container
runtime decides that from the container's NVIDIA_VISIBLE_DEVICES (UUIDs, indices, `all`,
`none`/`void`), except that a privileged container sees every GPU. This simulator applies exactly
that rule: for each lab node (label gpusplit.io/lab-fixture) it finds the running device-plugin
pods of DaemonSets that target the node, takes the healthy GPUs of the node's fixture that the
pod's container would see, and writes what the plugin would advertise into the node's status as
capacity and allocatable, as the kubelet does after the plugin registers.

MIG follows the plugin's MIG_STRATEGY env (or --mig-strategy): a MIG-enabled GPU counts as one
`nvidia.com/gpu` under `none`, as one `nvidia.com/gpu` per MIG device under `single`, and as one
`nvidia.com/mig-<profile>` per MIG device under `mixed`. A MIG UUID in NVIDIA_VISIBLE_DEVICES
makes its parent GPU visible, and the plugin then enumerates every MIG device of that GPU: the
real plugin walks all MIG devices of each GPU NVML shows and has no per-MIG filter.

Two plugins on one node is a real failure (they share the kubelet checkpoint): the simulator
marks the node with the annotation gpusplit.io/lab-device-plugin-conflict and advertises what
the plugin that started last sees (a new registration replaces the kubelet's endpoint).
"""

from __future__ import annotations

import json
import threading
import time

from kubernetes import client, config

from lab.components import KUBECONFIG
from lab.nodes import FIXTURE_LABEL, FIXTURES

RESOURCE = "nvidia.com/gpu"
MIG_PREFIX = "nvidia.com/mig-"
CONFLICT = "gpusplit.io/lab-device-plugin-conflict"
PLUGIN_IMAGE_HINT = "k8s-device-plugin"


# fixture name -> ((mtime_ns, size), the GPUs): the simulators read every node's fixture on every tick
_FIXTURE_CACHE: dict[str, tuple[tuple[int, int], list[dict]]] = {}


def fixture_gpus(fixture: str) -> list[dict]:
    """The GPUs of a fixture that a plugin could see (not lost), read again only when the file changed."""
    path = FIXTURES / f"{fixture}.json"
    try:
        st = path.stat()
    except FileNotFoundError:
        return []
    stamp = (st.st_mtime_ns, st.st_size)
    cached = _FIXTURE_CACHE.get(fixture)
    if cached is None or cached[0] != stamp:
        doc = json.loads(path.read_text())
        gpus = [] if doc.get("nvml_init_error") or doc.get("smi_no_driver") else doc.get("gpus", [])
        cached = (stamp, [g for g in gpus if not g.get("lost")])
        _FIXTURE_CACHE[fixture] = cached
    return [dict(g) for g in cached[1]]


def visible_gpus(gpus: list[dict], container: dict) -> list[dict]:
    """The GPUs a plugin container would see through the NVIDIA container runtime."""
    security = container.get("securityContext") or {}
    if security.get("privileged"):
        return list(gpus)
    env = {e["name"]: e.get("value") for e in container.get("env") or [] if "name" in e}
    value = env.get("NVIDIA_VISIBLE_DEVICES", "all")  # the plugin image sets `all`
    if value is None or value.strip() == "all":
        return list(gpus)
    if value.strip() in ("", "none", "void"):
        return []
    wanted = {v.strip() for v in value.split(",") if v.strip()}
    return [
        g
        for g in gpus
        if g["uuid"] in wanted
        or str(g["index"]) in wanted
        or any(m.get("uuid") in wanted for m in g.get("mig_devices") or [])
    ]


def mig_strategy(container: dict) -> str:
    env = {e["name"]: e.get("value") for e in container.get("env") or [] if "name" in e}
    value = env.get("MIG_STRATEGY")
    for arg in [*(container.get("args") or []), *(container.get("command") or [])]:
        if arg.startswith("--mig-strategy="):
            value = arg.split("=", 1)[1]
    return value or "none"


def advertised_ids(gpus: list[dict], strategy: str) -> dict[str, list[str]]:
    """{resource: [device id, ...]} the plugin registers for the GPUs it sees under a MIG strategy,
    in GPU index order: GPU UUIDs for whole GPUs, MIG UUIDs for MIG devices (deviceIDStrategy uuid)."""
    out: dict[str, list[str]] = {RESOURCE: []}
    for g in sorted(gpus, key=lambda g: g.get("index", 0)):
        mig_on = str((g.get("mig_mode") or {}).get("current", "")).lower() == "enabled"
        if not mig_on or strategy == "none":
            out[RESOURCE].append(g["uuid"])
            continue
        for mig in g.get("mig_devices") or []:
            name = RESOURCE if strategy == "single" else f"{MIG_PREFIX}{mig.get('profile')}"
            out.setdefault(name, []).append(mig.get("uuid"))
    return out


def advertised(gpus: list[dict], strategy: str) -> dict[str, int]:
    """{resource: count} the plugin registers for the GPUs it sees under a MIG strategy."""
    return {name: len(ids) for name, ids in advertised_ids(gpus, strategy).items()}


def plugin_container(pod: dict) -> dict:
    """The device-plugin container of a plugin pod."""
    return next(
        (c for c in pod["spec"]["containers"] if PLUGIN_IMAGE_HINT in c.get("image", "")),
        pod["spec"]["containers"][0],
    )


# how often a simulator syncs even when nothing it watches changed (a safety net; the watches and the files it
# stamps trigger a sync within a tick of a change)
RESYNC_SECONDS = 30.0
# how long one WATCH request lasts before it is made again from the last version seen
WATCH_SECONDS = 240


def _event_lines(stream):
    """The lines of a streamed answer (a WATCH: one JSON event per line), as they complete."""
    pending = b""
    for chunk in stream:
        pending += chunk if isinstance(chunk, bytes) else str(chunk).encode()
        *lines, pending = pending.split(b"\n")
        for line in lines:
            if line.strip():
                yield line


def _node_fingerprint(node: dict | None):
    """What the simulators read of a node: a change elsewhere (kwok's heartbeat every 5 minutes) is none of theirs."""
    if node is None:
        return None
    meta, status = node.get("metadata") or {}, node.get("status") or {}
    return json.dumps(
        [meta.get("labels"), meta.get("annotations"), status.get("capacity"), status.get("allocatable")],
        sort_keys=True,
    )


class ClusterWatch:
    """The lab's nodes (with the fixture label), every DaemonSet and every pod, as plain JSON, kept current the way
    a kubelet's informers keep theirs: one LIST, then a WATCH from its version, per kind, each in a thread of its
    own. Listing the three kinds on every tick, as the simulators did, cost the lab about 8.9 s of CPU in 30 s at
    rest with 200 nodes (the supervisor, the apiserver and etcd; docs/performance.md, seventeenth round); a kubelet
    and a device plugin read nothing from the apiserver at rest. ``changes`` counts the changes the simulators
    read (a node's heartbeat is not one); a failed or expired watch (the apiserver restarting, 410 Gone) lists
    again after ``retry`` seconds, and keeps what it had until then."""

    KINDS = (
        ("nodes", "core", "list_node", {"label_selector": FIXTURE_LABEL}),
        ("daemonsets", "apps", "list_daemon_set_for_all_namespaces", {}),
        ("pods", "core", "list_pod_for_all_namespaces", {}),
    )

    def __init__(self, new_api, retry: float = 1.0, watch_seconds: int = WATCH_SECONDS):
        self.new_api = new_api
        self.retry = retry
        self.watch_seconds = watch_seconds
        self.lock = threading.Lock()
        self.items: dict[str, dict] = {name: {} for name, *_ in self.KINDS}
        self.listed = {name: False for name, *_ in self.KINDS}
        self.changes = 0
        self.stopping = threading.Event()
        self.threads: list[threading.Thread] = []

    def start(self) -> ClusterWatch:
        for kind in self.KINDS:
            thread = threading.Thread(
                target=self._follow, args=kind, name=f"lab-watch-{kind[0]}", daemon=True
            )
            thread.start()
            self.threads.append(thread)
        return self

    def stop(self) -> None:
        self.stopping.set()

    def view(self) -> tuple[dict | None, int]:
        """``({"nodes": [...], "daemonsets": [...], "pods": [...]}, changes)``; the view is None until every kind
        was listed once."""
        with self.lock:
            if not all(self.listed.values()):
                return None, self.changes
            return {name: list(objs.values()) for name, objs in self.items.items()}, self.changes

    @staticmethod
    def _key(obj: dict) -> tuple:
        meta = obj.get("metadata") or {}
        return (meta.get("namespace") or "", meta.get("name"))

    def _caller(self, group: str, method: str):
        api = self.new_api()
        return getattr((client.CoreV1Api if group == "core" else client.AppsV1Api)(api), method)

    def _follow(self, name: str, group: str, method: str, query: dict) -> None:
        while not self.stopping.is_set():
            try:
                call = self._caller(group, method)
                listed = json.loads(call(_preload_content=False, **query).data)
                with self.lock:
                    self.items[name] = {self._key(obj): obj for obj in listed.get("items") or []}
                    self.listed[name] = True
                    self.changes += 1
                version = (listed.get("metadata") or {}).get("resourceVersion")
                while version and not self.stopping.is_set():
                    version = self._watch(name, call, query, version)
            except Exception as exc:  # the apiserver may be restarting: list again in a moment
                print(f"lab watch of {name}: {exc.__class__.__name__}: {str(exc)[:200]}", flush=True)
            self.stopping.wait(self.retry)

    def _watch(self, name: str, call, query: dict, version: str) -> str | None:
        """Follow ``name``'s events from ``version``; the version to follow on from when the WATCH ends, or None to
        list again (its ERROR event: the version expired)."""
        answer = call(
            watch=True,
            resource_version=version,
            allow_watch_bookmarks=True,
            timeout_seconds=self.watch_seconds,
            _preload_content=False,
            _request_timeout=(10, self.watch_seconds + 30),
            **query,
        )
        try:
            for line in _event_lines(answer.stream(amt=None, decode_content=False)):
                event = json.loads(line)
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    return None
                version = (obj.get("metadata") or {}).get("resourceVersion") or version
                if kind != "BOOKMARK":
                    self._apply(name, kind, obj)
        finally:
            answer.release_conn()
        return version

    def _apply(self, name: str, kind: str, obj: dict) -> None:
        key = self._key(obj)
        with self.lock:
            before = self.items[name].get(key)
            if kind == "DELETED":
                self.items[name].pop(key, None)
                after = None
            else:
                self.items[name][key] = obj
                after = obj
            if name != "nodes" or _node_fingerprint(before) != _node_fingerprint(after):
                self.changes += 1


# the supervisor's one watch, shared by the simulators it ticks
_WATCH: dict = {"watch": None}


def shared_watch() -> ClusterWatch:
    """The lab's one ClusterWatch, started at the first call (with its own API clients, made from the lab's
    kubeconfig each time a watch starts again)."""
    if _WATCH["watch"] is None:
        _WATCH["watch"] = ClusterWatch(lambda: config.new_client_from_config(str(KUBECONFIG))).start()
    return _WATCH["watch"]


def read_view(api: client.ApiClient) -> dict:
    """{"nodes": the lab's nodes, "daemonsets": every DaemonSet, "pods": every pod}, read now, as plain JSON."""
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)

    # the answer's JSON as it is: the client's models cost about 0.6 ms of CPU per node, nine times the JSON's own
    # decoding (a 200-node list, 2026-12-03)
    def items(call, **query):
        return json.loads(call(_preload_content=False, **query).data).get("items") or []

    return {
        "nodes": items(core.list_node, label_selector=FIXTURE_LABEL),
        "daemonsets": items(apps.list_daemon_set_for_all_namespaces),
        "pods": items(core.list_pod_for_all_namespaces),
    }


def running_plugins(api: client.ApiClient, view: dict | None = None) -> dict[str, list[tuple]]:
    """node -> [((namespace, DaemonSet), pod), ...] of the running device-plugin pods, oldest first:
    the last one is the plugin whose registration the kubelet keeps. ``view``: a :meth:`ClusterWatch.view`
    (default: read now)."""
    view = view if view is not None else read_view(api)
    plugins = {
        (ds["metadata"]["namespace"], ds["metadata"]["name"]): ds
        for ds in view["daemonsets"]
        if any(PLUGIN_IMAGE_HINT in c.get("image", "") for c in ds["spec"]["template"]["spec"]["containers"])
    }
    running: dict[str, list[tuple]] = {}
    if plugins:
        for pod in view["pods"]:
            owner = next(
                (o for o in pod["metadata"].get("ownerReferences") or [] if o.get("kind") == "DaemonSet"),
                None,
            )
            key = (pod["metadata"]["namespace"], owner["name"]) if owner else None
            if key in plugins and pod.get("status", {}).get("phase") == "Running":
                running.setdefault(pod["spec"].get("nodeName"), []).append((key, pod))
    for here in running.values():
        # the kubelet keeps the endpoint of the plugin that registered last for a resource
        here.sort(key=lambda kp: (kp[1]["metadata"].get("creationTimestamp") or "", kp[0]))
    return running


class TickedSimulator:
    """A lab simulator the supervisor ticks: ``sync(view)`` at most every ``interval`` seconds, and only when the
    supervisor's watch of the cluster (:class:`ClusterWatch`) or what the simulator stamps of its own files
    (:meth:`stamp`) changed since its last sync, or ``RESYNC_SECONDS`` passed; one API client for its writes, kept
    between ticks and dropped after a failure (the apiserver may be restarting)."""

    label = "simulator"

    def __init__(self, interval: float = 2.0, watch: ClusterWatch | None = None):
        self.interval = interval
        self.next_run = 0.0
        self.next_resync = 0.0
        self.synced = None
        self._api = None
        self._watch = watch

    def api(self) -> client.ApiClient:
        if self._api is None:
            self._api = config.new_client_from_config(str(KUBECONFIG))
        return self._api

    def watch(self) -> ClusterWatch:
        if self._watch is None:
            self._watch = shared_watch()
        return self._watch

    def stamp(self, view: dict):
        """What of the simulator's own inputs outside the cluster may have changed (default: the fixture files
        of the view's nodes)."""
        return fixture_stamps(view)

    def sync(self, view: dict) -> None:
        raise NotImplementedError

    def tick(self) -> None:
        if time.time() < self.next_run or not KUBECONFIG.exists():
            return
        self.next_run = time.time() + self.interval
        try:
            view, changes = self.watch().view()
            if view is None:
                return
            seen = (changes, self.stamp(view))
            if seen == self.synced and time.time() < self.next_resync:
                return
            self.sync(view)
            self.synced, self.next_resync = seen, time.time() + RESYNC_SECONDS
        except Exception as exc:  # the apiserver may be restarting; try again next tick
            self._api = None
            self.synced = None
            print(f"{self.label}: {exc.__class__.__name__}: {str(exc)[:200]}", flush=True)


def fixture_stamps(view: dict) -> tuple:
    """(fixture, mtime, size) of each fixture the view's nodes name: a fixture edited (a GPU lost) changes it."""
    out = []
    for fixture in sorted(
        {(n["metadata"].get("labels") or {}).get(FIXTURE_LABEL) for n in view["nodes"]} - {None}
    ):
        try:
            st = (FIXTURES / f"{fixture}.json").stat()
            out.append((fixture, st.st_mtime_ns, st.st_size))
        except OSError:
            out.append((fixture, None, None))
    return tuple(out)


class DevicePluginSimulator(TickedSimulator):
    label = "device plugin simulator"

    def sync(self, view: dict) -> None:
        api = self.api()
        core = client.CoreV1Api(api)
        running = running_plugins(api, view)
        for node in view["nodes"]:
            self.sync_node(core, node, running.get(node["metadata"]["name"], []))

    def sync_node(self, core: client.CoreV1Api, node: dict, plugin_pods: list[tuple]) -> None:
        name = node["metadata"]["name"]
        gpus = fixture_gpus(node["metadata"]["labels"][FIXTURE_LABEL])
        want = {RESOURCE: 0}
        for _, pod in plugin_pods:
            container = plugin_container(pod)
            want = advertised(visible_gpus(gpus, container), mig_strategy(container))
        status = node.get("status") or {}
        # a MIG resource no longer registered stays on the node with 0, as with the kubelet
        for section in ("capacity", "allocatable"):
            for key in status.get(section) or {}:
                if key.startswith(MIG_PREFIX):
                    want.setdefault(key, 0)
        values = {k: str(v) for k, v in want.items()}
        if any(
            (status.get(section) or {}).get(k) != v
            for section in ("capacity", "allocatable")
            for k, v in values.items()
        ):
            core.patch_node_status(name, {"status": {"capacity": values, "allocatable": values}})
        conflict = ",".join(f"{ns}/{n}" for (ns, n), _ in plugin_pods) if len(plugin_pods) > 1 else None
        if (node["metadata"].get("annotations") or {}).get(CONFLICT) != conflict:
            core.patch_node(name, {"metadata": {"annotations": {CONFLICT: conflict}}})
