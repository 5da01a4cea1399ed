"""control_plane_health (plugins/modules/control_plane_health.py) and resolve_endpoints
(plugins/module_utils/_control_plane/health.py) refuse endpoint values of the wrong type naming the
field, before anything is probed."""

from __future__ import annotations

import json

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpusplit.k8s.plugins.module_utils._control_plane import health
from ansible_collections.gpusplit.k8s.plugins.modules import control_plane_health

BAD_ENDPOINTS = [
    (
        {"kube-apiserver": {"health_url": 5}},
        ["endpoints.kube-apiserver.health_url: expected a string, got integer 5"],
    ),
    (
        {"kube-scheduler": "https://127.0.0.1:10259/healthz"},
        [
            "endpoints.kube-scheduler: expected a mapping with keys health_url, metrics_url, validate_certs, "
            "tls_server_name, got string"
        ],
    ),
    (
        {"kube-scheduler": {"validate_certs": "no", "metrics_url": "127.0.0.1:10259/metrics"}},
        [
            "endpoints.kube-scheduler.validate_certs: expected true or false, got string 'no'",
            "endpoints.kube-scheduler.metrics_url: '127.0.0.1:10259/metrics' is not an http(s) URL",
        ],
    ),
    (
        {"kube-apiserver": {"tls_server_name": ["kubernetes"]}},
        ["endpoints.kube-apiserver.tls_server_name: expected a string, got list ['kubernetes']"],
    ),
]


@pytest.mark.parametrize(("endpoints", "errors"), BAD_ENDPOINTS)
def test_resolve_endpoints_refuses_values_of_the_wrong_type(endpoints, errors):
    with pytest.raises(health.HealthError) as err:
        health.resolve_endpoints(["kube-apiserver", "kube-scheduler"], endpoints)
    assert err.value.errors == errors


def test_resolve_endpoints_refuses_endpoints_that_are_no_mapping():
    with pytest.raises(health.HealthError) as err:
        health.resolve_endpoints(["kube-apiserver"], ["https://127.0.0.1:6443/readyz"])
    assert err.value.errors == ["endpoints: expected a mapping of component to endpoint, got list"]


def test_resolve_endpoints_keeps_good_overrides_and_nulls():
    resolved = health.resolve_endpoints(
        ["kube-apiserver"],
        {
            "kube-apiserver": {
                "health_url": "http://10.0.0.1:6443/livez",
                "metrics_url": None,
                "tls_server_name": None,
            }
        },
    )
    assert resolved["kube-apiserver"] == {
        "health_url": "http://10.0.0.1:6443/livez",
        "metrics_url": "https://127.0.0.1:6443/metrics",
        "validate_certs": True,
        "tls_server_name": None,
    }


@pytest.mark.parametrize(("endpoints", "errors"), BAD_ENDPOINTS)
def test_the_module_fails_with_the_refusal_before_probing(endpoints, errors, capsys, monkeypatch):
    def no_probe(*_args, **_kwargs):
        raise AssertionError("nothing may be probed")

    monkeypatch.setattr(control_plane_health, "probe_component", no_probe)
    monkeypatch.setattr(control_plane_health, "probe_discovery", no_probe)
    with patch_module_args({"endpoints": endpoints, "timeout": 1}), pytest.raises(SystemExit) as exc:
        control_plane_health.main()
    out = json.loads(capsys.readouterr().out)
    assert exc.value.code == 1 and not out.get("changed")
    assert out["msg"] == "\n".join(errors) and out["errors"] == errors


@pytest.mark.parametrize(
    ("args", "errors"),
    [
        # issue 43: interval nan made "monotonic() + nan > deadline" false, and time.sleep(nan) crashed
        ({"interval": "nan"}, ["interval: expected a number of seconds above 0 and at most 3600, got nan"]),
        # probe_timeout inf reached the HTTP client ("timeout doesn't fit into C timeval", or a hang)
        (
            {"probe_timeout": "inf"},
            ["probe_timeout: expected a number of seconds above 0 and at most 3600, got inf"],
        ),
        (
            {"probe_timeout": "1e300"},
            ["probe_timeout: expected a number of seconds above 0 and at most 3600, got 1e+300"],
        ),
        ({"interval": -1}, ["interval: expected a number of seconds above 0 and at most 3600, got -1.0"]),
        (
            {"timeout": 10**30, "stable_probes": 0},
            [
                "timeout: expected a whole number of seconds from 0 to 86400, got an integer of 31 digits",
                "stable_probes: expected a whole number from 1 to 1000, got 0",
            ],
        ),
    ],
)
def test_numbers_outside_their_domain_are_refused_before_probing(args, errors, capsys, monkeypatch):
    def no_probe(*_args, **_kwargs):
        raise AssertionError("nothing may be probed")

    monkeypatch.setattr(control_plane_health, "probe_component", no_probe)
    monkeypatch.setattr(control_plane_health, "probe_discovery", no_probe)
    with patch_module_args(args), pytest.raises(SystemExit) as exc:
        control_plane_health.main()
    out = json.loads(capsys.readouterr().out)
    assert exc.value.code == 1 and not out.get("changed")
    assert out["errors"] == errors
