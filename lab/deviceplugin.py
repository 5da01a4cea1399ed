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

Sharing follows the plugin's config file (NVIDIA/k8s-device-plugin v0.20.0, api/config/v1 and
internal/rm/device_map.go): the file CONFIG_FILE (env or --config-file) names, read from the ConfigMap
volume mounted there. `sharing.timeSlicing` (or `sharing.mps`, which wins when set) replicates every
device of each listed resource `replicas` times as `<id>::<n>`; `renameByDefault: true` advertises
them as `<resource>.shared`; a `rename` of one's own and a `devices` other than `all` are reset at
start (DisableResourceNamingInConfig), as the plugin does. A config the plugin would refuse
(unknown version, no resources, replicas below 2) keeps it from starting: the node advertises nothing.

Two plugins on one node is a real failure (they share the kubelet checkpoint): the simulator
marks the node with the annotation gpusplit.io/lab-device-plugin-conflict and advertises what
the plugin that started last sees (a new registration replaces the kubelet's endpoint).
"""

from __future__ import annotations

import json
import posixpath
import time
from pathlib import Path

import yaml
from kubernetes import client, config

from lab.components import KUBECONFIG, LAB
from lab.nodes import FIXTURE_LABEL, FIXTURES, OWN_UUIDS_LABEL, own_uuids

RESOURCE = "nvidia.com/gpu"
MIG_PREFIX = "nvidia.com/mig-"
SHARED_SUFFIX = ".shared"  # the plugin's DefaultSharedResourceNameSuffix
CONFLICT = "gpusplit.io/lab-device-plugin-conflict"
PLUGIN_IMAGE_HINT = "k8s-device-plugin"


# fixture path -> ((mtime_ns, size), the GPUs): the simulators read every node's fixture on every tick
_FIXTURE_CACHE: dict[str, tuple[tuple[int, int], list[dict]]] = {}
# a node's own copy of its fixture, <lab dir>/node-fixtures/<node>.json, wins over the shared one: a test that
# changes a node's GPUs (the nvidia-mig-parted stand-in writes the fixture) gives that node a copy, so the
# other nodes of the same fixture keep theirs
NODE_FIXTURES = LAB / "node-fixtures"


def fixture_gpus(fixture: str, path: Path | None = None) -> list[dict]:
    """The GPUs of a fixture (``path``, or the shared one of that name) that a plugin could see (not lost),
    read again only when the file changed."""
    path = path or FIXTURES / f"{fixture}.json"
    try:
        st = path.stat()
    except FileNotFoundError:
        return []
    stamp = (st.st_mtime_ns, st.st_size)
    cached = _FIXTURE_CACHE.get(str(path))
    if cached is None or cached[0] != stamp:
        doc = json.loads(path.read_text())
        gpus = [] if doc.get("nvml_init_error") or doc.get("smi_no_driver") else doc.get("gpus", [])
        cached = (stamp, [g for g in gpus if not g.get("lost")])
        _FIXTURE_CACHE[str(path)] = cached
    return [dict(g) for g in cached[1]]


def node_gpus(node: dict) -> list[dict]:
    """The GPUs of a lab node: its own fixture copy's where it has one (NODE_FIXTURES), else its fixture's
    (fixture_gpus), under UUIDs of the node's own when it is labelled OWN_UUIDS_LABEL (the fleet bench's hosts
    share fixtures, not GPUs)."""
    labels = node["metadata"]["labels"]
    own = NODE_FIXTURES / f"{node['metadata']['name']}.json"
    gpus = fixture_gpus(labels[FIXTURE_LABEL], own if own.is_file() else None)
    if labels.get(OWN_UUIDS_LABEL) == "true":
        gpus = json.loads(own_uuids(json.dumps(gpus), node["metadata"]["name"]))
    return gpus


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


def advertised(gpus: list[dict], strategy: str, sharing: dict | None = None) -> dict[str, int]:
    """{resource: count} the plugin registers for the GPUs it sees under a MIG strategy (and sharing)."""
    return {name: len(ids) for name, ids in replicated(advertised_ids(gpus, strategy), sharing).items()}


class PluginConfigError(ValueError):
    """A config file the plugin refuses at start (it then advertises nothing)."""


def read_sharing(text: str) -> dict | None:
    """The replicated resources of a plugin config file, as the plugin ends up with them after its start:
    {"strategy": "mps"|"time-slicing", "fail_requests_greater_than_one", "resources": [{name, rename,
    replicas}]}, or None when nothing is replicated. PluginConfigError for what the plugin refuses."""
    doc = yaml.safe_load(text) or {}
    if not isinstance(doc, dict):
        raise PluginConfigError("the config file is not a mapping")
    if doc.get("version", "v1") not in ("v1", "", None):
        raise PluginConfigError(f"unknown version: {doc.get('version')}")
    sharing = doc.get("sharing") or {}
    chosen, strategy = None, None
    if sharing.get("mps") is not None:
        chosen, strategy = sharing["mps"], "mps"  # Sharing.ReplicatedResources: MPS when it is set
    elif sharing.get("timeSlicing") is not None:
        chosen, strategy = sharing["timeSlicing"], "time-slicing"
    if chosen is None:
        return None
    resources = chosen.get("resources") or []
    if not resources:
        raise PluginConfigError("no resources specified")
    by_default = bool(chosen.get("renameByDefault", False))
    out = []
    for r in resources:
        if "name" not in r:
            raise PluginConfigError("no resource name specified")
        replicas = r.get("replicas")
        if not isinstance(replicas, int) or replicas < 2:
            raise PluginConfigError("number of replicas must be >= 2")
        # DisableResourceNamingInConfig: only <name>.shared under renameByDefault; devices always all
        rename = r["name"] + SHARED_SUFFIX if by_default else ""
        out.append({"name": r["name"], "rename": rename, "replicas": replicas})
    fail = chosen.get("failRequestsGreaterThanOne")
    if fail is None and strategy == "mps":
        fail = True  # NewConfig keeps the historical MPS behaviour
    return {"strategy": strategy, "fail_requests_greater_than_one": bool(fail), "resources": out}


def replicated(ids: dict[str, list[str]], sharing: dict | None) -> dict[str, list[str]]:
    """The plugin's device map with its replicas (updateDeviceMapWithReplicas): each device of a shared
    resource becomes ``<id>::0`` .. ``<id>::<replicas-1>``, under the renamed resource when renamed."""
    if not sharing:
        return ids
    shared = {r["name"]: r for r in sharing["resources"]}
    out: dict[str, list[str]] = {name: list(v) for name, v in ids.items() if name not in shared}
    for name, r in shared.items():
        if not ids.get(name):
            continue
        target = r["rename"] or name
        out.setdefault(target, []).extend(f"{i}::{n}" for i in ids[name] for n in range(r["replicas"]))
    out.setdefault(RESOURCE, [])
    return out


def config_file(container: dict) -> str | None:
    """The config file a plugin container reads: --config-file, else CONFIG_FILE."""
    env = {e["name"]: e.get("value") for e in container.get("env") or [] if "name" in e}
    value = env.get("CONFIG_FILE")
    for arg in [*(container.get("args") or []), *(container.get("command") or [])]:
        if arg.startswith("--config-file="):
            value = arg.split("=", 1)[1]
    return value or None


def config_source(pod: dict, container: dict) -> tuple[str, str, str] | None:
    """(namespace, ConfigMap, key) the container's config file comes from, or None (no config file, or not
    in a ConfigMap volume)."""
    path = config_file(container)
    if not path:
        return None
    volumes = {v["name"]: v for v in pod["spec"].get("volumes") or []}
    for mount in container.get("volumeMounts") or []:
        base = mount.get("mountPath", "").rstrip("/")
        if base and path.startswith(base + "/"):
            cm = (volumes.get(mount.get("name")) or {}).get("configMap")
            if cm:
                return pod["metadata"]["namespace"], cm["name"], posixpath.relpath(path, base)
    return None


def plugin_devices(api: client.ApiClient, gpus: list[dict], pod: dict) -> dict[str, list[str]]:
    """{resource: [device id]} the plugin of ``pod`` registers: the GPUs its container sees, its MIG
    strategy, and the sharing of its config file ({} when the plugin would not start)."""
    container = plugin_container(pod)
    ids = advertised_ids(visible_gpus(gpus, container), mig_strategy(container))
    source = config_source(pod, container)
    if source is None:
        return ids
    namespace, name, key = source
    try:
        cm = json.loads(
            client.CoreV1Api(api).read_namespaced_config_map(name, namespace, _preload_content=False).data
        )
        text = (cm.get("data") or {})[key]
        return replicated(ids, read_sharing(text))
    except (client.ApiException, KeyError, PluginConfigError, yaml.YAMLError):
        return {RESOURCE: []}  # the plugin fails to load its config and registers nothing


def plugin_container(pod: dict) -> dict:
    """The device-plugin container of a plugin pod."""
    return next(
        (c for c in pod["spec"]["containers"] if PLUGIN_IMAGE_HINT in c.get("image", "")),
        pod["spec"]["containers"][0],
    )


# what one tick of the supervisor reads, shared by the simulators it ticks (each used to read it
# on its own): time of the read -> the lists
_VIEW: dict = {"at": None, "view": None}
VIEW_MAX_AGE = 1.0


def cluster_view(api: client.ApiClient, max_age: float = VIEW_MAX_AGE) -> dict:
    """{"nodes": the lab's nodes, "daemonsets": every DaemonSet, "pods": every pod}, as plain JSON, read
    at most once per ``max_age`` seconds (0: always read)."""
    now = time.monotonic()
    if _VIEW["at"] is None or max_age <= 0 or now - _VIEW["at"] > max_age:
        core, apps = client.CoreV1Api(api), client.AppsV1Api(api)

        # the answer's JSON as it is: the client's models and the dicts made back from them cost about 0.6 ms
        # of CPU per node, nine times the JSON's own decoding (a 200-node list, 2026-12-03); at 200 nodes the
        # simulators spent a third of a core on them (the collection reads its lists the same way,
        # module_utils/_k8s/client.py list_json, which the supervisor cannot import: it runs without the
        # collection on its path)
        def items(call, **query):
            return json.loads(call(_preload_content=False, **query).data).get("items") or []

        _VIEW["view"] = {
            "nodes": items(core.list_node, label_selector=FIXTURE_LABEL),
            "daemonsets": items(apps.list_daemon_set_for_all_namespaces),
            "pods": items(core.list_pod_for_all_namespaces),
        }
        _VIEW["at"] = now
    return _VIEW["view"]


def running_plugins(api: client.ApiClient, view: dict | None = None) -> dict[str, list[tuple]]:
    """node -> [((namespace, DaemonSet), pod), ...] of the running device-plugin pods, oldest first:
    the last one is the plugin whose registration the kubelet keeps. ``view``: a :func:`cluster_view`
    (default: read now)."""
    view = view if view is not None else cluster_view(api, max_age=0)
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
    """A lab simulator the supervisor ticks: ``sync()`` at most every ``interval`` seconds, with one
    API client kept between ticks and dropped after a failure (the apiserver may be restarting)."""

    label = "simulator"

    def __init__(self, interval: float = 2.0):
        self.interval = interval
        self.next_run = 0.0
        self._api = None

    def api(self) -> client.ApiClient:
        if self._api is None:
            self._api = config.new_client_from_config(str(KUBECONFIG))
        return self._api

    def sync(self) -> None:
        raise NotImplementedError

    def tick(self) -> None:
        if time.time() < self.next_run or not KUBECONFIG.exists():
            return
        self.next_run = time.time() + self.interval
        try:
            self.sync()
        except Exception as exc:  # the apiserver may be restarting; try again next tick
            self._api = None
            print(f"{self.label}: {exc.__class__.__name__}: {str(exc)[:200]}", flush=True)


class DevicePluginSimulator(TickedSimulator):
    label = "device plugin simulator"

    def sync(self) -> None:
        api = self.api()
        core = client.CoreV1Api(api)
        view = cluster_view(api)
        running = running_plugins(api, view)
        failed = []
        for node in view["nodes"]:
            # one node the tick cannot sync (deleted since the read, an odd object) never holds up the others
            try:
                self.sync_node(core, node, running.get(node["metadata"]["name"], []))
            except Exception as exc:
                failed.append(f"{node['metadata'].get('name')}: {exc.__class__.__name__}: {str(exc)[:200]}")
        if failed:
            raise RuntimeError(f"{len(failed)} node(s) not synced: {'; '.join(failed)[:600]}")

    def sync_node(self, core: client.CoreV1Api, node: dict, plugin_pods: list[tuple]) -> None:
        name = node["metadata"]["name"]
        gpus = node_gpus(node)
        want = {RESOURCE: 0}
        for _, pod in plugin_pods:
            want = {name: len(ids) for name, ids in plugin_devices(self.api(), gpus, pod).items()}
        status = node.get("status") or {}
        # a MIG or shared resource no longer registered stays on the node with 0, as with the kubelet
        for section in ("capacity", "allocatable"):
            for key in status.get(section) or {}:
                if key.startswith(MIG_PREFIX) or key.endswith(SHARED_SUFFIX):
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
