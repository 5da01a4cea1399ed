"""The host side decided on the controller, per host and for the fleet (plugins/plugin_utils/host_play.py)."""

from __future__ import annotations

import pytest

from ansible_collections.gpusplit.k8s.plugins.module_utils._split.planner import plan_node
from ansible_collections.gpusplit.k8s.plugins.plugin_utils import host_play
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.host_files_render import HostShareError
from ansible_collections.gpusplit.k8s.tests.unit.gpufacts import h100


def gpu(i):
    return h100(i)


GPUS = [gpu(i) for i in range(4)]
SETTINGS = {"accept-nvidia-visible-devices-envvar-when-unprivileged": False}


def node(host="n1", mode="device_plugin", split=None):
    return plan_node(host, GPUS, mode, {"host_count": 1} if split is None and mode != "none" else split)


def test_a_split_node_is_hardened_with_volume_mounts():
    run = host_play.host_play(node(), ["trainer.service"], plugin_settings={"hardening": "volume-mounts"})
    assert run["harden"] is True and run["split_plugin"] is True and run["refusal"] == ""
    assert run["toolkit_config"] == "/etc/nvidia-container-runtime/config.toml"
    assert run["toolkit_left_alone"] == "" and run["systemd_reload"] is True
    assert [d["unit"] for d in run["share"]["dropins"]] == ["trainer.service"]


def test_a_hardening_that_blinds_the_split_plugin_is_refused_by_host():
    run = host_play.host_play(node(), plugin_settings={"hardening": "envvar"})
    assert run["refusal"].startswith("n1: gpusplit_toolkit_hardening makes the NVIDIA Container Toolkit")
    assert "hardening=envvar" in run["refusal"]


@pytest.mark.parametrize(
    ("kwargs", "why"),
    [
        ({"toolkit_hardening": "no"}, "gpusplit_toolkit_hardening is false"),
        ({"mode": "none"}, "mode none: gpusplit does not split this node"),
    ],
)
def test_why_the_toolkit_is_left_alone(kwargs, why):
    mode = kwargs.pop("mode", "device_plugin")
    run = host_play.host_play(node(mode=mode), **kwargs)
    assert run["harden"] is False and run["toolkit_left_alone"] == why


def test_a_scratch_root_never_reloads_systemd_and_holds_every_path():
    run = host_play.host_play(node(), root="/srv/lab/n1/", toolkit_config_path="/opt/toolkit/config.toml")
    assert run["systemd_reload"] is False
    assert run["toolkit_config"] == "/srv/lab/n1/opt/toolkit/config.toml"
    assert run["share"]["state_path"] == "/srv/lab/n1/etc/gpusplit/host-state.json"
    assert run["obsolete_dirs"] == ["/srv/lab/n1/var/cache/gpusplit"]


def test_the_obsolete_folders_are_part_of_the_digest(monkeypatch):
    """A record left by a version that had no obsolete folder to remove does not match: the first run after an
    upgrade calls gpu_host_files, which removes them."""
    run = host_play.host_play(node())
    assert run["obsolete_dirs"] == ["/var/cache/gpusplit"]
    monkeypatch.setattr(host_play, "OBSOLETE_DIRS", ())
    earlier = host_play.host_play(node())
    assert earlier["obsolete_dirs"] == [] and earlier["digest"] != run["digest"]
    monkeypatch.undo()
    assert host_play.host_play(node(), discovery=record(earlier))["unchanged"] is False


def test_the_digest_follows_every_input_and_nothing_else():
    base = host_play.host_play(node(), ["a.service"], toolkit_settings=SETTINGS)
    assert host_play.host_play(node(), ["a.service"], toolkit_settings=SETTINGS)["digest"] == base["digest"]
    others = [
        host_play.host_play(node(), ["b.service"], toolkit_settings=SETTINGS),
        host_play.host_play(node(split={"host_count": 2}), ["a.service"], toolkit_settings=SETTINGS),
        host_play.host_play(node(), ["a.service"], toolkit_backup=False, toolkit_settings=SETTINGS),
        host_play.host_play(node(), ["a.service"], toolkit_settings={**SETTINGS, "x": 1}),
        host_play.host_play(node(), ["a.service"], root="/srv/x", toolkit_settings=SETTINGS),
    ]
    assert len({o["digest"] for o in others} | {base["digest"]}) == len(others) + 1


def record(run, **changes):
    return {
        "host_state": {"path": run["share"]["state_path"], "digest": run["digest"], "intact": True, **changes}
    }


def test_unchanged_only_with_this_runs_digest_intact_at_this_path():
    run = host_play.host_play(node())
    assert host_play.host_play(node(), discovery=record(run))["unchanged"] is True
    for discovery in (
        None,
        {},
        {"host_state": None},
        record(run, intact=False),
        record(run, digest="other"),
        record(run, path="/elsewhere/host-state.json"),
    ):
        assert host_play.host_play(node(), discovery=discovery)["unchanged"] is False, discovery


def test_the_fleet_takes_each_hosts_own_variables_and_the_defaults_for_the_rest():
    plan = {"nodes": {"n1": node("n1"), "n2": node("n2")}}
    defaults = {"gpusplit_host_services": ["default.service"], "gpusplit_host_root": "/"}
    first = host_play.host_play_fleet(
        plan, {"n1": {}, "n2": {"gpusplit_host_services": ["own.service"]}}, defaults
    )
    assert first["pending"] == ["n1", "n2"] and first["unchanged"] == []
    assert [d["unit"] for d in first["runs"]["n1"]["share"]["dropins"]] == ["default.service"]
    assert [d["unit"] for d in first["runs"]["n2"]["share"]["dropins"]] == ["own.service"]
    hostvars = {
        "n1": {"gpu_discovery_result": record(first["runs"]["n1"])},
        "n2": {
            "gpusplit_host_services": ["other.service"],
            "gpu_discovery_result": record(first["runs"]["n2"]),
        },
    }
    again = host_play.host_play_fleet(plan, hostvars, defaults)
    assert again["unchanged"] == ["n1"] and again["pending"] == ["n2"]


def test_the_fleet_refuses_every_bad_host_at_once():
    plan = {"nodes": {"n1": node("n1"), "n2": node("n2"), "gone": node("gone")}}
    hostvars = {
        "n1": {"gpusplit_toolkit_hardening": "maybe"},
        "n2": {"gpusplit_plugin_settings": {"hardening": "sideways"}},
    }
    with pytest.raises(HostShareError) as err:
        host_play.host_play_fleet(plan, hostvars)
    text = "\n".join(err.value.errors)
    assert "host 'gone' of the plan is not in the inventory" in text
    assert "n1: gpusplit_toolkit_hardening: expected true or false, got string 'maybe'" in text
    assert "n2: gpusplit_plugin_settings: settings.hardening 'sideways' is not one of" in text
