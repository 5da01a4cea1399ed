"""The lab's SSH host (lab/sshd.py, inventory/lab host lab-ssh-01): a real OpenSSH sshd on the lab's
loopback address, reached as the unprivileged user gpusplit-lab with the lab's client key, the host
key checked, and root through sudo (become), on an older Python as a managed host has it.

Only the connection is real here: the host is this machine, and its GPUs are simulated like every
lab host's (fixture l40s-pair, the stand-in nvidia-smi and NVML binding, a host root of its own, a
kwok node). Under each managed-host Python the fleets have (pyenv's 3.9 as on RHEL 9 / Rocky 9, 3.10
as on Ubuntu 22.04; a version this machine lacks is skipped):

* site.yml (discovery, the plan, the host role, the cluster side) runs through it into a fresh host
  root and changes nothing the second time; under 3.9 verify.yml and diagnose.yml follow, also with
  nothing changed the second time (the whole sequence once is enough to show they need nothing of
  the interpreter that site.yml does not);
* one control-plane edit: static_pod_flags merges a feature gate into the lab's kube-scheduler
  manifest (.lab/manifests, lab-cp-01's variables) as root through sudo, the lab supervisor restarts
  kube-scheduler like a kubelet, control_plane_health sees it healthy with the gate, a re-run changes
  nothing, and the backup is put back with restore_from. Without PyYAML the module refuses and names
  it; with it (the host's python3-yaml, here a copy of the controller's pure-Python PyYAML on
  PYTHONPATH) the edit goes through. The manifest is put back even when the test fails.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from ansible_output import ansible_playbook, changed_tasks, recap

from lab import components as C
from lab import lab as labctl
from lab import nodes, sshd

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
INVENTORY = ROOT / "inventory" / "lab"
HOST = "lab-ssh-01"
PYENV_VERSIONS = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv") / "versions"


def pyenv_python(minor: str) -> Path | None:
    """The newest CPython <minor>.x that pyenv installed (e.g. versions/3.9.18/bin/python3.9), or None."""
    found = []
    for version in PYENV_VERSIONS.glob(f"{minor}.*"):
        patch = version.name[len(minor) + 1 :]
        executable = version / "bin" / f"python{minor}"
        if patch.isdigit() and executable.is_file():
            found.append((int(patch), executable))
    return max(found)[1] if found else None


# the managed host's Pythons for the playbook runs: 3.9 (RHEL 9, Rocky 9) and 3.10 (Ubuntu 22.04)
HOST_PYTHONS = {minor: pyenv_python(minor) for minor in ("3.9", "3.10")}
# verify.yml and diagnose.yml run under this one only (the whole sequence takes minutes)
FULL_SEQUENCE = "3.9"


def host_pythons() -> list:
    """One pytest parameter per managed-host Python, skipped (with the reason) where pyenv lacks it."""
    return [
        pytest.param(
            minor,
            id=f"python{minor}",
            marks=pytest.mark.skipif(
                python is None,
                reason=f"needs pyenv's Python {minor} ({PYENV_VERSIONS}/{minor}.*) as the SSH host's interpreter",
            ),
        )
        for minor, python in HOST_PYTHONS.items()
    ]


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


def run(playbook: str, out: Path, python: Path, *extra: str, timings: dict | None = None):
    """playbooks/<playbook> (or a playbook path) on the SSH host and localhost, the host on ``python``."""
    started = time.monotonic()
    proc = ansible_playbook(
        playbook,  # a name under playbooks/, or an absolute path (pathlib keeps that as it is)
        INVENTORY,
        "--limit", f"{HOST},localhost",
        "-e", f"gpusplit_lab_ssh_python={python}",
        "-e", f"gpusplit_out_dir={out}",
        *extra,
    )  # fmt: skip
    if timings is not None:
        label = Path(playbook).name
        timings[label] = round(timings.get(label, 0.0) + time.monotonic() - started, 1)
    assert proc.returncode == 0, f"{playbook} failed:\n{proc.stdout[-6000:]}\n{proc.stderr[-3000:]}"
    return proc


def sshd_log_size() -> int:
    return sshd.LOG.stat().st_size if sshd.LOG.exists() else 0


def fresh_host_root(tmp_path: Path) -> Path:
    """A scratch root for the SSH host, seeded as `lab up` seeds one (the toolkit's stock config.toml),
    so that the first run under each Python writes every host file itself."""
    root = tmp_path / "host-root"
    config = root / "etc" / "nvidia-container-runtime" / "config.toml"
    config.parent.mkdir(parents=True)
    shutil.copyfile(nodes.TOOLKIT_CONFIG, config)
    return root


@pytest.mark.parametrize("minor", host_pythons())
def test_site_verify_diagnose_through_sshd_with_become(minor, ssh_host, tmp_path, kubectl):
    python = HOST_PYTHONS[minor]
    out = tmp_path / "out"
    root = fresh_host_root(tmp_path)
    host_root = ("-e", f"gpusplit_host_root={root}")
    timings: dict[str, float] = {}
    log_from = sshd_log_size()
    first = run("site.yml", out, python, *host_root, timings=timings)
    # it went through the lab's sshd, as gpusplit-lab with the lab's key (the login itself may be
    # older: ansible keeps its connection open for a minute and runs each task as a new session)
    log = sshd.LOG.read_bytes().decode(errors="replace")
    assert f"Accepted publickey for {sshd.USER}" in log, log[-2000:]
    assert f"Starting session: command for {sshd.USER}" in log[log_from:], log[-2000:]
    # written with become: as root, into a host root that gpusplit-lab may not write to
    env_file = root / "etc" / "gpusplit" / "host-gpus.env"
    assert env_file.stat().st_uid == 0
    env = dict(
        line.split("=", 1) for line in env_file.read_text().splitlines() if "=" in line and line[0] != "#"
    )
    assert env["CUDA_VISIBLE_DEVICES"] == HOST_GPU and env["GPUSPLIT_KUBERNETES_GPUS"] == KUBERNETES_GPU
    toolkit = root / "etc" / "nvidia-container-runtime" / "config.toml"
    assert "accept-nvidia-visible-devices-envvar-when-unprivileged = false" in toolkit.read_text()
    gpus = json.loads((out / "gpus.json").read_text())
    assert [g["uuid"] for g in gpus[HOST]["gpus"]] == [HOST_GPU, KUBERNETES_GPU], gpus[HOST]
    # the discovery environment (the NVML stand-in on PYTHONPATH) reached the module through sudo
    assert gpus[HOST]["backend"] == "nvml", gpus[HOST]["msg"]
    # the host role wrote its files under this Python (the host root was fresh)
    assert recap(first.stdout)[HOST]["failed"] == 0 and recap(first.stdout)[HOST]["changed"] > 0

    second = run("site.yml", out, python, *host_root, timings=timings)
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

    if minor == FULL_SEQUENCE:
        verify = run("verify.yml", out, python, *host_root, timings=timings)
        assert all(r["changed"] == 0 for r in recap(verify.stdout).values()), changed_tasks(verify.stdout)
        report = json.loads((out / "fleet-report.json").read_text())
        verdicts = {n["host"]: n["verdict"] for n in report["nodes"]}
        assert verdicts[HOST] == "OK", report
        node = kubectl.json("get", "node", HOST)
        assert node["status"]["allocatable"]["nvidia.com/gpu"] == "1"

        # writes pending.json and fleet.svg the first time
        run("diagnose.yml", out, python, *host_root, timings=timings)
        diagnose = run("diagnose.yml", out, python, *host_root, timings=timings)
        assert all(r["changed"] == 0 for r in recap(diagnose.stdout).values()), changed_tasks(diagnose.stdout)
        assert (out / "pending.json").is_file() and (out / "fleet.svg").is_file()
    print(f"SSH host on Python {minor}: {timings} ({sum(timings.values()):.1f}s)")


@pytest.mark.parametrize("minor", [*host_pythons(), pytest.param(None, id="inventory-default")])
def test_the_ssh_host_python_is_the_one_asked_for(minor, ssh_host):
    """The interpreter the inventory gives the SSH host is the host's, and gpusplit_lab_ssh_python picks another."""
    python = HOST_PYTHONS[minor] if minor else Path("/usr/bin/python3")
    asked = ["-e", f"gpusplit_lab_ssh_python={python}"] if minor else []
    proc = subprocess.run(
        ["ansible", HOST, "-i", str(INVENTORY), "-m", "ansible.builtin.setup", "-a", "gather_subset=!all,!min,python",
         *asked],
        capture_output=True, text=True, cwd=ROOT, env=ENV, timeout=180,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert f"executable: {python}" in proc.stdout, proc.stdout[-3000:]
    if minor:
        major, number = minor.split(".")
        version_info = rf"version_info:\s*-\s*{major}\s*-\s*{number}\s"
        assert re.search(version_info, proc.stdout), proc.stdout[-3000:]


# --------------------------------------------------------------------------------------------
# one control-plane edit through the SSH host, under each Python

# Beta and on by default in Kubernetes 1.37 (the catalog, from kube_features.go): setting it to true
# changes kube-scheduler's command, so the lab supervisor restarts it as a kubelet restarts a static
# pod, and changes nothing of what it does. kube-scheduler comes back faster than the other two.
GATE = "SchedulerPopFromBackoffQ"
COMPONENT = "kube-scheduler"

# lab-ssh-01's connection (its sshd, its user, root through sudo, ansible_python_interpreter from
# gpusplit_lab_ssh_python) with lab-cp-01's control-plane variables (group_vars/control_plane.yml).
# test_action: edit (first the same edit without PyYAML, which must refuse) or restore.
CONTROL_PLANE_EDIT = """\
---
- name: Edit the lab control plane's kube-scheduler manifest over SSH with become
  hosts: lab-ssh-01
  gather_facts: false
  vars:
    manifest: "{{ hostvars['lab-cp-01']['gpusplit_cp_manifest_dir'] }}/kube-scheduler.yaml"
    cp_kubeconfig: "{{ hostvars['lab-cp-01']['gpusplit_cp_kubeconfig'] }}"
    with_pyyaml:
      PYTHONPATH: "{{ test_pyyaml_path }}"
  tasks:
    - name: Read the Python and the user the modules run as
      ansible.builtin.setup:
        gather_subset: ["!all", "!min", "python", "user"]

    - name: Check them
      ansible.builtin.assert:
        that:
          - ansible_python.executable == gpusplit_lab_ssh_python
          - ansible_user_id == 'root'
        fail_msg: "{{ ansible_python.executable }} as {{ ansible_user_id }}"

    - name: Try the edit without PyYAML
      gpusplit.k8s.static_pod_flags:
        path: "{{ manifest }}"
        feature_gates: "{{ {test_gate: true} }}"
        backup_dir: "{{ test_backup_dir }}"
      register: without_pyyaml
      ignore_errors: true
      when: test_action == 'edit'

    - name: Check that it refused, named PyYAML and how to get it, and changed nothing
      ansible.builtin.assert:
        that:
          - without_pyyaml is failed
          - without_pyyaml is not changed
          - "'PyYAML' in without_pyyaml.msg"
          - "'python3-yaml' in without_pyyaml.msg"
        fail_msg: "{{ without_pyyaml | to_json }}"
      when: test_action == 'edit'

    - name: Read kube-scheduler's start time
      gpusplit.k8s.control_plane_health:
        components: [kube-scheduler]
        endpoints: "{{ test_endpoints }}"
        kubeconfig: "{{ cp_kubeconfig }}"
        timeout: 60
        stable_probes: 1
      environment: "{{ with_pyyaml }}"
      register: before

    - name: Merge the gate into the manifest
      gpusplit.k8s.static_pod_flags:
        path: "{{ manifest }}"
        feature_gates: "{{ {test_gate: true} }}"
        backup_dir: "{{ test_backup_dir }}"
      environment: "{{ with_pyyaml }}"
      register: edit
      when: test_action == 'edit'

    - name: Put the previous manifest back
      gpusplit.k8s.static_pod_flags:
        path: "{{ manifest }}"
        restore_from: "{{ test_restore_from }}"
      environment: "{{ with_pyyaml }}"
      register: restore
      when: test_action == 'restore'

    - name: Wait until kube-scheduler runs the manifest
      gpusplit.k8s.control_plane_health:
        components: [kube-scheduler]
        endpoints: "{{ test_endpoints }}"
        kubeconfig: "{{ cp_kubeconfig }}"
        feature_gates: "{{ {test_gate: true} if test_action == 'edit' else {} }}"
        started_after: "{{ {'kube-scheduler': before.start_times['kube-scheduler']} if restarted else {} }}"
        stable_probes: "{{ 2 if restarted else 1 }}"
        timeout: 120
      environment: "{{ with_pyyaml }}"
      vars:
        restarted: "{{ (edit if test_action == 'edit' else restore) is changed }}"
"""


def host_pyyaml(tmp_path: Path) -> Path:
    """A PYTHONPATH entry holding PyYAML for the host's Python, as python3-yaml gives a real host:
    the controller's PyYAML without its compiled part (PyYAML is pure Python without it)."""
    import yaml

    target = tmp_path / "host-pyyaml"
    shutil.copytree(
        Path(yaml.__file__).parent, target / "yaml", ignore=shutil.ignore_patterns("*.so", "__pycache__")
    )
    return target


def scheduler_generation() -> int:
    return labctl.read_state()[COMPONENT]["generation"]


def assert_lab_healthy() -> None:
    health = labctl.wait_healthy(180)
    assert health and all(v["healthy"] for v in health.values()), labctl.report_unhealthy(
        health or labctl.health()
    )


def manifest_dir_names() -> list[str]:
    """Every entry of the manifests directory (a kubelet would run any of them)."""
    return sorted(p.name for p in C.MANIFESTS.iterdir())


@pytest.fixture
def scheduler_manifest(lab):
    """kube-scheduler's manifest as the test found it; put back (and waited for) whatever happens."""
    path = C.MANIFESTS / f"{COMPONENT}.yaml"
    original = path.read_bytes()
    assert GATE not in original.decode(), f"{path} already sets {GATE}: a previous run left it there"
    assert_lab_healthy()
    yield path, original
    if path.read_bytes() != original:
        spare = path.with_name(f".{path.name}.test-restore")  # a dot-file: the supervisor ignores it
        spare.write_bytes(original)
        os.replace(spare, path)
        assert_lab_healthy()


@pytest.mark.parametrize("minor", host_pythons())
def test_control_plane_edit_through_sshd_with_become(minor, ssh_host, scheduler_manifest, tmp_path):
    path, original = scheduler_manifest
    python = HOST_PYTHONS[minor]
    playbook = tmp_path / "control-plane-edit.yml"
    playbook.write_text(CONTROL_PLANE_EDIT)
    backups = tmp_path / "backups"
    endpoint = f"https://{C.HOST}:{C.PORTS[COMPONENT]}"
    test_vars = {
        "test_gate": GATE,
        "test_backup_dir": str(backups),
        "test_pyyaml_path": str(host_pyyaml(tmp_path)),
        # the lab binds to its own loopback address (GPUSPLIT_LAB_HOST), not the default 127.0.0.1
        "test_endpoints": {
            COMPONENT: {"health_url": f"{endpoint}/healthz", "metrics_url": f"{endpoint}/metrics"}
        },
    }
    timings: dict[str, float] = {}
    out = tmp_path / "out"

    def edit_run(action: str, **more):
        extra = json.dumps({**test_vars, "test_action": action, **more})
        proc = run(str(playbook), out, python, "-e", extra, timings=timings)
        return recap(proc.stdout)[HOST], proc

    generation = scheduler_generation()
    before_lines = original.decode().splitlines()

    edited, proc = edit_run("edit")
    assert edited["changed"] == 1 and edited["failed"] == 0 and edited["ignored"] == 1, (
        edited,
        proc.stdout[-4000:],
    )
    text = path.read_text()
    added = [line for line in text.splitlines() if line not in before_lines]
    removed = [line for line in before_lines if line not in text.splitlines()]
    # one line of the command: --feature-gates appended, or an existing one with the gate merged in
    assert len(added) == 1 and "--feature-gates=" in added[0] and f"{GATE}=true" in added[0], added
    assert removed == [] or (len(removed) == 1 and "--feature-gates=" in removed[0]), removed
    (backup,) = backups.iterdir()
    assert backup.read_bytes() == original
    assert manifest_dir_names() == sorted(f"{c}.yaml" for c in C.STATIC_COMPONENTS)
    assert_lab_healthy()
    assert scheduler_generation() == generation + 1, labctl.read_state()[COMPONENT]

    again, proc = edit_run("edit")
    assert again["changed"] == 0 and again["failed"] == 0, (again, changed_tasks(proc.stdout))
    assert path.read_text() == text and list(backups.iterdir()) == [backup]
    assert scheduler_generation() == generation + 1

    restored, proc = edit_run("restore", test_restore_from=str(backup))
    assert restored["changed"] == 1 and restored["failed"] == 0, (restored, proc.stdout[-4000:])
    assert path.read_bytes() == original
    assert manifest_dir_names() == sorted(f"{c}.yaml" for c in C.STATIC_COMPONENTS)
    assert_lab_healthy()
    assert scheduler_generation() == generation + 2, labctl.read_state()[COMPONENT]
    print(f"control-plane edit on Python {minor}: {timings} ({sum(timings.values()):.1f}s)")
