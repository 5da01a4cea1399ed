"""Running ansible-playbook in the lab tests and reading its text output, once for every test module."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def ansible_playbook(
    playbook: str, inventory, *extra: str, timeout: int = 600
) -> subprocess.CompletedProcess:
    """playbooks/<playbook> against ``inventory`` with the repository's ansible.cfg, no colour."""
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
    return subprocess.run(
        ["ansible-playbook", "-i", str(inventory), str(ROOT / "playbooks" / playbook), *extra],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=timeout,
    )


def ansible_module(
    host: str,
    module: str,
    args: str,
    inventory,
    timeout: int = 300,
    check: bool = True,
    options: tuple[str, ...] = (),
) -> dict:
    """One module on one inventory host, ad hoc as a user runs it; its result (JSON callback).

    ``check``: the command must succeed (``check=False`` for a test of the module's failure).
    ``options``: more options of ``ansible`` (``--check``, ``--diff``)."""
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1",
        "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json",
    }
    proc = subprocess.run(
        ["ansible", "-i", str(inventory), host, "-m", module, "-a", args, *options],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=timeout,
        check=False,
    )
    assert proc.returncode == 0 or not check, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"][host]


def inventory_copy(tmp_path: Path, edit, order=None) -> Path:
    """A copy of the lab inventory with ``edit(gpu_nodes hosts)`` applied, the hosts in ``order`` if given."""
    import shutil

    import yaml

    dest = tmp_path / "inventory"
    shutil.copytree(ROOT / "inventory" / "lab", dest)
    doc = yaml.safe_load((dest / "hosts.yml").read_text())
    hosts = doc["all"]["children"]["gpu_nodes"]["hosts"]
    edit(hosts)
    if order:
        doc["all"]["children"]["gpu_nodes"]["hosts"] = {h: hosts[h] for h in order}
    (dest / "hosts.yml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return dest


def recap(output: str) -> dict[str, dict[str, int]]:
    """PLAY RECAP as {host: {ok, changed, unreachable, failed, skipped, rescued, ignored}}."""
    out = {}
    for line in output.split("PLAY RECAP", 1)[1].splitlines():
        m = re.match(r"^(\S+)\s+:\s+(.*)$", line.strip())
        if m:
            out[m.group(1)] = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", m.group(2))}
    return out


def changed_tasks(output: str) -> list[str]:
    """'TASK [...] -> host' for every task that reported changed."""
    out, task = [], None
    for line in output.splitlines():
        if line.startswith("TASK ["):
            task = line.split("]", 1)[0][6:]
        elif line.startswith("changed: ["):
            out.append(f"{task} -> {line[10:].split(']', 1)[0]}")
    return out
