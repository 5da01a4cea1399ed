"""The lab's SSH host (lab/sshd.py, inventory/lab host lab-ssh-01): a real OpenSSH sshd on the lab's
loopback address, reached as the unprivileged user gpusplit-lab with the lab's client key, the host
key checked, and root through sudo (become), on an older Python as a managed host has it.

Only the connection is real here: the host is this machine, and its GPUs are simulated like every
lab host's (fixture l40s-pair, the stand-in nvidia-smi and NVML binding, .lab/hosts/lab-ssh-01, a
kwok node). site.yml, verify.yml and diagnose.yml run through it and change nothing the second time.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from ansible_output import ansible_playbook, changed_tasks, recap

from lab import components as C
from lab import sshd

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
INVENTORY = ROOT / "inventory" / "lab"
HOST = "lab-ssh-01"
# the managed host's Python for the playbook runs: pyenv's 3.9 (RHEL 9, Rocky 9)
PYTHON39 = Path.home() / ".pyenv" / "versions" / "3.9.18" / "bin" / "python3.9"
# the first GPU by PCI bus id of tests/fixtures/gpus/l40s-pair.json stays with the host (host_count: 1)
HOST_GPU = "GPU-3c1f6a52-9e0b-4d7c-8a21-5b6e0f4d9a10"
KUBERNETES_GPU = "GPU-b84e27d9-1f63-4a05-9c3e-7d2a6c185e4b"


def ssh(*command: str, key: Path = sshd.CLIENT_KEY, known_hosts: Path = sshd.KNOWN_HOSTS, extra=()):
    argv = [
        "ssh",
        "-F", "/dev/null",
        "-p", str(sshd.PORT),
        "-i", str(key),
        "-o", "IdentitiesOnly=yes",
        "-o", "BatchMode=yes",
        "-o", f"UserKnownHostsFile={known_hosts}",
        "-o", "GlobalKnownHostsFile=/dev/null",
        "-o", "StrictHostKeyChecking=yes",
        "-o", "ConnectTimeout=10",
        *extra,
        f"{sshd.USER}@{C.HOST}",
        *command,
    ]  # fmt: skip
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


def listening_ports(pid: int) -> set[tuple[str, int]]:
    """(hex address, port) of the LISTEN sockets pid holds, from /proc."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = fd.readlink().as_posix()
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            parts = line.split()
            if parts[3] == "0A" and parts[9] in inodes:
                address, port = parts[1].split(":")
                found.add((address, int(port, 16)))
    return found


def hex_address(dotted: str) -> str:
    return "".join(f"{int(b):02X}" for b in reversed(dotted.split(".")))


@pytest.fixture(scope="module")
def ssh_host(lab):
    health = sshd.health()
    assert health["healthy"], f"the lab's sshd is not running after `lab up`: {health}"
    return health


def test_sshd_listens_on_the_lab_address_only(ssh_host):
    assert listening_ports(ssh_host["pid"]) == {(hex_address(C.HOST), sshd.PORT)}
    config = sshd.CONFIG.read_text()
    for line in ("PasswordAuthentication no", "AuthenticationMethods publickey", f"AllowUsers {sshd.USER}"):
        assert line in config.splitlines()


def test_key_login_as_the_unprivileged_user_and_sudo_to_root(ssh_host):
    proc = ssh("id -un; sudo -n id -un")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [sshd.USER, "root"]


def test_no_password_login_and_no_unknown_host_key(ssh_host, tmp_path):
    denied = ssh("true", extra=("-o", "PreferredAuthentications=password,keyboard-interactive"))
    assert denied.returncode == 255 and "Permission denied (publickey)" in denied.stderr, denied.stderr
    other_key = tmp_path / "other"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other_key)], check=True)
    assert ssh("true", key=other_key).returncode == 255
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    unknown = ssh("true", known_hosts=empty)
    assert unknown.returncode == 255 and "Host key verification failed" in unknown.stderr, unknown.stderr


def test_the_inventory_reaches_it_over_ssh_with_become(ssh_host):
    proc = subprocess.run(
        ["ansible-inventory", "-i", str(INVENTORY), "--host", HOST],
        capture_output=True, text=True, cwd=ROOT, env=ENV, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    hostvars = json.loads(proc.stdout)
    assert hostvars["ansible_connection"] == "ssh" and hostvars["ansible_become"] is True
    assert hostvars["ansible_user"] == sshd.USER and hostvars["ansible_port"] == sshd.PORT


def test_stop_leaves_nothing_listening_and_start_again(ssh_host):
    assert ssh("true").returncode == 0
    listener = sshd.pid()
    message = sshd.stop()
    try:
        assert "stopped sshd" in message
        assert sshd.pid() is None and not sshd.PIDFILE.exists()
        assert not Path(f"/proc/{listener}").exists() or sshd.descendants(listener) == []
        ok, detail = sshd.probe()
        assert not ok and "refused" in detail.lower(), detail
    finally:
        print(sshd.start())
    assert sshd.health()["healthy"]


def run(playbook: str, out: Path, python: Path, *extra: str):
    proc = ansible_playbook(
        playbook,
        INVENTORY,
        "--limit", f"{HOST},localhost",
        "-e", f"gpusplit_lab_ssh_python={python}",
        "-e", f"gpusplit_out_dir={out}",
        *extra,
    )  # fmt: skip
    assert proc.returncode == 0, f"{playbook} failed:\n{proc.stdout[-6000:]}\n{proc.stderr[-3000:]}"
    return proc


def sshd_log_size() -> int:
    return sshd.LOG.stat().st_size if sshd.LOG.exists() else 0


@pytest.mark.skipif(
    not PYTHON39.is_file(), reason=f"needs pyenv's Python 3.9 ({PYTHON39}) as the SSH host's interpreter"
)
def test_site_verify_diagnose_through_sshd_with_become_on_python39(ssh_host, tmp_path, kubectl):
    out = tmp_path / "out"
    log_from = sshd_log_size()
    first = run("site.yml", out, PYTHON39)
    # it went through the lab's sshd, as gpusplit-lab with the lab's key (the login itself may be
    # older: ansible keeps its connection open for a minute and runs each task as a new session)
    log = sshd.LOG.read_bytes().decode(errors="replace")
    assert f"Accepted publickey for {sshd.USER}" in log, log[-2000:]
    assert f"Starting session: command for {sshd.USER}" in log[log_from:], log[-2000:]
    # written with become: as root, into a host root that gpusplit-lab may not write to
    env_file = C.LAB / "hosts" / HOST / "etc" / "gpusplit" / "host-gpus.env"
    assert env_file.stat().st_uid == 0
    env = dict(
        line.split("=", 1) for line in env_file.read_text().splitlines() if "=" in line and line[0] != "#"
    )
    assert env["CUDA_VISIBLE_DEVICES"] == HOST_GPU and env["GPUSPLIT_KUBERNETES_GPUS"] == KUBERNETES_GPU
    toolkit = C.LAB / "hosts" / HOST / "etc" / "nvidia-container-runtime" / "config.toml"
    assert "accept-nvidia-visible-devices-envvar-when-unprivileged = false" in toolkit.read_text()
    gpus = json.loads((out / "gpus.json").read_text())
    assert [g["uuid"] for g in gpus[HOST]["gpus"]] == [HOST_GPU, KUBERNETES_GPU], gpus[HOST]
    # the discovery environment (the NVML stand-in on PYTHONPATH) reached the module through sudo
    assert gpus[HOST]["backend"] == "nvml", gpus[HOST]["msg"]
    assert recap(first.stdout)[HOST]["failed"] == 0

    second = run("site.yml", out, PYTHON39)
    assert all(r["changed"] == 0 and r["failed"] == 0 for r in recap(second.stdout).values()), (
        recap(second.stdout),
        changed_tasks(second.stdout),
    )
    # the GPU hosts left out by --limit keep their plugins and are named; the control-plane host,
    # which has no GPUs, is not among them
    unplanned = " ".join(
        second.stdout.split("inventory host(s) not planned in this run", 1)[1].split("\n\n", 1)[0].split()
    )
    assert "lab-dgx-01" in unplanned and "lab-cp-01" not in unplanned, unplanned
    assert "5 inventory host(s) not planned" in second.stdout

    verify = run("verify.yml", out, PYTHON39)
    assert all(r["changed"] == 0 for r in recap(verify.stdout).values()), changed_tasks(verify.stdout)
    report = json.loads((out / "fleet-report.json").read_text())
    verdicts = {n["host"]: n["verdict"] for n in report["nodes"]}
    assert verdicts[HOST] == "OK", report
    node = kubectl.json("get", "node", HOST)
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "1"

    run("diagnose.yml", out, PYTHON39)  # writes pending.json and fleet.svg the first time
    diagnose = run("diagnose.yml", out, PYTHON39)
    assert all(r["changed"] == 0 for r in recap(diagnose.stdout).values()), changed_tasks(diagnose.stdout)
    assert (out / "pending.json").is_file() and (out / "fleet.svg").is_file()


def test_the_ssh_host_python_is_the_one_asked_for(ssh_host):
    """The interpreter the inventory gives the SSH host is the host's, and gpusplit_lab_ssh_python picks another."""
    python = PYTHON39 if PYTHON39.is_file() else Path("/usr/bin/python3")
    proc = subprocess.run(
        ["ansible", HOST, "-i", str(INVENTORY), "-m", "ansible.builtin.setup", "-a", "gather_subset=!all,!min,python",
         "-e", f"gpusplit_lab_ssh_python={python}"],
        capture_output=True, text=True, cwd=ROOT, env=ENV, timeout=180,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert f"executable: {python}" in proc.stdout, proc.stdout[-3000:]
