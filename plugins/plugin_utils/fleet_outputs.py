# Copyright: gpusplit contributors
# Apache-2.0
"""Whether the files a run left in out/ still belong together, before something reads them.

``playbooks/discover.yml`` writes gpus.json, the gpu_plan role fleet-plan.json (and removes it,
with the verify outputs drawn from it, when it refuses), the gpu_verify role fleet-report.json and
fleet.svg. A later reader (``playbooks/diagnose.yml``) must not combine a plan with GPUs
discovered after it, or a report with a plan other than the one it verified.
:func:`stale_reason` says why, from the files' content: the report carries the digest of the plan it
verified (``plan_digest``), and the plan lists the GPUs of every planned host. File times are not read:
a file whose content did not change is not rewritten, so its time says nothing about the run it belongs to.
"""

from __future__ import annotations

import json
import os

from ansible_collections.gpusplit.k8s.plugins.plugin_utils.output_digest import json_digest

GPUS, PLAN, REPORT = "gpus.json", "fleet-plan.json", "fleet-report.json"
AGAIN = "run playbooks/verify.yml again (it discovers, plans and verifies)"


class _Unreadable(Exception):
    pass


def read_outputs(out_dir):
    """{file name: its JSON data, or None when absent} for gpus.json, fleet-plan.json and fleet-report.json in
    ``out_dir``, and the reason one of them cannot be read ("" when all can)."""
    out = {}
    for name in (GPUS, PLAN, REPORT):
        path = os.path.join(out_dir, name)
        try:
            with open(path, encoding="utf-8") as handle:
                out[name] = json.load(handle)
        except FileNotFoundError:
            out[name] = None
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            return out, f"{name} cannot be read as JSON ({exc}); {AGAIN}"
    return out, ""


def _planned_gpus(plan):
    """{host: {uuid: health}} of every planned host, or None when the plan has no such shape."""
    nodes = plan.get("nodes") if isinstance(plan, dict) else None
    if not isinstance(nodes, dict):
        return None
    out = {}
    for host, node in nodes.items():
        gpus = node.get("gpus") if isinstance(node, dict) else None
        if not isinstance(gpus, list):
            return None
        out[host] = {g.get("uuid"): g.get("health") for g in gpus if isinstance(g, dict)}
    return out


def _discovered_gpus(report):
    """{uuid: health status} of one host's entry in gpus.json, or None when it has no GPU list."""
    gpus = report.get("gpus") if isinstance(report, dict) else None
    if not isinstance(gpus, list):
        return None
    out = {}
    for g in gpus:
        if isinstance(g, dict):
            health = g.get("health")
            out[g.get("uuid")] = health.get("status") if isinstance(health, dict) else health
    return out


def _gpus_differ(gpus, plan):
    """The planned hosts whose GPUs (UUIDs and health) in ``gpus`` (gpus.json) are not those of the plan."""
    planned = _planned_gpus(plan)
    if planned is None or not isinstance(gpus, dict):
        return ["(the plan or gpus.json has no GPU list)"]
    return sorted(host for host, want in planned.items() if _discovered_gpus(gpus.get(host)) != want)


def stale_reason(outputs):
    """Why the fleet plan and report in out/ may not be read together, or "" when they may.

    ``outputs``: {file name: JSON data or None when absent} for gpus.json, fleet-plan.json and
    fleet-report.json (:func:`read_outputs`).
    """
    gpus, plan, report = (outputs.get(name) for name in (GPUS, PLAN, REPORT))
    if plan is None:
        return f"there is no {PLAN} (a refused plan removes it); {AGAIN}"
    if report is None:
        return f"there is no {REPORT}; {AGAIN}"
    if gpus is not None:
        hosts = _gpus_differ(gpus, plan)
        if hosts:
            return (
                f"{PLAN} was made for other GPUs than {GPUS} lists ({', '.join(hosts)}): the GPUs were "
                f"discovered again after the plan was made (or a later plan did not finish); {AGAIN}"
            )
    verified = report.get("plan_digest") if isinstance(report, dict) else None
    if not verified:
        return f"{REPORT} does not say which plan it verified (no plan_digest); {AGAIN}"
    if verified != json_digest(plan):
        return f"{REPORT} verified another plan than {PLAN} (plan_digest {verified}, the plan's {json_digest(plan)}); {AGAIN}"
    return ""
