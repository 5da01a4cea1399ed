"""The real node's kubelet release (lab/node.py: GPUSPLIT_LAB_NODE_KUBELET, restart-kubelet) and what
`lab status` says of the node (lab/lab.py), without starting anything."""

from __future__ import annotations

import pytest

from lab import components as C
from lab import lab as labctl
from lab import node

KNOWN = ["1.37.2", "1.36.3", "1.35.4"]


@pytest.mark.parametrize("kubelet", ["1.37.2", "1.36.3", "1.35.4"])
def test_a_kubelet_of_the_lab_or_an_older_release_may_join(kubelet):
    assert node.kubelet_skew_problem(kubelet, "1.37.2", KNOWN) is None


@pytest.mark.parametrize(
    ("kubelet", "apiserver", "known", "said"),
    [
        ("1.37.2", "1.36.3", KNOWN, "may not be newer than the lab's apiserver (1.36.3)"),
        ("1.37.3", "1.37.2", [*KNOWN, "1.37.3"], "may not be newer than the lab's apiserver (1.37.2)"),
        ("1.33.1", "1.37.2", [*KNOWN, "1.33.1"], "at most 3 minor releases older than the lab's apiserver"),
        (
            "1.34.0",
            "1.37.2",
            KNOWN,
            "not a release the lab builds (KUBE_VERSIONS in lab/versions.env: 1.37.2",
        ),
    ],
)
def test_a_kubelet_the_skew_policy_or_the_lab_rules_out_is_refused_by_name(kubelet, apiserver, known, said):
    problem = node.kubelet_skew_problem(kubelet, apiserver, known)
    assert problem is not None and said in problem and f"kubelet {kubelet}" in problem, problem
    assert node.KUBELET_RELEASE_ENV in problem


def test_the_kubelet_release_is_the_labs_unless_the_env_names_another(monkeypatch):
    monkeypatch.setattr(C, "lab_kube_version", lambda: "1.37.2")
    monkeypatch.delenv(node.KUBELET_RELEASE_ENV, raising=False)
    assert node.kubelet_release() == "1.37.2"
    assert node.kubelet_binary() == C.BIN / "kubelet"
    monkeypatch.setenv(node.KUBELET_RELEASE_ENV, "1.36.3")
    assert node.kubelet_release() == "1.36.3"
    assert node.kubelet_binary() == C.BIN / "1.36.3" / "kubelet"
    assert node.kubelet_command()[0] == str(C.BIN / "1.36.3" / "kubelet")
    assert node.kubelet_release("1.35.4") == "1.35.4"  # restart-kubelet --release wins
    monkeypatch.setenv(node.KUBELET_RELEASE_ENV, "1.38.0")
    with pytest.raises(node.NodeError, match="not a release the lab builds"):
        node.kubelet_release()


def test_a_refused_kubelet_release_is_what_the_machine_lacks(monkeypatch):
    monkeypatch.setattr(C, "lab_kube_version", lambda: "1.36.3")
    monkeypatch.setenv(node.KUBELET_RELEASE_ENV, "1.37.2")
    assert any("may not be newer than the lab's apiserver (1.36.3)" in x for x in node.missing())


def test_a_missing_kubelet_names_the_build_of_its_release(monkeypatch, tmp_path):
    monkeypatch.setattr(C, "BIN", tmp_path)
    assert (
        node.kubelet_missing("1.36.3")
        == f"{tmp_path}/1.36.3/kubelet (run `make lab-build K8S=1.36.3`: lab/build_node.sh)"
    )
    default = C.versions()["KUBE_VERSION"]
    assert node.kubelet_missing(default) == f"{tmp_path}/kubelet (run `make lab-build`: lab/build_node.sh)"


def test_the_running_kubelets_release_is_read_from_its_binarys_place():
    assert node.release_of_binary(str(C.BIN / "kubelet")) == C.versions()["KUBE_VERSION"]
    assert node.release_of_binary(str(C.BIN / "1.36.3" / "kubelet")) == "1.36.3"
    assert node.release_of_binary("/usr/bin/kubelet") is None


def node_state(**over):
    state = {
        "node": node.NAME,
        "ready": True,
        "containerd_pid": 10,
        "kubelet_pid": 11,
        "kubelet_release": "1.36.3",
        "kubelet_version": "v1.36.3",
        "error": None,
    }
    return {**state, **over}


def test_lab_status_says_the_node_is_up_ready_and_its_kubelets_release():
    got = labctl.real_node_report(node_state(), expected=True)
    assert got["healthy"] is True and got["kubelet_release"] == "1.36.3"
    assert got["detail"] == "containerd up, kubelet 1.36.3 up, Ready"
    assert labctl.lab_healthy({"etcd": {"healthy": True}}, got)
    assert not labctl.lab_healthy({"etcd": {"healthy": False}}, got)


@pytest.mark.parametrize(
    ("over", "said"),
    [
        # the node's Ready condition outlives its kubelet for a while: a stopped kubelet is unhealthy all the same
        ({"kubelet_pid": None, "kubelet_release": None}, "containerd up, kubelet down, Ready"),
        ({"containerd_pid": None}, "containerd down, kubelet 1.36.3 up, Ready"),
        ({"ready": False}, "containerd up, kubelet 1.36.3 up, not Ready"),
        (
            {
                "containerd_pid": None,
                "kubelet_pid": None,
                "kubelet_release": None,
                "ready": False,
                "error": "no root",
            },
            "containerd down, kubelet down, not Ready; lab up recorded: no root",
        ),
    ],
)
def test_a_node_lab_up_started_that_is_not_up_and_ready_makes_the_lab_unhealthy(over, said):
    got = labctl.real_node_report(node_state(**over), expected=True)
    assert got["healthy"] is False and got["detail"] == said
    assert not labctl.lab_healthy({"etcd": {"healthy": True}}, got)


def test_a_node_left_out_is_reported_but_does_not_count():
    state = node_state(containerd_pid=None, kubelet_pid=None, kubelet_release=None, ready=False)
    got = labctl.real_node_report(state, expected=False)
    assert got["healthy"] is False and "not started by lab up" in got["detail"]
    assert labctl.lab_healthy({"etcd": {"healthy": True}}, got)


def test_the_node_is_expected_while_a_pid_file_or_its_failure_is_kept(monkeypatch, tmp_path):
    monkeypatch.setattr(node, "STATE", tmp_path)
    assert not node.started()
    node.pidfile("kubelet").write_text("1")
    assert node.started()
    node.pidfile("kubelet").unlink()
    node.error_file().write_text("this machine lacks: root")
    assert node.started()
