"""gpusplit_rollout_batch against what Ansible's ``serial`` really does with it.

playbooks/resplit.yml checks gpusplit_rollout_batch (step rollout_batch), then hands the same value to
``serial``. Reference: ansible-playbook itself, on plays of 1 to 20 hosts whose ``serial`` is templated from
a variable as resplit.yml's is; a callback prints each batch's hosts as ansible-playbook starts it (the
play's own ``ansible_play_batch``), so that the plays need no task. Every value the check accepts gives the
batches ``serial`` makes; every value on which ``serial`` fails is refused by the check before anything runs.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ansible_collections.gpusplit.k8s.plugins.plugin_utils import rollout
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.rollout import RolloutError

BIN = Path(sys.executable).parent
SIZES = range(1, 21)
PERCENTAGES = [1, 5, 10, 12, 15, 20, 25, 29, 30, 33, 34, 40, 49, 50, 51, 60, 66, 67, 75, 80, 90, 99, 100]
ACCEPTED = [f"{p}%" for p in PERCENTAGES] + [1, 2, 3, 7, 20, 25, "4", " 6 ", " 30 %", 2.0]
# serial takes these, reading them as something else than they say: the check refuses them
READ_OTHERWISE = {0: "all hosts at once", -1: "all hosts at once", "2%5%": "25%", 2.5: "2"}
# serial fails on these with Python's words
FAILING = ["12.5%", "1e2%", "25% "]
BATCH = re.compile(r"^BATCH\|([^|]*)\|(.*)$", re.MULTILINE)
CALLBACK = """
from ansible.plugins.callback import CallbackBase


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "batches"
    CALLBACK_NEEDS_ENABLED = True

    def v2_playbook_on_play_start(self, play):
        batch = play.get_variable_manager().get_vars(play=play)["ansible_play_batch"]
        self._display.display("BATCH|%s|%s" % (play.get_name(), ",".join(batch)))
"""


def hosts(count):
    return [f"h{i:02d}" for i in range(1, count + 1)]


def run_playbook(tmp_path, plays):
    """ansible-playbook on ``plays`` over the hosts h01..h20 (groups g1..g20: the first N hosts): its
    return code, output and {label: [batch, ...]} from the batches' messages."""
    inventory = {
        "all": {
            "hosts": {h: {"ansible_connection": "local"} for h in hosts(20)},
            "children": {f"g{n}": {"hosts": {h: None for h in hosts(n)}} for n in SIZES},
        }
    }
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory, sort_keys=False))
    (tmp_path / "play.yml").write_text(yaml.safe_dump(plays, sort_keys=False))
    (tmp_path / "ansible.cfg").write_text("[defaults]\n")
    (tmp_path / "callbacks").mkdir()
    (tmp_path / "callbacks" / "batches.py").write_text(CALLBACK)
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(tmp_path / "ansible.cfg"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_CALLBACK_PLUGINS": str(tmp_path / "callbacks"),
        "ANSIBLE_CALLBACKS_ENABLED": "batches",
    }
    env.pop("ANSIBLE_STDOUT_CALLBACK", None)
    proc = subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", str(tmp_path / "hosts.yml"), str(tmp_path / "play.yml")],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=900,
    )
    batches = {}
    for label, members in BATCH.findall(proc.stdout):
        batches.setdefault(label, []).append(members.split(","))
    return proc.returncode, proc.stdout + proc.stderr, batches


def play(label, size, value):
    """A play like resplit.yml's: ``serial`` templated from a variable."""
    return {
        "name": label,
        "hosts": f"g{size}",
        "gather_facts": False,
        "vars": {"rollout_batch": value},
        "serial": "{{ rollout_batch }}",
        "tasks": [],
    }


def label(size, value):
    return f"{size}:{value!r}"


def test_accepted_values_give_serials_batches_for_1_to_20_hosts(tmp_path):
    plays = [play(label(n, v), n, v) for n in SIZES for v in ACCEPTED]
    plays += [play(label(4, v), 4, v) for v in READ_OTHERWISE]
    rc, out, batches = run_playbook(tmp_path, plays)
    assert rc == 0, out[-3000:]
    for n in SIZES:
        for value in ACCEPTED:
            assert rollout.rollout_batches(value, hosts(n)) == batches[label(n, value)], (n, value)
            assert min(n, rollout.batch_size(value, n)) == len(batches[label(n, value)][0]), (n, value)
    # 25% of 7 hosts: serial rounds down to 1 host a batch
    assert batches[label(7, "25%")] == [[h] for h in hosts(7)]
    # what serial makes of the values the check refuses (they do not mean what they say)
    assert batches[label(4, 0)] == batches[label(4, -1)] == [hosts(4)]
    assert batches[label(4, "2%5%")] == [[h] for h in hosts(4)]
    assert batches[label(4, 2.5)] == [hosts(4)[:2], hosts(4)[2:]]
    for value in READ_OTHERWISE:
        with pytest.raises(RolloutError, match="gpusplit_rollout_batch"):
            rollout.batch_size(value, 4)


@pytest.mark.parametrize("value", FAILING)
def test_values_serial_fails_on_are_refused_by_the_check(tmp_path, value):
    rc, out, batches = run_playbook(tmp_path, [play(label(4, value), 4, value)])
    assert rc != 0 and not batches, out[-3000:]
    assert "invalid literal for int()" in out, out[-3000:]
    with pytest.raises(RolloutError, match="gpusplit_rollout_batch"):
        rollout.batch_size(value, 4)
