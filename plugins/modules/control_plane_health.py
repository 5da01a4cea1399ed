#!/usr/bin/python
# Copyright: gpusplit contributors
# Apache License 2.0 (see galaxy.yml)
"""Ansible module gpusplit.k8s.control_plane_health."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: control_plane_health
short_description: Wait until control-plane components are healthy and report the feature gates they run with
version_added: "0.1.0"
description:
  - Probes kube-apiserver, kube-controller-manager and kube-scheduler on the control-plane node it runs
    on, over HTTPS, and waits until every component in O(components) is healthy (HTTP 200 on its health
    endpoint) and, when asked, reports the expected feature gates on its own C(/metrics)
    (C(kubernetes_feature_enabled{name="GenericWorkload"} 1)), has restarted after a change
    (C(process_start_time_seconds) later than O(started_after)), and kube-apiserver serves O(api_versions)
    (its C(/apis) discovery, what C(kubectl api-versions) prints).
  - A component must pass O(stable_probes) probes in a row, O(interval) seconds apart, so that a
    component that comes up and crashes again is not taken for healthy.
  - Fails after O(timeout) seconds with what is still wrong per component; the probes are returned either way.
  - Changes nothing.
options:
  components:
    description: Components to wait for.
    type: list
    elements: str
    default: [kube-apiserver, kube-controller-manager, kube-scheduler]
  endpoints:
    description:
      - Per component, overrides of the default endpoints (keys C(health_url), C(metrics_url),
        C(validate_certs), C(tls_server_name)).
      - Defaults are C(https://127.0.0.1:6443/readyz) and C(/metrics) for kube-apiserver (verified against
        the kubeconfig's CA as server name C(kubernetes)), C(https://127.0.0.1:10257/healthz) for
        kube-controller-manager and C(https://127.0.0.1:10259/healthz) for kube-scheduler (self-signed
        serving certificates, not verified; the kubelet's probes do not verify them either).
    type: dict
    default: {}
  kubeconfig:
    description:
      - Kubeconfig whose client certificate (or token) authenticates the probes and whose CA verifies
        kube-apiserver. C(/metrics) of every component needs an authorized identity (for kubeadm
        C(/etc/kubernetes/admin.conf)). Without it only the health endpoints are probed.
    type: path
  context:
    description: Kubeconfig context.
    type: str
  feature_gates:
    description: Gates each component must report, name to expected boolean.
    type: dict
    default: {}
  api_versions:
    description: Group/versions kube-apiserver must serve, for example C(scheduling.k8s.io/v1beta1).
    type: list
    elements: str
    default: []
  apiserver_url:
    description: Base URL for the discovery check; default the kube-apiserver health URL's scheme, host and port.
    type: str
  started_after:
    description:
      - Per component, a unix time its process must have started after (the value of
        C(start_times) read just before the change), proving the component runs the new flags.
    type: dict
    default: {}
  timeout:
    description: Seconds to wait in all, V(0) to V(86400).
    type: int
    default: 300
  interval:
    description: Seconds between probes, above V(0) and at most V(3600).
    type: float
    default: 2
  stable_probes:
    description: Consecutive good probes each component needs, V(1) to V(1000).
    type: int
    default: 2
  probe_timeout:
    description: Seconds one HTTP request may take, above V(0) and at most V(3600).
    type: float
    default: 5
requirements:
  - PyYAML (python3-yaml) on the managed host, to read O(kubeconfig)
extends_documentation_fragment:
  - gpusplit.k8s.attributes.check_mode_no_diff
author:
  - gpusplit contributors (!UNKNOWN)
"""

EXAMPLES = r"""
- name: All three components healthy before anything changes
  gpusplit.k8s.control_plane_health:
    kubeconfig: /etc/kubernetes/admin.conf
    timeout: 60
  register: before

- name: kube-apiserver restarted with GenericWorkload on and serving scheduling.k8s.io/v1beta1
  gpusplit.k8s.control_plane_health:
    components: [kube-apiserver]
    kubeconfig: /etc/kubernetes/admin.conf
    feature_gates:
      GenericWorkload: true
    api_versions: [scheduling.k8s.io/v1beta1]
    started_after:
      kube-apiserver: "{{ before.start_times['kube-apiserver'] }}"
"""

RETURN = r"""
healthy:
  description: Whether every component passed.
  type: bool
  returned: always
elapsed:
  description: Seconds spent.
  type: float
  returned: always
attempts:
  description: Probe rounds made.
  type: int
  returned: always
start_times:
  description: Per component, C(process_start_time_seconds) from the last probe (null when unknown).
  type: dict
  returned: always
  sample: {kube-apiserver: 1795936668.88}
feature_gates:
  description: Per component, C(kubernetes_feature_enabled) values of the gates in O(feature_gates).
  type: dict
  returned: always
  sample: {kube-scheduler: {GenericWorkload: 1.0}}
served_api_versions:
  description: Group/versions of O(api_versions) that are served.
  type: list
  elements: str
  returned: always
problems:
  description: Per component, what was still wrong at the last probe (empty lists when healthy).
  type: dict
  returned: always
probes:
  description: The last probe of each component (health, metrics, discovery results).
  type: dict
  returned: always
"""

import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpusplit.k8s.plugins.module_utils._control_plane.components import APISERVER
from ansible_collections.gpusplit.k8s.plugins.module_utils._control_plane.health import (
    Credentials,
    HealthError,
    base_url,
    discovery_problems,
    evaluate_probe,
    load_kubeconfig,
    probe_component,
    probe_discovery,
    resolve_endpoints,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._control_plane.module_io import run_module
from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import (
    MAX_SECONDS,
    check_number,
    fail_on_refusal,
)

DISCOVERY = "kube-apiserver discovery"


def _start_times(given) -> dict:
    """``started_after`` as ``{component: seconds}`` (empty values dropped)."""
    times = {}
    for component, value in (given or {}).items():
        if value in (None, ""):
            continue
        try:
            times[component] = float(value)
        except (TypeError, ValueError):
            raise HealthError(
                f"started_after.{component} must be a process start time in seconds, not {value!r}"
            ) from None
    return times


def check_numbers(p) -> list:
    """The refusals of the options that take a number (nan, inf, 1e300, out of range), all at once."""
    problems = []
    for name, low, high, above, integer, unit in (
        ("timeout", 0, MAX_SECONDS, False, True, "seconds"),
        ("interval", 0, 3600, True, False, "seconds"),
        ("probe_timeout", 0, 3600, True, False, "seconds"),
        ("stable_probes", 1, 1000, False, True, ""),
    ):
        try:
            check_number(p[name], name, low, high, integer=integer, above=above, unit=unit, error=HealthError)
        except HealthError as exc:
            problems.extend(exc.errors)
    return problems


def run(module: AnsibleModule) -> dict:
    p = module.params
    with fail_on_refusal(module):
        problems = check_numbers(p)
        if problems:
            raise HealthError(problems)
        endpoints = resolve_endpoints(p["components"], p["endpoints"])
        apiserver_endpoint = resolve_endpoints([APISERVER], p["endpoints"])[APISERVER]
        kubeconfig = load_kubeconfig(p["kubeconfig"], p["context"]) if p["kubeconfig"] else None
        started_after = _start_times(p["started_after"])
    api_versions = list(p["api_versions"] or [])
    apiserver_url = p["apiserver_url"] or base_url(apiserver_endpoint["health_url"])
    want_metrics = kubeconfig is not None
    if (p["feature_gates"] or started_after) and not want_metrics:
        module.fail_json(msg="feature_gates and started_after are read from /metrics, which needs kubeconfig")

    # what to check: each component; the discovery goes with kube-apiserver's own probe when it is
    # among the components (same round as its restart check), else it is a check of its own
    checks = list(endpoints)
    if api_versions and APISERVER not in endpoints:
        checks.append(DISCOVERY)
    stable = max(1, p["stable_probes"])
    streak = dict.fromkeys(checks, 0)
    probes: dict[str, dict] = {}
    problems: dict[str, list] = {}
    started = time.monotonic()
    deadline = started + max(0, p["timeout"])
    attempts = 0
    with Credentials(kubeconfig) as creds:
        while True:
            attempts += 1
            for check in checks:
                if streak[check] >= stable:
                    continue
                if check == DISCOVERY:
                    probe = {
                        "discovery": probe_discovery(
                            apiserver_url, apiserver_endpoint, creds, p["probe_timeout"]
                        )
                    }
                    issues = discovery_problems(probe["discovery"], api_versions)
                else:
                    probe = probe_component(check, endpoints[check], creds, want_metrics, p["probe_timeout"])
                    issues = evaluate_probe(probe, p["feature_gates"], started_after.get(check))
                    if check == APISERVER and api_versions and not issues:
                        probe["discovery"] = probe_discovery(
                            apiserver_url, apiserver_endpoint, creds, p["probe_timeout"]
                        )
                        issues = discovery_problems(probe["discovery"], api_versions)
                probes[check] = probe
                problems[check] = issues
                streak[check] = 0 if issues else streak[check] + 1
            if all(n >= stable for n in streak.values()):
                break
            if time.monotonic() + p["interval"] > deadline:
                break
            time.sleep(p["interval"])

    healthy = all(n >= stable for n in streak.values())
    served = set()
    for probe in probes.values():
        served.update((probe.get("discovery") or {}).get("served") or [])
    components = {c: probes[c] for c in endpoints if c in probes}
    result = {
        "changed": False,
        "healthy": healthy,
        "elapsed": round(time.monotonic() - started, 2),
        "attempts": attempts,
        "start_times": {
            c: (pr.get("metrics") or {}).get("process_start_time") for c, pr in components.items()
        },
        "feature_gates": {
            c: {g: ((pr.get("metrics") or {}).get("feature_gates") or {}).get(g) for g in p["feature_gates"]}
            for c, pr in components.items()
        },
        "served_api_versions": sorted(gv for gv in api_versions if gv in served),
        "problems": problems,
        "probes": probes,
    }
    if not healthy:
        lines = [
            f"{c}: {'; '.join(problems.get(c) or ['not stable yet'])}" for c in checks if streak[c] < stable
        ]
        module.fail_json(
            msg=f"not healthy after {result['elapsed']:.0f}s (timeout {p['timeout']}s): " + " | ".join(lines),
            **result,
        )
    return result


def main():
    module = AnsibleModule(
        argument_spec=dict(
            components=dict(
                type="list",
                elements="str",
                default=["kube-apiserver", "kube-controller-manager", "kube-scheduler"],
            ),
            endpoints=dict(type="dict", default={}),
            kubeconfig=dict(type="path"),
            context=dict(type="str"),
            feature_gates=dict(type="dict", default={}),
            api_versions=dict(type="list", elements="str", default=[]),
            apiserver_url=dict(type="str"),
            started_after=dict(type="dict", default={}),
            timeout=dict(type="int", default=300),
            interval=dict(type="float", default=2),
            stable_probes=dict(type="int", default=2),
            probe_timeout=dict(type="float", default=5),
        ),
        supports_check_mode=True,
    )
    run_module(module, run)


if __name__ == "__main__":
    main()
