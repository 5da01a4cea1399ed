"""The module gpu_pod_resources (plugins/modules/gpu_pod_resources.py): its arguments, check mode,
missing_ok and its refusals, run as Ansible runs it (main with the module arguments)."""

from __future__ import annotations

import importlib
import json

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpusplit.k8s.plugins.modules import gpu_pod_resources

try:
    import grpc
except ImportError:
    grpc = None

GPU = "GPU-3d5c1f8e-6a4b-4a1e-9f0a-2b7c8d9e0f13"
PODS = [
    {
        "namespace": "ml",
        "name": "trainer-0",
        "containers": [
            {
                "name": "main",
                "devices": [{"resource_name": "nvidia.com/gpu", "device_ids": [GPU], "numa_nodes": []}],
                "dynamic_resources": [],
            }
        ],
    }
]


def run_module(args, capsys):
    with patch_module_args(args), pytest.raises(SystemExit) as done:
        gpu_pod_resources.main()
    return done.value.code, json.loads(capsys.readouterr().out)


@pytest.fixture
def kubelet(tmp_path):
    """The socket of a grpcio server answering List with PODS (the lab's stand-in serves it)."""
    if grpc is None:
        pytest.skip("needs grpcio (a real gRPC server), not installed here")
    path = tmp_path / "kubelet.sock"
    server = importlib.import_module("lab.podresources").serve(path, lambda: PODS)
    yield str(path)
    server.stop(0)


@pytest.mark.parametrize("check_mode", [False, True])
def test_reads_the_holders_and_changes_nothing(kubelet, capsys, check_mode):
    code, out = run_module({"socket": kubelet, "_ansible_check_mode": check_mode}, capsys)
    assert code == 0 and out["changed"] is False and out["available"] is True
    assert out["socket"] == kubelet and out["pods"] == PODS
    assert out["holders"] == [
        {
            "namespace": "ml",
            "pod": "trainer-0",
            "container": "main",
            "resource_name": "nvidia.com/gpu",
            "device_id": GPU,
            "claim_name": None,
            "claim_namespace": None,
            "driver": None,
            "pool": None,
            "device": None,
        }
    ]


def test_resource_prefixes_choose_the_holders(kubelet, capsys):
    code, out = run_module({"socket": kubelet, "resource_prefixes": ["amd.com/"]}, capsys)
    assert code == 0 and out["holders"] == [] and out["pods"] == PODS


def test_a_missing_socket_fails_unless_missing_ok(tmp_path, capsys):
    path = str(tmp_path / "kubelet.sock")
    code, out = run_module({"socket": path}, capsys)
    assert code == 1 and out["failed"] is True and out["changed"] is False
    assert out["msg"].startswith("reading the kubelet's pod resources refused:\n- ")
    assert f"{path} does not exist" in out["msg"] and out["errors"] and out["socket"] == path
    code, out = run_module({"socket": path, "missing_ok": True, "_ansible_check_mode": True}, capsys)
    assert code == 0 and out["available"] is False and out["pods"] == [] and out["holders"] == []


def test_a_bad_timeout_is_refused_by_name(tmp_path, capsys):
    code, out = run_module({"socket": str(tmp_path / "kubelet.sock"), "timeout": -1}, capsys)
    assert (
        code == 1
        and "timeout: expected a number of seconds above 0 and at most 86400, got -1.0" in out["msg"]
    )


@pytest.mark.parametrize("bad", ["nan", "inf", "-inf", "1e300", "86401"])
def test_a_timeout_outside_its_domain_is_refused_before_the_call(tmp_path, capsys, bad):
    """issue 43: nan, inf or 1e300 passed the check (only "<= 0" was refused) and failed later in the socket
    layer with Python's words (settimeout: "Invalid value NaN", "timeout doesn't fit into C timeval")."""
    code, out = run_module(
        {"socket": str(tmp_path / "kubelet.sock"), "timeout": bad, "missing_ok": True}, capsys
    )
    assert code == 1
    assert "timeout: expected a number of seconds above 0 and at most 86400, got " in out["msg"]


def test_the_documentation_names_every_option_and_return():
    import yaml

    doc = yaml.safe_load(gpu_pod_resources.DOCUMENTATION)
    assert sorted(doc["options"]) == ["missing_ok", "resource_prefixes", "socket", "timeout"]
    returned = yaml.safe_load(gpu_pod_resources.RETURN)
    assert sorted(returned) == ["available", "holders", "pods", "socket"]
    assert sorted(returned["holders"]["contains"]) == sorted(
        ["namespace", "pod", "container", "resource_name", "device_id"]
        + ["claim_name", "claim_namespace", "driver", "pool", "device"]
    )


# The discovery module reads the same answer in its own call (option pod_resources_socket), so that a
# run reaches each host with one module execution; a failure there is returned, never raised.
def facts_holders(**params):
    from ansible_collections.gpusplit.k8s.plugins.module_utils._gpu import facts

    return facts.read_holders({"pod_resources_timeout": 5.0, **params})


def test_the_discovery_reads_the_same_answer_in_its_own_call(kubelet):
    found = facts_holders(pod_resources_socket=kubelet)
    assert found["available"] is True and found["pods"] == PODS and "error" not in found
    assert [(h["pod"], h["device_id"]) for h in found["holders"]] == [("trainer-0", GPU)]


def test_the_discovery_reads_nothing_without_a_socket():
    assert facts_holders(pod_resources_socket=None) is None


def test_the_discovery_takes_a_missing_socket_for_no_kubelet(tmp_path):
    found = facts_holders(pod_resources_socket=str(tmp_path / "none.sock"))
    assert found == {"available": False, "socket": str(tmp_path / "none.sock"), "pods": [], "holders": []}


def test_the_discovery_returns_a_failure_with_its_reason(tmp_path):
    not_a_socket = tmp_path / "kubelet.sock"
    not_a_socket.write_text("")
    found = facts_holders(pod_resources_socket=str(not_a_socket))
    assert found["available"] is False and found["pods"] == [] and found["holders"] == []
    assert str(not_a_socket) in found["error"]
