"""gpusplit_rollout_batch as Ansible's serial reads it (ansible-playbook itself: tests/unit/playbooks)."""

from __future__ import annotations

import pytest

from ansible_collections.gpusplit.k8s.plugins.plugin_utils import rollout
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.rollout import RolloutError


@pytest.mark.parametrize(
    ("value", "total", "want"),
    [
        (2, 10, 2),
        ("3", 10, 3),
        (" 3 ", 10, 3),
        (2.0, 10, 2),
        ("25%", 8, 2),
        ("10%", 3, 1),
        ("100%", 7, 7),
        # serial rounds down: 25% of 7 hosts is 1, 75% of 7 is 5, 99% of 20 is 19
        ("25%", 7, 1),
        ("75%", 7, 5),
        ("99%", 20, 19),
        ("1%", 20, 1),
        # as serial's float arithmetic has it: 29% of 100 hosts is 28
        ("29%", 100, 28),
        (" 25 %", 8, 2),
    ],
)
def test_batch_sizes(value, total, want):
    assert rollout.batch_size(value, total) == want


@pytest.mark.parametrize(
    "value",
    [
        0,
        -1,
        "0%",
        "150%",
        "abc",
        True,
        None,
        2.5,
        "2.5",
        # serial fails on these with "invalid literal for int()"
        "12.5%",
        "1e2%",
        "25% ",
        "%",
        "",
        float("nan"),
        float("inf"),
        # serial reads these as something else than they say (25%, 3, 2): refused, not guessed
        "2%5%",
        "+3",
        "\u0663",
        "\u00b2",
        ["1", "50%"],
        {"size": 2},
    ],
)
def test_bad_batch_sizes_are_refused(value):
    with pytest.raises(RolloutError, match="gpusplit_rollout_batch"):
        rollout.batch_size(value, 4)


def test_rollout_batches_cut_the_hosts_in_order():
    hosts = [f"h{i}" for i in range(7)]
    assert rollout.rollout_batches("25%", hosts) == [[h] for h in hosts]
    assert rollout.rollout_batches(3, hosts) == [hosts[:3], hosts[3:6], hosts[6:]]
    assert rollout.rollout_batches("100%", hosts) == [hosts]
