# Copyright: gpusplit contributors
# Apache-2.0
"""Verification of a split against what the cluster and the hosts really show. Private to the collection.

Inputs are plain data the playbook reads once per run: the fleet plan, the live Node objects,
the live device-plugin pods, and each host's GPU facts (with their compute processes). The
verdict per node is OK (everything as planned), DRIFT (not yet or no longer as planned, but
nothing a pod could misuse: e.g. fewer GPUs advertised than planned, plugin pod not running) or
FAIL (the split does not hold: more GPUs advertised than the Kubernetes share, a host process on
a Kubernetes GPU, a container process on a host GPU, two device plugins on one node).

What a node's mode expects comes from the mode table (``modes.py``): the planned resources are
advertised (``advertises_resources``), the split plugin runs there (``split_plugin``), another
device plugin may run there (``other_plugins_allowed``), processes are checked
(``checks_processes``). Pure functions.
"""

from __future__ import annotations

import json
import time

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError, type_name
from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.names import (
    APP_NAME,
    LABEL_MANAGED_BY,
    LABEL_NAME,
    MANAGED_BY,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._split.gc_pause import gc_paused
from ansible_collections.gpusplit.k8s.plugins.module_utils._split.modes import get_mode
from ansible_collections.gpusplit.k8s.plugins.module_utils._split.planner import (
    GPU_RESOURCE,
    MIG_RESOURCE_PREFIX,
    SHARE_HOST,
    SHARE_KUBERNETES,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._split.sharing import (
    SHARED_SUFFIX,
    advertised_difference,
    pod_sharing,
    sharing_text,
)

OK, DRIFT, FAIL = "OK", "DRIFT", "FAIL"
PLUGIN_IMAGE_HINT = "k8s-device-plugin"
# a FAIL right after an apply can be the old plugin pod or the kubelet's last count: it must hold this long
# (within the wait) before it is reported
FAIL_SETTLE_SECONDS = 15
# seconds between two reads of the cluster while waiting
READ_INTERVAL_SECONDS = 2


def _quantity(value):
    if value in (None, ""):
        return 0
    try:
        return int(str(value))
    except ValueError:
        return None


def is_device_plugin_container(container):
    """A container running the NVIDIA device plugin.

    gpu-feature-discovery ships in the same image since the two projects merged, so the image
    alone does not tell: a container whose name or command is gpu-feature-discovery is not one.
    """
    if PLUGIN_IMAGE_HINT not in (container.get("image") or ""):
        return False
    words = [container.get("name") or "", *(container.get("command") or []), *(container.get("args") or [])]
    return not any("gpu-feature-discovery" in w for w in words)


def _plugin_pods_by_node(pods):
    by_node = {}
    for pod in pods or []:
        spec = pod.get("spec") or {}
        if not any(is_device_plugin_container(c) for c in spec.get("containers") or []):
            continue
        node = spec.get("nodeName")
        if node:
            by_node.setdefault(node, []).append(pod)
    return by_node


def _is_ours(pod):
    return ((pod.get("metadata") or {}).get("labels") or {}).get(LABEL_NAME) == APP_NAME


def unmanaged_plugin_daemonsets(daemonsets):
    """DaemonSets that run an NVIDIA device plugin and are not gpusplit's (stock or operator)."""
    out = []
    for ds in daemonsets or []:
        meta = ds.get("metadata") or {}
        if (meta.get("labels") or {}).get(LABEL_MANAGED_BY) == MANAGED_BY:
            continue
        containers = (((ds.get("spec") or {}).get("template") or {}).get("spec") or {}).get(
            "containers"
        ) or []
        if any(is_device_plugin_container(c) for c in containers):
            out.append(ds)
    return out


def _rolling_out(node_plan, plugin_pods):
    """Only gpusplit's plugin runs here, and some pod of it still has another device list."""
    running = [p for p in plugin_pods if (p.get("status") or {}).get("phase") == "Running"]
    if not running or not all(_is_ours(p) for p in running):
        return False
    want = ",".join(node_plan["kubernetes_uuids"])
    sharing = sharing_text(node_plan.get("sharing"))
    for pod in running:
        if pod_sharing(pod) != sharing:
            return True
        for container in (pod.get("spec") or {}).get("containers") or []:
            env = {e.get("name"): e.get("value") for e in container.get("env") or []}
            if "NVIDIA_VISIBLE_DEVICES" in env and env["NVIDIA_VISIBLE_DEVICES"] != want:
                return True
    return False


def check_processes(node_plan, gpus):
    """(fail reasons) for processes on the wrong share, from the host's GPU facts."""
    reasons = []
    share_of = {g["uuid"]: g["share"] for g in node_plan.get("gpus", [])}
    for gpu in gpus or []:
        share = share_of.get(gpu.get("uuid"))
        for proc in gpu.get("processes") or []:
            in_container = proc.get("in_container")
            who = f"pid {proc.get('pid')} ({proc.get('name') or '?'})"
            if share == SHARE_KUBERNETES and in_container is False:
                reasons.append(f"host process {who} runs on Kubernetes GPU {gpu['uuid']}")
            elif share == SHARE_HOST and in_container is True:
                reasons.append(f"container process {who} runs on host GPU {gpu['uuid']}")
    return reasons


def gpu_resources(allocatable):
    """{resource: int or None} of the GPU resources a node advertises: nvidia.com/gpu, nvidia.com/mig-*, and
    nvidia.com/gpu.shared (time-slicing renamed)."""
    return {
        k: _quantity(v)
        for k, v in sorted((allocatable or {}).items())
        if k in (GPU_RESOURCE, GPU_RESOURCE + SHARED_SUFFIX) or k.startswith(MIG_RESOURCE_PREFIX)
    }


def _compare_resource(name, advertised, expected, node_plan, plugin_pods, fails, drifts):
    if advertised is None:
        fails.append(f"allocatable {name} is not an integer")
    elif advertised > expected and _rolling_out(node_plan, plugin_pods):
        drifts.append(
            f"node advertises {advertised} {name}, more than the planned {expected}, while its "
            "split device plugin still runs an older device list (rolling out)"
        )
    elif advertised > expected:
        fails.append(
            f"node advertises {advertised} {name} but the Kubernetes share is {expected}: "
            "pods can be given host GPUs (is a privileged or unsplit device plugin running there?)"
        )
    elif advertised < expected:
        drifts.append(f"node advertises {advertised} {name}, fewer than the planned {expected}")


def verify_node(node_plan, node, plugin_pods, gpus):
    """The report entry for one node.

    Every GPU resource counts: nvidia.com/gpu, and under mig_strategy mixed each
    nvidia.com/mig-<profile>; one the plan does not have must be 0 on the node.
    """
    fails, drifts = [], []
    mode = node_plan["mode"]
    info = get_mode(mode, where=f"{node_plan['host']}: node plan")
    planned = node_plan.get("resources", {}) if info.advertises_resources else {}
    expected_resources = {GPU_RESOURCE: 0, **{k: int(v) for k, v in planned.items()}}
    expected = expected_resources[GPU_RESOURCE]
    allocatable = None
    advertised = None
    if node is None:
        fails.append(f"node {node_plan['node']} is not registered in the cluster")
    else:
        advertised = gpu_resources((node.get("status") or {}).get("allocatable") or {})
        advertised.setdefault(GPU_RESOURCE, 0)
        allocatable = advertised[GPU_RESOURCE]
        for name in sorted(expected_resources.keys() | advertised.keys()):
            _compare_resource(
                name,
                advertised.get(name, 0),
                expected_resources.get(name, 0),
                node_plan,
                plugin_pods,
                fails,
                drifts,
            )
        difference = advertised_difference(node_plan, advertised)
        if difference:
            (fails if fails else drifts).append(f"sharing {sharing_text(node_plan['sharing'])}: {difference}")
    running = [p for p in plugin_pods if (p.get("status") or {}).get("phase") == "Running"]
    if len(running) > 1:
        names = ", ".join(sorted(p["metadata"]["name"] for p in running))
        fails.append(
            f"{len(running)} device plugins run on the node ({names}); they share the kubelet checkpoint"
        )
    if info.split_plugin and expected > 0:
        ours = [p for p in running if _is_ours(p)]
        if not ours:
            drifts.append("the node's split device-plugin pod is not running")
    elif not info.split_plugin and not info.other_plugins_allowed and running:
        fails.append(f"a device plugin runs on a node in mode {mode}")
    if info.checks_processes:  # a node left alone is not split: any process may use any GPU
        fails.extend(check_processes(node_plan, gpus))
    verdict = FAIL if fails else DRIFT if drifts else OK
    return {
        "name": node_plan["node"],
        "host": node_plan["host"],
        "mode": mode,
        "host_gpus": node_plan["host_uuids"],
        "kubernetes_gpus": node_plan["kubernetes_uuids"],
        "excluded_gpus": [e["uuid"] for e in node_plan.get("excluded", [])],
        "expected_allocatable": expected,
        "allocatable": allocatable,
        "expected_resources": expected_resources,
        "resources": advertised,
        "verdict": verdict,
        "reasons": fails + drifts,
    }


def _got(value):
    return f"got {type_name(value)}"


def _string(value):
    return None if isinstance(value, str) else _got(value)


def _strings(value):
    if not isinstance(value, list):
        return _got(value)
    bad = [i for i, v in enumerate(value) if not isinstance(v, str)]
    return f"item {bad[0]} is {type_name(value[bad[0]])}" if bad else None


def _counts(value):
    if not isinstance(value, dict):
        return _got(value)
    for name, count in value.items():
        try:
            int(count)
        except (TypeError, ValueError):
            return f"{name} is {count!r}, not a count"
    return None


def _mappings_with(*keys):
    def check(value):
        if not isinstance(value, list):
            return _got(value)
        for i, item in enumerate(value):
            if not isinstance(item, dict):
                return f"item {i} is {type_name(item)}"
            missing = [k for k in keys if k not in item]
            if missing:
                return f"item {i} has no {', '.join(missing)}"
        return None

    return check


def _sharing(value):
    if value is None:
        return None
    if not isinstance(value, dict):
        return _got(value)
    if not isinstance(value.get("replicas"), int) or isinstance(value.get("replicas"), bool):
        return f"replicas is {type_name(value.get('replicas'))}"
    return _mappings_with("name", "devices", "advertised_as")(value.get("resources"))


# what verify reads from a node plan: key, required, check (None or what is wrong), what it is
NODE_PLAN_FIELDS = (
    ("host", True, _string, "the inventory host name (a string)"),
    ("node", True, _string, "the Kubernetes node name (a string)"),
    ("host_uuids", True, _strings, "a list of GPU UUIDs"),
    ("kubernetes_uuids", True, _strings, "a list of GPU UUIDs"),
    ("resources", False, _counts, "a mapping of resource name to count"),
    ("gpus", False, _mappings_with("uuid", "share"), "a list of GPUs, each with uuid and share"),
    ("excluded", False, _mappings_with("uuid"), "a list of GPUs, each with uuid"),
    ("sharing", False, _sharing, "null, or the sharing of the plan (replicas, resources)"),
)


def _node_plan_problems(host, node_plan):
    problems = []
    for key, required, check, what in NODE_PLAN_FIELDS:
        field = f"plan.nodes.{host}.{key}"
        if key not in node_plan:
            if required:
                problems.append(
                    f"{field}: missing; expected {what} (is this a node plan of the gpu_plan role?)"
                )
            continue
        wrong = check(node_plan[key])
        if wrong:
            problems.append(f"{field}: expected {what}, {wrong}")
    return problems


def _facts_problems(facts_by_host):
    if facts_by_host is None:
        return []
    if not isinstance(facts_by_host, dict):
        return [f"facts: expected a mapping of host to its GPU facts, got {type_name(facts_by_host)}"]
    problems = []
    for host, gpus in sorted(facts_by_host.items(), key=lambda item: str(item[0])):
        wrong = None if gpus is None else _mappings_with()(gpus)
        if wrong:
            problems.append(f"facts.{host}: expected a list of GPUs (nvidia_gpus), each a mapping, {wrong}")
    return problems


# What verify_fleet reads of a node plan and of each GPU of a host's facts, as paths (``gpus.uuid``: the
# uuid of each item of the list gpus). The action plugin of fleet_verify sends the module only these
# (verify_inputs): the whole plan and every host's facts were most of the module's arguments at fleet size
# (docs/dev/measurements.md). The unit tests record what verify_fleet reads of whole inputs and fail
# where a read is not here.
NODE_PLAN_READS = (
    "mode",
    *(field[0] for field in NODE_PLAN_FIELDS if field[0] not in ("gpus", "excluded")),
    "gpus.uuid",
    "gpus.share",
    "excluded.uuid",
)
GPU_FACT_READS = ("uuid", "processes")


def _keep(value, paths):
    """``value`` with only ``paths`` (tuples of keys; a list's items each kept the same way). A value of
    another shape than the paths expect is kept as it is, so that require_fleet_plan still refuses it."""
    if isinstance(value, list):
        return [_keep(item, paths) for item in value]
    if not isinstance(value, dict):
        return value
    out = {}
    for path in paths:
        key = path[0]
        if key in value:
            rest = [p[1:] for p in paths if p[0] == key and len(p) > 1]
            whole = any(p == (key,) for p in paths)
            out[key] = value[key] if whole or not rest else _keep(value[key], rest)
    return out


@gc_paused
def verify_inputs(plan, facts_by_host):
    """``(plan, facts_by_host)`` with only what :func:`verify_fleet` reads of them: of each node plan the
    paths of NODE_PLAN_READS, of each GPU in the facts those of GPU_FACT_READS. Inputs of another shape
    are passed as they are, for require_fleet_plan to refuse."""
    node_paths = [tuple(p.split(".")) for p in NODE_PLAN_READS]
    gpu_paths = [tuple(p.split(".")) for p in GPU_FACT_READS]
    if isinstance(plan, dict) and isinstance(plan.get("nodes"), dict):
        plan = {"nodes": {host: _keep(node_plan, node_paths) for host, node_plan in plan["nodes"].items()}}
    if isinstance(facts_by_host, dict):
        facts_by_host = {host: _keep(gpus, gpu_paths) for host, gpus in facts_by_host.items()}
    return plan, facts_by_host


def require_fleet_plan(plan, facts_by_host=None):
    """Refuse (GpusplitError with every reason) what is not a fleet plan of the table's modes.

    Every field verify reads from a node plan is checked (:data:`NODE_PLAN_FIELDS`), and the GPU
    facts per host when given.
    """
    if not isinstance(plan, dict) or not isinstance(plan.get("nodes"), dict):
        raise GpusplitError(["plan: expected a fleet plan with a 'nodes' mapping (from the gpu_plan role)"])
    errors = []
    for host in sorted(plan["nodes"], key=str):
        node_plan = plan["nodes"][host]
        if not isinstance(node_plan, dict):
            errors.append(f"{host}: node plan: expected a mapping, got {type_name(node_plan)}")
            continue
        try:
            get_mode(node_plan.get("mode"), where=f"{host}: node plan")
        except GpusplitError as exc:
            errors.extend(exc.errors)
        errors.extend(_node_plan_problems(host, node_plan))
    errors.extend(_facts_problems(facts_by_host))
    if errors:
        raise GpusplitError(errors)


@gc_paused
def verify_fleet(plan, nodes, pods, facts_by_host):
    """The fleet report: one entry per planned node, and the counts of each verdict.

    A plan that is not a fleet plan of known modes is refused (:func:`require_fleet_plan`).
    """
    require_fleet_plan(plan, facts_by_host)
    by_name = {n["metadata"]["name"]: n for n in nodes or []}
    pods_by_node = _plugin_pods_by_node(pods)
    entries = []
    for host in sorted(plan["nodes"], key=str):
        node_plan = plan["nodes"][host]
        entries.append(
            verify_node(
                node_plan,
                by_name.get(node_plan["node"]),
                pods_by_node.get(node_plan["node"], []),
                (facts_by_host or {}).get(host) or [],
            )
        )
    counts = {v: sum(1 for e in entries if e["verdict"] == v) for v in (OK, DRIFT, FAIL)}
    return {"nodes": entries, "counts": counts, "ok": counts[FAIL] == 0 and counts[DRIFT] == 0}


def wait_for_fleet(read_report, wait_seconds, clock=time.monotonic, sleep=time.sleep):
    """The fleet report of ``read_report()`` (a fresh read of the cluster, compared), read again every
    READ_INTERVAL_SECONDS while a node is in DRIFT, or a FAIL has not held for FAIL_SETTLE_SECONDS (within
    ``wait_seconds``): ``(report, seconds waited, reads)``.

    ``wait_seconds`` counts from the last read that had fewer nodes in DRIFT than every read before it, not
    from the start: on a first run the controller-manager creates the split plugins' pods at its client rate
    (about five writes per node's DaemonSet at 20 per second by default), so a fleet's nodes come right one
    after the other for minutes at a thousand nodes; the wait goes on while they do, and ends ``wait_seconds``
    after the last one that came right (a plugin that does not start). The lowest count can fall at most once
    per planned node, so the whole wait stays under (planned nodes + 1) x (``wait_seconds`` + one read).
    ``wait_seconds`` 0: one read."""
    wait = max(0, wait_seconds)
    start = clock()
    settle = start + min(FAIL_SETTLE_SECONDS, wait)
    lowest = None
    reads = 0
    while True:
        report = read_report()
        reads += 1
        counts = report["counts"]
        now = clock()
        if lowest is None or counts[DRIFT] < lowest:  # the first read, or one more node came right
            lowest, deadline = counts[DRIFT], now + wait
        if now >= deadline or (counts[DRIFT] == 0 and (counts[FAIL] == 0 or now >= settle)):
            return report, round(now - start, 1), reads
        sleep(READ_INTERVAL_SECONDS)


def _allocatable_cell(entry):
    """``advertised/planned`` of nvidia.com/gpu, then of each MIG resource (``mig-1g.10gb 2/2``)."""
    if entry["allocatable"] is None:
        return "-"
    cell = f"{entry['allocatable']}/{entry['expected_allocatable']}"
    have = entry.get("resources") or {}
    want = entry.get("expected_resources") or {}
    for name in sorted((have.keys() | want.keys()) - {GPU_RESOURCE}):
        short = name.split("/", 1)[1]
        cell += f" {short} {have.get(name, 0)}/{want.get(name, 0)}"
    return cell


def report_table(report):
    """A fixed-width table of the fleet report."""
    header = ("NODE", "MODE", "HOST", "K8S", "ALLOCATABLE", "VERDICT", "REASON")
    rows = [
        (
            e["name"],
            e["mode"],
            str(len(e["host_gpus"])),
            str(len(e["kubernetes_gpus"])),
            _allocatable_cell(e),
            e["verdict"],
            "; ".join(e["reasons"]) or "-",
        )
        for e in report["nodes"]
    ]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header) - 1)]
    lines = []
    for row in [header, *rows]:
        lines.append("  ".join(c.ljust(widths[i]) for i, c in enumerate(row[:-1])) + "  " + row[-1])
    c = report["counts"]
    lines.append(f"{len(rows)} node(s): {c[OK]} OK, {c[DRIFT]} DRIFT, {c[FAIL]} FAIL")
    return "\n".join(lines)


def dumps(report):
    return json.dumps(report, indent=2, sort_keys=True)
