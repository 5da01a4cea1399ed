"""Control-plane health (plugins/module_utils/_control_plane/health.py), the control_plane_health module against
local HTTP(S) servers, the control_plane_gates filters (k3s/rke2 drop-in rendering, detection) and the
role's own consistency (defaults, argument specs)."""

from __future__ import annotations

import base64
import datetime
import http.server
import ipaddress
import json
import math
import ssl
import threading
import time
from pathlib import Path

import pytest
import yaml
from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpusplit.k8s.plugins.module_utils._control_plane import health
from ansible_collections.gpusplit.k8s.plugins.module_utils._control_plane.rancher import (
    render_rancher_dropin,
)
from ansible_collections.gpusplit.k8s.plugins.modules import control_plane_health

ROOT = Path(__file__).resolve().parents[5]
ROLE = ROOT / "roles" / "control_plane_gates"

# An excerpt of kube-scheduler v1.37.2's /metrics as served by the lab (GenericWorkload off).
SCHEDULER_METRICS = """\
# HELP kubernetes_build_info [ALPHA] A metric with a constant '1' value labeled by major, minor, git version.
# TYPE kubernetes_build_info gauge
kubernetes_build_info{build_date="2026-11-12T00:00:00Z",compiler="gc",git_commit="",git_tree_state="",git_version="v1.37.2-lab",go_version="go1.26.1",major="1",minor="37",platform="linux/amd64"} 1
# HELP kubernetes_feature_enabled [BETA] This metric records the data about the stage and enablement of a k8s feature.
# TYPE kubernetes_feature_enabled gauge
kubernetes_feature_enabled{name="APIResponseCompression",stage="BETA"} 1
kubernetes_feature_enabled{name="CompositePodGroup",stage="ALPHA"} 0
kubernetes_feature_enabled{name="DRADeviceTaintRules",stage=""} 1
kubernetes_feature_enabled{name="GenericWorkload",stage="BETA"} 0
# HELP process_start_time_seconds Start time of the process since unix epoch in seconds.
# TYPE process_start_time_seconds gauge
process_start_time_seconds 1.7959366689e+09
# HELP scheduler_pending_pods [STABLE] Number of pending pods, by the queue type.
# TYPE scheduler_pending_pods gauge
scheduler_pending_pods{queue="active"} 0
scheduler_pending_pods{queue="unschedulable"} 4
"""

# What the lab's kube-apiserver log holds after a start with an unknown gate (lab/lab.py supervisor
# writes the "===== start" lines; the rest is the component's own output).
APISERVER_CRASH_LOG = """\
I1129 07:31:40.113208    2931 server.go:151] Version: v1.37.2-lab
I1129 07:31:46.400210    2931 controller.go:231] Shutting down

===== start 07:31:47 /lab/bin/kube-apiserver
E1129 07:31:47.735513    3224 run.go:72] "command failed" err="unrecognized feature gate: NoSuchGateForGpusplit"

===== start 07:31:49 /lab/bin/kube-apiserver
E1129 07:31:49.470129    3794 run.go:72] "command failed" err="unrecognized feature gate: NoSuchGateForGpusplit"
"""


# --------------------------------------------------------------------------------------------
# Prometheus text


def test_parse_prometheus_text_reads_samples_and_skips_comments():
    samples = health.parse_prometheus_text(SCHEDULER_METRICS)
    names = [s[0] for s in samples]
    assert "kubernetes_build_info" in names and not any(n.startswith("#") for n in names)
    build = next(s for s in samples if s[0] == "kubernetes_build_info")
    assert build[1]["git_version"] == "v1.37.2-lab" and build[2] == 1.0
    assert ("scheduler_pending_pods", {"queue": "unschedulable"}, 4.0) in samples


def test_parse_prometheus_text_escapes_specials_and_timestamps():
    text = (
        'm{a="x\\"y",b="c\\\\d",c="line\\nbreak", d="spaced" } 3 1700000000000\n'
        "n +Inf\n"
        "o NaN\n"
        'p{empty=""} -1.5e-3\n'
    )
    samples = health.parse_prometheus_text(text)
    assert samples[0] == ("m", {"a": 'x"y', "b": "c\\d", "c": "line\nbreak", "d": "spaced"}, 3.0)
    assert samples[1] == ("n", {}, math.inf)
    assert math.isnan(samples[2][2])
    assert samples[3] == ("p", {"empty": ""}, -0.0015)


def test_parse_prometheus_text_restricted_to_names_skips_the_rest():
    text = SCHEDULER_METRICS + "garbage line that is not a sample\n"
    with pytest.raises(health.HealthError, match="cannot parse metrics line"):
        health.parse_prometheus_text(text)
    assert health.process_start_time(text) == pytest.approx(1795936668.9)


def test_feature_gates_from_metrics():
    assert health.feature_gate_states(SCHEDULER_METRICS) == {
        "APIResponseCompression": True,
        "CompositePodGroup": False,
        "DRADeviceTaintRules": True,
        "GenericWorkload": False,
    }
    assert health.feature_gate_values(SCHEDULER_METRICS)["GenericWorkload"] == 0.0
    stages = health.feature_gate_stages(SCHEDULER_METRICS)
    assert stages["GenericWorkload"] == "BETA" and stages["DRADeviceTaintRules"] == ""


def test_process_start_time_absent():
    assert health.process_start_time("up 1\n") is None


def test_bad_label_syntax_is_an_error():
    with pytest.raises(health.HealthError, match="labels"):
        health.parse_prometheus_text("m{a=unquoted} 1\n")


# --------------------------------------------------------------------------------------------
# discovery


def test_served_group_versions_from_every_discovery_shape():
    group_list = {
        "kind": "APIGroupList",
        "groups": [
            {
                "name": "scheduling.k8s.io",
                "versions": [
                    {"groupVersion": "scheduling.k8s.io/v1", "version": "v1"},
                    {"groupVersion": "scheduling.k8s.io/v1beta1", "version": "v1beta1"},
                ],
            }
        ],
    }
    aggregated = {
        "kind": "APIGroupDiscoveryList",
        "items": [{"metadata": {"name": "scheduling.k8s.io"}, "versions": [{"version": "v1beta1"}]}],
    }
    core = {"kind": "APIVersions", "versions": ["v1"]}
    assert health.served_group_versions(group_list) == [
        "scheduling.k8s.io/v1",
        "scheduling.k8s.io/v1beta1",
    ]
    assert health.served_group_versions(aggregated) == ["scheduling.k8s.io/v1beta1"]
    assert health.served_group_versions(core) == ["v1"]
    assert health.served_group_versions(None) == []


def test_discovery_problems():
    served = {"ok": True, "url": "https://x/apis", "served": ["scheduling.k8s.io/v1"]}
    assert health.discovery_problems(served, []) == []
    assert health.discovery_problems(served, ["scheduling.k8s.io/v1beta1"]) == [
        "scheduling.k8s.io/v1beta1 is not served (kube-apiserver discovery https://x/apis)"
    ]
    down = {"ok": False, "url": "https://x/apis", "error": "ConnectionRefusedError: refused"}
    assert "refused" in health.discovery_problems(down, ["v1"])[0]


# --------------------------------------------------------------------------------------------
# decisions


def probe(health_ok=True, gates=None, start=100.0, metrics_ok=True, status=200):
    return {
        "component": "kube-scheduler",
        "health": {"url": "https://127.0.0.1:10259/healthz", "ok": health_ok, "status": status, "body": "ok"}
        if health_ok
        else {"url": "https://127.0.0.1:10259/healthz", "ok": False, "status": None, "error": "refused"},
        "metrics": {
            "url": "https://127.0.0.1:10259/metrics",
            "ok": metrics_ok,
            "status": 200 if metrics_ok else 403,
            "body": "" if metrics_ok else "forbidden",
            "feature_gates": gates or {},
            "process_start_time": start,
        },
    }


def test_evaluate_probe_healthy_and_as_expected():
    assert health.evaluate_probe(probe(gates={"GenericWorkload": 1.0}), {"GenericWorkload": True}, 50) == []
    assert health.evaluate_probe(probe(), None, None) == []


def test_evaluate_probe_reports_each_problem():
    assert health.evaluate_probe(probe(health_ok=False), {"GenericWorkload": True}) == [
        "https://127.0.0.1:10259/healthz: refused"
    ]
    wrong = health.evaluate_probe(probe(gates={"GenericWorkload": 0.0}), {"GenericWorkload": "true"}, 150)
    assert wrong == [
        'kubernetes_feature_enabled{name="GenericWorkload"} is 0, expected 1',
        "kube-scheduler has not restarted yet (process started 100.00, not after 150.00)",
    ]
    missing = health.evaluate_probe(probe(gates={}), {"NoSuchGate": True})
    assert missing == ['kubernetes_feature_enabled{name="NoSuchGate"} is not reported by kube-scheduler']
    forbidden = health.evaluate_probe(probe(metrics_ok=False), {"GenericWorkload": True})
    assert forbidden == ["https://127.0.0.1:10259/metrics: HTTP 403: forbidden"]
    no_start = probe(gates={"GenericWorkload": 1.0}, start=None)
    assert health.evaluate_probe(no_start, {}, 1) == ["kube-scheduler reports no process_start_time_seconds"]
    with pytest.raises(health.HealthError):
        health.evaluate_probe(probe(gates={"G": 1.0}), {"G": "maybe"})


def test_component_error_prefers_fatal_lines_and_dedupes_crash_loops():
    lines = health.component_error(APISERVER_CRASH_LOG)
    assert lines == [
        'E1129 07:31:49.470129    3794 run.go:72] "command failed" err="unrecognized feature gate: NoSuchGateForGpusplit"'
    ]


@pytest.mark.parametrize(
    "line",
    [
        'E1129 07:00:00.000000 1 run.go:72] "command failed" err="cannot set feature gate DynamicResourceAllocation to false, feature is locked to true"',
        'E1129 07:00:00.000000 1 run.go:72] "command failed" err="DRADeviceTaintRules is enabled, but depends on features that are disabled: [DRADeviceTaints]"',
        "Error: unknown flag: --runtime-config",
        'E1129 07:00:00.000000 1 run.go:72] "command failed" err="group version scheduling.k8s.io/v1alpha2 that has not been registered"',
    ],
)
def test_component_error_finds_every_start_refusal(line):
    text = (
        "I1129 07:00:00.000000 1 server.go:1] starting\n" + line + "\nI1129 07:00:01.000000 1 x.go:1] more\n"
    )
    assert health.component_error(text) == [line]


def test_component_error_falls_back_to_errors_then_tail():
    errors = "I0 a\nE1129 07:00:00.000000 1 x.go:1] connection refused\nI0 b\n"
    assert health.component_error(errors) == ["E1129 07:00:00.000000 1 x.go:1] connection refused"]
    plain = "\n".join(f"line {i}" for i in range(20))
    assert health.component_error(plain, 3) == ["line 17", "line 18", "line 19"]
    assert health.component_error("") == []


# --------------------------------------------------------------------------------------------
# endpoints, kubeconfig


def test_resolve_endpoints_defaults_and_overrides():
    ep = health.resolve_endpoints(["kube-apiserver", "kube-scheduler"])
    assert ep["kube-apiserver"]["health_url"] == "https://127.0.0.1:6443/readyz"
    assert (
        ep["kube-apiserver"]["validate_certs"] is True
        and ep["kube-apiserver"]["tls_server_name"] == "kubernetes"
    )
    assert ep["kube-scheduler"]["validate_certs"] is False
    over = health.resolve_endpoints(
        ["kube-apiserver", "etcd"],
        {
            "kube-apiserver": {"health_url": "https://10.0.0.1:6443/livez"},
            "etcd": {"health_url": "http://x/health"},
        },
    )
    assert over["kube-apiserver"]["health_url"] == "https://10.0.0.1:6443/livez"
    assert over["kube-apiserver"]["metrics_url"] == "https://127.0.0.1:6443/metrics"
    assert over["etcd"]["metrics_url"] is None
    with pytest.raises(health.HealthError, match="unknown endpoint keys"):
        health.resolve_endpoints(["kube-apiserver"], {"kube-apiserver": {"url": "x"}})
    with pytest.raises(health.HealthError, match="no health_url"):
        health.resolve_endpoints(["etcd"])
    assert health.base_url("https://127.0.0.1:6443/readyz?verbose") == "https://127.0.0.1:6443"


def kubeconfig_doc(user: dict, cluster: dict | None = None) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "admin",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:6443", **(cluster or {})}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "admin", "context": {"cluster": "c", "user": "u"}}],
    }


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def test_load_kubeconfig_inline_and_files(tmp_path):
    inline = tmp_path / "inline.conf"
    inline.write_text(
        yaml.safe_dump(
            kubeconfig_doc(
                {"client-certificate-data": b64("CERT"), "client-key-data": b64("KEY")},
                {"certificate-authority-data": b64("CA")},
            )
        )
    )
    creds = health.load_kubeconfig(str(inline))
    assert (creds["server"], creds["ca_pem"], creds["cert_pem"], creds["key_pem"]) == (
        "https://127.0.0.1:6443",
        "CA",
        "CERT",
        "KEY",
    )
    (tmp_path / "pki").mkdir()
    (tmp_path / "pki" / "ca.crt").write_text("CA2")
    (tmp_path / "token").write_text("secret\n")
    files = tmp_path / "files.conf"
    files.write_text(
        yaml.safe_dump(
            kubeconfig_doc({"tokenFile": str(tmp_path / "token")}, {"certificate-authority": "pki/ca.crt"})
        )
    )
    creds = health.load_kubeconfig(str(files))
    assert creds["ca_pem"] == "CA2" and creds["token"] == "secret" and creds["cert_pem"] is None


def test_load_kubeconfig_refuses_exec_plugins_and_unknown_contexts(tmp_path):
    path = tmp_path / "exec.conf"
    path.write_text(yaml.safe_dump(kubeconfig_doc({"exec": {"command": "aws"}})))
    with pytest.raises(health.HealthError, match="exec/auth-provider"):
        health.load_kubeconfig(str(path))
    with pytest.raises(health.HealthError, match="context 'nope' not found"):
        health.load_kubeconfig(str(path), "nope")
    with pytest.raises(health.HealthError, match="cannot read kubeconfig"):
        health.load_kubeconfig(str(tmp_path / "missing"))


# --------------------------------------------------------------------------------------------
# probes against local servers


class FakeComponent(http.server.BaseHTTPRequestHandler):
    """A control-plane component: /healthz, /readyz, /metrics, /api, /apis, behaviour set per server."""

    def do_GET(self):  # noqa: N802 - http.server's name
        state = self.server.state
        state.setdefault("requests", []).append((self.path, self.headers.get("Authorization")))
        if self.path in ("/healthz", "/readyz"):
            return self.reply(
                200 if state.get("healthy", True) else 500,
                "ok" if state.get("healthy", True) else "[-]etcd failed",
            )
        if self.path == "/metrics":
            if state.get("metrics_forbidden"):
                return self.reply(403, 'forbidden: User "system:anonymous" cannot get path "/metrics"')
            gate = state.get("gate", 0)
            body = SCHEDULER_METRICS.replace(
                'kubernetes_feature_enabled{name="GenericWorkload",stage="BETA"} 0',
                f'kubernetes_feature_enabled{{name="GenericWorkload",stage="BETA"}} {gate}',
            ).replace("1.7959366689e+09", str(state.get("start", 1000.0)))
            return self.reply(200, body)
        if self.path == "/api":
            return self.reply(200, json.dumps({"kind": "APIVersions", "versions": ["v1"]}))
        if self.path == "/apis":
            versions = [{"groupVersion": gv} for gv in state.get("served", ["scheduling.k8s.io/v1"])]
            return self.reply(
                200, json.dumps({"kind": "APIGroupList", "groups": [{"name": "x", "versions": versions}]})
            )
        return self.reply(404, "not found")

    def reply(self, status, body):
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def fake_server():
    servers = []

    def start(state=None, tls=None):
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FakeComponent)
        server.state = state if state is not None else {}
        if tls:
            server.socket = tls.wrap_socket(server.socket, server_side=True)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        servers.append(server)
        scheme = "https" if tls else "http"
        return f"{scheme}://127.0.0.1:{server.server_address[1]}", server.state

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def test_probe_component_over_http(fake_server):
    url, state = fake_server({"gate": 1, "start": 4242.5})
    endpoint = {"health_url": url + "/healthz", "metrics_url": url + "/metrics"}
    with health.Credentials({"token": "t0k"}) as creds:
        result = health.probe_component("kube-scheduler", endpoint, creds)
    assert result["health"]["ok"] and result["metrics"]["ok"]
    assert result["metrics"]["feature_gates"]["GenericWorkload"] == 1.0
    assert result["metrics"]["process_start_time"] == 4242.5
    assert ("/metrics", "Bearer t0k") in state["requests"]


def test_https_get_never_raises_on_network_trouble():
    result = health.https_get("https://127.0.0.1:1/healthz", timeout=1)
    assert result["ok"] is False and "Connection" in result["error"]
    assert "unsupported URL scheme" in health.https_get("ftp://x/")["error"]


def make_tls(tmp_path):
    """A CA and a serving certificate for DNS name "kubernetes" (not for 127.0.0.1), as kubeadm's."""
    # a test-only package (the module reads PEM with the ssl module): skipped where a Python lacks it
    pytest.importorskip("cryptography")
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)  # noqa: UP017 - datetime.UTC is Python 3.11+
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test-ca")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(1)
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        # key identifiers and key usage as kubeadm's CA has them: Python 3.13's strict X.509
        # verification (its default) refuses a chain without them
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(2)
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("kubernetes"), x509.IPAddress(ipaddress.ip_address("10.96.0.1"))]
            ),
            critical=False,
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    (tmp_path / "ca.crt").write_bytes(ca.public_bytes(pem))
    (tmp_path / "srv.crt").write_bytes(cert.public_bytes(pem))
    (tmp_path / "srv.key").write_bytes(
        key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(tmp_path / "srv.crt"), str(tmp_path / "srv.key"))
    return ctx, ca.public_bytes(pem).decode()


def test_https_verifies_against_the_server_name_not_the_address(fake_server, tmp_path):
    tls, ca_pem = make_tls(tmp_path)
    url, _state = fake_server({}, tls=tls)
    with health.Credentials({"ca_pem": ca_pem}) as creds:
        ok = health.https_get(url + "/readyz", creds.context(True), "kubernetes")
        wrong = health.https_get(url + "/readyz", creds.context(True))
        unverified = health.https_get(url + "/readyz", creds.context(False))
    assert ok["ok"] and ok["body"] == "ok"
    assert not wrong["ok"] and "TLS verification failed" in wrong["error"] and "127.0.0.1" in wrong["error"]
    assert unverified["ok"]
    with health.Credentials({}) as creds:
        unknown_ca = health.https_get(url + "/readyz", creds.context(True), "kubernetes")
    assert "TLS verification failed" in unknown_ca["error"]


def test_credentials_files_are_private_and_removed():
    creds = health.Credentials({"ca_pem": "CA", "token": "x"})
    path = Path(creds.ca_file)
    assert path.read_text() == "CA" and oct(path.stat().st_mode & 0o777) == "0o600"
    assert oct(path.parent.stat().st_mode & 0o777) == "0o700"
    creds.close()
    assert not path.exists()


# --------------------------------------------------------------------------------------------
# the module


def run_module(args, capsys):
    with patch_module_args(args), pytest.raises(SystemExit) as exc:
        control_plane_health.main()
    return exc.value.code, json.loads(capsys.readouterr().out)


def write_kubeconfig(tmp_path) -> str:
    path = tmp_path / "admin.conf"
    path.write_text(yaml.safe_dump(kubeconfig_doc({"token": "admin-token"})))
    return str(path)


def test_module_waits_for_the_gate_and_the_restart(fake_server, tmp_path, capsys):
    url, state = fake_server({"gate": 0, "start": 1000.0})
    endpoints = {"kube-scheduler": {"health_url": url + "/healthz", "metrics_url": url + "/metrics"}}

    def restart_later():
        time.sleep(0.6)
        state.update(gate=1, start=2000.0)

    threading.Thread(target=restart_later, daemon=True).start()
    rc, result = run_module(
        {
            "components": ["kube-scheduler"],
            "endpoints": endpoints,
            "kubeconfig": write_kubeconfig(tmp_path),
            "feature_gates": {"GenericWorkload": True},
            "started_after": {"kube-scheduler": 1000.0},
            "timeout": 20,
            "interval": 0.2,
        },
        capsys,
    )
    assert rc == 0, result
    assert result["healthy"] is True and result["changed"] is False
    assert result["start_times"] == {"kube-scheduler": 2000.0}
    assert result["feature_gates"] == {"kube-scheduler": {"GenericWorkload": 1.0}}
    assert result["attempts"] >= 3


def test_module_checks_api_discovery(fake_server, tmp_path, capsys):
    url, _state = fake_server({"served": ["scheduling.k8s.io/v1", "scheduling.k8s.io/v1beta1"]})
    endpoints = {"kube-apiserver": {"health_url": url + "/readyz", "metrics_url": url + "/metrics"}}
    rc, result = run_module(
        {
            "components": ["kube-apiserver"],
            "endpoints": endpoints,
            "api_versions": ["scheduling.k8s.io/v1beta1"],
            "timeout": 5,
            "interval": 0.1,
        },
        capsys,
    )
    assert rc == 0, result
    assert result["served_api_versions"] == ["scheduling.k8s.io/v1beta1"]
    assert "v1" in result["probes"]["kube-apiserver"]["discovery"]["served"]


def test_module_times_out_with_what_is_wrong(fake_server, tmp_path, capsys):
    url, _state = fake_server({"gate": 0})
    bad, _ = fake_server({"healthy": False})
    endpoints = {
        "kube-scheduler": {"health_url": url + "/healthz", "metrics_url": url + "/metrics"},
        "kube-controller-manager": {"health_url": bad + "/healthz", "metrics_url": bad + "/metrics"},
        "kube-apiserver": {"health_url": url + "/readyz", "metrics_url": url + "/metrics"},
    }
    rc, result = run_module(
        {
            "components": ["kube-scheduler", "kube-controller-manager"],
            "endpoints": endpoints,
            "kubeconfig": write_kubeconfig(tmp_path),
            "feature_gates": {"GenericWorkload": True},
            "api_versions": ["scheduling.k8s.io/v1beta1"],
            "timeout": 1,
            "interval": 0.3,
        },
        capsys,
    )
    assert rc == 1 and result["failed"] and result["healthy"] is False
    assert (
        'kube-scheduler: kubernetes_feature_enabled{name="GenericWorkload"} is 0, expected 1' in result["msg"]
    )
    assert "kube-controller-manager: " + bad + "/healthz: HTTP 500: [-]etcd failed" in result["msg"]
    assert "kube-apiserver discovery: scheduling.k8s.io/v1beta1 is not served" in result["msg"]


def test_module_needs_a_kubeconfig_for_metrics(capsys):
    rc, result = run_module({"feature_gates": {"GenericWorkload": True}, "timeout": 1}, capsys)
    assert rc == 1 and "needs kubeconfig" in result["msg"]


# --------------------------------------------------------------------------------------------
# the k3s/rke2 drop-in the role renders (the role's steps are tested in plugin_utils/test_role_steps.py)


def test_rancher_dropin_is_deterministic_and_sorted():
    render = render_rancher_dropin
    a = render({"GenericWorkload": True, "DRADeviceTaintRules": True}, {})
    b = render({"DRADeviceTaintRules": "true", "GenericWorkload": "True"}, None)
    assert a == b
    assert "feature-gates=DRADeviceTaintRules=true,GenericWorkload=true" in a
    assert "runtime-config" not in a
    assert yaml.safe_load(a)["kube-apiserver-arg+"] == [
        "feature-gates=DRADeviceTaintRules=true,GenericWorkload=true"
    ]


# --------------------------------------------------------------------------------------------
# the role


def role_yaml(*parts):
    return yaml.safe_load((ROLE.joinpath(*parts)).read_text())


def test_role_default_endpoints_equal_the_module_defaults():
    defaults = role_yaml("defaults", "main.yml")
    resolved = health.resolve_endpoints(defaults["gpusplit_cp_components"], defaults["gpusplit_cp_endpoints"])
    assert resolved == health.DEFAULT_ENDPOINTS
    assert defaults["gpusplit_cp_components"] == [
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
    ]


def test_role_argument_specs_cover_every_default():
    defaults = role_yaml("defaults", "main.yml")
    specs = role_yaml("meta", "argument_specs.yml")["argument_specs"]
    for entry in ("main", "preflight"):
        options = specs[entry]["options"]
        assert set(defaults) <= set(options), set(defaults) - set(options)
        for name, option in options.items():
            if "default" in option:
                assert defaults[name] == option["default"], name


def test_role_never_backs_up_into_the_manifest_dir():
    defaults = role_yaml("defaults", "main.yml")
    assert not defaults["gpusplit_cp_backup_dir"].startswith(defaults["gpusplit_cp_manifest_dir"])
    lab = yaml.safe_load((ROOT / "inventory" / "lab" / "group_vars" / "control_plane.yml").read_text())
    assert lab["gpusplit_cp_backup_dir"].endswith("gpusplit_lab_dir }}/backups") and lab[
        "gpusplit_cp_manifest_dir"
    ].endswith("gpusplit_lab_dir }}/manifests")


def test_playbook_rolls_one_node_at_a_time_and_stops_on_the_first_failure():
    plays = yaml.safe_load((ROOT / "playbooks" / "feature_gates.yml").read_text())
    preflight, rollout = plays
    assert preflight["any_errors_fatal"] is True and "serial" not in preflight
    assert preflight["tasks"][0]["ansible.builtin.include_role"]["tasks_from"] == "preflight"
    assert rollout["serial"] == 1 and rollout["max_fail_percentage"] == 0
    assert rollout["roles"] == [{"role": "gpusplit.k8s.control_plane_gates"}]
