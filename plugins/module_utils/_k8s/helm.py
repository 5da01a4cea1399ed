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
import os
import re
import tarfile

try:
    import yaml
except ImportError:  # ansible-core brings PyYAML; read_chart_metadata says so when it is missing
    yaml = None

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError, a_type_name
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


def _bare(version):
    """``v1.2.3`` and ``1.2.3`` are the same release (charts spell it both ways)."""
    text = str(version or "").strip()
    return text[1:] if text[:1] in ("v", "V") else text


def read_chart_metadata(path):
    """The ``Chart.yaml`` of a local chart: a chart folder or a packaged ``.tgz`` (``helm package``).

    Only the top-level chart's file counts, not a vendored subchart's (``<chart>/charts/...``).
    """
    path = str(path or "")
    if yaml is None:
        raise HelmError("reading a local chart's Chart.yaml needs PyYAML (pip install pyyaml)")
    try:
        if os.path.isdir(path):
            with open(os.path.join(path, "Chart.yaml"), encoding="utf-8") as handle:
                text = handle.read()
        elif os.path.isfile(path):
            with tarfile.open(path, "r:*") as archive:
                members = [
                    m
                    for m in archive.getmembers()
                    if m.isfile() and m.name.count("/") == 1 and m.name.endswith("/Chart.yaml")
                ]
                if not members:
                    raise HelmError(
                        f"the chart archive {path} has no <chart>/Chart.yaml at its top: is it a packaged chart?"
                    )
                text = archive.extractfile(members[0]).read().decode("utf-8")
        else:
            raise HelmError(f"the local chart {path!r} is neither a chart folder nor a packaged chart (.tgz)")
    except (OSError, tarfile.TarError, UnicodeDecodeError) as exc:
        raise HelmError(f"cannot read the Chart.yaml of the local chart {path}: {exc}") from exc
    try:
        meta = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise HelmError(f"the Chart.yaml of the local chart {path} is not YAML: {exc}") from exc
    if not isinstance(meta, dict) or not meta.get("name") or not meta.get("version"):
        raise HelmError(f"the Chart.yaml of the local chart {path} has no name or no version")
    return {
        "name": str(meta["name"]),
        "version": str(meta["version"]),
        "app_version": str(meta.get("appVersion") or ""),
    }


def check_local_chart(meta, path, want_name, want_version):
    """Refuse a local chart that is not the one gpusplit was built for, naming both.

    The version is compared without a leading ``v``. A development version (``...-devel``, what a
    chart folder in its source repository says between releases, e.g. the GPU Operator's
    ``v1.0.0-devel`` at every tag) is refused with the ``helm package`` command that stamps it
    the way the release does; gpusplit cannot tell which commit such a folder is from.
    """
    have = f"{meta['name']} {meta['version']}"
    want = f"{want_name} {want_version}"
    if meta["name"] != want_name:
        raise HelmError(
            f"the local chart {path} is {have}, but gpusplit was built for {want}: give the {want_name} chart"
        )
    if _bare(meta["version"]) == _bare(want_version):
        return meta
    if meta["version"].endswith("-devel"):
        raise HelmError(
            f"the local chart {path} is {have} (appVersion {meta['app_version'] or 'unset'}), an unreleased "
            f"source checkout, not the released {want} gpusplit was built for. If it is the source of the "
            f"{want_version} release, package it the way the release does and give the .tgz: "
            f"helm package {path} --version {want_version} --app-version {want_version}"
        )
    raise HelmError(
        f"the local chart {path} is {have}, but gpusplit was built for {want}: give the {want_version} chart "
        f"(or change the version pin only after checking gpusplit's values against the new chart)"
    )


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
    local=False,
):
    """``helm upgrade --install``: the values file is the release's whole user-supplied values.

    ``--reset-values`` so that a value dropped from the file is dropped from the release too
    (helm would otherwise keep it from the last revision only when no values are given).
    A local chart (``local``: a folder or a .tgz) is given without ``--version``: helm ignores
    it there, so its version is checked from its Chart.yaml beforehand (``check_local_chart``).
    """
    cmd = [helm, "upgrade", "--install", name, chart_ref]
    if not local:
        cmd += ["--version", str(chart_version)]
    cmd += ["-n", namespace]
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
        raise HelmError(f"helm list printed {a_type_name(rows)}, not a list")
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
        raise HelmError(f"helm get values printed {a_type_name(values)}, not a mapping of values")
    return values or {}


def _normalised(values):
    """JSON round trip: what helm stores (numbers, booleans, nested maps) compared as helm prints it."""
    return json.loads(json.dumps(values or {}, sort_keys=True))


def decide(row, live_values, chart_ref, chart_version, values, chart_name=None):
    """What to do: ``install``, ``upgrade`` (with the reasons) or ``none``.

    Unchanged only when the release is ``deployed`` from the same chart and version with the
    same values. A failed or pending release is upgraded again. ``chart_name``: the name from a
    local chart's Chart.yaml (a path says nothing about it).
    """
    if row is None:
        return {"action": "install", "reasons": ["the release is not installed"]}
    reasons = []
    want_chart = f"{chart_name or chart_name_of(chart_ref)}-{chart_version}"
    if row.get("chart") != want_chart:
        reasons.append(f"chart {row.get('chart')} is installed, {want_chart} is wanted")
    if row.get("status") != "deployed":
        reasons.append(f"the release is {row.get('status')}, not deployed")
    if _normalised(live_values) != _normalised(values):
        reasons.append("its values differ")
    return {"action": "upgrade" if reasons else "none", "reasons": reasons}
