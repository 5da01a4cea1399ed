"""gpusplit_mig_geometry: checked against the placed split and the GPUs' MIG devices, before any change."""

from __future__ import annotations

import pytest

from ansible_collections.gpusplit.k8s.plugins.module_utils._split.planner import PlanError, plan_node

A100 = "NVIDIA A100-SXM4-80GB"


def gpu(i, name=A100, mig=None, profiles=(), memory=81920):
    return {
        "uuid": f"GPU-0000000{i}-0000-4000-8000-00000000000{i}",
        "index": i,
        "minor_number": i,
        "pci_bus_id": f"00000000:{0x18 + i:02X}:00.0",
        "name": name,
        "memory_total_mib": memory,
        "mig_mode": {"current": None if mig is None else ("enabled" if mig else "disabled"), "pending": None},
        "mig_devices": [
            {
                "uuid": f"MIG-0000000{i}-0000-4000-8000-0000000000{n:02d}",
                "index": n,
                "profile": p,
                "gpu_instance_id": n,
            }
            for n, p in enumerate(profiles)
        ],
        "health": {"status": "ok", "reasons": []},
        "processes": [],
    }


# GPUs 0, 1 for the host; 2 (2x 3g.40gb) and 3 (MIG disabled) for Kubernetes
FACTS = [
    gpu(0, mig=False),
    gpu(1, mig=False),
    gpu(2, mig=True, profiles=["3g.40gb", "3g.40gb"]),
    gpu(3, mig=False),
]
UUID = [g["uuid"] for g in FACTS]


def plan(geometry, facts=FACTS, strategy="mixed", mode="device_plugin", split=None):
    return plan_node(
        "gpu-a", facts, mode, split or {"host_count": 2}, mig_strategy=strategy, mig_geometry=geometry
    )


def refused(geometry, **kwargs):
    with pytest.raises(PlanError) as exc:
        plan(geometry, **kwargs)
    return exc.value.errors


def test_a_geometry_the_gpu_has_is_carried_by_the_plan():
    got = plan({UUID[2]: ["3g.40gb", "3g.40gb"]})
    assert got["mig_geometry"] == {UUID[2]: ["3g.40gb", "3g.40gb"]}
    assert plan(None)["mig_geometry"] is None


def test_a_host_gpu_is_refused_naming_it():
    [error] = refused({UUID[0]: ["3g.40gb"]})
    assert error.startswith(f"gpu-a: gpusplit_mig_geometry.{UUID[0]}: GPU {UUID[0]} (")
    assert (
        "is in the host share; gpusplit never changes the MIG geometry of a GPU outside the Kubernetes share"
        in error
    )


def test_a_gpu_without_mig_is_refused():
    facts = [gpu(0, "NVIDIA L40S", mig=False), gpu(1, "NVIDIA L40S", mig=False)]
    [error] = refused({UUID[1]: ["1g.10gb"]}, facts=facts, split={"host_count": 1})
    assert "(NVIDIA L40S) has no MIG" in error
    no_mode = [gpu(0), gpu(1)]  # an A100 whose facts show no MIG mode
    assert "has no MIG" in refused({UUID[1]: ["1g.10gb"]}, facts=no_mode, split={"host_count": 1})[0]


@pytest.mark.parametrize(
    ("profiles", "words"),
    [
        (["4g.40gb", "4g.40gb"], "take 8 compute slices and the GPU has 7"),
        (["7g.160gb"], "7g.160gb asks for more memory than the GPU's 80 GB"),
        (["3g"], "'3g' is not a MIG profile"),
        ([], "expected a list of MIG profiles"),
        ("3g.40gb", "expected a list of MIG profiles"),
    ],
)
def test_profiles_that_do_not_fit_are_refused(profiles, words):
    errors = refused({UUID[2]: profiles})
    assert any(words in e for e in errors), errors


def test_a_declared_geometry_the_gpu_does_not_have_is_planned_as_a_change_and_counted_as_declared():
    before = plan(None)
    assert before["resources"] == {"nvidia.com/gpu": 1, "nvidia.com/mig-3g.40gb": 2}
    assert before["mig_changes"] == []
    got = plan({UUID[2]: ["1g.10gb"] * 7, UUID[3]: ["3g.40gb", "4g.40gb"]})
    assert got["mig_changes"] == [
        {"uuid": UUID[2], "index": 2, "now": ["3g.40gb", "3g.40gb"], "want": ["1g.10gb"] * 7},
        {"uuid": UUID[3], "index": 3, "now": None, "want": ["3g.40gb", "4g.40gb"]},
    ]
    # GPU 2's two 3g.40gb go, GPU 3 stops being a whole GPU: what the plugin advertises after the apply
    assert got["resources"] == {
        "nvidia.com/gpu": 0,
        "nvidia.com/mig-1g.10gb": 7,
        "nvidia.com/mig-3g.40gb": 1,
        "nvidia.com/mig-4g.40gb": 1,
    }
    assert got["resource_name"] == [
        "nvidia.com/mig-1g.10gb",
        "nvidia.com/mig-3g.40gb",
        "nvidia.com/mig-4g.40gb",
    ]
    assert got["kubernetes_mig_uuids"] == []  # the apply destroys GPU 2's MIG devices
    # the GPUs keep the MIG devices they have now: the re-split maps the pods holding them to the GPU
    assert len(got["gpus"][2]["mig_uuids"]) == 2
    # a geometry the GPUs have is no change; single counts every MIG device as nvidia.com/gpu
    assert plan({UUID[2]: ["3g.40gb", "3g.40gb"]})["mig_changes"] == []
    whole = [gpu(i, mig=False) for i in range(4)]
    single = plan({UUID[3]: ["3g.40gb", "3g.40gb"]}, facts=whole, strategy="single")
    assert single["resources"] == {"nvidia.com/gpu": 3} and len(single["mig_changes"]) == 1
    assert "3g.40gb, 3g.40gb" not in " ".join(plan(None)["warnings"])


def test_bad_shapes_modes_and_strategies_are_refused():
    assert "expected a mapping of all or a GPU UUID" in refused([UUID[2]])[0]
    assert (
        "no GPU of this host has this UUID"
        in refused({"GPU-ffffffff-0000-4000-8000-000000000000": ["1g.10gb"]})[0]
    )
    none = refused({UUID[3]: ["1g.10gb"]}, strategy="none", split={"uuids": [UUID[3]]})
    assert "mig_strategy 'none' advertises whole GPUs only" in none[0]
    assert "mode dra has no MIG geometry" in refused({UUID[2]: ["3g.40gb", "3g.40gb"]}, mode="dra")[0]
    both = [*FACTS[:3], gpu(3, mig=True, profiles=["3g.40gb", "3g.40gb"])]
    single = refused({UUID[2]: ["3g.40gb", "3g.40gb"], UUID[3]: ["1g.10gb"]}, facts=both, strategy="single")
    assert any("single needs one MIG profile" in e for e in single), single
