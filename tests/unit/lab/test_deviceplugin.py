"""The lab's device-plugin simulator: what it advertises for a plugin container (no cluster needed)."""

from __future__ import annotations

import json
import threading
import time

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
    """A LIST answer (``data``), or a WATCH answer streamed in pieces that split its lines anywhere."""

    def __init__(self, items=None, version="1", events=None):
        self.data = json.dumps(
            {"kind": "List", "metadata": {"resourceVersion": version}, "items": items}
        ).encode()
        text = "".join(json.dumps(event) + "\n" for event in events or [])
        self.pieces = [text[i : i + 7].encode() for i in range(0, len(text), 7)]
        self.released = False

    def stream(self, amt=None, decode_content=False):
        yield from self.pieces

    def release_conn(self):
        self.released = True


NODE = {"metadata": {"name": "lab-x", "labels": {dp.FIXTURE_LABEL: "dgx-h100"}}, "status": {}}
DS = {
    "metadata": {"namespace": "kube-system", "name": "split-lab-x"},
    "spec": {"template": {"spec": {"containers": [{"image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.4"}]}}},
}
POD = {
    "metadata": {
        "namespace": "kube-system",
        "name": "p",
        "resourceVersion": "5",
        "ownerReferences": [{"kind": "DaemonSet", "name": "split-lab-x"}],
    },
    "spec": {"nodeName": "lab-x"},
    "status": {"phase": "Running"},
}


def fake_api(calls, lists, watches):
    """API classes whose LIST calls answer ``lists[kind]`` and whose WATCH calls answer ``watches[kind]`` in turn
    (then block: the test's watch thread stays there)."""

    def method(kind):
        def call(**query):
            calls.append((kind, dict(query)))
            assert query.pop("_preload_content") is False
            if not query.pop("watch", False):
                return _Answer(lists[kind], version="3")
            assert query["allow_watch_bookmarks"] is True
            if watches[kind]:
                return watches[kind].pop(0)
            threading.Event().wait()

        return call

    class Core:
        def __init__(self, api):
            self.list_node = method("nodes")
            self.list_pod_for_all_namespaces = method("pods")

    class Apps:
        def __init__(self, api):
            self.list_daemon_set_for_all_namespaces = method("daemonsets")

    return Core, Apps


def wait_for(predicate, timeout=10.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.01)
    return False


def test_the_simulators_read_the_cluster_through_one_list_and_watch_per_kind(monkeypatch):
    """The supervisor's simulators read the nodes, DaemonSets and pods from a LIST and then a WATCH from its version
    (ClusterWatch), as plain JSON; a node's heartbeat is no change for them, a pod's event and a node's new
    capacity are; an expired watch (ERROR) lists again."""
    calls = []
    heartbeat = {**NODE, "status": {"conditions": [{"type": "Ready", "lastHeartbeatTime": "t2"}]}}
    capacity = {**NODE, "status": {"capacity": {"nvidia.com/gpu": "8"}}}
    pending = {
        **POD,
        "metadata": {**POD["metadata"], "name": "q", "resourceVersion": "7"},
        "status": {"phase": "Pending"},
    }
    watches = {
        "nodes": [_Answer(events=[{"type": "MODIFIED", "object": heartbeat}, {"type": "MODIFIED", "object": capacity}])],
        "daemonsets": [_Answer(events=[{"type": "ERROR", "object": {"kind": "Status", "code": 410}}])],
        "pods": [_Answer(events=[{"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "6"}}},
                                 {"type": "ADDED", "object": pending}, {"type": "DELETED", "object": pending}])],
    }  # fmt: skip
    core, apps = fake_api(calls, {"nodes": [NODE], "daemonsets": [DS], "pods": [POD]}, watches)
    monkeypatch.setattr(dp.client, "CoreV1Api", core)
    monkeypatch.setattr(dp.client, "AppsV1Api", apps)
    watch = dp.ClusterWatch(lambda: object(), retry=0.01).start()
    try:
        # every kind listed (daemonsets twice: its watch expired), then followed from the list's version
        assert wait_for(lambda: sum(1 for kind, q in calls if kind == "daemonsets" and "watch" not in q) >= 2)
        assert wait_for(lambda: sum(1 for _, q in calls if "watch" in q) >= 4)
        view, changes = watch.view()
        assert [n["status"] for n in view["nodes"]] == [capacity["status"]]
        assert view["daemonsets"] == [DS] and view["pods"] == [POD]
        # lists 4 (nodes, pods, daemonsets twice) + the capacity + the pod added and deleted; not the heartbeat
        assert changes == 7
        listed = [q for kind, q in calls if kind == "nodes" and "watch" not in q]
        assert listed == [{"label_selector": dp.FIXTURE_LABEL, "_preload_content": False}]
        followed = [q for kind, q in calls if kind == "pods" and "watch" in q]
        assert followed[0]["resource_version"] == "3"
        assert followed[1]["resource_version"] == "7"  # on from the last event's version
        assert dp.running_plugins(object(), view) == {"lab-x": [(("kube-system", "split-lab-x"), POD)]}
    finally:
        watch.stop()


def test_a_simulator_syncs_when_its_view_or_its_files_change_and_else_rests(monkeypatch, tmp_path):
    """A tick syncs only when the watch counted a change, a fixture file changed, or the resync time passed."""

    class Watch:
        changes = 1

        def view(self):
            return {"nodes": [NODE], "daemonsets": [], "pods": []}, self.changes

    class Counting(dp.TickedSimulator):
        def __init__(self, watch):
            super().__init__(interval=0, watch=watch)
            self.views = []

        def sync(self, view):
            self.views.append(view)

    fixtures = tmp_path / "fixtures"
    fixtures.mkdir()
    (fixtures / "dgx-h100.json").write_text("{}")
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("")
    monkeypatch.setattr(dp, "FIXTURES", fixtures)
    monkeypatch.setattr(dp, "KUBECONFIG", kubeconfig)
    watch = Watch()
    sim = Counting(watch)
    for _ in range(3):
        sim.tick()
    assert len(sim.views) == 1
    watch.changes = 2
    sim.tick()
    sim.tick()
    assert len(sim.views) == 2
    (fixtures / "dgx-h100.json").write_text('{"gpus": []}')  # a fixture edited: its size changed
    sim.tick()
    assert len(sim.views) == 3
    sim.next_resync = 0.0  # the resync time passed
    sim.tick()
    assert len(sim.views) == 4
