"""The lab's device-plugin simulator: what it advertises for a plugin container (no cluster needed)."""

from __future__ import annotations

import json

import pytest

from lab import deviceplugin as dp

A100 = dp.fixture_gpus("a100-mig")  # GPU 0: 2x 3g.40gb, GPU 1: 3g.40gb + 3x 1g.10gb, GPUs 2, 3: MIG off


def container(visible, strategy=None, privileged=False):
    env = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": visible}]
    if strategy:
        env.append({"name": "MIG_STRATEGY", "value": strategy})
    return {"env": env, "securityContext": {"privileged": privileged}}


def test_fixture_has_the_expected_shape():
    assert [len(g["mig_devices"]) for g in A100] == [2, 4, 0, 0]


@pytest.mark.parametrize(
    ("strategy", "expected"),
    [
        (None, {"nvidia.com/gpu": 4}),
        ("single", {"nvidia.com/gpu": 8}),
        ("mixed", {"nvidia.com/gpu": 2, "nvidia.com/mig-3g.40gb": 3, "nvidia.com/mig-1g.10gb": 3}),
    ],
)
def test_all_gpus_under_each_strategy(strategy, expected):
    c = container("all", strategy)
    assert dp.advertised(dp.visible_gpus(A100, c), dp.mig_strategy(c)) == expected


def test_a_mig_uuid_exposes_every_mig_device_of_its_gpu():
    one = A100[1]["mig_devices"][1]["uuid"]
    c = container(one, "mixed")
    assert [g["uuid"] for g in dp.visible_gpus(A100, c)] == [A100[1]["uuid"]]
    assert dp.advertised(dp.visible_gpus(A100, c), "mixed") == {
        "nvidia.com/gpu": 0,
        "nvidia.com/mig-3g.40gb": 1,
        "nvidia.com/mig-1g.10gb": 3,
    }


def test_strategy_from_args_and_privileged_sees_everything():
    c = {
        "args": ["--mig-strategy=single"],
        "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": A100[0]["uuid"]}],
    }
    assert dp.mig_strategy(c) == "single"
    assert dp.advertised(dp.visible_gpus(A100, c), "single") == {"nvidia.com/gpu": 2}
    assert len(dp.visible_gpus(A100, container(A100[0]["uuid"], privileged=True))) == 4


def test_a_fixture_is_read_again_when_its_file_changes(tmp_path, monkeypatch):
    monkeypatch.setattr(dp, "FIXTURES", tmp_path)
    monkeypatch.setattr(dp, "_FIXTURE_CACHE", {})
    path = tmp_path / "box.json"
    path.write_text('{"gpus": [{"uuid": "GPU-a", "index": 0}, {"uuid": "GPU-b", "index": 1, "lost": true}]}')
    first = dp.fixture_gpus("box")
    assert [g["uuid"] for g in first] == ["GPU-a"]
    first[0]["uuid"] = "changed by a caller"  # a caller's change does not reach the next caller
    assert [g["uuid"] for g in dp.fixture_gpus("box")] == ["GPU-a"]
    path.write_text('{"gpus": [{"uuid": "GPU-a", "index": 0}, {"uuid": "GPU-c", "index": 1}]}')
    assert [g["uuid"] for g in dp.fixture_gpus("box")] == ["GPU-a", "GPU-c"]
    path.write_text('{"nvml_init_error": "driver not loaded", "gpus": [{"uuid": "GPU-a", "index": 0}]}')
    assert dp.fixture_gpus("box") == []
    path.unlink()
    assert dp.fixture_gpus("box") == []


class _Answer:
    def __init__(self, items):
        self.data = json.dumps({"kind": "List", "items": items}).encode()


def test_the_simulators_of_one_tick_share_one_read_of_the_cluster(monkeypatch):
    """Both simulators of a supervisor tick read the nodes, DaemonSets and pods once, as plain JSON."""
    calls = []
    node = {"metadata": {"name": "lab-x", "labels": {dp.FIXTURE_LABEL: "dgx-h100"}}}
    ds = {
        "metadata": {"namespace": "kube-system", "name": "split-lab-x"},
        "spec": {
            "template": {"spec": {"containers": [{"image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.4"}]}}
        },
    }
    pod = {
        "metadata": {
            "namespace": "kube-system",
            "name": "p",
            "ownerReferences": [{"kind": "DaemonSet", "name": "split-lab-x"}],
        },
        "spec": {"nodeName": "lab-x"},
        "status": {"phase": "Running"},
    }

    def lister(name, items):
        def call(**kwargs):
            calls.append((name, kwargs))
            assert kwargs.pop("_preload_content") is False
            return _Answer(items)

        return call

    class Core:
        def __init__(self, api):
            self.list_node = lister("nodes", [node])
            self.list_pod_for_all_namespaces = lister("pods", [pod])

    class Apps:
        def __init__(self, api):
            self.list_daemon_set_for_all_namespaces = lister("daemonsets", [ds])

    monkeypatch.setattr(dp.client, "CoreV1Api", Core)
    monkeypatch.setattr(dp.client, "AppsV1Api", Apps)
    monkeypatch.setattr(dp, "_VIEW", {"at": None, "view": None})
    first = dp.cluster_view(object())
    assert dp.cluster_view(object()) is first  # the second simulator of the tick
    assert [name for name, _ in calls] == ["nodes", "daemonsets", "pods"]
    assert calls[0][1] == {"label_selector": dp.FIXTURE_LABEL}
    assert dp.running_plugins(object(), first) == {"lab-x": [(("kube-system", "split-lab-x"), pod)]}
    assert len(calls) == 3
    dp.cluster_view(object(), max_age=0)  # a read older than max_age is read again
    assert len(calls) == 6
