# Copyright: gpusplit contributors
# Apache-2.0
"""One Helm release, installed or upgraded with the helm binary: helm 3 and helm 4. Private to the collection.

Why not kubernetes.core.helm: in kubernetes.core 6.x it ends every change by listing the release
with ``helm list --all``, a flag helm 4 removed (all states are listed by default there; helm/helm
issue 31784). With helm 4 the install happens and the task then fails. This module only uses
commands and flags that both major versions have: ``helm list --filter -o json``,
``helm get values -o json`` and ``helm upgrade --install``.

Pure functions here (commands, parsing, the decision); running them is the module's job.
"""

from __future__ import annotations

import json
import re

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError
from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.names import DNS_LABEL_RE

_DURATION_RE = re.compile(r"^(\d+(\.\d+)?(h|m|s|ms|us|ns))+$")


class HelmError(GpusplitError):
    """A refusal or a failed helm command; the message says what to fix."""


def duration(value):
    """A helm ``--timeout``: a Go duration (``10m0s``, ``90s``) or a whole number of seconds."""
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return f"{value}s"
    text = str(value or "").strip()
    if text.isdigit() and int(text) > 0:
        return f"{text}s"
    if not _DURATION_RE.match(text):
        raise HelmError(f"timeout {value!r} is not a duration such as 10m0s or 600s")
    return text


def check_request(name, namespace, chart_ref, chart_version, timeout=None):
    """Refuse a request helm would refuse, or that gpusplit never makes (an unpinned chart)."""
    problems = []
    if timeout is not None:
        try:
            duration(timeout)
        except HelmError as exc:
            problems.append(str(exc))
    if not name or len(name) > 53 or not DNS_LABEL_RE.match(name):
        problems.append(f"release name {name!r} must be a DNS label of at most 53 characters (helm's limit)")
    if not namespace or len(namespace) > 63 or not DNS_LABEL_RE.match(namespace):
        problems.append(f"namespace {namespace!r} is not a DNS label")
    if not chart_ref:
        problems.append("chart_ref is empty")
    if not chart_version or not str(chart_version).strip():
        problems.append("chart_version is empty: gpusplit installs pinned chart versions only")
    if problems:
        raise HelmError("; ".join(problems))


def is_oci(ref):
    return str(ref or "").startswith("oci://")


def chart_name_of(chart_ref):
    """``oci://registry/path/name`` or ``repo/name`` or ``name`` -> ``name``."""
    return str(chart_ref).rstrip("/").rsplit("/", 1)[-1]


def global_args(kubeconfig=None, context=None):
    args = []
    if kubeconfig:
        args += ["--kubeconfig", str(kubeconfig)]
    if context:
        args += ["--kube-context", str(context)]
    return args


def list_command(helm, name, namespace, kubeconfig=None, context=None):
    """The release's row, in every state helm lists by default (helm 3: deployed and failed)."""
    return [helm, "list", "-n", namespace, "--filter", f"^{re.escape(name)}$", "-o", "json"] + global_args(
        kubeconfig, context
    )


def values_command(helm, name, namespace, kubeconfig=None, context=None):
    """The values the release was given (not the chart's defaults)."""
    return [helm, "get", "values", name, "-n", namespace, "-o", "json"] + global_args(kubeconfig, context)


def upgrade_command(
    helm,
    name,
    namespace,
    chart_ref,
    chart_version,
    values_file,
    repo_url=None,
    create_namespace=True,
    wait=False,
    timeout=None,
    kubeconfig=None,
    context=None,
):
    """``helm upgrade --install``: the values file is the release's whole user-supplied values.

    ``--reset-values`` so that a value dropped from the file is dropped from the release too
    (helm would otherwise keep it from the last revision only when no values are given).
    """
    cmd = [helm, "upgrade", "--install", name, chart_ref, "--version", str(chart_version), "-n", namespace]
    if repo_url and not is_oci(chart_ref):
        cmd += ["--repo", repo_url]
    if create_namespace:
        cmd.append("--create-namespace")
    cmd += ["--reset-values", "-f", str(values_file)]
    if wait:
        cmd.append("--wait")
        if timeout:
            cmd += ["--timeout", duration(timeout)]
    return cmd + global_args(kubeconfig, context)


def parse_list(text, name):
    """The row of release ``name`` from ``helm list -o json``; None when it is not installed."""
    try:
        rows = json.loads(text or "[]")
    except ValueError as exc:
        raise HelmError(f"helm list printed something that is not JSON: {str(text)[:200]!r} ({exc})") from exc
    if not isinstance(rows, list):
        raise HelmError(f"helm list printed {type(rows).__name__}, not a list")
    for row in rows:
        if isinstance(row, dict) and row.get("name") == name:
            return row
    return None


def parse_values(text):
    """``helm get values -o json`` -> dict (helm prints ``null`` for a release given no values)."""
    try:
        values = json.loads(text or "null")
    except ValueError as exc:
        raise HelmError(
            f"helm get values printed something that is not JSON: {str(text)[:200]!r} ({exc})"
        ) from exc
    if values is not None and not isinstance(values, dict):
        raise HelmError(f"helm get values printed a {type(values).__name__}, not a mapping of values")
    return values or {}


def _normalised(values):
    """JSON round trip: what helm stores (numbers, booleans, nested maps) compared as helm prints it."""
    return json.loads(json.dumps(values or {}, sort_keys=True))


def decide(row, live_values, chart_ref, chart_version, values):
    """What to do: ``install``, ``upgrade`` (with the reasons) or ``none``.

    Unchanged only when the release is ``deployed`` from the same chart and version with the
    same values. A failed or pending release is upgraded again.
    """
    if row is None:
        return {"action": "install", "reasons": ["the release is not installed"]}
    reasons = []
    want_chart = f"{chart_name_of(chart_ref)}-{chart_version}"
    if row.get("chart") != want_chart:
        reasons.append(f"chart {row.get('chart')} is installed, {want_chart} is wanted")
    if row.get("status") != "deployed":
        reasons.append(f"the release is {row.get('status')}, not deployed")
    if _normalised(live_values) != _normalised(values):
        reasons.append("its values differ")
    return {"action": "upgrade" if reasons else "none", "reasons": reasons}
