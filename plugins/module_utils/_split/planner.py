# Copyright: gpusplit contributors
# Apache-2.0
"""The split planner: which GPUs of a host go to Kubernetes, which stay with the host.

Private to the collection. No I/O and no Ansible imports: the functions take GPU facts (as
reported by the module ``nvidia_gpu_facts``) plus the inventory's wishes and return plain dicts,
deterministic for any order of the facts. Every refusal is collected (per host, then across the fleet) and
raised once as :class:`PlanError`, each message naming the host and the offending value.

What differs between modes comes from the mode table (``modes.py``): whether the Kubernetes
share is advertised as resources (``advertises_resources``), whether the MIG strategy applies
(``mig_strategy_applies``), whether devices are named ``gpu-<minor>`` (``device_names_by_minor``)
and whether Kubernetes gets a share at all (``kubernetes_share``). The facts are read in
``inputs.py``, the ``split`` selectors in ``selectors.py``; the fleet table is
``plugins/plugin_utils/split_table.py`` (controller only).

See docs/split.md for the schema of the plan and the rules.
"""

from __future__ import annotations

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError, type_name
from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.names import dns_subdomain_problem
from ansible_collections.gpusplit.k8s.plugins.module_utils._split import mig_geometry as mig_rules
from ansible_collections.gpusplit.k8s.plugins.module_utils._split.fleet_identity import (
    shared_gpu_problems,
    shared_node_names,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._split.gc_pause import gc_paused
from ansible_collections.gpusplit.k8s.plugins.module_utils._split.inputs import (
    MAX_LISTED,
    fmt_list,
    read_facts,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._split.modes import SHARE_NONE, get_mode
from ansible_collections.gpusplit.k8s.plugins.module_utils._split.selectors import (
    product_matches,
    read_split,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._split.sharing import apply_to_plan, read_sharing

MIG_STRATEGIES = ("none", "single", "mixed")
FLEET_ENTRY_KEYS = (
    "facts",
    "mode",
    "split",
    "mig_strategy",
    "exclude_unhealthy",
    "node_name",
    "sharing",
    "mig_geometry",
)

GPU_RESOURCE = "nvidia.com/gpu"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
SHARE_KUBERNETES = "kubernetes"
SHARE_HOST = "host"
SHARE_EXCLUDED = "excluded"


class PlanError(GpusplitError):
    """One or more refusals; ``errors`` holds every message (each names host and value)."""


def mig_resource_name(profile):
    """The device plugin's resource for a MIG profile under mig_strategy mixed."""
    return MIG_RESOURCE_PREFIX + str(profile)


def _health_reason(g):
    text = f"health {g.health}"
    if g.health_reasons:
        text += ": " + "; ".join(g.health_reasons)
    return text


def _usable_summary(gpus, share, usable):
    parts = [f"{len(gpus)} GPU(s) on the host"]
    lost = sum(1 for g in gpus if g.health == "lost")
    degraded = sum(1 for g in gpus if g.health == "degraded" and not usable(g))
    if lost:
        parts.append(f"{lost} lost")
    if degraded:
        parts.append(f"{degraded} degraded")
    if share:
        parts.append(f"{len(share)} already placed by the other selector")
    return ", ".join(parts)


class _Split:
    """The working state of one host's plan."""

    def __init__(self, host, gpus, mode, mig_strategy, exclude_unhealthy, errors, warnings):
        self.host = host
        self.gpus = gpus
        self.mode = mode.name
        self.mode_info = mode  # the mode's entry in the table
        self.mig_strategy = mig_strategy
        self.exclude_unhealthy = exclude_unhealthy
        self.errors = errors
        self.warnings = warnings
        self.share = {}  # gpu key -> share
        self.origin = {}  # gpu key -> what put it there (for messages)
        self.excluded_reason = {}
        self.k_sel = None
        self.h_sel = None

    def usable(self, g):
        if g.health == "lost" or g.uuid is None or g.pci is None:
            return False
        return g.health == "ok" or not self.exclude_unhealthy

    def put(self, g, share, origin):
        self.share[g.key] = share
        self.origin[g.key] = origin

    def left(self):
        return [g for g in self.gpus if g.key not in self.share and self.usable(g)]


def _mig_selection_refusal(st):
    """Why this host's split cannot name MIG devices, or None when it can."""
    if st.mode_info.device_names_by_minor:
        return (
            f"mode {st.mode} keeps the host share off Kubernetes with one DeviceTaintRule per whole GPU "
            "(gpu-<minor>); name the parent GPU instead"
        )
    if st.mig_strategy == "none":
        return (
            "mig_strategy 'none' advertises whole GPUs only; set mig_strategy single or mixed "
            "to hand out MIG devices"
        )
    return None


def _place_explicit(st, sel):
    host, k_sel, h_sel = st.host, st.k_sel, st.h_sel
    k_explicit, h_explicit = sel["k_explicit"], sel["h_explicit"]
    if k_explicit is not None and h_explicit is not None:
        host_keys = {g.key for g in h_explicit}
        for g in k_explicit:
            if g.key in host_keys:
                st.errors.append(
                    f"{host}: split.{k_sel} and split.{h_sel} both name GPU {g.describe()}; "
                    "a GPU belongs to one share"
                )
        if st.errors:
            return
    for g in h_explicit or ():
        st.put(g, SHARE_HOST, "split." + h_sel)
        if g.health != "ok":
            st.warnings.append(
                f"GPU {g.uuid} is kept for the host by split.{h_sel} although its {_health_reason(g)}"
            )
    for g in k_explicit or ():
        st.put(g, SHARE_KUBERNETES, "split." + k_sel)
        if g.health == "lost":
            st.errors.append(
                f"{host}: split.{k_sel} selects GPU {g.describe()} into the Kubernetes share, "
                f"but the GPU is lost ({_health_reason(g)})"
            )
        elif g.health != "ok":
            st.warnings.append(
                f"GPU {g.uuid} is given to Kubernetes by split.{k_sel} although its {_health_reason(g)}"
            )


def _place_product(st, sel):
    patterns = sel["patterns"]
    matched = [g for g in st.gpus if product_matches(g.name, patterns)]
    if not matched:
        names = fmt_list(sorted({g.name for g in st.gpus}))
        st.errors.append(
            f"{st.host}: split.product {sel['product']!r} matches no GPU on this host (products: {names})"
        )
        return
    # the host's explicit list was placed first: a GPU it names must not match the product too
    overlap = [g for g in matched if st.share.get(g.key) == SHARE_HOST]
    if overlap:
        st.errors.append(
            f"{st.host}: split.product {sel['product']!r} and {st.origin[overlap[0].key]} both name "
            f"GPU(s) {fmt_list(g.describe() for g in overlap)}; a GPU belongs to one share (narrow the "
            f"product pattern, or keep only GPUs of other products in {st.origin[overlap[0].key]})"
        )
        return
    picked = [g for g in matched if st.usable(g)]
    if not picked:
        st.errors.append(
            f"{st.host}: split.product {sel['product']!r} matches only GPUs that are unhealthy: "
            f"{fmt_list(g.describe() for g in matched)}"
        )
        return
    for g in picked:
        st.put(g, SHARE_KUBERNETES, "split.product")


def _place_counts(st, sel, whole_gpu_only):
    host = st.host
    h_count, k_count = sel["h_count"], sel["k_count"]
    if h_count is not None:
        candidates = st.left()
        if h_count > len(candidates):
            st.errors.append(
                f"{host}: split.host_count {h_count} is more than the {len(candidates)} usable GPU(s) "
                f"left for it ({_usable_summary(st.gpus, st.share, st.usable)})"
            )
            return
        for g in candidates[:h_count]:
            st.put(g, SHARE_HOST, "split.host_count")
    if k_count is not None:
        candidates = st.left()
        skipped = []
        if whole_gpu_only:
            skipped = [g for g in candidates if g.mig_enabled]
            candidates = [g for g in candidates if not g.mig_enabled]
        if k_count > len(candidates):
            detail = _usable_summary(st.gpus, st.share, st.usable)
            if skipped:
                detail += (
                    f"; {len(skipped)} more have MIG enabled, which mig_strategy 'none' cannot advertise"
                )
            st.errors.append(
                f"{host}: split.count {k_count} is more than the {len(candidates)} usable GPU(s) ({detail})"
            )
            return
        if k_count == 0:
            st.warnings.append("split.count is 0: Kubernetes gets no GPU on this node")
        for g in candidates[:k_count]:
            st.put(g, SHARE_KUBERNETES, "split.count")
        for g in skipped:
            st.warnings.append(
                f"GPU {g.uuid} has MIG enabled; split.count skipped it (mig_strategy 'none') "
                "and it stays with the host"
            )


def _place_rest(st):
    k_sel, h_sel = st.k_sel, st.h_sel
    for g in st.gpus:
        if g.key in st.share:
            continue
        if not st.usable(g):
            st.share[g.key] = SHARE_EXCLUDED
            st.excluded_reason[g.key] = _health_reason(g)
        elif k_sel is None:
            st.put(g, SHARE_KUBERNETES, f"the rest (not named by split.{h_sel})")
        else:
            st.put(g, SHARE_HOST, f"the rest (not selected by split.{k_sel})")
            if h_sel is not None:
                st.warnings.append(
                    f"GPU {g.uuid} is named by neither split.{k_sel} nor split.{h_sel}; "
                    "it stays with the host"
                )


def _check_mig(st, whole_gpu_only):
    host = st.host
    kube = [g for g in st.gpus if st.share[g.key] == SHARE_KUBERNETES]
    if whole_gpu_only:
        for g in kube:
            if g.mig_enabled:
                st.errors.append(
                    f"{host}: {st.origin[g.key]} gives GPU {g.describe()} to Kubernetes as a whole GPU, "
                    "but its MIG mode is enabled; set mig_strategy single or mixed, disable MIG, "
                    "or keep it for the host"
                )
        return
    if not st.mode_info.mig_strategy_applies:
        return
    mig_on = [g for g in kube if g.mig_enabled]
    if st.mig_strategy == "single":
        if mig_on and len(mig_on) != len(kube):
            st.errors.append(
                f"{host}: mig_strategy single needs one MIG mode across the Kubernetes share; "
                f"MIG enabled: {fmt_list(g.uuid for g in mig_on)}; "
                f"MIG disabled: {fmt_list(g.uuid for g in kube if not g.mig_enabled)}"
            )
        for g in mig_on:
            if not g.migs:
                st.errors.append(
                    f"{host}: mig_strategy single: GPU {g.describe()} has MIG enabled but no MIG devices"
                )
        profiles = sorted({str(m["profile"]) for g in mig_on for m in g.migs})
        if len(profiles) > 1:
            st.errors.append(
                f"{host}: mig_strategy single needs one MIG profile across the Kubernetes share, "
                f"found {', '.join(profiles)} (use mig_strategy mixed)"
            )
    else:  # mixed
        for g in mig_on:
            if not g.migs:
                st.warnings.append(
                    f"GPU {g.uuid} has MIG enabled but no MIG devices: Kubernetes gets nothing from it"
                )
            for m in g.migs:
                if not m["profile"]:
                    st.errors.append(
                        f"{host}: mig_strategy mixed: MIG device {m['uuid']} of GPU {g.uuid} has no profile"
                    )


def _check_minor_names(st):
    """A mode that names devices gpu-<minor> needs the minor number of every GPU it may taint."""
    for g in st.gpus:
        share = st.share[g.key]
        if share == SHARE_EXCLUDED and g.minor is None and (g.health == "lost" or g.uuid is None):
            st.warnings.append(
                f"mode {st.mode}: {g.health} GPU {g.describe()} has no minor_number; "
                "no DeviceTaintRule can name it"
            )
        elif share != SHARE_KUBERNETES and g.minor is None:
            st.errors.append(
                f"{st.host}: mode {st.mode}: GPU {g.describe()} has no minor_number, "
                "so its DRA device name gpu-<minor> is unknown"
            )
        if share == SHARE_HOST and g.mig_enabled:
            st.warnings.append(
                f"mode {st.mode}: GPU {g.uuid} has MIG enabled; its MIG devices get DeviceTaintRules by the names "
                "the DRA driver publishes, so they are covered only once the driver has published them"
            )


def _final_warnings(st):
    for g in st.gpus:
        if g.mig_pending is not None:
            st.warnings.append(
                f"GPU {g.uuid} has a MIG mode change pending ({g.mig_pending}); "
                "it takes effect after a GPU reset"
            )
        if st.share[g.key] == SHARE_KUBERNETES and g.host_procs:
            procs = ", ".join(
                f"pid {p.get('pid')} ({p.get('name') or '?'})" for p in g.host_procs[:MAX_LISTED]
            )
            st.warnings.append(
                f"GPU {g.uuid} goes to Kubernetes but runs {len(g.host_procs)} process(es) "
                f"not known to be in a container: {procs}"
            )


def node_name_problem(host, node_name):
    """Why the Kubernetes node name of ``host`` is not one (it names a Node, labels and the split
    DaemonSet's pinning), or None. ``node_name``: gpusplit_node_name, None for the host name."""
    if node_name is None:
        problem = dns_subdomain_problem(host)
        if problem:
            return (
                f"{host}: the inventory host name is the node name (gpusplit_node_name is not set), but "
                f"{host!r} is not a Kubernetes node name: {problem}; set gpusplit_node_name to the node's name"
            )
        return None
    problem = dns_subdomain_problem(node_name)
    if problem:
        return (
            f"{host}: node_name (gpusplit_node_name) {node_name!r} is not a Kubernetes node name (an RFC 1123 "
            f"subdomain, e.g. gpu-a.example.com): {problem}"
        )
    return None


def _plan(
    host, facts, mode, split, mig_strategy, exclude_unhealthy, node_name, sharing=None, mig_geometry=None
):
    """Return (plan or None, errors). Never raises for bad input."""
    errors = []
    warnings = []
    host = str(host)
    if isinstance(node_name, int) and not isinstance(node_name, bool):
        node_name = str(node_name)  # gpusplit_node_name: 12345 in YAML is a number, and a valid name
    problem = node_name_problem(host, node_name)
    if problem:
        errors.append(problem)
    node = str(node_name) if node_name is not None else host
    info = None
    try:
        info = get_mode(mode, where=host)
    except GpusplitError as exc:
        errors.extend(exc.errors)
    if mig_strategy is None:
        mig_strategy = "none"
    if not isinstance(mig_strategy, str) or mig_strategy not in MIG_STRATEGIES:
        errors.append(
            f"{host}: mig_strategy (gpusplit_mig_strategy) {mig_strategy!r} is not one of {', '.join(MIG_STRATEGIES)}"
        )
    if not isinstance(exclude_unhealthy, bool):
        errors.append(
            f"{host}: exclude_unhealthy (gpusplit_exclude_unhealthy) {exclude_unhealthy!r} is not true or false"
        )
    shared = read_sharing(host, sharing, info, errors)
    gpus = read_facts(host, facts, errors)
    if errors:
        return None, errors

    st = _Split(host, gpus, info, mig_strategy, exclude_unhealthy, errors, warnings)
    if info.kubernetes_share == SHARE_NONE:
        if split:
            warnings.append(f"mode {mode}: split is ignored, every GPU stays with the host")
        for g in gpus:
            st.put(g, SHARE_HOST, f"mode {mode}")
    else:
        # a device plugin under mig_strategy none advertises whole GPUs only
        whole_gpu_only = info.mig_strategy_applies and mig_strategy == "none"
        sel = read_split(host, split, gpus, errors, warnings, _mig_selection_refusal(st))
        if sel is None:
            return None, errors
        st.k_sel, st.h_sel = sel["k_sel"], sel["h_sel"]
        # order: explicit lists (both sides) -> product -> host_count -> count -> the rest
        _place_explicit(st, sel)
        if not errors and sel["patterns"] is not None:
            _place_product(st, sel)
        if not errors:
            _place_counts(st, sel, whole_gpu_only)
        if errors:
            return None, errors
        _place_rest(st)
        _check_mig(st, whole_gpu_only)
        if info.device_names_by_minor:
            _check_minor_names(st)
        if errors:
            return None, errors
    geometry = mig_rules.read_mig_geometry(host, mig_geometry, st, SHARE_KUBERNETES, errors)
    if errors:
        return None, errors
    _final_warnings(st)
    plan = apply_to_plan(mig_rules.count_planned(_assemble(st, node), st, geometry), shared)
    return plan, []


def _empty_plan(host, node, mode, mig_strategy):
    return {
        "host": host,
        "node": node,
        "mode": mode,
        "mig_strategy": mig_strategy,
        "split": False,
        "selector": {"kubernetes": None, "host": None},
        "kubernetes_uuids": [],
        "host_uuids": [],
        "excluded": [],
        "kubernetes_count": 0,
        "host_count": 0,
        "excluded_count": 0,
        "gpu_count": 0,
        "kubernetes_mig_uuids": [],
        "resource_name": GPU_RESOURCE,
        "resources": {GPU_RESOURCE: 0},
        "dra_devices": [],
        "dra_excluded_devices": [],
        "sharing": None,
        "mig_geometry": None,
        "mig_changes": [],
        "warnings": [],
        "gpus": [],
    }


def _assemble(st, node):
    mode, mig_strategy = st.mode, st.mig_strategy
    plan = _empty_plan(st.host, node, mode, mig_strategy)
    plan["selector"] = {"kubernetes": st.k_sel, "host": st.h_sel}
    kube_uuids, host_uuids, excluded, kube_migs = [], [], [], []
    dra_devices, dra_excluded, out_gpus = [], [], []
    resources = {}
    advertises = st.mode_info.advertises_resources
    by_minor = st.mode_info.device_names_by_minor
    for g in st.gpus:
        share = st.share[g.key]
        out_gpus.append(
            {
                "uuid": g.uuid,
                "pci_bus_id": g.pci,
                "index": g.index,
                "minor_number": g.minor,
                "name": g.name,
                "memory_total_mib": g.memory,
                "share": share,
                "health": g.health,
                "mig_enabled": g.mig_enabled,
                "mig_uuids": [m["uuid"] for m in g.migs],
            }
        )
        if share == SHARE_KUBERNETES:
            kube_uuids.append(g.uuid)
            if not advertises:
                continue
            if g.mig_enabled and mig_strategy != "none":
                for m in g.migs:
                    kube_migs.append(m["uuid"])
                    name = GPU_RESOURCE if mig_strategy == "single" else mig_resource_name(m["profile"])
                    resources[name] = resources.get(name, 0) + 1
            else:
                resources[GPU_RESOURCE] = resources.get(GPU_RESOURCE, 0) + 1
        elif share == SHARE_HOST:
            host_uuids.append(g.uuid)
            if by_minor:
                dra_devices.append(f"gpu-{g.minor}")
        else:
            excluded.append(
                {"uuid": g.uuid, "pci_bus_id": g.pci, "reason": st.excluded_reason.get(g.key, "")}
            )
            if by_minor and g.minor is not None:
                dra_excluded.append(f"gpu-{g.minor}")
    resources.setdefault(GPU_RESOURCE, 0)
    resources = {k: resources[k] for k in sorted(resources)}
    plan.update(
        {
            "kubernetes_uuids": kube_uuids,
            "host_uuids": host_uuids,
            "excluded": excluded,
            "kubernetes_count": len(kube_uuids),
            "host_count": len(host_uuids),
            "excluded_count": len(excluded),
            "gpu_count": len(st.gpus),
            "kubernetes_mig_uuids": kube_migs,
            "resources": resources,
            "dra_devices": dra_devices,
            "dra_excluded_devices": dra_excluded,
            # gpusplit owns GPU advertising on every planned node that has GPUs: the stock plugin and
            # the operator's plugin stay off it (label gpusplit.io/split=true, see render.node_labels).
            "split": bool(st.gpus),
            "warnings": st.warnings,
            "gpus": out_gpus,
        }
    )
    if mig_strategy == "mixed" and advertises:
        plan["resource_name"] = [k for k, v in resources.items() if v] or [GPU_RESOURCE]
    return plan


def plan_node(
    host,
    facts,
    mode,
    split,
    mig_strategy="none",
    exclude_unhealthy=True,
    node_name=None,
    sharing=None,
    mig_geometry=None,
):
    """Plan one host. Raises PlanError with every refusal for this host."""
    plan, errors = _plan(
        host, facts, mode, split, mig_strategy, exclude_unhealthy, node_name, sharing, mig_geometry
    )
    if errors:
        raise PlanError(errors)
    return plan


@gc_paused
def plan_fleet(hosts, distinct_gpus=False):
    """Plan every host; collect the refusals of all hosts before raising one PlanError.

    ``hosts``: {host: {facts, mode, split, mig_strategy?, exclude_unhealthy?, node_name?, sharing?,
    mig_geometry?}}.
    ``distinct_gpus``: also refuse hosts that report the same GPU UUID (_split/fleet_identity.py); the
    fleet planner of the playbooks (filter fleet_plan) always does, on the inventory's discovered GPUs.
    Returns {"nodes": {host: node plan} (sorted by host), "summary": {...}, "warnings": [...]}.
    """
    if not isinstance(hosts, dict):
        raise PlanError([f"fleet: expected a mapping of host -> {{facts, mode, split}}, got {hosts!r}"])
    errors = []
    nodes = {}
    for host in sorted(hosts, key=str):
        entry = hosts[host]
        if not isinstance(entry, dict):
            errors.append(f"{host}: expected a mapping with facts, mode, split; got {entry!r}")
            continue
        unknown = sorted(str(k) for k in entry if k not in FLEET_ENTRY_KEYS)
        if unknown:
            errors.append(
                f"{host}: unknown key(s) {', '.join(unknown)} (allowed: {', '.join(FLEET_ENTRY_KEYS)})"
            )
            continue
        plan, errs = _plan(
            host,
            entry.get("facts"),
            entry.get("mode"),
            entry.get("split"),
            entry.get("mig_strategy", "none"),
            entry.get("exclude_unhealthy", True),
            entry.get("node_name"),
            entry.get("sharing"),
            entry.get("mig_geometry"),
        )
        if errs:
            errors.extend(errs)
        else:
            nodes[str(host)] = plan
    errors.extend(shared_node_names(nodes))
    if distinct_gpus:
        errors.extend(shared_gpu_problems(nodes))
    if errors:
        raise PlanError(errors)
    return {"nodes": nodes, "summary": fleet_summary(nodes), "warnings": fleet_warnings(nodes)}


def fleet_summary(nodes):
    """Totals over {host: node plan}."""
    by_mode = {}
    totals = {"nodes": len(nodes), "gpus": 0, "kubernetes_gpus": 0, "host_gpus": 0, "excluded_gpus": 0}
    for plan in nodes.values():
        by_mode[plan["mode"]] = by_mode.get(plan["mode"], 0) + 1
        totals["gpus"] += plan["gpu_count"]
        totals["kubernetes_gpus"] += plan["kubernetes_count"]
        totals["host_gpus"] += plan["host_count"]
        totals["excluded_gpus"] += plan["excluded_count"]
    totals["by_mode"] = {k: by_mode[k] for k in sorted(by_mode)}
    return totals


def fleet_warnings(nodes):
    """Every node's warnings, prefixed with its host."""
    return [f"{host}: {w}" for host, plan in nodes.items() for w in plan["warnings"]]


NODE_PLAN_KEYS = ("host", "node", "mode", "gpus")  # what every reader of a node plan relies on


def node_plans(plan):
    """The node plans of a fleet plan, a node plan, or a list of node plans (in order).

    Each must be a node plan of the planner (a mapping with host, node, mode and gpus); what is
    not is refused, naming where it is.
    """
    if isinstance(plan, dict) and isinstance(plan.get("nodes"), dict):
        found = [(f"plan.nodes.{host}", p) for host, p in plan["nodes"].items()]
    elif isinstance(plan, dict) and "host" in plan and "gpus" in plan:
        found = [("plan", plan)]
    elif isinstance(plan, (list, tuple)):
        found = [(f"plan[{i}]", p) for i, p in enumerate(plan)]
    else:
        raise PlanError(
            [f"expected a fleet plan, a node plan or a list of node plans, got {type_name(plan)}"]
        )
    errors = []
    for where, p in found:
        if not isinstance(p, dict):
            errors.append(
                f"{where}: expected a node plan of the gpu_plan role (a mapping), got {type_name(p)}"
            )
            continue
        missing = [k for k in NODE_PLAN_KEYS if k not in p]
        if missing or not isinstance(p["gpus"], list):
            lacks = (
                f"lacks {', '.join(missing)}" if missing else f"gpus is a {type_name(p['gpus'])}, not a list"
            )
            errors.append(f"{where}: not a node plan of the gpu_plan role: it {lacks}")
    if errors:
        raise PlanError(errors)
    return [p for _unused, p in found]
