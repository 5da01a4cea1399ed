"""The lab's device-plugin simulator: what it advertises for a plugin container (no cluster needed)."""

from __future__ import annotations

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
