"""The lab's SSH host: a real OpenSSH sshd on the lab's loopback address, for one GPU host of
inventory/lab that Ansible reaches over SSH with become, as it reaches a real fleet.

`python -m lab.lab up` starts it and `down` stops it (with every session it served); `status`
shows it. Everything it needs is generated under .lab/ssh (no system sshd configuration is read
or changed):

    sshd_config         its own configuration: this address and port only, key authentication only
    host_ed25519_key    the host key; known_hosts holds its public half for the clients
    client_ed25519      the key Ansible logs in with; authorized_keys holds its public half
    sshd.pid            the daemon's pid

It logs in as the unprivileged user `gpusplit-lab` (created the first time, with sudo NOPASSWD so
that `become: true` really switches to root). That needs root on this machine, Debian's
openssh-server and sudo; a missing piece is reported by name. The host's GPUs are simulated like
every lab host's (its fixture, the stand-in nvidia-smi and NVML binding, files under
.lab/hosts/<host>, a kwok node), and the machine is the same one: only the connection is real.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import stat
import subprocess
import time
from pathlib import Path

from lab import components as C

SSH_DIR = C.LAB / "ssh"
CONFIG = SSH_DIR / "sshd_config"
HOST_KEY = SSH_DIR / "host_ed25519_key"
CLIENT_KEY = SSH_DIR / "client_ed25519"
AUTHORIZED_KEYS = SSH_DIR / "authorized_keys"
KNOWN_HOSTS = SSH_DIR / "known_hosts"
PIDFILE = SSH_DIR / "sshd.pid"
LOG = C.LOGS / "sshd.log"
PORT = 22022
USER = "gpusplit-lab"
SUDOERS = Path("/etc/sudoers.d") / USER
SSHD = Path("/usr/sbin/sshd")
# sshd refuses to start without its privilege-separation directory (made by the Debian service)
PRIVSEP_DIR = Path("/run/sshd")


class SshdError(RuntimeError):
    """Something the SSH host needs is missing or would not start; the message says what to do."""


def missing_tools() -> list[str]:
    """What this machine lacks for the SSH host (Debian package names)."""
    missing = []
    if not SSHD.exists() or not shutil.which("ssh-keygen"):
        missing.append("openssh-server")
    if not shutil.which("ssh"):
        missing.append("openssh-client")
    if not shutil.which("sudo"):
        missing.append("sudo")
    return missing


def writable_by_others(path: Path) -> list[str]:
    """The folders from ``path`` up to / that users other than their owner may write (as /tmp)."""
    found = []
    for folder in [path, *path.parents]:
        try:
            mode = folder.stat().st_mode
        except OSError:
            continue
        if mode & (stat.S_IWGRP | stat.S_IWOTH):
            found.append(str(folder))
    return found


def render_config(host: str = C.HOST, port: int = PORT, user: str = USER) -> str:
    """The sshd_config of the lab's SSH host: one address, keys only, one user."""
    return "\n".join(
        [
            "# The lab's SSH host (lab/sshd.py); written by `python -m lab.lab up`.",
            f"ListenAddress {host}:{port}",
            f"HostKey {HOST_KEY}",
            f"PidFile {PIDFILE}",
            f"AuthorizedKeysFile {AUTHORIZED_KEYS}",
            f"AllowUsers {user}",
            "AuthenticationMethods publickey",
            "PubkeyAuthentication yes",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "PermitRootLogin no",
            # no PAM: nothing of the system's login stack is read; the account has no password
            "UsePAM no",
            # the key files sit in the checkout: sshd checks that no one else can write them or
            # the directories above them, as it does for ~/.ssh; a checkout below a folder anyone may
            # write (a clone in /tmp) would have every key refused, so there the check is off
            f"StrictModes {'yes' if not writable_by_others(AUTHORIZED_KEYS.parent) else 'no'}",
            "X11Forwarding no",
            "AllowTcpForwarding no",
            "AllowAgentForwarding no",
            "PermitTunnel no",
            "PrintMotd no",
            "Subsystem sftp internal-sftp",
            "LogLevel VERBOSE",
            "",
        ]
    )


def _keygen(path: Path, comment: str) -> None:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        check=True,
        capture_output=True,
        text=True,
    )


def ensure_keys(host: str = C.HOST, port: int = PORT) -> list[str]:
    """Host key, client key, authorized_keys and known_hosts; returns what was generated."""
    SSH_DIR.mkdir(parents=True, exist_ok=True)
    os.chmod(SSH_DIR, 0o755)
    made = []
    for path, comment in ((HOST_KEY, "gpusplit lab ssh host"), (CLIENT_KEY, "gpusplit lab client")):
        if not path.exists():
            _keygen(path, comment)
            made.append(path.name)
    _write(AUTHORIZED_KEYS, Path(f"{CLIENT_KEY}.pub").read_text(), 0o644)
    host_pub = " ".join(Path(f"{HOST_KEY}.pub").read_text().split()[:2])
    _write(KNOWN_HOSTS, f"[{host}]:{port} {host_pub}\n", 0o644)
    return made


def _write(path: Path, text: str, mode: int) -> None:
    if path.exists() and path.read_text() == text and (path.stat().st_mode & 0o777) == mode:
        return
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(text)
    os.chmod(tmp, mode)
    tmp.replace(path)


def ensure_user(user: str = USER) -> bool:
    """The unprivileged login user with sudo NOPASSWD; True when it was created now."""
    created = False
    try:
        pwd.getpwnam(user)
        known = True
    except KeyError:
        known = False
    # Two labs that start at once (the test workers' labs on a new machine) may both find no user: the
    # second useradd then fails on /etc/passwd's lock or finds the name taken; it tries again a few times.
    for attempt in range(20):
        if known:
            break
        # -p '*': no password to log in with, yet not locked (sshd without PAM refuses locked accounts)
        proc = subprocess.run(
            ["useradd", "--create-home", "--shell", "/bin/sh", "--password", "*", user],
            capture_output=True,
            text=True,
        )
        if proc.returncode in (0, 9):  # 9: another lab created it meanwhile
            created = proc.returncode == 0
            break
        try:
            pwd.getpwnam(user)
            break  # another lab's useradd held the lock and made it
        except KeyError:
            pass
        if attempt == 19:
            raise SshdError(f"useradd {user} failed (exit {proc.returncode}): {proc.stderr.strip()}")
        time.sleep(0.5)
    rule = f"{user} ALL=(ALL:ALL) NOPASSWD: ALL\n"
    if not SUDOERS.exists() or SUDOERS.read_text() != rule:
        tmp = SUDOERS.with_name(f".{user}.{os.getpid()}")  # sudo ignores names with a dot
        tmp.write_text(rule)
        os.chmod(tmp, 0o440)
        check = subprocess.run(["visudo", "-cqf", str(tmp)], capture_output=True, text=True)
        if check.returncode != 0:
            tmp.unlink()
            raise SshdError(
                f"visudo refused the sudo rule for {user}: {check.stderr.strip() or check.stdout.strip()}"
            )
        tmp.replace(SUDOERS)
    return created


def pid() -> int | None:
    """The pid of the lab's sshd (the listener), from its PidFile, when that process is sshd."""
    try:
        found = int(PIDFILE.read_text().split()[0])
        cmdline = Path(f"/proc/{found}/cmdline").read_bytes().decode(errors="replace")
    except (OSError, ValueError, IndexError):
        return None
    return found if "sshd" in cmdline and str(CONFIG) in cmdline else None


def probe(host: str = C.HOST, port: int = PORT, timeout: float = 2.0) -> tuple[bool, str]:
    """(healthy, detail): sshd answers with its protocol banner."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            banner = sock.recv(256).decode(errors="replace").strip()
    except OSError as exc:
        return False, str(exc)
    return banner.startswith("SSH-2.0-"), banner


def health() -> dict:
    ok, detail = probe()
    return {
        "healthy": ok and pid() is not None,
        "address": f"{C.HOST}:{PORT}",
        "user": USER,
        "pid": pid(),
        "detail": detail,
    }


def start(timeout: float = 20.0) -> str:
    """Start the lab's sshd (or find it running); returns what was done. Raises SshdError."""
    missing = missing_tools()
    if missing:
        raise SshdError(
            f"the lab's SSH host needs {', '.join(missing)}: apt-get install -y {' '.join(missing)}"
        )
    if os.geteuid() != 0:
        raise SshdError(
            f"the lab's SSH host needs root: sshd logs in as the user {USER}, which only a root sshd can do"
        )
    notes = []
    if ensure_user():
        notes.append(f"created user {USER} (sudo NOPASSWD in {SUDOERS})")
    made = ensure_keys()
    if made:
        notes.append(f"generated {', '.join(made)}")
    _write(CONFIG, render_config(), 0o644)
    running = pid()
    if running:
        return "; ".join([*notes, f"sshd already running ({C.HOST}:{PORT}, pid {running})"])
    PRIVSEP_DIR.mkdir(mode=0o755, exist_ok=True)
    C.LOGS.mkdir(parents=True, exist_ok=True)
    test = subprocess.run([str(SSHD), "-t", "-f", str(CONFIG)], capture_output=True, text=True)
    if test.returncode != 0:
        raise SshdError(f"sshd refuses {C.shown(CONFIG)}: {test.stderr.strip()}")
    # sshd forks into the background once it listens; a failure to bind is its exit status
    proc = subprocess.run(
        [str(SSHD), "-f", str(CONFIG), "-E", str(LOG)],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    if proc.returncode != 0:
        raise SshdError(f"sshd did not start (exit {proc.returncode}): {proc.stderr.strip()}; log {LOG}")
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pid() and probe()[0]:
            return "; ".join([*notes, f"sshd listening on {C.HOST}:{PORT} (user {USER}, pid {pid()})"])
        time.sleep(0.2)
    raise SshdError(f"sshd did not answer on {C.HOST}:{PORT} within {timeout:.0f}s; log {LOG}: {_tail()}")


def _tail(lines: int = 10) -> str:
    try:
        return " | ".join(LOG.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _alive(target: int) -> bool:
    try:
        state = Path(f"/proc/{target}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        tree.setdefault(ppid, []).append(int(entry.name))
    return tree


def descendants(root: int) -> list[int]:
    """Every process below root (the sessions a listener sshd forked), children first."""
    tree, out, todo = _children(), [], [root]
    while todo:
        for child in tree.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out[::-1]


def stop(timeout: float = 10.0) -> str:
    """Stop the lab's sshd and the sessions it serves (ansible's persistent connections)."""
    listener = pid()
    if listener is None:
        PIDFILE.unlink(missing_ok=True)
        return "sshd was not running"
    sessions = descendants(listener)
    for target in [listener, *sessions]:
        try:
            os.kill(target, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.time() + timeout
    while time.time() < deadline and any(_alive(p) for p in [listener, *sessions]):
        time.sleep(0.1)
    for target in [listener, *sessions]:
        if _alive(target):
            try:
                os.kill(target, signal.SIGKILL)
            except ProcessLookupError:
                pass
    PIDFILE.unlink(missing_ok=True)
    return f"stopped sshd (pid {listener}) and {len(sessions)} session process(es)"
