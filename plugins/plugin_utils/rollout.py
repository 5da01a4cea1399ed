# Copyright: gpusplit contributors
# Apache-2.0
"""The batches of playbooks/resplit.yml: gpusplit_rollout_batch read as Ansible's ``serial`` reads it.

resplit.yml checks the value here (step rollout_batch) before anything changes, then gives the same value
to ``serial``. So this accepts only what ``serial`` reads as it is written, and makes the same batches;
tests/unit/playbooks/test_rollout_batch_serial.py compares both with ansible-playbook itself.
"""

from __future__ import annotations

import math

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError, ascii_int, type_name


class RolloutError(GpusplitError):
    """gpusplit_rollout_batch refused."""

    title = "rollout"


def batch_size(value, total):
    """gpusplit_rollout_batch as the number of hosts in each batch of ``total`` hosts, as ``serial`` makes them:
    a whole number of hosts (>= 1), or a whole percentage from 1% to 100% of ``total`` rounded down, at least 1
    (25% of 7 hosts is 1). ASCII digits, blanks around them, the ``%`` last. Refused: what ``serial`` fails on
    with Python's words (``"12.5%"``, ``"1e2%"``, ``"25% "``) and what it reads otherwise than written (``0``
    and ``-1``: all hosts at once; ``"2%5%"``: 25%; ``2.5``: 2; non-ASCII digits), ``"0%"`` and ``"150%"``."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise RolloutError(
            f"gpusplit_rollout_batch: expected a number or a percentage, got {type_name(value)}"
        )
    if isinstance(value, str) and value.endswith("%"):
        percent = ascii_int(value[:-1])
        if percent is not None and 1 <= percent <= 100:
            # serial's rounding: the share of the hosts as a float, cut to a whole number, at least 1
            return int(percent / 100.0 * total) or 1
    else:
        count = ascii_int(value) if isinstance(value, str) else value
        if isinstance(count, float) and math.isfinite(count) and count == int(count):
            count = int(count)
        if isinstance(count, int) and count >= 1:
            return count
    raise RolloutError(
        f"gpusplit_rollout_batch: {value!r} is neither a whole number >= 1 nor a percentage "
        "from 1% to 100% in whole percent (ASCII digits, the % last)"
    )


def rollout_batches(value, hosts):
    """``hosts`` cut into the batches of :func:`batch_size` in order (the last one takes what is left)."""
    size = batch_size(value, len(hosts))
    return [list(hosts[i : i + size]) for i in range(0, len(hosts), size)]
