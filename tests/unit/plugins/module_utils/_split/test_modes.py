"""The split-mode table: its helpers, its consistency, and that a new mode needs only its entry.

The throwaway-mode tests add a copy of each mode under another name (``<mode>_canary``) to the
table and check that the planner, verify, the renderers, the host share and the GPU Operator
checks treat it exactly like the mode it copies: nothing outside the table compares mode names.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ansible_collections.gpusplit.k8s.plugins.filter.split_modes import FilterModule
from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError
from ansible_collections.gpusplit.k8s.plugins.module_utils._split import modes, verify
from ansible_collections.gpusplit.k8s.plugins.module_utils._split.planner import PlanError, plan_fleet
from ansible_collections.gpusplit.k8s.plugins.plugin_utils import gpu_operator_checks, host_files_render
from ansible_collections.gpusplit.k8s.plugins.plugin_utils import split_render as render

ROOT = Path(__file__).resolve().parents[5]
CANARY = "_canary"
UUIDS = [f"GPU-0000000{i}-1111-2222-3333-444444444444" for i in range(4)]
MIGS = [f"MIG-0000000{i}-aaaa-bbbb-cccc-dddddddddddd" for i in range(2)]


# --------------------------------------------------------------------------------------------
# the table and its helpers


def test_names_are_the_table_in_order():
    assert modes.MODE_NAMES == tuple(modes.MODES) == ("device_plugin", "gpu_operator", "dra", "none")
    assert all(name == mode.name for name, mode in modes.MODES.items())


def test_get_mode_refuses_an_unknown_mode_naming_where():
    assert modes.get_mode("dra").kubernetes_share == modes.SHARE_DRA
    with pytest.raises(
        GpusplitError, match=r"^h1: mode 'bogus' is not one of device_plugin, gpu_operator, dra, none$"
    ):
        modes.get_mode("bogus", where="h1")
    with pytest.raises(
        PlanError, match=r"^h1: mode 'bogus' is not one of device_plugin, gpu_operator, dra, none$"
    ):
        plan_fleet({"h1": {"facts": [], "mode": "bogus", "split": {}}})
    with pytest.raises(GpusplitError, match="mode None is not one of"):
        modes.get_mode(None)
    assert modes.find_mode(["dra"]) is None and modes.find_mode("none") is modes.MODES["none"]


def test_mode_has_and_names_where():
    assert modes.mode_has("gpu_operator", "operator_managed")
    assert not modes.mode_has("bogus", "split_plugin")
    assert modes.names_where(split_plugin=True) == ("device_plugin", "gpu_operator")
    assert modes.names_where(kubernetes_share=modes.SHARE_DRA) == ("dra",)
    assert modes.names_where(hardens_host=False) == ("none",)
    with pytest.raises(GpusplitError, match="split modes have no field bogus"):
        modes.names_where(bogus=1)


def test_as_dicts_is_plain_data():
    table = modes.as_dicts()
    assert list(table) == list(modes.MODE_NAMES)
    assert table["gpu_operator"]["renders"] == ["ClusterPolicy", "DaemonSet"]
    assert json.loads(json.dumps(table)) == table


def test_each_entry_is_consistent():
    """What a mode renders follows from its other fields (one entry cannot contradict itself)."""
    for mode in modes.MODES.values():
        assert ("DaemonSet" in mode.renders) == mode.split_plugin, mode.name
        assert ("ClusterPolicy" in mode.renders) == mode.operator_managed, mode.name
        assert ("DeviceTaintRule" in mode.renders) == (mode.kubernetes_share == modes.SHARE_DRA), mode.name
        assert mode.advertises_resources == (mode.kubernetes_share == modes.SHARE_DEVICE_PLUGIN), mode.name
        assert mode.isolate in (modes.ISOLATE_DEVICE_TAINT, modes.ISOLATE_REPLAN, modes.ISOLATE_NOTHING)
        if mode.kubernetes_share == modes.SHARE_NONE:
            assert mode.isolate == modes.ISOLATE_NOTHING and not mode.renders, mode.name


def test_the_split_modes_filter():
    split_modes = FilterModule().filters()["split_modes"]
    assert list(split_modes({})) == list(modes.MODE_NAMES)
    assert list(split_modes({"hardens_host": True})) == ["device_plugin", "gpu_operator", "dra"]
    assert list(split_modes({"isolate": "replan"})) == ["device_plugin", "gpu_operator"]
    assert split_modes({"kubernetes_share": "dra"})["dra"]["device_names_by_minor"] is True
    from ansible.errors import AnsibleFilterError

    with pytest.raises(
        AnsibleFilterError, match="gpusplit split modes refused:\n- split modes have no field"
    ):
        split_modes({"hardening": True})
    with pytest.raises(AnsibleFilterError, match="expected a mapping"):
        split_modes("dra")


# --------------------------------------------------------------------------------------------
# nothing outside the table compares mode names


MODE_NAME = r"(?:device_plugin|gpu_operator|dra|none)"
COMPARISONS = (
    re.compile(r"mode\S*\s*(?:==|!=)\s*['\"]" + MODE_NAME + r"['\"]"),
    re.compile(r"mode\S*\s*(?:not\s+)?in\s*[\[(]\s*['\"]" + MODE_NAME + r"['\"]"),
    re.compile(r"selectattr\('mode',\s*'(?:equalto|in)',\s*\[?'" + MODE_NAME + r"'"),
)
READERS = (
    "plugins/module_utils/_split/planner.py",
    "plugins/module_utils/_split/selectors.py",
    "plugins/module_utils/_split/verify.py",
    "plugins/plugin_utils/split_render.py",
    "plugins/plugin_utils/host_files_render.py",
    "plugins/plugin_utils/gpu_operator.py",
    "plugins/plugin_utils/gpu_operator_checks.py",
    "roles/gpu_host/tasks/main.yml",
    "playbooks/isolate_gpu.yml",
    "playbooks/dra.yml",
)


@pytest.mark.parametrize("path", READERS)
def test_readers_of_the_table_compare_no_mode_names(path):
    text = (ROOT / path).read_text()
    found = [m.group(0) for pattern in COMPARISONS for m in pattern.finditer(text)]
    assert not found, f"{path} compares mode names instead of reading the mode table: {found}"


# --------------------------------------------------------------------------------------------
# a throwaway mode: one entry, nothing else


@pytest.fixture(params=["device_plugin", "gpu_operator", "dra", "none"])
def canary(request, monkeypatch):
    """Adds ``<mode>_canary``, a copy of ``<mode>``, to the table; returns (mode, its copy's name)."""
    base = request.param
    name = base + CANARY
    table = dict(modes.MODES)
    table[name] = table[base]._replace(name=name, description="a throwaway copy of " + base)
    monkeypatch.setattr(modes, "MODES", table)
    monkeypatch.setattr(modes, "MODE_NAMES", tuple(table))
    return base, name


def gpu_facts(processes=None):
    """Four H100s; the last one has MIG enabled with two 1g.10gb devices."""
    out = []
    for i, uuid in enumerate(UUIDS):
        mig = i == 3
        out.append(
            {
                "uuid": uuid,
                "index": i,
                "minor_number": i,
                "pci_bus_id": f"00000000:{0x18 + i:02X}:00.0",
                "name": "NVIDIA H100 80GB HBM3",
                "memory_total_mib": 81559,
                "mig_mode": {"current": "enabled" if mig else "disabled", "pending": None},
                "mig_devices": [
                    {
                        "uuid": m,
                        "index": n,
                        "profile": "1g.10gb",
                        "gpu_instance_id": n + 1,
                        "compute_instance_id": 0,
                        "memory_total_mib": 9856,
                    }
                    for n, m in enumerate(MIGS)
                ]
                if mig
                else [],
                "health": {"status": "ok", "reasons": []},
                "processes": (processes or {}).get(i, []),
            }
        )
    return out


def outcome(func):
    """("ok", result) or ("refused", messages)."""
    try:
        return ["ok", func()]
    except GpusplitError as exc:
        return ["refused", exc.errors]


def as_base(value, base, name):
    """``value`` with the copy's name written as the mode it copies."""
    return json.loads(json.dumps(value, sort_keys=True).replace(name, base))


def other_mode(mode):
    """A second node's mode, never the one under test (the fleet summary counts nodes per mode)."""
    return "device_plugin" if mode.startswith("none") else "none"


def fleet(mode, split, mig_strategy):
    return {
        "n1": {"facts": gpu_facts(), "mode": mode, "split": split, "mig_strategy": mig_strategy},
        "n2": {"facts": gpu_facts(), "mode": other_mode(mode), "split": {"count": 1}},
    }


SCENARIOS = [
    (split, strategy)
    for split in ({"host_count": 1}, {"count": 2}, {"uuids": [UUIDS[0], *MIGS]}, {"host_uuids": MIGS})
    for strategy in ("none", "single", "mixed")
]


@pytest.mark.parametrize(("split", "mig_strategy"), SCENARIOS)
def test_the_planner_treats_a_throwaway_mode_like_the_mode_it_copies(canary, split, mig_strategy):
    base, name = canary
    want = outcome(lambda: plan_fleet(fleet(base, split, mig_strategy)))
    got = outcome(lambda: plan_fleet(fleet(name, split, mig_strategy)))
    assert as_base(got, base, name) == as_base(want, base, name)
    if got[0] == "ok":
        assert got[1]["nodes"]["n1"]["mode"] == name


def cluster_states(plan):
    """(nodes, pods, facts) the way verify reads them: as planned, and the ways it can go wrong."""
    n1 = plan["nodes"]["n1"]

    def node(resources):
        return {
            "metadata": {"name": "n1"},
            "status": {"allocatable": {k: str(v) for k, v in resources.items()}},
        }

    def pod(name, ours):
        labels = {"app.kubernetes.io/name": "gpusplit-device-plugin"} if ours else {}
        return {
            "metadata": {"name": name, "labels": labels},
            "spec": {"nodeName": "n1", "containers": [{"image": "nvcr.io/nvidia/k8s-device-plugin:v0.20.0"}]},
            "status": {"phase": "Running"},
        }

    host_proc = {"pid": 7, "name": "trainer", "in_container": False}
    kube_index = UUIDS.index(n1["kubernetes_uuids"][0]) if n1["kubernetes_uuids"] else 0
    return [
        ([node(n1["resources"])], [pod("dp", True)], {"n1": gpu_facts()}),
        ([node({})], [], {"n1": gpu_facts()}),
        ([node({"nvidia.com/gpu": 4})], [pod("stock", False)], {}),
        ([node({})], [], {"n1": gpu_facts({kube_index: [host_proc]})}),
        ([], [], {}),
    ]


@pytest.mark.parametrize("mig_strategy", ["none", "mixed"])
def test_verify_treats_a_throwaway_mode_like_the_mode_it_copies(canary, mig_strategy):
    base, name = canary
    split = {"host_count": 1} if mig_strategy == "mixed" else {"host_uuids": [UUIDS[3]]}
    want_plan = plan_fleet(fleet(base, split, mig_strategy))
    got_plan = plan_fleet(fleet(name, split, mig_strategy))
    for want_state, got_state in zip(cluster_states(want_plan), cluster_states(got_plan), strict=True):
        want = verify.verify_fleet(want_plan, *want_state)
        got = verify.verify_fleet(got_plan, *got_state)
        assert as_base(got, base, name) == as_base(want, base, name)
        squeeze = re.compile(r" +")  # the longer name widens the MODE column
        assert squeeze.sub(" ", verify.report_table(got).replace(name, base)) == squeeze.sub(
            " ", verify.report_table(want)
        )


def test_verify_refuses_a_plan_with_a_mode_the_table_does_not_have():
    plan = plan_fleet(fleet("device_plugin", {"count": 1}, "none"))
    plan["nodes"]["n1"]["mode"] = "gone"
    with pytest.raises(GpusplitError, match=r"n1: node plan: mode 'gone' is not one of"):
        verify.verify_fleet(plan, [], [], {})
    with pytest.raises(GpusplitError, match="expected a fleet plan with a 'nodes' mapping"):
        verify.require_fleet_plan({"n1": {}})


@pytest.mark.parametrize("operator_managed", [False, True])
def test_the_rendered_plan_treats_a_throwaway_mode_like_the_mode_it_copies(canary, operator_managed):
    base, name = canary
    settings = {"namespace": "gpusplit"}
    want_plan = plan_fleet(fleet(base, {"host_count": 1}, "mixed"))
    got_plan = plan_fleet(fleet(name, {"host_count": 1}, "mixed"))
    want = render.render_fleet(want_plan, settings)
    got = render.render_fleet(got_plan, settings)
    assert as_base(got, base, name) == as_base(want, base, name)
    kinds = [o["kind"] for o in got]
    assert kinds.count("DaemonSet") == modes.mode_has(name, "split_plugin") + modes.mode_has(
        other_mode(name), "split_plugin"
    )
    want_nodes = render.render_node_patches(want_plan, operator_managed)
    got_nodes = render.render_node_patches(got_plan, operator_managed)
    assert as_base(got_nodes, base, name) == as_base(want_nodes, base, name)


def test_host_share_and_operator_checks_treat_a_throwaway_mode_like_the_mode_it_copies(canary):
    base, name = canary
    want_plan = plan_fleet(fleet(base, {"host_count": 1}, "mixed"))
    got_plan = plan_fleet(fleet(name, {"host_count": 1}, "mixed"))
    want = outcome(lambda: host_files_render.host_files(want_plan["nodes"]["n1"], ["trainer"], "/"))
    got = outcome(lambda: host_files_render.host_files(got_plan["nodes"]["n1"], ["trainer"], "/"))
    assert as_base(got, base, name) == as_base(want, base, name)
    kube = dict(want_plan["nodes"]["n1"], host_uuids=[], kubernetes_uuids=[UUIDS[0]], mode=name)
    assert outcome(lambda: host_files_render.host_files(kube))[0] == (
        "refused" if modes.MODES[base].kubernetes_share == modes.SHARE_NONE else "ok"
    )
    for check in (
        lambda plan: [p["host"] for p in gpu_operator_checks.operator_nodes(plan)],
        lambda plan: gpu_operator_checks.fleet_mig_strategy(plan),
        lambda plan: gpu_operator_checks.check_plugin_hardening(plan, "envvar", True),
        lambda plan: gpu_operator_checks.mig_config_labels(plan, {"n1": "all-1g.10gb"}),
    ):
        assert as_base(check(got_plan), base, name) == as_base(check(want_plan), base, name)
