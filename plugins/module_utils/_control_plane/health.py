# Copyright: gpusplit contributors
# Apache-2.0
"""Health of control-plane components seen from outside: probes, metrics, API discovery, decisions.

Private to the collection.

A feature gate is proven on, per component, by that component's own ``/metrics``:
``kubernetes_feature_enabled{name="GenericWorkload",stage="BETA"} 1`` (k8s.io/component-base
v0.37.2 ``featuregate``: every component registers the gauge for every gate it knows).  A restart is
proven by ``process_start_time_seconds`` (client_golang's process collector, registered by
component-base ``metrics/legacyregistry``) moving past the value read just before the change.  An
API group/version is proven served by kube-apiserver's discovery document ``/apis`` (what
``kubectl api-versions`` reads).

Two halves:

* pure functions (no I/O): :func:`parse_prometheus_text`, :func:`feature_gate_states`,
  :func:`process_start_time`, :func:`served_group_versions`, :func:`evaluate_probe`,
  :func:`discovery_problems`, :func:`component_error`, :func:`resolve_endpoints`;
* small I/O helpers for a module running on the control-plane node: :func:`load_kubeconfig`,
  :class:`Credentials`, :func:`https_get`, :func:`probe_component`, :func:`probe_discovery`.

Defaults are the ports kubeadm and k3s/rke2 use (kube-apiserver 6443, kube-controller-manager
10257, kube-scheduler 10259).  kube-scheduler and kube-controller-manager serve a self-signed
certificate generated in memory unless ``--tls-cert-file`` is given (component-base / apiserver
``SecureServingOptions.MaybeDefaultWithSelfSignedCerts``), so their certificate cannot be verified
and their endpoints default to ``validate_certs: false``, as the kubelet's own HTTPS probes do.
kube-apiserver's certificate is verified against the kubeconfig's CA with the server name
``kubernetes``: kubeadm always puts that DNS name into the serving certificate
(cmd/kubeadm/app/util/pkiutil ``GetAPIServerAltNames``), 127.0.0.1 it does not.
"""

from __future__ import annotations

import base64
import http.client
import json
import math
import os
import re
import shutil
import socket
import ssl
import tempfile
import time
import urllib.parse

from ansible_collections.gpusplit.k8s.plugins.module_utils._control_plane.components import (
    APISERVER,
    CONTROLLER_MANAGER,
    SCHEDULER,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._control_plane.yaml_text import load_map
from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError, type_name
from ansible_collections.gpusplit.k8s.plugins.module_utils._host.files import read_text

FEATURE_METRIC = "kubernetes_feature_enabled"
START_TIME_METRIC = "process_start_time_seconds"

DEFAULT_ENDPOINTS = {
    APISERVER: {
        "health_url": "https://127.0.0.1:6443/readyz",
        "metrics_url": "https://127.0.0.1:6443/metrics",
        "validate_certs": True,
        "tls_server_name": "kubernetes",
    },
    CONTROLLER_MANAGER: {
        "health_url": "https://127.0.0.1:10257/healthz",
        "metrics_url": "https://127.0.0.1:10257/metrics",
        "validate_certs": False,
        "tls_server_name": None,
    },
    SCHEDULER: {
        "health_url": "https://127.0.0.1:10259/healthz",
        "metrics_url": "https://127.0.0.1:10259/metrics",
        "validate_certs": False,
        "tls_server_name": None,
    },
}

ENDPOINT_KEYS = ("health_url", "metrics_url", "validate_certs", "tls_server_name")


class HealthError(GpusplitError):
    """Bad input: unknown component, unusable kubeconfig, unparsable metrics line."""


# --------------------------------------------------------------------------------------------
# endpoints


def resolve_endpoints(components, overrides: dict | None = None) -> dict[str, dict]:
    """``{component: {health_url, metrics_url, validate_certs, tls_server_name}}`` for ``components``.

    ``overrides`` maps a component to a (partial) endpoint dict laid over :data:`DEFAULT_ENDPOINTS`;
    a component outside the defaults needs at least ``health_url``.
    """
    overrides = overrides or {}
    if not isinstance(overrides, dict):
        raise HealthError(
            f"endpoints: expected a mapping of component to endpoint, got {type_name(overrides)}"
        )
    resolved = {}
    for component in components:
        base = dict(DEFAULT_ENDPOINTS.get(component, {}))
        extra = overrides.get(component) or {}
        if not isinstance(extra, dict):
            raise HealthError(
                f"endpoints.{component}: expected a mapping with keys {', '.join(ENDPOINT_KEYS)}, "
                f"got {type_name(extra)}"
            )
        unknown = sorted(set(extra) - set(ENDPOINT_KEYS))
        if unknown:
            raise HealthError(f"{component}: unknown endpoint keys {', '.join(unknown)}")
        problems = [_endpoint_problem(f"endpoints.{component}.{k}", k, v) for k, v in extra.items()]
        if any(problems):
            raise HealthError([problem for problem in problems if problem])
        base.update({k: v for k, v in extra.items() if v is not None or k == "tls_server_name"})
        if not base.get("health_url"):
            raise HealthError(f"{component}: no health_url (not a known control-plane component)")
        base.setdefault("metrics_url", None)
        base.setdefault("validate_certs", True)
        base.setdefault("tls_server_name", None)
        resolved[component] = base
    return resolved


def _endpoint_problem(field, key, value):
    """What is wrong with one endpoint value given by the caller (None when it is usable)."""
    if value is None:
        return None
    if key == "validate_certs":
        if not isinstance(value, bool):
            return f"{field}: expected true or false, got {type_name(value)} {value!r}"
        return None
    if not isinstance(value, str):
        return f"{field}: expected a string, got {type_name(value)} {value!r}"
    if key.endswith("_url"):
        parts = urllib.parse.urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            return f"{field}: {value!r} is not an http(s) URL"
    return None


def base_url(url: str) -> str:
    """``https://127.0.0.1:6443/readyz`` -> ``https://127.0.0.1:6443``."""
    parts = urllib.parse.urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


# --------------------------------------------------------------------------------------------
# Prometheus text exposition format (version 0.0.4)

_SAMPLE_RE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})?\s+(\S+)(?:\s+(-?\d+))?\s*$")
_LABEL_RE = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(,|$)')
_UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


def _parse_labels(text: str, line: str) -> dict[str, str]:
    inner = text[1:-1]
    labels: dict[str, str] = {}
    pos = 0
    while pos < len(inner):
        if not inner[pos:].strip():
            break
        m = _LABEL_RE.match(inner, pos)
        if not m:
            raise HealthError(f"cannot parse the labels of metrics line: {line!r}")
        value = re.sub(r"\\[\\\"n]", lambda e: _UNESCAPE[e.group(0)], m.group(2))
        labels[m.group(1)] = value
        pos = m.end()
    return labels


def _parse_value(raw: str, line: str) -> float:
    special = {"+Inf": math.inf, "-Inf": -math.inf, "NaN": math.nan}
    if raw in special:
        return special[raw]
    try:
        return float(raw)
    except ValueError:
        raise HealthError(f"cannot parse the value of metrics line: {line!r}") from None


def parse_prometheus_text(text: str, names=None) -> list[tuple[str, dict, float]]:
    """Samples ``[(metric name, labels, value)]`` of a Prometheus text exposition.

    ``# HELP`` / ``# TYPE`` / comments and blank lines are skipped; label values are unescaped
    (``\\\\``, ``\\"``, ``\\n``); an optional timestamp is ignored.  ``names`` restricts the result
    (and the parsing work) to those metric names.
    """
    wanted = set(names) if names else None
    samples = []
    for raw_line in (text or "").splitlines():
        line = raw_line.strip()
        if not line or line.startswith("#"):
            continue
        if wanted is not None:
            name_end = re.match(r"[a-zA-Z_:][a-zA-Z0-9_:]*", line)
            if not name_end or name_end.group(0) not in wanted:
                continue
        m = _SAMPLE_RE.match(line)
        if not m:
            raise HealthError(f"cannot parse metrics line: {line!r}")
        labels = _parse_labels(m.group(2), line) if m.group(2) else {}
        samples.append((m.group(1), labels, _parse_value(m.group(3), line)))
    return samples


def feature_gate_values(text: str) -> dict[str, float]:
    """``{gate: value}`` of every ``kubernetes_feature_enabled`` sample."""
    return {
        labels["name"]: value
        for _name, labels, value in parse_prometheus_text(text, [FEATURE_METRIC])
        if "name" in labels
    }


def feature_gate_states(text: str) -> dict[str, bool]:
    """``{gate: enabled}`` as the component reports it on ``/metrics`` (value 1 = enabled)."""
    return {name: value == 1 for name, value in feature_gate_values(text).items()}


def feature_gate_stages(text: str) -> dict[str, str]:
    """``{gate: stage}`` (``ALPHA``, ``BETA``, ``""`` for GA, ``DEPRECATED``) from the same metric."""
    return {
        labels["name"]: labels.get("stage", "")
        for _name, labels, _value in parse_prometheus_text(text, [FEATURE_METRIC])
        if "name" in labels
    }


def process_start_time(text: str) -> float | None:
    """``process_start_time_seconds`` (unix time) or None when the metric is absent."""
    samples = parse_prometheus_text(text, [START_TIME_METRIC])
    return samples[0][2] if samples else None


# --------------------------------------------------------------------------------------------
# API discovery


def served_group_versions(discovery: dict) -> list[str]:
    """``group/version`` strings served according to ``/apis`` (and ``/api``) discovery documents.

    Accepts an ``APIGroupList`` (``{"groups": [{"name", "versions": [{"groupVersion"}]}]}``), the
    aggregated ``APIGroupDiscoveryList`` (``{"items": [{"metadata": {"name"}, "versions":
    [{"version"}]}]}``) and the core ``APIVersions`` (``{"versions": ["v1"]}``), so that what
    ``kubectl api-versions`` prints can be reproduced from either form.
    """
    served: list[str] = []
    if not isinstance(discovery, dict):
        return served
    for group in discovery.get("groups") or []:
        for version in group.get("versions") or []:
            gv = version.get("groupVersion") or f"{group.get('name')}/{version.get('version')}"
            served.append(gv)
    for item in discovery.get("items") or []:
        name = (item.get("metadata") or {}).get("name", "")
        for version in item.get("versions") or []:
            v = version.get("version")
            served.append(f"{name}/{v}" if name else v)
    if discovery.get("kind") == "APIVersions":
        served.extend(discovery.get("versions") or [])
    return sorted(set(served))


# --------------------------------------------------------------------------------------------
# decisions


def _gate_value(expected) -> float:
    if isinstance(expected, bool):
        return 1.0 if expected else 0.0
    text = str(expected).strip().lower()
    if text in ("1", "true", "t", "yes", "on"):
        return 1.0
    if text in ("0", "false", "f", "no", "off"):
        return 0.0
    raise HealthError(f"expected gate value {expected!r} is not a boolean")


def evaluate_probe(
    probe: dict, expect_gates: dict | None = None, started_after: float | None = None
) -> list[str]:
    """What is still wrong with one component's probe; an empty list means healthy and as expected.

    ``probe`` is what :func:`probe_component` returns (``health`` and ``metrics``; for kube-apiserver
    possibly ``discovery``, judged by :func:`discovery_problems`).  ``expect_gates`` ``{gate: bool}``
    must match ``kubernetes_feature_enabled``; ``started_after`` must be exceeded by the process start
    time (the component was restarted after the change).
    """
    problems: list[str] = []
    component = probe.get("component", "component")
    health = probe.get("health") or {}
    if not health.get("ok"):
        problems.append(f"{health.get('url')}: {_describe(health)}")
        return problems
    if not expect_gates and started_after is None:
        return problems
    metrics = probe.get("metrics") or {}
    if not metrics.get("ok"):
        problems.append(f"{metrics.get('url') or 'metrics'}: {_describe(metrics)}")
        return problems
    values = metrics.get("feature_gates") or {}
    for gate, expected in sorted((expect_gates or {}).items()):
        want = _gate_value(expected)
        have = values.get(gate)
        if have is None:
            problems.append(f'{FEATURE_METRIC}{{name="{gate}"}} is not reported by {component}')
        elif have != want:
            problems.append(f'{FEATURE_METRIC}{{name="{gate}"}} is {have:g}, expected {want:g}')
    if started_after is not None:
        start = metrics.get("process_start_time")
        if start is None:
            problems.append(f"{component} reports no {START_TIME_METRIC}")
        elif start <= float(started_after):
            problems.append(
                f"{component} has not restarted yet (process started {start:.2f}, "
                f"not after {float(started_after):.2f})"
            )
    return problems


def discovery_problems(discovery: dict | None, api_versions) -> list[str]:
    """Group/versions of ``api_versions`` that the discovery result does not list as served."""
    if not api_versions:
        return []
    discovery = discovery or {}
    if not discovery.get("ok"):
        return [f"{discovery.get('url') or 'discovery'}: {_describe(discovery)}"]
    served = set(discovery.get("served") or [])
    return [
        f"{gv} is not served (kube-apiserver discovery {discovery.get('url')})"
        for gv in api_versions
        if gv not in served
    ]


def _describe(result: dict) -> str:
    if result.get("error"):
        return str(result["error"])
    status = result.get("status")
    body = (result.get("body") or "").strip().replace("\n", " ")
    if status is None:
        return "not probed"
    return f"HTTP {status}" + (f": {body[:300]}" if body else "")


#: what a component prints when it refuses to start (component-base featuregate, cobra, klog)
_FATAL_PATTERNS = (
    r"unrecognized feature gate",
    r"cannot set feature gate",
    r"depends on features that are disabled",
    r"has not been registered",
    r"unknown flag",
    r"invalid argument",
    r'"command failed"',
    r"^Error:",
    r"^F\d{4} ",
    r"^E\d{4} ",
)


def component_error(log_text: str, max_lines: int = 6) -> list[str]:
    """The lines of a component's log tail that say why it stopped, newest last.

    Fatal start-up messages (``unrecognized feature gate: X``, ``cannot set feature gate ...``,
    ``... depends on features that are disabled``, ``group version ... has not been registered``,
    cobra's ``Error:``, klog ``E``/``F`` lines) are preferred; without any, the last lines.
    """
    lines = [line.rstrip() for line in (log_text or "").splitlines() if line.strip()]
    strong = [line for line in lines if any(re.search(p, line) for p in _FATAL_PATTERNS[:6])]
    if strong:
        return _dedupe_tail(strong, max_lines)
    weak = [line for line in lines if any(re.search(p, line.strip()) for p in _FATAL_PATTERNS[6:])]
    if weak:
        return _dedupe_tail(weak, max_lines)
    return lines[-max_lines:]


def _dedupe_tail(lines: list[str], max_lines: int) -> list[str]:
    """The last ``max_lines`` distinct messages (a crash-looping component repeats itself)."""
    seen = set()
    out = []
    for line in reversed(lines):
        key = re.sub(r"^[IWEF]\d{4} [\d:.]+\s+\d+ ", "", line)
        if key in seen:
            continue
        seen.add(key)
        out.append(line)
        if len(out) >= max_lines:
            break
    return list(reversed(out))


# --------------------------------------------------------------------------------------------
# I/O: credentials


def load_kubeconfig(path: str, context: str | None = None) -> dict:
    """``{server, ca_pem, cert_pem, key_pem, token, ca_file, cert_file, key_file}`` of a kubeconfig.

    Inline ``*-data`` and file references are both read; relative file paths resolve against the
    kubeconfig's directory, as kubectl does.  Exec and auth-provider plugins are not run: probes need
    a client certificate or a token.
    """
    text = read_text(path, f"kubeconfig {path}", error=HealthError)
    doc = load_map(text, f"kubeconfig {path}", of="kubeconfig fields", error=HealthError)
    base = os.path.dirname(os.path.abspath(path))
    for section, inner in (("clusters", "cluster"), ("contexts", "context"), ("users", "user")):
        entries = doc.get(section) or []
        if not isinstance(entries, list) or any(
            not isinstance(e, dict) or not isinstance(e.get(inner) or {}, dict) for e in entries
        ):
            raise HealthError(
                f"kubeconfig {path}: {section} must be a list of {{name, {inner}: {{...}}}} entries"
            )

    def named(section, name):
        for entry in doc.get(section) or []:
            if entry.get("name") == name:
                return entry
        return None

    ctx_name = context or doc.get("current-context")
    ctx = named("contexts", ctx_name) if ctx_name else None
    if ctx is None:
        contexts = doc.get("contexts") or []
        if context or len(contexts) > 1:
            raise HealthError(f"kubeconfig {path}: context {ctx_name!r} not found")
        ctx = contexts[0] if contexts else {"context": {}}
    ctx = ctx.get("context") or {}
    cluster = (
        named("clusters", ctx.get("cluster"))
        or {"cluster": (doc.get("clusters") or [{}])[0].get("cluster", {})}
    )["cluster"]
    user = (named("users", ctx.get("user")) or {"user": (doc.get("users") or [{}])[0].get("user", {})})[
        "user"
    ]
    if user.get("exec") or user.get("auth-provider"):
        raise HealthError(
            f"kubeconfig {path}: the user authenticates through an exec/auth-provider plugin; "
            "give a kubeconfig with a client certificate or a token (for kubeadm: /etc/kubernetes/admin.conf)"
        )

    def read_file(key, name):
        name = name if os.path.isabs(name) else os.path.join(base, name)
        return read_text(name, f"{key} {name} (named in kubeconfig {path})", error=HealthError)

    def read(data_key, file_key, obj):
        if obj.get(data_key):
            try:
                return base64.b64decode(obj[data_key]).decode()
            except (TypeError, ValueError) as exc:  # not a string, binascii.Error, UnicodeDecodeError
                raise HealthError(f"kubeconfig {path}: {data_key} is not base64-encoded PEM: {exc}") from exc
        if obj.get(file_key):
            return read_file(file_key, obj[file_key])
        return None

    token = user.get("token")
    if not token and user.get("tokenFile"):
        # relative to the working directory, not to the kubeconfig's directory
        token = read_file("tokenFile", os.path.abspath(user["tokenFile"])).strip()
    return {
        "server": cluster.get("server"),
        "ca_pem": read("certificate-authority-data", "certificate-authority", cluster),
        "cert_pem": read("client-certificate-data", "client-certificate", user),
        "key_pem": read("client-key-data", "client-key", user),
        "token": token,
        "insecure": bool(cluster.get("insecure-skip-tls-verify")),
    }


class Credentials:
    """SSL contexts (verifying / not verifying) carrying the kubeconfig's client identity.

    ``ssl`` loads certificates from files only, so the PEM data is written to a private temporary
    directory (mode 0700) that :meth:`close` removes; use it as a context manager.
    """

    def __init__(self, kubeconfig: dict | None = None, ca_file: str | None = None):
        self.kubeconfig = kubeconfig or {}
        self._dir = tempfile.mkdtemp(prefix="gpusplit-probe-")
        self.ca_file = ca_file or self._write("ca.crt", self.kubeconfig.get("ca_pem"))
        self.cert_file = self._write("client.crt", self.kubeconfig.get("cert_pem"))
        self.key_file = self._write("client.key", self.kubeconfig.get("key_pem"))
        self.token = self.kubeconfig.get("token")
        self._contexts: dict[bool, ssl.SSLContext] = {}

    def _write(self, name, pem):
        if not pem:
            return None
        path = os.path.join(self._dir, name)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(pem)
        return path

    def context(self, validate: bool) -> ssl.SSLContext:
        if validate not in self._contexts:
            if validate:
                ctx = (
                    ssl.create_default_context(cafile=self.ca_file)
                    if self.ca_file
                    else ssl.create_default_context()
                )
            else:
                ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
            if self.cert_file and self.key_file:
                ctx.load_cert_chain(self.cert_file, self.key_file)
            self._contexts[validate] = ctx
        return self._contexts[validate]

    def headers(self) -> dict:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def close(self):
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# --------------------------------------------------------------------------------------------
# I/O: probes


def https_get(
    url: str,
    context: ssl.SSLContext | None = None,
    server_name: str | None = None,
    headers: dict | None = None,
    timeout: float = 5.0,
    max_body: int = 8 * 1024 * 1024,
) -> dict:
    """GET ``url``; ``{url, ok, status, body, error}`` and never an exception for network trouble.

    ``server_name`` replaces the host name for SNI and certificate verification (the address in the
    URL is still what is connected to), so that ``https://127.0.0.1:6443`` can be checked against a
    certificate issued for ``kubernetes``.
    """
    result = {"url": url, "ok": False, "status": None, "body": "", "error": None}
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or "127.0.0.1"
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    try:
        if parts.scheme == "https":
            port = parts.port or 443
            ctx = context or ssl.create_default_context()
            conn = http.client.HTTPSConnection(host, port, timeout=timeout, context=ctx)
            # connect here so that SNI and the certificate check use server_name, not the address
            sock = socket.create_connection((host, port), timeout=timeout)
            try:
                conn.sock = ctx.wrap_socket(sock, server_hostname=server_name or host)
            except Exception:
                sock.close()
                raise
        elif parts.scheme == "http":
            conn = http.client.HTTPConnection(host, parts.port or 80, timeout=timeout)
        else:
            result["error"] = f"unsupported URL scheme in {url}"
            return result
        try:
            conn.request("GET", path, headers={"Accept": "application/json, */*", **(headers or {})})
            resp = conn.getresponse()
            body = resp.read(max_body)
        finally:
            conn.close()
        result["status"] = resp.status
        result["body"] = body.decode("utf-8", errors="replace")
        result["ok"] = resp.status == 200
    except ssl.SSLCertVerificationError as exc:
        result["error"] = f"TLS verification failed: {exc.verify_message or exc}"
    except (OSError, http.client.HTTPException, ssl.SSLError) as exc:
        result["error"] = f"{type_name(exc)}: {exc}" if str(exc) else type_name(exc)
    return result


def probe_component(
    component: str,
    endpoint: dict,
    credentials: Credentials,
    want_metrics: bool = True,
    timeout: float = 5.0,
) -> dict:
    """One look at a component: its health endpoint and (when asked and healthy) its ``/metrics``."""
    validate = bool(endpoint.get("validate_certs", True))
    server_name = endpoint.get("tls_server_name")
    ctx = credentials.context(validate)
    headers = credentials.headers()
    probe = {"component": component, "time": time.time()}
    health = https_get(endpoint["health_url"], ctx, server_name, headers, timeout)
    health["body"] = health["body"][:500]
    probe["health"] = health
    metrics = {"url": endpoint.get("metrics_url"), "ok": False, "status": None, "error": None}
    if want_metrics and health["ok"] and endpoint.get("metrics_url"):
        got = https_get(endpoint["metrics_url"], ctx, server_name, headers, timeout)
        metrics.update({k: got[k] for k in ("ok", "status", "error")})
        if got["ok"]:
            try:
                metrics["feature_gates"] = feature_gate_values(got["body"])
                metrics["process_start_time"] = process_start_time(got["body"])
            except HealthError as exc:
                metrics.update(ok=False, error=str(exc))
        else:
            metrics["body"] = got["body"][:500]
    elif want_metrics and not endpoint.get("metrics_url"):
        metrics["error"] = "no metrics_url configured"
    probe["metrics"] = metrics
    return probe


def probe_discovery(
    apiserver_url: str, endpoint: dict, credentials: Credentials, timeout: float = 5.0
) -> dict:
    """``{url, ok, served: [group/version ...]}`` from kube-apiserver's ``/api`` and ``/apis``."""
    ctx = credentials.context(bool(endpoint.get("validate_certs", True)))
    served: list[str] = []
    result = {"url": apiserver_url.rstrip("/") + "/apis", "ok": False, "served": served, "error": None}
    for path in ("/api", "/apis"):
        got = https_get(
            apiserver_url.rstrip("/") + path,
            ctx,
            endpoint.get("tls_server_name"),
            credentials.headers(),
            timeout,
        )
        if not got["ok"]:
            result.update(status=got["status"], error=got["error"], body=got["body"][:300])
            return result
        try:
            served.extend(served_group_versions(json.loads(got["body"])))
        except ValueError as exc:
            result["error"] = f"{path}: not JSON: {exc}"
            return result
    result["served"] = sorted(set(served))
    result["ok"] = True
    return result
