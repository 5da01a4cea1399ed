"""`make bench-fleet`: what a whole site.yml costs per host on the lab, first run and unchanged re-run.

For each fleet size N it writes an inventory of N simulated GPU hosts (the lab's fixtures and
modes in turn, every host this machine over a local connection, as in inventory/lab), creates
their kwok Nodes in the running lab, runs ``playbooks/site.yml`` twice and prints one row:

* first run and re-run, wall seconds of ``ansible-playbook``;
* module executions per GPU host on the re-run: tasks (each loop item once) whose action runs a
  module on the host, counted by a small callback (controller-only actions such as set_fact,
  debug, assert, argument-spec validation and delegated tasks are not counted);
* the apiserver's write requests during the re-run: ``apiserver_request_total`` of its /metrics
  for POST, PUT, PATCH, APPLY, DELETE, DELETECOLLECTION, before and after, without dry runs and
  without what the lab itself writes all the time (leases, events, status subresources, the pods'
  service-account tokens: kwok's kubelets, the device-plugin stand-in, the controllers);
* the changed count of the re-run;
* tasks per GPU host on the re-run (ok, changed, failed and skipped in the play recap: each one costs
  the controller a worker process, the host's variables and the callbacks, even a skipped one);
* CPU seconds of each run, split: what the simulated GPU hosts ran (every command their connection
  started: the module processes and the shells around them, counted by the bench's connection plugin,
  a local connection that reads its worker's CPU of reaped children around each command), of it the
  module processes alone (the bench hosts run their modules through a small wrapper of the Python
  interpreter that adds up each module process's CPU time), and the rest: the controller
  (``ansible-playbook``, its workers, the controller's own modules). On the lab the GPU hosts are this
  machine, so what they run takes the controller's cores; on a real fleet it runs on the hosts.

At the end, seconds per host: the slope between the two largest N of the first run, the re-run, the
controller's CPU of each and the hosts' module CPU of the re-run; and, at the largest N, the controller's
CPU per host of each run and the re-run's controller CPU as a share of the first run's. The bench's Nodes,
host roots and per-node DaemonSets are deleted after each N. Needs the lab (``python -m lab.lab up``); see
docs/performance.md for the current figures and docs/dev/measurements.md for recorded runs.

    python tools/bench_fleet.py [--sizes 10,50,200] [--forks 20] [--json out/bench-fleet.json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

PREFIX = "bench-"
# (fixture, mode, split, host services): the lab inventory's hosts, in turn
MIX = (
    ("dgx-h100", "device_plugin", {"host_count": 2}, []),
    ("workstation", "device_plugin", {"product": "NVIDIA RTX A6000"}, ["ollama.service"]),
    ("h200", "device_plugin", {"count": 1}, []),
    ("gpu-lost", "device_plugin", {"count": 1}, []),
    ("a100-mig", "none", None, []),
    ("l40s-pair", "device_plugin", {"host_count": 1}, ["trainer.service"]),
)
# gpusplit's ownership label: the bench's DaemonSets and their pods carry it
MANAGED = "app.kubernetes.io/managed-by=gpusplit"
WRITE_VERBS = {"POST", "PUT", "PATCH", "APPLY", "DELETE", "DELETECOLLECTION"}
# what the lab writes on its own, whatever gpusplit does
BACKGROUND_RESOURCES = {"leases", "events", "tokenreviews", "subjectaccessreviews"}
# subresources written by the lab's kubelets and controllers: status, and the service-account tokens
# (TokenRequest) the kubelets ask for their pods' projected volumes; gpusplit asks for no token
BACKGROUND_SUBRESOURCES = {"status", "token"}
# how long the cleanup waits for the garbage collector to delete the pods of the bench's DaemonSets
# (else their DELETEs fall into the next fleet size's re-run)
GC_WAIT_SECONDS = 120
# how long the bench waits after a first run for the controller-manager to finish with the split DaemonSets
SETTLE_SECONDS = 180

CALLBACK = """
import json
import os
import resource
import time
from collections import Counter

from ansible.plugins.callback import CallbackBase


# CPU seconds of this process (ansible-playbook's main process) and of its reaped children (its workers)
def _cpu():
    me, workers = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime, workers.ru_utime + workers.ru_stime

CONTROLLER_ONLY = {
    "set_fact", "debug", "assert", "fail", "meta", "include_role", "include_tasks", "import_role",
    "import_tasks", "include_vars", "add_host", "group_by", "set_stats", "pause",
    "validate_argument_spec", "noop", "role_step",
}


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "gpusplit_bench_count"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.host_side = Counter()
        self.delegated = Counter()
        self.by_task = Counter()
        self.task_seconds = Counter()
        # per task, CPU seconds of the main process and of the workers reaped while it ran (their children too)
        self.task_main_cpu = Counter()
        self.task_workers_cpu = Counter()
        self._task = None
        self._started = None
        self._cpu_started = None

    def _close_task(self):
        if self._task is not None:
            self.task_seconds[self._task] += time.monotonic() - self._started
            main, workers = _cpu()
            self.task_main_cpu[self._task] += main - self._cpu_started[0]
            self.task_workers_cpu[self._task] += workers - self._cpu_started[1]
        self._task = None

    def v2_playbook_on_task_start(self, task, is_conditional):
        self._close_task()
        self._task = task.get_name()
        self._started = time.monotonic()
        self._cpu_started = _cpu()

    v2_playbook_on_handler_task_start = lambda self, task: self.v2_playbook_on_task_start(task, False)

    def _count(self, result):
        task = result._task
        action = (getattr(task, "resolved_action", None) or task.action or "").rsplit(".", 1)[-1]
        if action in CONTROLLER_ONLY:
            return
        res = result._result
        items = res.get("results") if isinstance(res.get("results"), list) and task.loop is not None else None
        n = sum(1 for r in items if not r.get("skipped")) if items is not None else 1
        if not n:
            return
        host = result._host.get_name()
        if res.get("_ansible_delegated_vars") or task.delegate_to:
            self.delegated[host] += n
        else:
            self.host_side[host] += n
            self.by_task[task.get_name()] += n

    def v2_runner_on_ok(self, result):
        self._count(result)

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._count(result)

    def v2_playbook_on_stats(self, stats):
        self._close_task()
        hosts = sorted(stats.processed)
        out = {
            "host_side": dict(self.host_side),
            "delegated": dict(self.delegated),
            "by_task": dict(self.by_task),
            "task_seconds": dict(self.task_seconds),
            "task_main_cpu": dict(self.task_main_cpu),
            "task_workers_cpu": dict(self.task_workers_cpu),
            "main_cpu_s": _cpu()[0],
            "stats": {h: stats.summarize(h) for h in hosts},
        }
        with open(os.environ["GPUSPLIT_BENCH_COUNT_FILE"], "w") as handle:
            json.dump(out, handle)
"""


# Runs a module with the real interpreter and adds the CPU seconds of that process (and what it
# started) to the file GPUSPLIT_BENCH_MODULE_CPU_FILE names; the exit status and the streams are the
# module's own. -I -S: the wrapper's own start costs a few milliseconds.
INTERPRETER_WRAPPER = """#!{python} -IS
import os
import sys

pid = os.fork()
if pid == 0:
    os.execv({python!r}, [{python!r}] + sys.argv[1:])
_, status, usage = os.wait4(pid, 0)
log = os.environ.get("GPUSPLIT_BENCH_MODULE_CPU_FILE")
if log:
    with open(log, "a") as handle:
        handle.write("%.4f\\n" % (usage.ru_utime + usage.ru_stime))
sys.exit(os.waitstatus_to_exitcode(status))
"""


# The GPU hosts' connection: ansible-core's local connection that adds, for each command it runs, the CPU
# seconds of what that command started (reaped in this worker between the command's start and its end:
# the shell, the module's interpreter, mkdir and rm of a temporary folder) to the file
# GPUSPLIT_BENCH_HOST_CPU_FILE names. On a fleet those processes run on the hosts, not on the controller.
CONNECTION_NAME = "gpusplit_bench_local"
CONNECTION = '''
DOCUMENTATION = """
    name: gpusplit_bench_local
    short_description: the fleet bench's local connection, which counts what the host's commands cost
    description:
        - Runs each command on this machine as ansible.builtin.local does, and appends the CPU seconds of the
          processes the command started to the file GPUSPLIT_BENCH_HOST_CPU_FILE names.
    author: gpusplit
    options:
        become_success_timeout:
            type: int
            default: 10
            description: Seconds to wait for become to succeed (as the local connection's option).
            vars:
                - name: ansible_local_become_success_timeout
        become_strip_preamble:
            type: bool
            default: true
            description: Whether become's own output before the command is left out (as the local connection's).
            vars:
                - name: ansible_local_become_strip_preamble
    extends_documentation_fragment:
        - connection_pipelining
"""

import os
import resource

from ansible.plugins.connection.local import Connection as LocalConnection


def _spent():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


class Connection(LocalConnection):
    def exec_command(self, cmd, in_data=None, sudoable=True):
        before = _spent()
        try:
            return super().exec_command(cmd, in_data=in_data, sudoable=sudoable)
        finally:
            log = os.environ.get("GPUSPLIT_BENCH_HOST_CPU_FILE")
            if log:
                with open(log, "a") as handle:
                    handle.write("%.4f\\n" % (_spent() - before))
'''


def host_name(i: int) -> str:
    return f"{PREFIX}{i:04d}"


def inventory(n: int, lab_dir: Path | None = None, fixture_dir: Path | None = None) -> dict:
    """The inventory of ``n`` bench hosts, the lab's fixtures and modes in turn. With ``lab_dir`` (the lab's
    folder), each host also names its own lab paths (see :func:`lab_host_vars`), and its fixture with GPU UUIDs
    of its own in ``fixture_dir`` (see :func:`write_fixtures`)."""
    hosts = {}
    for i in range(n):
        fixture, mode, split, services = MIX[i % len(MIX)]
        hvars = {"gpusplit_lab_fixture": fixture, "gpusplit_mode": mode}
        if split is not None:
            hvars["gpusplit_split"] = split
        if services:
            hvars["gpusplit_host_services"] = services
        if lab_dir is not None:
            hvars.update(lab_host_vars(host_name(i), fixture, lab_dir, fixture_dir))
        hosts[host_name(i)] = hvars
    return {"all": {"children": {"gpu_nodes": {"hosts": hosts}}}}


def write_fixtures(n: int, fixture_dir: Path) -> None:
    """<host>.json in ``fixture_dir`` for each of ``n`` bench hosts: its lab fixture with every GPU and MIG
    UUID replaced by one of the host's own (lab.nodes.own_uuids). The fixtures are taken in turn, so without
    this two hosts would report the same GPUs, which the planner refuses as one machine in the inventory twice;
    the device-plugin stand-in gives the host's Node the same UUIDs (its label lab.nodes.OWN_UUIDS_LABEL)."""
    from lab import nodes

    fixture_dir.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        text = (nodes.FIXTURES / f"{MIX[i % len(MIX)][0]}.json").read_text()
        (fixture_dir / f"{host_name(i)}.json").write_text(nodes.own_uuids(text, host_name(i)))


def lab_host_vars(host: str, fixture: str, lab_dir: Path, fixture_dir: Path | None = None) -> dict:
    """What inventory/lab works out for a lab host with expressions, named as values: the host's scratch root
    and the fake NVML's environment (its fixture, the fakes on PYTHONPATH and PATH). With ``fixture_dir``, the
    host's own copy of the fixture there (write_fixtures) instead of the lab's.

    The lab's inventory finds the checkout, the lab folder and the controller's PATH with expressions (file
    tests, lookups) so that it works from any checkout; every task that templates a path of a GPU host
    evaluates them again, about 20 ms of controller CPU per host and task (2026-12-03: the discovery's worker
    80 against 103 ms). A real fleet's inventory names its values, and it has no fake NVML: the bench measures
    gpusplit, not the lab's self-location."""
    fakes = ROOT / "tests" / "fakes"
    return {
        "gpusplit_host_root": str(lab_dir / "hosts" / host),
        "gpusplit_discovery_environment": {
            "PYTHONPATH": str(fakes),
            "GPUSPLIT_FAKE_NVML_FIXTURE": str(
                fixture_dir / f"{host}.json"
                if fixture_dir is not None
                else ROOT / "tests" / "fixtures" / "gpus" / f"{fixture}.json"
            ),
            "PATH": f"{fakes / 'bin'}:{os.environ.get('PATH', '')}",
        },
    }


def write_interpreter(workdir: Path) -> Path:
    """The interpreter wrapper the bench hosts run their modules with (see INTERPRETER_WRAPPER)."""
    path = workdir / "python-cpu"
    path.write_text(INTERPRETER_WRAPPER.format(python=sys.executable))
    path.chmod(0o755)
    return path


def write_plugins(workdir: Path) -> None:
    """The bench's callback (callbacks/) and its GPU hosts' connection (connections/) in ``workdir``."""
    (workdir / "callbacks").mkdir(parents=True, exist_ok=True)
    (workdir / "callbacks" / "gpusplit_bench_count.py").write_text(CALLBACK)
    (workdir / "connections").mkdir(parents=True, exist_ok=True)
    (workdir / "connections" / f"{CONNECTION_NAME}.py").write_text(CONNECTION)


def write_inventory(n: int, workdir: Path) -> Path:
    """inventory-<n>/ in ``workdir``: hosts.yml, the lab's group_vars/all.yml and, for the GPU hosts,
    the interpreter wrapper that counts their modules' CPU time and the connection that counts what
    their commands cost."""
    import yaml

    inv = workdir / f"inventory-{n}"
    (inv / "group_vars").mkdir(parents=True, exist_ok=True)
    # the lab's own settings (local connection, fake NVML, scratch host roots, lab kubeconfig)
    shutil.copy(ROOT / "inventory" / "lab" / "group_vars" / "all.yml", inv / "group_vars" / "all.yml")
    # the checkout and the lab's paths as plain values, as a fleet's inventory names its own (why: lab_host_vars;
    # the checkout's expression alone cost about 40 ms of controller CPU per host and task); the lab folder as
    # inventory/lab names it (GPUSPLIT_LAB_DIR, else .lab in the checkout)
    lab_dir = Path(os.environ.get("GPUSPLIT_LAB_DIR") or ROOT / ".lab")
    (inv / "group_vars" / "gpu_nodes.yml").write_text(
        yaml.safe_dump(
            {
                "ansible_python_interpreter": str(write_interpreter(workdir)),
                "ansible_connection": CONNECTION_NAME,
                "gpusplit_lab_root": str(ROOT),
                "gpusplit_lab_dir": str(lab_dir),
                "gpusplit_discovery_proc_root": str(ROOT / "tests" / "fixtures" / "proc"),
            }
        )
    )
    write_fixtures(n, inv / "fixtures")
    (inv / "hosts.yml").write_text(yaml.safe_dump(inventory(n, lab_dir, inv / "fixtures"), sort_keys=False))
    return inv


def apiserver_writes(core) -> dict:
    """Write requests the apiserver counted so far (its /metrics), as :func:`parse_writes` sorts them."""
    api = core.api_client
    resp = api.call_api("GET", api.configuration.host + "/metrics")
    return parse_writes((resp.read() if resp.data is None else resp.data).decode())


def parse_writes(text: str) -> dict:
    """``apiserver_request_total`` of write verbs: {"writes": {"VERB resource[/sub]": n}, "dry_run": n, "background": n}."""
    out = {"writes": {}, "dry_run": 0, "background": 0}
    for line in text.splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', line[: line.rindex("}")]))
        value = float(line.rsplit(" ", 1)[1])
        if labels.get("verb") not in WRITE_VERBS:
            continue
        resource = labels.get("resource", "")
        if labels.get("dry_run"):
            out["dry_run"] += value
        elif resource in BACKGROUND_RESOURCES or labels.get("subresource") in BACKGROUND_SUBRESOURCES:
            out["background"] += value
        else:
            key = f"{labels['verb']} {resource}" + (
                f"/{labels['subresource']}" if labels.get("subresource") else ""
            )
            out["writes"][key] = out["writes"].get(key, 0) + value
    return out


def writes_between(before: dict, after: dict) -> dict:
    keys = set(before["writes"]) | set(after["writes"])
    diff = {k: int(after["writes"].get(k, 0) - before["writes"].get(k, 0)) for k in keys}
    return {
        "writes": sum(diff.values()),
        "by_kind": {k: v for k, v in sorted(diff.items()) if v},
        "dry_run": int(after["dry_run"] - before["dry_run"]),
        "background": int(after["background"] - before["background"]),
    }


def create_nodes(core, n: int) -> None:
    from lab import nodes

    for i in range(n):
        fixture = MIX[i % len(MIX)][0]
        # the GPUs of write_fixtures' copy: the stand-in derives the same UUIDs for the host
        nodes.ensure_node(core, host_name(i), fixture, {nodes.OWN_UUIDS_LABEL: "true"})
        nodes.seed_host_root(host_name(i))


def delete_bench_objects(core) -> int:
    """Delete every bench Node, its scratch host root and gpusplit's DaemonSets for it; the count of Nodes."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    from lab import nodes

    gone = 0
    for node in core.list_node().items:
        if node.metadata.name.startswith(PREFIX):
            try:
                core.delete_node(node.metadata.name)
                gone += 1
            except ApiException as exc:
                if exc.status != 404:
                    raise
    apps = client.AppsV1Api(core.api_client)
    for ds in apps.list_daemon_set_for_all_namespaces(label_selector=MANAGED).items:
        host = (ds.metadata.annotations or {}).get("gpusplit.io/host", "")
        if host.startswith(PREFIX):
            try:
                apps.delete_namespaced_daemon_set(ds.metadata.name, ds.metadata.namespace)
            except ApiException as exc:
                if exc.status != 404:
                    raise
    if nodes.HOSTS_ROOT.exists():
        for path in nodes.HOSTS_ROOT.glob(f"{PREFIX}*"):
            shutil.rmtree(path, ignore_errors=True)
    wait_for_bench_pods_gone(core)
    return gone


def wait_until_done(left_of, timeout: float, interval: float, clock=time.monotonic, sleep=time.sleep):
    """Call ``left_of()`` (what is not done yet, a list) every ``interval`` seconds until it returns nothing or
    ``timeout`` seconds have passed; ``(seconds waited, how many were left)``."""
    start = clock()
    while True:
        left = left_of()
        waited = clock() - start
        if not left or waited > timeout:
            return round(waited, 1), len(left)
        sleep(interval)


def wait_for_bench_pods_gone(core, timeout: float = GC_WAIT_SECONDS) -> int:
    """Wait until the garbage collector has deleted the pods of the bench's DaemonSets; the count left."""

    def left():
        pods = core.list_pod_for_all_namespaces(label_selector=MANAGED).items
        return [pod for pod in pods if (pod.spec.node_name or "").startswith(PREFIX)]

    return wait_until_done(left, timeout, interval=2)[1]


def settled(daemonset: dict) -> bool:
    """Whether the DaemonSet controller is done with a DaemonSet (JSON as the apiserver sends it): it observed the
    current generation, and as many pods as it wants are scheduled, updated, ready and available."""
    meta, status = daemonset.get("metadata") or {}, daemonset.get("status") or {}
    want = status.get("desiredNumberScheduled")
    return (
        want is not None
        and status.get("observedGeneration") == meta.get("generation")
        # (the API leaves out a count of 0)
        and all(
            status.get(count, 0) == want
            for count in (
                "currentNumberScheduled",
                "updatedNumberScheduled",
                "numberReady",
                "numberAvailable",
            )
        )
    )


def wait_until_settled(apps, timeout: float = SETTLE_SECONDS) -> tuple[float, int]:
    """Wait until the split DaemonSets of the bench's nodes are settled (:func:`settled`); ``(seconds waited, how
    many were not)``. A first run ends when every node advertises its share (``gpu_verify``), while the
    controller-manager still writes the DaemonSets' status at its client rate (20 per second by default: about
    10 s more for 200 DaemonSets); a re-run started then would count that tail, and a real fleet's re-run finds a
    settled cluster."""

    def left():
        answer = apps.list_daemon_set_for_all_namespaces(label_selector=MANAGED, _preload_content=False)
        items = json.loads(answer.data).get("items") or []
        return [ds for ds in items if PREFIX in ds["metadata"]["name"] and not settled(ds)]

    return wait_until_done(left, timeout, interval=1)


def children_cpu() -> float:
    """CPU seconds of every child process of the bench reaped so far (and of their children)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def lab_processes() -> dict[str, int]:
    """name -> pid of the lab's own processes: its control plane and kwok (the supervisor's state file),
    and the supervisor, which runs the device-plugin and pod-resources simulators."""
    from lab import lab

    found = {}
    with contextlib.suppress(OSError, ValueError):
        found["supervisor"] = int(lab.PIDFILE.read_text().strip())
    with contextlib.suppress(OSError, ValueError):
        for name, state in json.loads(lab.STATE.read_text()).items():
            if state.get("pid"):
                found[name] = int(state["pid"])
    return found


def process_cpu(pid: int) -> float | None:
    """CPU seconds of a process and of its children reaped so far, from /proc (None: gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def steal_seconds() -> float:
    """CPU seconds the machine's hypervisor took from this machine's CPUs so far (/proc/stat steal)."""
    with contextlib.suppress(OSError, IndexError, ValueError):
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
        return int(fields[8]) / os.sysconf("SC_CLK_TCK")
    return 0.0


def lab_cpu_between(before: dict[str, float | None], after: dict[str, float | None]) -> dict[str, float]:
    """CPU seconds each lab process spent between two readings (a process that restarted is left out)."""
    return {
        name: round(after[name] - before[name], 1)
        for name in before
        if before[name] is not None and after.get(name) is not None and after[name] >= before[name]
    }


def module_cpu(path: Path) -> tuple[int, float]:
    """(module processes, their CPU seconds) from the interpreter wrapper's file; (commands, their CPU
    seconds) from the connection's."""
    if not path.exists():
        return 0, 0.0
    values = [float(line) for line in path.read_text().split() if line]
    return len(values), sum(values)


def run_site(
    inv: Path, forks: int, workdir: Path, label: str, extra_env: dict, extra_vars: tuple = ()
) -> dict:
    counts = workdir / f"counts-{label}.json"
    modules = workdir / f"module-cpu-{label}.txt"
    commands = workdir / f"host-cpu-{label}.txt"
    modules.unlink(missing_ok=True)
    commands.unlink(missing_ok=True)
    env = dict(os.environ)
    env.update(
        {
            "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
            "ANSIBLE_CALLBACK_PLUGINS": str(workdir / "callbacks"),
            "ANSIBLE_CALLBACKS_ENABLED": "gpusplit_bench_count",
            "GPUSPLIT_BENCH_COUNT_FILE": str(counts),
            "GPUSPLIT_BENCH_MODULE_CPU_FILE": str(modules),
            "ANSIBLE_CONNECTION_PLUGINS": str(workdir / "connections"),
            "GPUSPLIT_BENCH_HOST_CPU_FILE": str(commands),
            "ANSIBLE_NOCOLOR": "1",
        }
    )
    env.update(extra_env)
    cmd = [
        str(Path(sys.executable).parent / "ansible-playbook"),
        "-i",
        str(inv),
        "-e",
        json.dumps({"gpusplit_out_dir": str(workdir / "out")}),
        *[arg for extra in extra_vars for arg in ("-e", extra)],
        "-f",
        str(forks),
        str(ROOT / "playbooks" / "site.yml"),
    ]
    log = workdir / f"site-{label}.log"
    procs = lab_processes()
    lab_before = {name: process_cpu(pid) for name, pid in procs.items()}
    steal_before = steal_seconds()
    cpu_before = children_cpu()
    start = time.monotonic()
    with log.open("w") as handle:
        rc = subprocess.run(cmd, cwd=ROOT, env=env, stdout=handle, stderr=subprocess.STDOUT).returncode
    seconds = time.monotonic() - start
    cpu = children_cpu() - cpu_before
    steal = steal_seconds() - steal_before
    lab_cpu = lab_cpu_between(lab_before, {name: process_cpu(pid) for name, pid in procs.items()})
    module_runs, modules_cpu = module_cpu(modules)
    command_runs, commands_cpu = module_cpu(commands)
    data = json.loads(counts.read_text()) if counts.exists() else {}
    return {
        "rc": rc,
        "seconds": seconds,
        "cpu_s": cpu,
        "host_module_runs": module_runs,
        "host_module_cpu_s": modules_cpu,
        # every command of the GPU hosts: their modules, the wrapper, the shells around them
        "host_commands": command_runs,
        "host_cpu_s": commands_cpu,
        "controller_cpu_s": cpu - max(commands_cpu, modules_cpu),
        "lab_cpu_s": lab_cpu,
        "steal_s": round(steal, 1),
        "log": str(log),
        **data,
    }


def per_host(run: dict, n: int) -> float:
    gpu_hosts = [h for h in run.get("host_side", {}) if h.startswith(PREFIX)]
    return sum(run["host_side"][h] for h in gpu_hosts) / max(n, 1)


def changed(run: dict) -> int:
    return sum(s.get("changed", 0) for s in run.get("stats", {}).values())


def tasks_per_host(run: dict, n: int) -> float:
    """Tasks each GPU host went through: ok (changed included), failed, unreachable and skipped."""
    stats = [s for h, s in run.get("stats", {}).items() if h.startswith(PREFIX)]
    keys = ("ok", "failures", "unreachable", "skipped")
    return sum(s.get(k, 0) for s in stats for k in keys) / max(n, 1)


def task_cpu(run: dict, top: int = 12) -> dict:
    """{task: [main process CPU s, workers' CPU s]} of a run's ``top`` tasks by their sum."""
    main, workers = run.get("task_main_cpu", {}), run.get("task_workers_cpu", {})
    both = {
        name: [round(main.get(name, 0.0), 2), round(workers.get(name, 0.0), 2)]
        for name in set(main) | set(workers)
    }
    return dict(sorted(both.items(), key=lambda kv: -sum(kv[1]))[:top])


def bench(sizes: list[int], forks: int, workdir: Path, extra_env: dict, extra_vars: tuple = ()) -> list[dict]:
    from kubernetes import client

    from lab import nodes

    core = nodes.api()
    apps = client.AppsV1Api(core.api_client)
    write_plugins(workdir)
    rows = []
    delete_bench_objects(core)
    for n in sizes:
        inv = write_inventory(n, workdir)
        create_nodes(core, n)
        load_before = os.getloadavg()
        try:
            first = run_site(inv, forks, workdir, f"{n}-first", extra_env, extra_vars)
            settle_s, unsettled = wait_until_settled(apps)
            before = apiserver_writes(core)
            again = run_site(inv, forks, workdir, f"{n}-rerun", extra_env, extra_vars)
            after = apiserver_writes(core)
        finally:
            delete_bench_objects(core)
        row = {
            "hosts": n,
            "first_s": round(first["seconds"], 1),
            # after the first run, until the controller-manager was done with the split DaemonSets
            "settle_s": settle_s,
            "unsettled": unsettled,
            "rerun_s": round(again["seconds"], 1),
            "first_rc": first["rc"],
            "rerun_rc": again["rc"],
            "modules_per_host_first": round(per_host(first, n), 2),
            "modules_per_host_rerun": round(per_host(again, n), 2),
            "changed_first": changed(first),
            "changed_rerun": changed(again),
            "tasks_per_host_rerun": round(tasks_per_host(again, n), 2),
            "cpu_s_first": round(first["cpu_s"], 1),
            "cpu_s_rerun": round(again["cpu_s"], 1),
            "controller_cpu_s_first": round(first["controller_cpu_s"], 1),
            "host_module_cpu_s_first": round(first["host_module_cpu_s"], 1),
            "host_module_runs_first": first["host_module_runs"],
            "host_cpu_s_first": round(first["host_cpu_s"], 1),
            "host_commands_first": first["host_commands"],
            "controller_cpu_s_rerun": round(again["controller_cpu_s"], 1),
            "host_module_cpu_s_rerun": round(again["host_module_cpu_s"], 1),
            "host_module_runs_rerun": again["host_module_runs"],
            "host_cpu_s_rerun": round(again["host_cpu_s"], 1),
            "host_commands_rerun": again["host_commands"],
            # the lab's own processes (its control plane, kwok, the simulators' supervisor): on a fleet they are
            # the cluster's and the hosts' kubelets, not the controller's; and the hypervisor's steal
            "lab_cpu_s_first": first["lab_cpu_s"],
            "lab_cpu_s_rerun": again["lab_cpu_s"],
            "steal_s_first": first["steal_s"],
            "steal_s_rerun": again["steal_s"],
            "load_before": [round(x, 2) for x in load_before],
            "apiserver": writes_between(before, after),
            "host_tasks_rerun": again.get("by_task", {}),
            "slowest_tasks_rerun": dict(
                sorted(again.get("task_seconds", {}).items(), key=lambda kv: -kv[1])[:12]
            ),
            # the controller's main process (the strategy, each host's variables, the results, the callbacks); the
            # rest of the controller's CPU is its workers (and the controller's own modules)
            "main_cpu_s_first": round(first.get("main_cpu_s", 0.0), 1),
            "main_cpu_s_rerun": round(again.get("main_cpu_s", 0.0), 1),
            # per task of the re-run: CPU seconds of the main process and of the workers reaped meanwhile (with
            # what they ran, the GPU hosts' commands included), the largest first
            "task_cpu_rerun": task_cpu(again),
            "slowest_tasks_first": dict(
                sorted(first.get("task_seconds", {}).items(), key=lambda kv: -kv[1])[:12]
            ),
            "logs": [first["log"], again["log"]],
        }
        rows.append(row)
        print_row(row, flush=True)
    return rows


HEADER = (
    "| GPU hosts | first run s | re-run s | re-run/first | controller CPU s: first / re-run | controller CPU"
    " re-run/first | controller CPU per host: first / re-run | GPU hosts' module CPU per host: first / re-run"
    " | module executions per host | tasks per host | re-run changed | re-run apiserver writes"
    " | the lab's own CPU s: first / re-run | load average |"
)


def ratio(a: float, b: float) -> float:
    return a / b if b else 0.0


def print_row(row: dict, flush: bool = False) -> None:
    n = row["hosts"]
    rc = "" if row["first_rc"] == row["rerun_rc"] == 0 else f" (rc {row['first_rc']}/{row['rerun_rc']})"
    load = " ".join(f"{x:.1f}" for x in row.get("load_before", ()))
    first_c, again_c = row["controller_cpu_s_first"], row["controller_cpu_s_rerun"]
    print(
        f"| {n} | {row['first_s']} | {row['rerun_s']} | {ratio(row['rerun_s'], row['first_s']):.0%} | "
        f"{first_c} / {again_c} | {ratio(again_c, first_c):.0%} | "
        f"{first_c / n:.3f} / {again_c / n:.3f} | "
        f"{row['host_module_cpu_s_first'] / n:.3f} / {row['host_module_cpu_s_rerun'] / n:.3f} | "
        f"{row['modules_per_host_rerun']} | {row['tasks_per_host_rerun']} | {row['changed_rerun']} | "
        f"{row['apiserver']['writes']}{rc} | "
        f"{sum(row.get('lab_cpu_s_first', {}).values()):.1f} / {sum(row.get('lab_cpu_s_rerun', {}).values()):.1f} | "
        f"{load} |",
        flush=flush,
    )


# the slopes printed at the end: (row key, what it is)
SLOPES = (
    ("first_s", "first run"),
    ("rerun_s", "re-run"),
    ("controller_cpu_s_first", "controller CPU seconds of the first run"),
    ("controller_cpu_s_rerun", "controller CPU seconds of the re-run"),
    ("host_module_cpu_s_rerun", "GPU hosts' module CPU seconds of the re-run"),
)


def summary(rows: list[dict]) -> list[str]:
    """The lines printed after the table: the slopes, and the controller's CPU at the largest fleet."""
    lines = []
    if len(rows) >= 2:
        a, b = sorted(rows, key=lambda r: r["hosts"])[-2:]
        for key, word in SLOPES:
            s = slope(rows, key)
            if s is not None:
                lines.append(f"seconds per host ({word}, slope {a['hosts']} -> {b['hosts']} hosts): {s:.3f}")
    if rows:
        top = max(rows, key=lambda r: r["hosts"])
        n = top["hosts"]
        first_c, again_c = top["controller_cpu_s_first"], top["controller_cpu_s_rerun"]
        lines.append(
            f"{n} hosts: controller CPU per GPU host {first_c / n:.3f} s (first run), {again_c / n:.3f} s (re-run); "
            f"the re-run's controller CPU is {ratio(again_c, first_c):.0%} of the first run's; "
            f"the GPU hosts' commands {top['host_cpu_s_first'] / n:.3f} and {top['host_cpu_s_rerun'] / n:.3f} s per host, "
            f"of it their modules {top['host_module_cpu_s_first'] / n:.3f} and {top['host_module_cpu_s_rerun'] / n:.3f} s"
        )
    return lines


def slope(rows: list[dict], key: str) -> float | None:
    if len(rows) < 2:
        return None
    a, b = sorted(rows, key=lambda r: r["hosts"])[-2:]
    if b["hosts"] == a["hosts"]:
        return None
    return (b[key] - a[key]) / (b["hosts"] - a["hosts"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--sizes", default="10,50,200", help="fleet sizes, comma-separated (default 10,50,200)"
    )
    parser.add_argument(
        "--forks", type=int, default=20, help="ansible-playbook -f (default 20, as ansible.cfg)"
    )
    parser.add_argument("--json", help="also write the rows, per-task counts and times to this file")
    parser.add_argument("--keep", help="keep inventories and logs in this folder (default: a temporary one)")
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        help="KEY=VALUE for ansible-playbook (e.g. ANSIBLE_PIPELINING=1)",
    )
    parser.add_argument(
        "-e",
        "--extra-vars",
        action="append",
        default=[],
        help="ansible-playbook -e for both runs (e.g. gpusplit_gpu_taint=true, as inventory/example sets it)",
    )
    args = parser.parse_args(argv)
    try:
        sizes = sorted({int(s) for s in args.sizes.split(",") if s.strip()})
    except ValueError:
        parser.error(f"--sizes: {args.sizes!r} is not a comma-separated list of host counts")
    if not sizes or min(sizes) < 1:
        parser.error("--sizes: give at least one host count of 1 or more")
    extra_env = {}
    for item in args.env:
        key, sep, value = item.partition("=")
        if not sep or not key:
            parser.error(f"--env: {item!r} is not KEY=VALUE")
        extra_env[key] = value

    # a SIGTERM ends the bench through its cleanup (the bench Nodes, host roots and DaemonSets)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(143))
    workdir = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="gpusplit-bench-fleet-"))
    workdir.mkdir(parents=True, exist_ok=True)
    load = os.getloadavg()
    print(
        f"bench-fleet: site.yml on the lab, {os.cpu_count()} CPUs, load average "
        f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, forks {args.forks}, sizes {sizes}"
        + (f", env {extra_env}" if extra_env else "")
        + (f", extra vars {args.extra_vars}" if args.extra_vars else "")
    )
    print(HEADER)
    print("|---" * HEADER.count(" | ") + "|---|")
    try:
        rows = bench(sizes, args.forks, workdir, extra_env, tuple(args.extra_vars))
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    for line in summary(rows):
        print(line)
    for row in rows:
        if row["apiserver"]["by_kind"]:
            print(f"{row['hosts']} hosts, re-run writes: {row['apiserver']['by_kind']}")
        print(
            f"{row['hosts']} hosts: the split DaemonSets settled {row['settle_s']} s after the first run"
            + (f" ({row['unsettled']} not yet)" if row["unsettled"] else "")
            + ", before the re-run"
        )
        if row["steal_s_first"] or row["steal_s_rerun"]:
            print(
                f"{row['hosts']} hosts: the hypervisor took {row['steal_s_first']} s (first run) and "
                f"{row['steal_s_rerun']} s (re-run) of CPU from this machine"
            )
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"load": load, "forks": args.forks, "rows": rows}, indent=1))
    return 0 if all(r["first_rc"] == 0 and r["rerun_rc"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
