"""The fleet bench's own parts (tools/bench_fleet.py): its inventory, the apiserver write count, the slope.

The bench itself needs the lab and takes minutes (`make bench-fleet`, docs/performance.md); its
counting callback is exercised by tests/unit/roles/test_gpu_host_one_call.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import bench_fleet  # noqa: E402

sys.path.remove(str(ROOT / "tools"))

METRICS = """\
# HELP apiserver_request_total [STABLE] Counter of apiserver requests
# TYPE apiserver_request_total counter
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="nodes",scope="cluster",subresource="",verb="LIST",version="v1"} 40
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="nodes",scope="resource",subresource="",verb="APPLY",version="v1"} 6
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="nodes",scope="resource",subresource="",verb="PATCH",version="v1"} 2
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="nodes",scope="resource",subresource="status",verb="PATCH",version="v1"} 90
apiserver_request_total{code="200",component="apiserver",dry_run="",group="coordination.k8s.io",resource="leases",scope="resource",subresource="",verb="PUT",version="v1"} 500
apiserver_request_total{code="200",component="apiserver",dry_run="All",group="apps",resource="daemonsets",scope="resource",subresource="",verb="APPLY",version="v1"} 3
apiserver_request_total{code="201",component="apiserver",dry_run="",group="apps",resource="daemonsets",scope="resource",subresource="",verb="POST",version="v1"} 1
"""


def test_the_inventory_takes_the_lab_fixtures_and_modes_in_turn():
    hosts = bench_fleet.inventory(8)["all"]["children"]["gpu_nodes"]["hosts"]
    assert list(hosts) == [f"bench-{i:04d}" for i in range(8)]
    fixtures = [h["gpusplit_lab_fixture"] for h in hosts.values()]
    assert fixtures[:6] == [m[0] for m in bench_fleet.MIX] and fixtures[6:] == fixtures[:2]
    assert hosts["bench-0004"] == {"gpusplit_lab_fixture": "a100-mig", "gpusplit_mode": "none"}
    assert hosts["bench-0001"]["gpusplit_host_services"] == ["ollama.service"]
    fixture_dir = ROOT / "tests" / "fixtures" / "gpus"
    assert all((fixture_dir / f"{f}.json").is_file() for f in fixtures)


def test_the_gpu_hosts_name_the_checkout_as_a_plain_path(tmp_path):
    """The lab inventory finds the checkout with an expression each task would evaluate again; the bench's
    GPU hosts name it, as a real inventory names its paths (the same checkout)."""
    import yaml

    inv = bench_fleet.write_inventory(3, tmp_path)
    gpu_vars = yaml.safe_load((inv / "group_vars" / "gpu_nodes.yml").read_text())
    assert gpu_vars["gpusplit_lab_root"] == str(ROOT)
    assert (Path(gpu_vars["gpusplit_lab_root"]) / "lab" / "lab.py").is_file()
    lab_vars = yaml.safe_load((inv / "group_vars" / "all.yml").read_text())
    assert "{{" in lab_vars["gpusplit_lab_root"]  # localhost keeps the lab's own expression


def test_the_gpu_hosts_name_the_values_the_lab_inventory_works_out(tmp_path):
    """Each bench host names its lab paths and the fake NVML's environment as values; they are the values
    the lab inventory's expressions give that host (templated by ansible itself)."""
    import json
    import os
    import subprocess

    import yaml

    named_dir = tmp_path / "named"
    named = bench_fleet.write_inventory(2, named_dir)
    hosts = yaml.safe_load((named / "hosts.yml").read_text())["all"]["children"]["gpu_nodes"]["hosts"]
    gpu_vars = yaml.safe_load((named / "group_vars" / "gpu_nodes.yml").read_text())
    # the same hosts with the lab's expressions only
    plain = tmp_path / "plain"
    (plain / "group_vars").mkdir(parents=True)
    (plain / "group_vars" / "all.yml").write_text(
        (ROOT / "inventory" / "lab" / "group_vars" / "all.yml").read_text()
    )
    (plain / "group_vars" / "gpu_nodes.yml").write_text(yaml.safe_dump({"gpusplit_lab_root": str(ROOT)}))
    (plain / "hosts.yml").write_text(yaml.safe_dump(bench_fleet.inventory(2)))
    names = [
        "gpusplit_host_root",
        "gpusplit_discovery_environment",
        "gpusplit_discovery_proc_root",
        "gpusplit_lab_dir",
    ]
    expression = "{{ {" + ", ".join(f"'{name}': {name}" for name in names) + "} | to_json }}"
    done = subprocess.run(
        [
            str(Path(sys.executable).parent / "ansible"),
            "gpu_nodes",
            "-i",
            str(plain),
            "-o",
            "-m",
            "ansible.builtin.debug",
            "-a",
            f"msg={expression}",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg")),
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    worked_out = {}
    for line in done.stdout.splitlines():
        host, _sep, answer = line.partition(" | SUCCESS => ")
        worked_out[host.strip()] = json.loads(json.loads(answer)["msg"])
    assert sorted(worked_out) == sorted(hosts)
    for host, values in worked_out.items():
        named_values = dict(gpu_vars, **hosts[host])
        named = {name: named_values[name] for name in names}
        # the fixture is the host's own copy (GPU UUIDs of its own), the lab's own fixture otherwise
        own = Path(named["gpusplit_discovery_environment"].pop("GPUSPLIT_FAKE_NVML_FIXTURE"))
        lab = Path(values["gpusplit_discovery_environment"].pop("GPUSPLIT_FAKE_NVML_FIXTURE"))
        assert named == values
        assert own == named_dir / "inventory-2" / "fixtures" / f"{host}.json"
        assert json.loads(own.read_text()) == json.loads(bench_fleet_own_uuids(lab.read_text(), host))


def bench_fleet_own_uuids(text, host):
    from lab import nodes

    return nodes.own_uuids(text, host)


def test_every_bench_host_reports_gpus_of_its_own(tmp_path):
    """The fixtures are taken in turn; each host's copy has UUIDs of its own, everything else as the lab's, and
    the device-plugin stand-in gives the host's Node the same UUIDs."""
    import json

    from lab import deviceplugin, nodes

    n = len(bench_fleet.MIX) + 2
    bench_fleet.write_fixtures(n, tmp_path)
    seen = {}
    for i in range(n):
        host = bench_fleet.host_name(i)
        doc = json.loads((tmp_path / f"{host}.json").read_text())
        for gpu in doc.get("gpus") or []:
            for uuid in [gpu["uuid"], *(m["uuid"] for m in gpu.get("mig_devices") or [])]:
                assert uuid not in seen, (uuid, host, seen.get(uuid))
                seen[uuid] = host
        fixture = bench_fleet.MIX[i % len(bench_fleet.MIX)][0]
        lab = json.loads((nodes.FIXTURES / f"{fixture}.json").read_text())
        assert len(doc.get("gpus") or []) == len(lab.get("gpus") or [])
        node = nodes.node_body(host, fixture, {nodes.OWN_UUIDS_LABEL: "true"})
        plugin_sees = [] if doc.get("nvml_init_error") or doc.get("smi_no_driver") else doc.get("gpus") or []
        want = [g["uuid"] for g in plugin_sees if not g.get("lost")]
        assert [g["uuid"] for g in deviceplugin.node_gpus(node)] == want
    assert len(seen) > 20


def test_writes_leave_out_reads_dry_runs_and_what_the_lab_writes_on_its_own():
    parsed = bench_fleet.parse_writes(METRICS)
    assert parsed == {
        "writes": {"APPLY nodes": 6, "PATCH nodes": 2, "POST daemonsets": 1},
        "dry_run": 3,
        "background": 590,
    }
    later = bench_fleet.parse_writes(
        METRICS.replace('verb="PATCH",version="v1"} 2', 'verb="PATCH",version="v1"} 5')
    )
    assert bench_fleet.writes_between(parsed, later) == {
        "writes": 3,
        "by_kind": {"PATCH nodes": 3},
        "dry_run": 0,
        "background": 0,
    }


def test_seconds_per_host_is_the_slope_between_the_two_largest_fleets():
    rows = [{"hosts": 10, "rerun_s": 30.0}, {"hosts": 200, "rerun_s": 130.0}, {"hosts": 50, "rerun_s": 50.0}]
    assert bench_fleet.slope(rows, "rerun_s") == pytest.approx(80.0 / 150)
    assert bench_fleet.slope(rows[:1], "rerun_s") is None


@pytest.mark.parametrize(
    "argv, message",
    [(["--sizes", "5,x"], "--sizes"), (["--sizes", "0"], "--sizes"), (["--env", "NOEQUALS"], "--env")],
)
def test_bad_arguments_are_refused_naming_the_option(argv, message, capsys):
    with pytest.raises(SystemExit) as caught:
        bench_fleet.main(argv)
    assert caught.value.code == 2
    assert message in capsys.readouterr().err


def test_the_interpreter_wrapper_adds_up_module_cpu_and_keeps_the_exit_status(tmp_path, monkeypatch):
    import subprocess

    wrapper = bench_fleet.write_interpreter(tmp_path)
    log = tmp_path / "cpu.txt"
    monkeypatch.setenv("GPUSPLIT_BENCH_MODULE_CPU_FILE", str(log))
    for code in (0, 3):
        done = subprocess.run(
            [str(wrapper), "-c", f"import sys; print(sys.stdin.read()); sys.exit({code})"],
            input="from stdin",
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == code and done.stdout.strip() == "from stdin", done.stderr
    runs, cpu = bench_fleet.module_cpu(log)
    assert runs == 2 and cpu > 0
    assert bench_fleet.module_cpu(tmp_path / "none.txt") == (0, 0.0)


def test_tasks_per_host_counts_the_bench_hosts_recap():
    run = {
        "stats": {
            "bench-0000": {"ok": 7, "changed": 1, "failures": 0, "unreachable": 0, "skipped": 2},
            "bench-0001": {"ok": 6, "changed": 0, "failures": 1, "unreachable": 0, "skipped": 1},
            "localhost": {"ok": 20, "skipped": 6},
        }
    }
    assert bench_fleet.tasks_per_host(run, 2) == pytest.approx(8.5)


def test_the_kubelets_token_requests_are_the_labs_own_writes():
    line = (
        'apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="serviceaccounts",'
        'scope="resource",subresource="token",verb="POST",version="v1"} 4\n'
    )
    assert bench_fleet.parse_writes(line) == {"writes": {}, "dry_run": 0, "background": 4}


def test_a_processs_cpu_is_read_from_proc_and_a_gone_one_is_left_out(tmp_path):
    import os
    import subprocess

    busy = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass\ninput()",
        ],
        stdin=subprocess.PIPE,
    )
    try:
        before = {"busy": bench_fleet.process_cpu(busy.pid), "me": bench_fleet.process_cpu(os.getpid())}
        import time

        deadline = time.monotonic() + 30
        while bench_fleet.process_cpu(busy.pid) < 0.3 and time.monotonic() < deadline:
            time.sleep(0.05)
        after = {"busy": bench_fleet.process_cpu(busy.pid), "me": None}
    finally:
        busy.communicate(b"\n")
    spent = bench_fleet.lab_cpu_between(before, after)
    assert list(spent) == ["busy"] and spent["busy"] >= 0.2
    assert bench_fleet.process_cpu(busy.pid) is None  # reaped: no /proc entry
    assert bench_fleet.lab_cpu_between({"restarted": 9.0}, {"restarted": 1.0}) == {}
    assert bench_fleet.steal_seconds() >= 0.0


def daemonset_status(generation=2, **status):
    return {"metadata": {"name": "gpusplit-dp-bench-0001", "generation": generation}, "status": status}


# a DaemonSet of one pod that its controller is done with
DONE = {
    "observedGeneration": 2,
    "desiredNumberScheduled": 1,
    "currentNumberScheduled": 1,
    "updatedNumberScheduled": 1,
    "numberReady": 1,
    "numberAvailable": 1,
}


@pytest.mark.parametrize(
    ("daemonset", "done"),
    [
        (daemonset_status(**DONE), True),
        # the pod is up but the controller has not written that it is available yet
        (daemonset_status(**{k: v for k, v in DONE.items() if k != "numberAvailable"}), False),
        # a status of the generation before (an apply changed the DaemonSet)
        (daemonset_status(**{**DONE, "observedGeneration": 1}), False),
        (daemonset_status(), False),  # no status yet
        # no node for it: nothing to wait for (the API leaves the zero counts out)
        (daemonset_status(observedGeneration=2, desiredNumberScheduled=0), True),
    ],
)
def test_a_daemonset_is_settled_once_its_controller_wrote_every_pod_available(daemonset, done):
    assert bench_fleet.settled(daemonset) is done


def test_a_wait_reads_until_nothing_is_left_or_its_time_is_up():
    """wait_until_done reads what is left every interval: it stops at the first empty read, or after the timeout with
    the count still left; it reads once more after the last sleep."""
    now = [0.0]
    reads = []

    def sleep(seconds):
        now[0] += seconds

    def left_of(answers):
        def read():
            reads.append(now[0])
            return answers.pop(0) if answers else ["x"]

        return read

    clock = lambda: now[0]  # noqa: E731
    assert bench_fleet.wait_until_done(left_of([["a", "b"], ["a"], []]), 10, 2, clock, sleep) == (4.0, 0)
    assert reads == [0.0, 2.0, 4.0]
    now[0], reads[:] = 0.0, []
    assert bench_fleet.wait_until_done(left_of([]), 5, 2, clock, sleep) == (6.0, 1)
    assert reads == [0.0, 2.0, 4.0, 6.0]
    now[0], reads[:] = 0.0, []
    assert bench_fleet.wait_until_done(left_of([[]]), 5, 2, clock, sleep) == (0.0, 0)
    assert reads == [0.0]


def test_the_gpu_hosts_connection_counts_their_commands_and_the_wrapper_their_modules(tmp_path):
    """The bench's GPU hosts run over its connection plugin (the local connection that counts the CPU of each
    command it runs) with the interpreter wrapper: every module execution is one module process, and the
    host's commands (the shells around it, the wrapper) cost at least what its modules cost."""
    import os
    import subprocess

    import yaml

    bench_fleet.write_plugins(tmp_path)
    wrapper = bench_fleet.write_interpreter(tmp_path)
    host = {"ansible_connection": bench_fleet.CONNECTION_NAME, "ansible_python_interpreter": str(wrapper)}
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump({"all": {"hosts": {"h1": host, "h2": host}}}))
    modules, commands = tmp_path / "modules.txt", tmp_path / "commands.txt"
    done = subprocess.run(
        [str(Path(sys.executable).parent / "ansible"), "all", "-i", str(tmp_path / "hosts.yml")]
        + ["-m", "ansible.builtin.ping"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=dict(
            os.environ,
            ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
            ANSIBLE_CONNECTION_PLUGINS=str(tmp_path / "connections"),
            GPUSPLIT_BENCH_MODULE_CPU_FILE=str(modules),
            GPUSPLIT_BENCH_HOST_CPU_FILE=str(commands),
        ),
        timeout=120,
    )
    assert done.returncode == 0 and done.stdout.count("pong") == 2, done.stdout + done.stderr
    module_runs, module_cpu = bench_fleet.module_cpu(modules)
    command_runs, command_cpu = bench_fleet.module_cpu(commands)
    assert module_runs == 2 and module_cpu > 0
    assert command_runs >= 2 and command_cpu > module_cpu


def bench_row(hosts, **values):
    row = {
        "hosts": hosts,
        "first_s": 80.0,
        "rerun_s": 20.0,
        "first_rc": 0,
        "rerun_rc": 0,
        "controller_cpu_s_first": 60.0,
        "controller_cpu_s_rerun": 20.0,
        "host_module_cpu_s_first": 30.0,
        "host_module_cpu_s_rerun": 10.0,
        "host_cpu_s_first": 32.0,
        "host_cpu_s_rerun": 11.0,
        "modules_per_host_rerun": 1.0,
        "tasks_per_host_rerun": 1.1,
        "changed_rerun": 0,
        "apiserver": {"writes": 0},
        "lab_cpu_s_first": {"etcd": 1.0},
        "lab_cpu_s_rerun": {"etcd": 0.5},
        "load_before": [1.0, 2.0, 3.0],
    }
    row.update(values)
    return row


def test_a_row_has_a_cell_per_column_and_gives_the_controllers_cpu_per_host(capsys):
    bench_fleet.print_row(bench_row(200))
    line = capsys.readouterr().out.strip()
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert len(cells) == len(bench_fleet.HEADER.strip("|").split("|"))
    assert cells[4:8] == ["60.0 / 20.0", "33%", "0.300 / 0.100", "0.150 / 0.050"]


def test_the_summary_gives_the_slopes_and_the_controllers_share_at_the_largest_fleet():
    rows = [
        bench_row(50, first_s=30.0, rerun_s=8.0, controller_cpu_s_first=15.0, controller_cpu_s_rerun=5.0),
        bench_row(200),
    ]
    lines = bench_fleet.summary(rows)
    assert "seconds per host (first run, slope 50 -> 200 hosts): 0.333" in lines
    assert "seconds per host (controller CPU seconds of the re-run, slope 50 -> 200 hosts): 0.100" in lines
    assert lines[-1].startswith(
        "200 hosts: controller CPU per GPU host 0.300 s (first run), 0.100 s (re-run); "
        "the re-run's controller CPU is 33% of the first run's"
    )
    assert bench_fleet.summary(rows[:1])[0].startswith("50 hosts:")


def test_a_runs_task_cpu_is_the_main_process_and_the_workers_largest_first():
    run = {
        "task_main_cpu": {"a": 0.5, "b": 2.0, "c": 0.1},
        "task_workers_cpu": {"a": 3.0, "c": 0.2, "d": 0.01},
    }
    assert bench_fleet.task_cpu(run, top=3) == {"a": [0.5, 3.0], "b": [2.0, 0.0], "c": [0.1, 0.2]}
    assert bench_fleet.task_cpu({}) == {}
