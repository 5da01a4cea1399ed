# Copyright: gpusplit contributors
# Apache-2.0
"""What the roles read of the inventory's variables on the controller: a host's variables, its node name,
its GPU facts, its discovery report, its MIG configuration. Private to the collection.

``hostvars`` is Ansible's mapping of host to variables (or any mapping of that shape, in tests); a host the
inventory does not have is refused by name.
"""

from __future__ import annotations

from collections.abc import Mapping

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError


def host_vars(hostvars, host):
    """``hostvars[host]``; a host the inventory does not have is refused, naming it."""
    if not isinstance(host, str) or host not in hostvars:
        raise GpusplitError(f"host {host!r} is not in the inventory (hostvars has no such host)")
    return hostvars[host]


def gpu_facts(hv):
    """A host's GPU facts (nvidia_gpus), None where it has none."""
    return hv.get("ansible_facts", {}).get("nvidia_gpus", hv.get("nvidia_gpus"))


def inventory_nodes(hostvars, hosts):
    """The Kubernetes node name of every inventory host (gpusplit_node_name, else the host name)."""
    return [str(host_vars(hostvars, h).get("gpusplit_node_name") or h) for h in hosts]


def fleet_facts(hostvars, hosts):
    """{host: nvidia_gpus} for the hosts that have GPU facts."""
    out = {}
    for host in hosts:
        facts = gpu_facts(host_vars(hostvars, host))
        if facts is not None:
            out[host] = facts
    return out


# what the fleet's GPU report says of a host whose discovery did not finish (failed, unreachable, skipped)
UNFINISHED = {
    "backend": None,
    "driver_version": None,
    "cuda_version": None,
    "msg": "GPU discovery did not finish on this host",
    "gpus": [],
}


def _finished(result):
    return isinstance(result, Mapping) and not any(
        result.get(k) for k in ("failed", "skipped", "unreachable")
    )


def discovery_report(hv):
    """One host's GPU report from this run's discovery result (role gpu_discovery: its last reading, the one after
    the binding's install where that ran), None where it has none."""
    result = hv.get("gpu_discovery_result")
    if not _finished(result):
        return None
    facts = result.get("ansible_facts") or {}
    return {
        "backend": facts.get("nvidia_gpu_backend"),
        "driver_version": facts.get("nvidia_driver_version"),
        "cuda_version": facts.get("nvidia_cuda_driver_version"),
        "msg": result.get("msg"),
        "nvml_binding": result.get("nvml_binding"),
        "gpus": facts.get("nvidia_gpus") or [],
    }


def discovery_reports(hostvars, hosts, known=None):
    """{host: GPU report} of every one of ``hosts``, from each one's discovery result; a host whose
    discovery did not finish gets the UNFINISHED report.

    ``known``: the reports the role made at its end (``gpu_discovery_reports``), for the hosts that finished
    it; taken as they are, and every other host is UNFINISHED (it failed after its first reading, or was
    never reached), without reading any host's variables."""
    out = {}
    for host in hosts:
        if known is not None:
            out[host] = known[host] if host in known else dict(UNFINISHED)
            continue
        report = discovery_report(host_vars(hostvars, host))
        out[host] = dict(UNFINISHED) if report is None else report
    return out
