"""Simulated GPU nodes for the lab: one Node object per host of inventory/lab.

Only the kubelet is simulated (kwok keeps these nodes Ready and their leases fresh) and the
device plugin (lab.deviceplugin sets what each node advertises). Everything that reads or
writes these Node objects talks to the real kube-apiserver.
"""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import yaml
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from lab.components import HOSTS_ROOT, KUBECONFIG, LOGS, ROOT

INVENTORY = ROOT / "inventory" / "lab" / "hosts.yml"
FIXTURES = ROOT / "tests" / "fixtures" / "gpus"
FIXTURE_LABEL = "gpusplit.io/lab-fixture"
# a node that shares its fixture with others (the fleet bench's hosts) and gives its GPUs UUIDs of its own
OWN_UUIDS_LABEL = "gpusplit.io/lab-own-uuids"
_UUID = re.compile(
    r"\b(?:GPU|MIG)-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.IGNORECASE
)
KWOK_ANNOTATION = {"kwok.x-k8s.io/node": "fake"}
BASE_RESOURCES = {"cpu": "64", "memory": "512Gi", "pods": "110", "ephemeral-storage": "1Ti"}


def api() -> client.CoreV1Api:
    return client.CoreV1Api(config.new_client_from_config(str(KUBECONFIG)))


def lab_hosts(inventory: Path = INVENTORY) -> dict[str, dict]:
    """host -> host vars, for every host of the lab inventory that names a GPU fixture."""
    doc = yaml.safe_load(inventory.read_text())
    found: dict[str, dict] = {}

    def walk(group: dict, inherited: dict) -> None:
        merged = {**inherited, **(group.get("vars") or {})}
        for name, hvars in (group.get("hosts") or {}).items():
            found[name] = {**merged, **(hvars or {})}
        for child in (group.get("children") or {}).values():
            walk(child or {}, merged)

    walk(doc.get("all", doc), {})
    return {h: v for h, v in found.items() if v.get("gpusplit_lab_fixture")}


def own_uuid(found: str, host: str) -> str:
    """The UUID that GPU or MIG UUID ``found`` of a shared fixture has on ``host``: the same prefix, the rest
    derived from the host and the UUID (the same every time, another one on every host)."""
    return found[:4].upper() + str(uuid.uuid5(uuid.NAMESPACE_URL, f"gpusplit-lab/{host}/{found.lower()}"))


def own_uuids(text: str, host: str) -> str:
    """``text`` (a fixture, or GPUs as JSON) with every GPU and MIG UUID replaced by ``host``'s own (own_uuid):
    two hosts of one fixture then report different GPUs, as two machines do."""
    return _UUID.sub(lambda m: own_uuid(m.group(0), host), text)


def node_body(name: str, fixture: str, extra_labels: dict | None = None) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": dict(KWOK_ANNOTATION),
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                FIXTURE_LABEL: fixture,
                **(extra_labels or {}),
            },
        },
        "spec": {},
    }


def ensure_node(
    core: client.CoreV1Api, name: str, fixture: str | None = None, labels: dict | None = None
) -> bool:
    """Create the node if missing, and give it CPU/memory capacity. True when created."""
    created = False
    try:
        core.read_node(name)
    except ApiException as exc:
        if exc.status != 404:
            raise
        body = node_body(name, fixture or "none", labels)
        if fixture is None:
            body["metadata"]["labels"].pop(FIXTURE_LABEL)
        core.create_node(body)
        created = True
    node = core.read_node(name)
    alloc = dict(node.status.allocatable or {})
    if any(k not in alloc for k in BASE_RESOURCES):
        patch = {"status": {"capacity": {**BASE_RESOURCES}, "allocatable": {**BASE_RESOURCES}}}
        core.patch_node_status(name, patch)
    return created


def current_kwok_id(log: Path) -> str | None:
    """The holder identity of the running kwok, from the last start section of its log."""
    if not log.exists():
        return None
    last = log.read_text(errors="replace").rsplit("===== start", 1)[-1]
    match = re.search(r'"id":"([^"]+)"', last)
    return match.group(1) if match else None


def release_stale_leases(core: client.CoreV1Api, kwok_id: str | None) -> list[str]:
    """Delete node leases held by an earlier kwok process.

    kwok only manages a node whose lease it holds; after a lab restart the old holder's lease
    would keep the new kwok away from the node until it expires.
    """
    if not kwok_id:
        return []
    coord = client.CoordinationV1Api(core.api_client)
    released = []
    for lease in coord.list_namespaced_lease("kube-node-lease").items:
        holder = lease.spec.holder_identity or ""
        if holder and holder != kwok_id and holder.startswith("vm_"):
            coord.delete_namespaced_lease(lease.metadata.name, "kube-node-lease")
            released.append(lease.metadata.name)
    return released


TOOLKIT_CONFIG = ROOT / "tests" / "fixtures" / "nvidia-container-toolkit" / "config.toml"


def seed_host_root(host: str) -> Path:
    """The scratch root of a lab host, with the toolkit's stock config.toml the first time.

    The host side of the split (toolkit hardening, drop-ins, host-gpus.env) writes under it
    instead of /, so the demo exercises the real file edits.
    """
    root = HOSTS_ROOT / host
    config = root / "etc" / "nvidia-container-runtime" / "config.toml"
    if not config.exists():
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text(TOOLKIT_CONFIG.read_text())
    return root


def ensure_nodes(inventory: Path = INVENTORY) -> list[str]:
    core = api()
    release_stale_leases(core, current_kwok_id(LOGS / "kwok.log"))
    names = []
    for host, hvars in sorted(lab_hosts(inventory).items()):
        ensure_node(core, host, hvars["gpusplit_lab_fixture"])
        seed_host_root(host)
        names.append(host)
    return names
