# Copyright: gpusplit contributors
# Apache-2.0
"""The DRA preflight: every check the DRA driver and DRA-mode split need, over gathered data. Private to the collection.

resource.k8s.io/v1 (and DeviceTaintRule in a version gpusplit writes: module_utils/_control_plane/api_versions.py) served,
Kubernetes >= 1.34.2, NVIDIA driver >= 565,
CDI enabled in containerd (from its config and imports), no device plugin on a DRA node.
``preflight`` never raises: it returns every check with its result (``preflight_table``).
"""

from __future__ import annotations

from ansible_collections.gpusplit.k8s.plugins.module_utils._control_plane import api_versions
from ansible_collections.gpusplit.k8s.plugins.module_utils._dra.names import API_GROUP_VERSION, DraError
from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.names import APP_NAME, LABEL_NAME
from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.versions import format_version, parse_version
from ansible_collections.gpusplit.k8s.plugins.plugin_utils._dra.chart import deep_merge

try:  # Python 3.11+ (the controller); the host-side code never imports this module
    import tomllib
except ImportError:  # pragma: no cover
    tomllib = None

MIN_KUBERNETES = (1, 34, 2)
MIN_DRIVER_MAJOR = 565
MIN_CONTAINERD = (1, 7)

# how a pod is recognised as an NVIDIA device plugin (stock, gpusplit's, the operator's)
DEVICE_PLUGIN_IMAGE_HINT = "k8s-device-plugin"
DEVICE_PLUGIN_LABELS = {LABEL_NAME: (APP_NAME, "nvidia-device-plugin")}


def check_api(apis, need_taint_rules=False, git_version=None):
    """Errors when the DRA objects (and, if asked, DeviceTaintRule) are not served in a version gpusplit writes.

    Each error names the version needed and, for the cluster's release (``git_version``), the gates and
    runtime-config that serve it (``api_versions.pick``).
    """
    try:
        api_versions.pick("dra", apis, git_version)
    except api_versions.ApiVersionError as exc:
        return [str(exc)]
    if need_taint_rules:
        try:
            api_versions.pick("device_taint_rule", apis, git_version)
        except api_versions.ApiVersionError as exc:
            return [str(exc)]
    return []


def check_kubernetes_version(git_version, minimum=MIN_KUBERNETES):
    version = parse_version(git_version, inside=True)
    if version is None:
        return [f"cannot read the Kubernetes version {git_version!r}"]
    if version < tuple(minimum):
        return [
            f"Kubernetes {git_version} is older than {format_version(minimum)}, which the NVIDIA DRA driver needs"
        ]
    return []


def check_driver_version(host, driver_version, minimum=MIN_DRIVER_MAJOR):
    if not driver_version:
        return [f"{host}: no NVIDIA driver version in the GPU facts (is the driver loaded?)"]
    version = parse_version(str(driver_version), inside=True)
    if version is None:
        return [f"{host}: cannot read the NVIDIA driver version {driver_version!r}"]
    if version[0] < minimum:
        return [f"{host}: NVIDIA driver {driver_version} is older than {minimum}, which the DRA driver needs"]
    return []


def _toml(text, what):
    if tomllib is None:  # pragma: no cover
        raise DraError("reading containerd's config needs Python 3.11 (tomllib) on the controller")
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise DraError(f"{what} is not valid TOML: {exc}") from None


def containerd_imports(config_text, config_path="/etc/containerd/config.toml"):
    """The ``imports`` globs of a containerd config, absolute (relative ones are next to it)."""
    if not config_text:
        return []
    doc = _toml(config_text, config_path)
    imports = doc.get("imports") or []
    if isinstance(imports, str):
        imports = [imports]
    base = config_path.rsplit("/", 1)[0] or "/"
    return [i if i.startswith("/") else f"{base}/{i}" for i in imports if isinstance(i, str)]


_CRI_SECTIONS = (
    (
        "io.containerd.cri.v1.runtime",
        'plugins."io.containerd.cri.v1.runtime"',
    ),  # containerd 2.x (config version 3)
    ("io.containerd.grpc.v1.cri", 'plugins."io.containerd.grpc.v1.cri"'),  # containerd 1.7 (config version 2)
    ("cri", "plugins.cri"),  # config version 1
)


def containerd_cdi(
    config_text, containerd_version=None, imports=(), config_path="/etc/containerd/config.toml"
):
    """Whether containerd's CRI plugin has CDI on: {"enabled": True|False|None, "detail": str}.

    containerd 2.x: on unless ``enable_cdi = false``; 1.7: off unless ``enable_cdi = true`` in
    ``[plugins."io.containerd.grpc.v1.cri"]``; older: no CDI. ``config_text`` None = no config
    file (containerd's defaults). ``containerd_version``: the output of ``containerd --version``
    or a version; when unknown, config ``version = 3`` means containerd 2.x. ``imports``:
    [(path, text)] of the files the config imports, merged in order. None = cannot tell.
    """
    merged = {}
    sources = []
    if config_text is not None:
        merged = _toml(config_text, config_path)
        sources.append(config_path)
    for path, text in imports or ():
        merged = deep_merge(merged, _toml(text, path))
        sources.append(path)
    version = parse_version(containerd_version, inside=True) if containerd_version else None
    if version is not None:
        major = "2.x" if version[0] >= 2 else "1.x"
        if version[:2] < MIN_CONTAINERD:
            return {
                "enabled": False,
                "detail": f"containerd {format_version(version)} has no CDI support (needs >= 1.7; 2.x has it on)",
            }
    elif merged.get("version") == 3:
        major = "2.x"
    else:
        major = None
    plugins = merged.get("plugins") or {}
    explicit = None
    for key, spelled in _CRI_SECTIONS:
        section = plugins.get(key)
        if isinstance(section, dict) and isinstance(section.get("enable_cdi"), bool):
            explicit = (section["enable_cdi"], spelled)
            break
    where = ", ".join(sources) if sources else f"no {config_path} (containerd's defaults)"
    if explicit is not None:
        on, spelled = explicit
        state = "true" if on else "false"
        detail = f"enable_cdi = {state} in [{spelled}] ({where})"
        if not on:
            detail += "; set it to true (or remove it on containerd 2.x) and restart containerd"
        return {"enabled": on, "detail": detail}
    if major == "2.x":
        return {"enabled": True, "detail": f"containerd 2.x enables CDI by default ({where})"}
    if major == "1.x":
        return {
            "enabled": False,
            "detail": (
                f"containerd 1.7 has CDI off by default ({where}): add enable_cdi = true and "
                'cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"] under [plugins."io.containerd.grpc.v1.cri"] '
                "and restart containerd"
            ),
        }
    return {
        "enabled": None,
        "detail": (
            f"cannot tell whether CDI is on ({where}, containerd version unknown): containerd 2.x has it on, "
            "1.7 off by default; set gpusplit_containerd_version or enable_cdi explicitly"
        ),
    }


def _pod_is_device_plugin(pod):
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    for key, names in DEVICE_PLUGIN_LABELS.items():
        if labels.get(key) in names:
            return True
    spec = pod.get("spec") or {}
    containers = list(spec.get("containers") or []) + list(spec.get("initContainers") or [])
    return any(DEVICE_PLUGIN_IMAGE_HINT in (c.get("image") or "") for c in containers)


def device_plugin_pods(pods, nodes):
    """{node: [namespace/name]} of NVIDIA device-plugin pods (stock, gpusplit, operator) on ``nodes``."""
    wanted = set(nodes or [])
    out = {}
    for pod in pods or []:
        spec = pod.get("spec") or {}
        node = spec.get("nodeName")
        if node not in wanted or not _pod_is_device_plugin(pod):
            continue
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        meta = pod.get("metadata") or {}
        out.setdefault(node, []).append(f"{meta.get('namespace')}/{meta.get('name')}")
    return {k: sorted(v) for k, v in sorted(out.items())}


PREFLIGHT_CHECKS = (
    "api",
    "kubernetes_version",
    "device_taint_rules",
    "driver_version",
    "cdi",
    "device_plugin",
)


def preflight(cluster, hosts, pods=None, skip=(), need_taint_rules=True):
    """Every check the DRA driver and DRA-mode split need, over gathered data. Never raises.

    ``cluster``: {"git_version": str, "apis": {group/version: {Kind: ...}}} (k8s_cluster_info), and where the
    control plane's components were asked, "gates": {component: {gate: bool}} (their kubernetes_feature_enabled);
    ``hosts``: {host: {"node", "driver_version", "containerd": {"config_text", "config_path",
    "version", "imports": [{"path", "text"}]}}} for the hosts in mode dra; ``pods``: the live
    pods on those nodes; ``skip``: names from PREFLIGHT_CHECKS not to run (said in the report).
    Returns {"ok", "errors", "warnings", "checks": [{"check", "subject", "ok", "detail"}]}.
    """
    skip = set(skip or ())
    unknown = sorted(skip - set(PREFLIGHT_CHECKS))
    checks = []
    errors = []
    warnings = []
    if unknown:
        errors.append(
            f"preflight: unknown check(s) to skip: {', '.join(unknown)} (known: {', '.join(PREFLIGHT_CHECKS)})"
        )

    def record(name, subject, problems, ok_detail):
        if name in skip:
            checks.append({"check": name, "subject": subject, "ok": None, "detail": "skipped"})
            warnings.append(f"{subject}: preflight check {name} skipped")
            return
        checks.append(
            {
                "check": name,
                "subject": subject,
                "ok": not problems,
                "detail": "; ".join(problems) or ok_detail,
            }
        )
        errors.extend(problems)

    cluster = cluster or {}
    apis = cluster.get("apis") or {}
    git_version = cluster.get("git_version")
    record("api", "cluster", check_api(apis, git_version=git_version), f"{API_GROUP_VERSION} served")
    record(
        "kubernetes_version",
        "cluster",
        check_kubernetes_version(git_version),
        f"Kubernetes {git_version} >= {format_version(MIN_KUBERNETES)}",
    )
    if need_taint_rules:
        chosen = api_versions.choose(("dra", "device_taint_rule"), apis, git_version)
        taint_errors = (
            [chosen["refusals"]["device_taint_rule"]]
            if chosen["api_versions"]["dra"] and "device_taint_rule" in chosen["refusals"]
            else []
        )
        if chosen["api_versions"]["device_taint_rule"] and cluster.get("gates"):
            # served, but kube-scheduler or kube-controller-manager with the release's gate off would not act on
            # the rules (DRADeviceTaintRules on 1.36: the runtime-config alone serves the API)
            off = api_versions.gates_refusal("device_taint_rule", git_version, cluster["gates"])
            taint_errors += [off] if off else []
        served_in = chosen["api_versions"]["device_taint_rule"] or API_GROUP_VERSION
        record("device_taint_rules", "cluster", taint_errors, f"DeviceTaintRule served in {served_in}")
    nodes = {}
    for host in sorted(hosts or {}):
        info = hosts[host] or {}
        node = info.get("node") or host
        nodes[node] = host
        driver = info.get("driver_version")
        record(
            "driver_version",
            host,
            check_driver_version(host, driver),
            f"NVIDIA driver {driver} >= {MIN_DRIVER_MAJOR}",
        )
        ctd = info.get("containerd")
        if ctd is None:
            record(
                "cdi",
                host,
                [f"{host}: containerd was not inspected (run the dra_driver role's host.yml on it first)"],
                "",
            )
            continue
        try:
            imports = [(i.get("path"), i.get("text") or "") for i in ctd.get("imports") or []]
            cdi = containerd_cdi(
                ctd.get("config_text"),
                ctd.get("version"),
                imports,
                ctd.get("config_path") or "/etc/containerd/config.toml",
            )
        except DraError as exc:
            cdi = {"enabled": None, "detail": str(exc)}
        problems = [] if cdi["enabled"] else [f"{host}: CDI: {cdi['detail']}"]
        record("cdi", host, problems, cdi["detail"])
    found = device_plugin_pods(pods, nodes)
    for node, host in sorted(nodes.items()):
        problems = []
        if node in found:
            problems.append(
                f"{host}: device plugin pod(s) {', '.join(found[node])} run on node {node}, which is in mode dra: "
                "the DRA driver and a device plugin must not share a node (remove it, or keep it off nodes "
                "labelled gpusplit.io/split=true / nvidia.com/gpu.deploy.device-plugin=false)"
            )
        record("device_plugin", host, problems, f"no device plugin on node {node}")
    return {"ok": not errors, "errors": errors, "warnings": warnings, "checks": checks}


def preflight_table(report):
    """CHECK  SUBJECT  RESULT  DETAIL: one line per check, and how many failed."""
    header = ("CHECK", "SUBJECT", "RESULT", "DETAIL")
    rows = [
        (c["check"], c["subject"], "skip" if c["ok"] is None else "ok" if c["ok"] else "FAIL", c["detail"])
        for c in report.get("checks") or []
    ]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(3)]
    lines = ["  ".join(row[i].ljust(widths[i]) for i in range(3)) + "  " + row[3] for row in [header, *rows]]
    failed = sum(1 for c in report.get("checks") or [] if c["ok"] is False)
    lines.append(f"{len(rows)} check(s), {failed} failed")
    return "\n".join(lines)
