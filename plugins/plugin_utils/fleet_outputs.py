# Copyright: gpusplit contributors
# Apache-2.0
"""Whether the files a run left in out/ still belong together, before something reads them.

``playbooks/discover.yml`` writes gpus.json, the gpu_plan role fleet-plan.json (and removes it,
with the verify outputs drawn from it, when it refuses), the gpu_verify role fleet-report.json and
fleet.svg. A later reader (``playbooks/diagnose.yml``) must not combine a plan with GPUs
discovered after it, or a report with a plan other than the one it verified.
:func:`stale_reason` says why, from the files' modification times.
"""

from __future__ import annotations

import datetime

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError, type_name

GPUS, PLAN, REPORT = "gpus.json", "fleet-plan.json", "fleet-report.json"
AGAIN = "run playbooks/verify.yml again (it discovers, plans and verifies)"


def _when(mtime):
    return datetime.datetime.fromtimestamp(mtime, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def mtimes_of(stat_results):
    """{file name: mtime or None} from the results of ``ansible.builtin.stat`` looped over file names."""
    if not isinstance(stat_results, list):
        raise GpusplitError(f"expected the results of a stat loop (a list), got {type_name(stat_results)}")
    out = {}
    for i, result in enumerate(stat_results):
        stat = result.get("stat") if isinstance(result, dict) else None
        item = result.get("item") if isinstance(result, dict) else None
        if not isinstance(item, str) or not isinstance(stat, dict):
            raise GpusplitError(
                f"[{i}]: expected a stat result with item (the file name) and stat, got {type_name(result)}"
            )
        out[item.rsplit("/", 1)[-1]] = stat.get("mtime") if stat.get("exists") else None
    return out


def stale_reason(mtimes):
    """Why the fleet plan and report in out/ may not be read together, or "" when they may.

    ``mtimes``: {file name: modification time (seconds) or None when absent} for gpus.json,
    fleet-plan.json and fleet-report.json.
    """
    gpus, plan, report = (mtimes.get(name) for name in (GPUS, PLAN, REPORT))
    if plan is None:
        return f"there is no {PLAN} (a refused plan removes it); {AGAIN}"
    if report is None:
        return f"there is no {REPORT}; {AGAIN}"
    if gpus is not None and gpus > plan:
        return (
            f"{PLAN} ({_when(plan)}) is older than {GPUS} ({_when(gpus)}): the GPUs were discovered again "
            f"after the plan was made (or a later plan did not finish); {AGAIN}"
        )
    if report < plan:
        return f"{REPORT} ({_when(report)}) is older than {PLAN} ({_when(plan)}): it verified an earlier plan; {AGAIN}"
    return ""
