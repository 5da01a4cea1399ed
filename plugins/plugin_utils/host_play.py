# Copyright: gpusplit contributors
# Apache-2.0
"""What the role gpu_host does on each host, decided on the controller (filters host_play, host_play_fleet).

:func:`host_play` is one host's decision: the host share (plugin_utils/host_files_render.py), whether the toolkit is
hardened (the mode table's ``hardens_host`` and gpusplit_toolkit_hardening), the refusal of a hardening that
would blind the split plugin, the toolkit's path, why it is left alone, and the digest of everything the
module gpu_host_files is called with. :func:`host_play_fleet` does it for every planned host at once, with
each host's own variables, and compares each digest with the record that gpu_host_files left on the host
(read back by the discovery, ``gpu_discovery_result.host_state``): the hosts whose host side is already as
this run would leave it are left out of the play that changes the hosts, so an unchanged host costs the
run one module execution, the discovery (docs/performance.md).
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError, type_name
from ansible_collections.gpusplit.k8s.plugins.module_utils._host import host_files_record
from ansible_collections.gpusplit.k8s.plugins.module_utils._split import modes
from ansible_collections.gpusplit.k8s.plugins.module_utils._split.gc_pause import gc_paused
from ansible_collections.gpusplit.k8s.plugins.plugin_utils import split_render as render
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.host_files_render import HostShareError, host_files

# inventory variable -> host_play argument (the role gpu_host's inputs; its defaults fill what a host leaves out)
SETTINGS = {
    "gpusplit_host_services": "services",
    "gpusplit_host_root": "root",
    "gpusplit_toolkit_hardening": "toolkit_hardening",
    "gpusplit_plugin_settings": "plugin_settings",
    "gpusplit_toolkit_config_path": "toolkit_config_path",
    "gpusplit_toolkit_backup": "toolkit_backup",
    "gpusplit_systemd_reload": "systemd_reload",
}
DISCOVERY_VAR = "gpu_discovery_result"
_TRUE = ("true", "yes", "on", "1", "y", "t")
_FALSE = ("false", "no", "off", "0", "n", "f", "")


def _flag(value, name, host):
    """A boolean as Ansible's ``bool`` filter reads one; anything else is refused by name."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in _TRUE + _FALSE:
        return value.strip().lower() in _TRUE
    raise HostShareError([f"{host}: {name}: expected true or false, got {type_name(value)} {value!r}"])


# folders (under the host root) that gpusplit 0.1 kept on a host and that nothing uses now: its code cache. They are
# part of every run's digest, so that the first run after an upgrade calls gpu_host_files, which removes them
OBSOLETE_DIRS = ("var/cache/gpusplit",)


def host_play(
    plan,
    services=None,
    root="/",
    toolkit_hardening=True,
    plugin_settings=None,
    toolkit_config_path="/etc/nvidia-container-runtime/config.toml",
    toolkit_backup=True,
    systemd_reload=True,
    toolkit_settings=None,
    discovery=None,
):
    """What gpu_host does on the host of ``plan`` (a node plan): ``share`` (host_files), ``harden``,
    ``split_plugin``, ``plugin_hardening``, ``toolkit_config``, ``toolkit_left_alone`` (why not hardened, or
    ''), ``backup``, ``systemd_reload``, ``toolkit_settings``, ``refusal`` (the hardening that would blind the
    split plugin, or ''), ``obsolete_dirs`` (folders an earlier version left, to remove), ``digest`` (of all
    of it: what the module gpu_host_files is called with) and ``unchanged`` (the record read back by
    ``discovery``, this run's discovery result, holds the digest and its files are intact: the host side
    can be skipped)."""
    share = host_files(plan, services, root)
    host = share["host"]
    hardening = _flag(toolkit_hardening, "gpusplit_toolkit_hardening", host)
    harden = hardening and share["mode"] in modes.names_where(hardens_host=True)
    split_plugin = share["mode"] in modes.names_where(split_plugin=True)
    try:
        plugin_hardening = render.resolve_settings(plugin_settings or {})["hardening"]
    except GpusplitError as exc:
        raise HostShareError([f"{host}: gpusplit_plugin_settings: {e}" for e in exc.errors]) from None
    if not isinstance(toolkit_config_path, str) or not toolkit_config_path.strip():
        raise HostShareError(
            [f"{host}: gpusplit_toolkit_config_path: expected a path, got {type_name(toolkit_config_path)}"]
        )
    toolkit_config = posixpath.join(share["root"], toolkit_config_path.lstrip("/"))
    if not hardening:
        left_alone = "gpusplit_toolkit_hardening is false"
    elif not harden:
        left_alone = f"mode {share['mode']}: gpusplit does not split this node"
    else:
        left_alone = ""
    refusal = ""
    if split_plugin and share["kubernetes_uuids"] and plugin_hardening != "volume-mounts":
        # with the toolkit hardened it honours NVIDIA_VISIBLE_DEVICES only in privileged containers, and
        # the split plugin gets its own GPUs through that variable (docs/hardening.md)
        refusal = (
            f"{host}: gpusplit_toolkit_hardening makes the NVIDIA Container Toolkit ignore NVIDIA_VISIBLE_DEVICES "
            "in unprivileged containers, and this node's split device plugin runs with "
            f"gpusplit_plugin_settings.hardening={plugin_hardening} (no CAP_SYS_ADMIN): it would see no GPU and "
            "the node would advertise 0. Set gpusplit_plugin_settings.hardening: volume-mounts (the plugin gets "
            "CAP_SYS_ADMIN and hands GPUs to pods as volume mounts), or, with a CDI strategy (where "
            "runtimeClassName nvidia is the gate), gpusplit_toolkit_hardening: false. See docs/hardening.md."
        )
    run = {
        "share": share,
        "harden": harden,
        "split_plugin": split_plugin,
        "plugin_hardening": plugin_hardening,
        "toolkit_config": toolkit_config,
        "toolkit_left_alone": left_alone,
        "backup": _flag(toolkit_backup, "gpusplit_toolkit_backup", host),
        "systemd_reload": _flag(systemd_reload, "gpusplit_systemd_reload", host) and share["root"] == "/",
        "toolkit_settings": dict(toolkit_settings or {}),
        "refusal": refusal,
        "obsolete_dirs": [posixpath.join(share["root"], folder) for folder in OBSOLETE_DIRS],
    }
    run["digest"] = host_files_record.run_digest(run)
    state = discovery.get("host_state") if isinstance(discovery, Mapping) else None
    run["unchanged"] = host_files_record.unchanged(state, share["state_path"], run["digest"])
    return run


@gc_paused
def host_play_fleet(plan, hostvars, defaults=None, toolkit_settings=None):
    """host_play for every host of the fleet plan, each with its own variables (``defaults``: the role's
    defaults, {inventory variable: value}, for what a host leaves out). Returns ``{"runs": {host: run},
    "pending": [hosts whose host side changes, or is not known], "unchanged": [hosts left as they are]}``.
    Every host's refusal is collected and raised at once (HostShareError)."""
    if not isinstance(plan, dict) or not isinstance(plan.get("nodes"), dict):
        raise HostShareError([f"the fleet plan: expected a mapping with nodes, got {type_name(plan)}"])
    defaults = dict(defaults or {})
    out = {"runs": {}, "pending": [], "unchanged": []}
    errors = []
    for host in sorted(plan["nodes"]):
        if host not in hostvars:
            errors.append(f"host {host!r} of the plan is not in the inventory (hostvars has no such host)")
            continue
        hv = hostvars[host]
        args = {arg: hv.get(var, defaults.get(var)) for var, arg in SETTINGS.items()}
        args = {k: v for k, v in args.items() if v is not None}
        try:
            run = host_play(
                plan["nodes"][host],
                toolkit_settings=toolkit_settings,
                discovery=hv.get(DISCOVERY_VAR),
                **args,
            )
        except GpusplitError as exc:
            errors.extend(exc.errors)
            continue
        out["runs"][host] = run
        (out["unchanged"] if run["unchanged"] else out["pending"]).append(host)
    if errors:
        raise HostShareError(errors)
    return out
