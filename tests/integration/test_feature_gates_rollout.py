"""playbooks/feature_gates.yml against the lab's real v1.37.2 control plane.

What is proven, on the real kube-apiserver, kube-controller-manager and kube-scheduler (run by the lab
supervisor from .lab/manifests exactly as a kubelet runs static pods):

* refusals happen before anything is touched: the manifests' bytes stay the same and no component
  restarts (GangScheduling on 1.37, a locked gate, a broken dependency, an unhealthy control plane);
* the rollout enables GenericWorkload: before, scheduling.k8s.io/v1beta1 is not served and every
  component reports kubernetes_feature_enabled{name="GenericWorkload"} 0; after, it is served and all
  three report 1, each component restarted exactly once, in the order kube-apiserver,
  kube-controller-manager, kube-scheduler; the kubeadm-config ConfigMap (created from real kubeadm
  output) carries the same flags; a re-run changes nothing and restarts nothing;
* a gate the binary does not know takes the real kube-apiserver down; the rollout puts the previous
  manifest back, the lab is healthy again, and the play fails with kube-apiserver's own words;
* after a rollout and after a rollback the manifests directory holds the three manifests and
  nothing else (no temporary file, no backup: the kubelet would run it);
* k3s/rke2: the same three real components run with the flags of a k3s configuration directory
  (lab/k3s_standin.py reads it as k3s does and stands in for `systemctl restart k3s`). The role
  merges GenericWorkload into gpusplit's drop-in, keeping a gate an earlier run wrote there and the
  args of config.yaml, restarts the "service", and checks the components; a gate the binary does not
  know puts the previous drop-in back, restarts again, and the lab is healthy.

The lab's manifests are put back as they were found at the end.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from ansible_collections.gpusplit.k8s.plugins.module_utils._control_plane.health import (
    Credentials,
    load_kubeconfig,
    probe_component,
    resolve_endpoints,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._control_plane.rancher import render_rancher_dropin
from lab import components as C
from lab import lab as labctl

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
PLAYBOOK = "playbooks/feature_gates.yml"
GATE = "GenericWorkload"
API = "scheduling.k8s.io/v1beta1"
COMPONENTS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
KUBEADM_CM = ROOT / "tests" / "fixtures" / "kubeadm" / "v1beta4" / "kubeadm-config.configmap.yaml"
TIMINGS = C.OUT / "feature-gates-rollout-timings.json"


# --------------------------------------------------------------------------------------------
# helpers


def run_playbook(
    extra_vars: dict, *args: str, timeout: float = 600, path_prefix: str = ""
) -> tuple[int, str, float]:
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_FORCE_COLOR": "0",
        "PATH": f"{path_prefix}{BIN}:{C.BIN}:{os.environ.get('PATH', '')}",
    }
    argv = [
        str(BIN / "ansible-playbook"),
        "-i",
        "inventory/lab",
        PLAYBOOK,
        "-e",
        json.dumps(extra_vars),
        *args,
    ]
    started = time.monotonic()
    done = subprocess.run(
        argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    return done.returncode, done.stdout + done.stderr, time.monotonic() - started


def recap(output: str, host: str = "lab-cp-01") -> dict[str, int]:
    m = re.search(rf"^{re.escape(host)}\s+:\s+(.*)$", output, re.M)
    assert m, output[-3000:]
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", m.group(1))}


def task_status(output: str, task: str) -> str | None:
    """ok / changed / skipping / fatal: the first result line after the task's header."""
    m = re.search(rf"^TASK \[[^\]]*: {re.escape(task)}\] \**\n(\w+)", output, re.M)
    return m.group(1).rstrip(":") if m else None


def manifest_bytes() -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(C.MANIFESTS.glob("*.yaml"))}


def manifest_dir_names() -> list[str]:
    """Every entry of the manifests directory; the kubelet would run any of them."""
    return sorted(p.name for p in C.MANIFESTS.iterdir())


EXPECTED_MANIFESTS = sorted(f"{c}.yaml" for c in COMPONENTS)


def generations() -> dict[str, int]:
    state = labctl.read_state()
    return {c: state[c]["generation"] for c in COMPONENTS}


def gate_values() -> dict[str, dict]:
    """Per component: GenericWorkload from its own /metrics and its process start time."""
    out = {}
    with Credentials(load_kubeconfig(str(C.KUBECONFIG))) as creds:
        for component, endpoint in resolve_endpoints(COMPONENTS, C.control_plane_endpoints()).items():
            probe = probe_component(component, endpoint, creds)
            metrics = probe["metrics"]
            assert metrics["ok"], (component, probe)
            out[component] = {
                "gate": metrics["feature_gates"].get(GATE),
                "started": metrics["process_start_time"],
            }
    return out


def served(kubectl) -> set[str]:
    return set(kubectl("api-versions").stdout.split())


def wait_lab_healthy(timeout: float = 180) -> None:
    health = labctl.wait_healthy(timeout)
    assert health and all(v["healthy"] for v in health.values()), labctl.report_unhealthy(
        health or labctl.health()
    )


def cluster_configuration(kubectl) -> dict:
    cm = kubectl.json("-n", "kube-system", "get", "configmap", "kubeadm-config")
    return yaml.safe_load(cm["data"]["ClusterConfiguration"])


def extra_args(config: dict, section: str) -> dict[str, str]:
    return {a["name"]: a["value"] for a in (config.get(section) or {}).get("extraArgs") or []}


# --------------------------------------------------------------------------------------------
# fixtures


@pytest.fixture(scope="module")
def control_plane(lab, kubectl):
    """The lab's control plane in its default state (GenericWorkload off), restored afterwards."""
    found = manifest_bytes()
    C.write_manifests(force=True)
    wait_lab_healthy()
    kubectl("-n", "kube-system", "delete", "configmap", "kubeadm-config", "--ignore-not-found")
    kubectl("apply", "-f", str(KUBEADM_CM))
    timings: dict = {}
    yield timings
    kubectl("-n", "kube-system", "delete", "configmap", "kubeadm-config", "--ignore-not-found", check=False)
    if manifest_bytes() != found:
        for name, data in found.items():
            (C.MANIFESTS / name).write_bytes(data)
        time.sleep(2)
    wait_lab_healthy()
    if timings:
        TIMINGS.parent.mkdir(parents=True, exist_ok=True)
        TIMINGS.write_text(json.dumps(timings, indent=1) + "\n")


# --------------------------------------------------------------------------------------------
# refusals: nothing is touched


def test_check_mode_reports_the_change_and_writes_nothing(control_plane):
    before, gens = manifest_bytes(), generations()
    rc, out, _ = run_playbook({"gpusplit_feature_gates": {GATE: True}}, "--check", "--diff")
    assert rc == 0, out[-4000:]
    assert "+    - --feature-gates=GenericWorkload=true" in out
    assert "+    - --runtime-config=scheduling.k8s.io/v1beta1=true" in out
    # three manifests, and the ClusterConfiguration (a server-side dry run)
    assert recap(out)["changed"] == 5
    assert "Store the ClusterConfiguration" in out
    assert manifest_bytes() == before and generations() == gens


@pytest.mark.parametrize(
    ("gates", "said"),
    [
        (
            {GATE: True, "GangScheduling": True},
            "unrecognized feature gate: GangScheduling (Kubernetes 1.37: removed in 1.37, merged into GenericWorkload)",
        ),
        (
            {"DynamicResourceAllocation": False},
            "cannot set feature gate DynamicResourceAllocation to false, feature is locked to true",
        ),
        (
            {"DRADeviceTaints": False},
            "DRADeviceTaintRules is enabled, but depends on features that are disabled: [DRADeviceTaints]",
        ),
        (
            {"NoSuchGateForGpusplit": True},
            "NoSuchGateForGpusplit is not in the gpusplit feature-gate catalog",
        ),
    ],
    ids=["removed-GangScheduling", "locked", "dependency", "uncatalogued"],
)
def test_refused_before_touching_anything(control_plane, kubectl, gates, said):
    before, gens = manifest_bytes(), generations()
    config_before = kubectl.json("-n", "kube-system", "get", "configmap", "kubeadm-config")["metadata"][
        "resourceVersion"
    ]
    rc, out, _ = run_playbook({"gpusplit_feature_gates": gates})
    assert rc != 0
    assert said in " ".join(out.split()), out[-4000:]
    assert "Check the requested gates for this version, on the controller" in out
    assert "Merge the gates into the static-pod manifest" not in out  # the rollout play never started
    assert manifest_bytes() == before and generations() == gens
    after = kubectl.json("-n", "kube-system", "get", "configmap", "kubeadm-config")["metadata"][
        "resourceVersion"
    ]
    assert after == config_before


def test_unhealthy_control_plane_stops_before_any_change(control_plane):
    before, gens = manifest_bytes(), generations()
    endpoints = C.control_plane_endpoints()
    # a scheduler that does not answer
    endpoints["kube-scheduler"].update(
        health_url=f"https://{C.HOST}:1/healthz", metrics_url=f"https://{C.HOST}:1/metrics"
    )
    rc, out, _ = run_playbook(
        {
            "gpusplit_feature_gates": {GATE: True},
            "gpusplit_cp_endpoints": endpoints,
            "gpusplit_cp_precheck_timeout": 3,
        }
    )
    assert rc != 0
    text = " ".join(out.split())
    assert "the control plane is not healthy before the change, so nothing was changed" in text, out[-3000:]
    assert f"kube-scheduler: https://{C.HOST}:1/healthz: ConnectionRefusedError" in text
    assert manifest_bytes() == before and generations() == gens


def test_k3s_path_renders_the_drop_in_and_checks_the_components(control_plane, tmp_path):
    """The k3s branch up to the service restart (there is no k3s here): with the drop-in already as
    the role renders it, nothing is written or restarted, and the components are checked the same way."""
    rancher = tmp_path / "rancher-k3s"
    (rancher / "config.yaml.d").mkdir(parents=True)
    (rancher / "config.yaml").write_text("write-kubeconfig-mode: '0600'\n")
    dropin = rancher / "config.yaml.d" / "50-gpusplit-feature-gates.yaml"
    dropin.touch(mode=0o600)
    dropin.write_text(
        render_rancher_dropin(
            {GATE: False},
            {},
            header="Written by gpusplit (role gpusplit.k8s.control_plane_gates): feature gates for the control plane.",
        )
    )
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    (fake_bin / "k3s").write_text(
        "#!/bin/sh\necho 'k3s version v1.37.2+k3s1 (0123abcd)'\necho 'go version go1.26.1'\n"
    )
    (fake_bin / "k3s").chmod(0o755)
    before, gens, dropin_before = manifest_bytes(), generations(), dropin.read_bytes()
    rc, out, _ = run_playbook(
        {
            "gpusplit_feature_gates": {GATE: False},
            "gpusplit_cp_flavour": "k3s",
            "gpusplit_cp_rancher_dirs": {"k3s": str(rancher), "rke2": str(tmp_path / "rke2")},
        },
        path_prefix=f"{fake_bin}:",
    )
    assert rc == 0, out[-5000:]
    assert recap(out)["changed"] == 0
    assert "Wait until every component runs with the gates" in out
    assert task_status(out, "Merge the gates into the drop-in") == "ok"
    assert task_status(out, "Restart the service") == "skipping"
    assert task_status(out, "Wait until every component runs with the gates") == "ok"
    assert dropin.read_bytes() == dropin_before
    assert manifest_bytes() == before and generations() == gens


# --------------------------------------------------------------------------------------------
# the rollout


def test_rollout_enables_generic_workload_on_all_three(control_plane, kubectl):
    assert API not in served(kubectl)
    before = gate_values()
    assert {c: v["gate"] for c, v in before.items()} == dict.fromkeys(COMPONENTS, 0.0)
    gens = generations()

    rc, out, seconds = run_playbook({"gpusplit_feature_gates": {GATE: True}})
    assert rc == 0, out[-6000:]
    assert recap(out)["failed"] == 0

    assert API in served(kubectl)
    after = gate_values()
    assert {c: v["gate"] for c, v in after.items()} == dict.fromkeys(COMPONENTS, 1.0)
    # each component restarted exactly once, the API first, then the controller-manager, then the scheduler
    assert generations() == {c: n + 1 for c, n in gens.items()}
    starts = [after[c]["started"] for c in COMPONENTS]
    assert all(after[c]["started"] > before[c]["started"] for c in COMPONENTS)
    assert starts == sorted(starts), starts

    assert manifest_dir_names() == EXPECTED_MANIFESTS

    # the manifests say so, and so does kubeadm's ClusterConfiguration
    apiserver = yaml.safe_load((C.MANIFESTS / "kube-apiserver.yaml").read_text())["spec"]["containers"][0][
        "command"
    ]
    assert apiserver[-2:] == [
        "--feature-gates=GenericWorkload=true",
        "--runtime-config=scheduling.k8s.io/v1beta1=true",
    ]
    config = cluster_configuration(kubectl)
    assert extra_args(config, "apiServer") == {
        "audit-log-maxage": "7",  # kept from the fixture
        "feature-gates": "GenericWorkload=true",
        "runtime-config": "scheduling.k8s.io/v1beta1=true",
    }
    for section in ("controllerManager", "scheduler"):
        assert extra_args(config, section) == {"feature-gates": "GenericWorkload=true"}

    control_plane["rollout_seconds"] = round(seconds, 1)
    control_plane["restart_gaps_seconds"] = {
        "kube-apiserver->kube-controller-manager": round(starts[1] - starts[0], 1),
        "kube-controller-manager->kube-scheduler": round(starts[2] - starts[1], 1),
    }

    # a re-run changes nothing and restarts nothing
    config_rv = kubectl.json("-n", "kube-system", "get", "configmap", "kubeadm-config")["metadata"][
        "resourceVersion"
    ]
    manifests = manifest_bytes()
    rc, out, seconds = run_playbook({"gpusplit_feature_gates": {GATE: True}})
    assert rc == 0, out[-4000:]
    assert recap(out)["changed"] == 0
    assert manifest_bytes() == manifests
    assert generations() == {c: n + 1 for c, n in gens.items()}
    assert (
        kubectl.json("-n", "kube-system", "get", "configmap", "kubeadm-config")["metadata"]["resourceVersion"]
        == config_rv
    )
    control_plane["rerun_seconds"] = round(seconds, 1)
    print(f"\nrollout on the lab: {control_plane}")


def test_unknown_gate_is_rolled_back_with_the_components_own_error(control_plane, kubectl):
    # GenericWorkload is on from the test above; the catalog is bypassed so that the real
    # kube-apiserver gets a gate it does not know
    before, gens = manifest_bytes(), generations()
    assert API in served(kubectl)
    rc, out, seconds = run_playbook(
        {
            "gpusplit_feature_gates": {GATE: True, "NoSuchGateForGpusplit": True},
            "gpusplit_cp_skip_preflight": True,
            "gpusplit_cp_health_timeout": 40,
        }
    )
    assert rc != 0
    text = " ".join(out.split())
    # kube-apiserver's own words, from its log
    assert 'err="unrecognized feature gate: NoSuchGateForGpusplit"' in out, out[-5000:]
    assert "kube-apiserver on lab-cp-01 did not come back healthy with the new flags" in text
    assert "The previous manifest was put back from" in text and "kube-apiserver is healthy again" in text
    assert "The rollout stops here" in text
    assert recap(out)["rescued"] == 1

    # the previous manifest is back, byte for byte, put there without a temporary or backup file
    # in the manifests directory, and everything is healthy and as before
    assert manifest_bytes() == before
    assert manifest_dir_names() == EXPECTED_MANIFESTS
    wait_lab_healthy()
    assert API in served(kubectl)
    assert {c: v["gate"] for c, v in gate_values().items()} == dict.fromkeys(COMPONENTS, 1.0)
    now = generations()
    assert now["kube-apiserver"] >= gens["kube-apiserver"] + 2  # the broken start, then the restored one
    assert {c: now[c] for c in COMPONENTS[1:]} == {c: gens[c] for c in COMPONENTS[1:]}  # never touched
    backups = sorted((C.LAB / "backups").glob("kube-apiserver.yaml.*.bak"))
    assert backups and backups[-1].read_bytes() == before["kube-apiserver.yaml"]
    control_plane["failed_rollout_with_rollback_seconds"] = round(seconds, 1)


# --------------------------------------------------------------------------------------------
# k3s / rke2: the lab's components run from a k3s configuration directory

DROPIN = "50-gpusplit-feature-gates.yaml"
DROPIN_HEADER = (
    "Written by gpusplit (role gpusplit.k8s.control_plane_gates): feature gates for the control plane."
)
# a gate an earlier run of the role wrote (on by default in 1.37: harmless), which must stay
EARLIER_GATE = "DRAPartitionableDevices"


def k3s_restart_command(rancher: Path) -> str:
    return f"env PYTHONPATH={ROOT} {sys.executable} -m lab.k3s_standin restart --config-dir {rancher}"


def k3s_vars(k3s: dict, gates: dict, **more) -> dict:
    return {
        "gpusplit_feature_gates": gates,
        "gpusplit_cp_flavour": "k3s",
        "gpusplit_cp_rancher_dirs": {"k3s": str(k3s["dir"]), "rke2": str(k3s["dir"].parent / "rke2")},
        "gpusplit_cp_rancher_restart_command": k3s_restart_command(k3s["dir"]),
        **more,
    }


def running_commands() -> dict[str, list[str]]:
    return {c: C.command_from_manifest(C.MANIFESTS / f"{c}.yaml")[1:] for c in COMPONENTS}


@pytest.fixture
def k3s(control_plane, tmp_path):
    """The lab's components run as a k3s server would run them: config.yaml with an arg of its own,
    and the drop-in an earlier gpusplit run left; the manifests are put back afterwards."""
    found = manifest_bytes()
    rancher = tmp_path / "rancher-k3s"
    (rancher / "config.yaml.d").mkdir(parents=True)
    (rancher / "config.yaml").write_text(
        "write-kubeconfig-mode: '0600'\nkube-apiserver-arg:\n  - audit-log-maxage=7\n"
    )
    dropin = rancher / "config.yaml.d" / DROPIN
    dropin.write_text(render_rancher_dropin({EARLIER_GATE: True}, header=DROPIN_HEADER))
    dropin.chmod(0o600)
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    (fake_bin / "k3s").write_text(
        "#!/bin/sh\necho 'k3s version v1.37.2+k3s1 (0123abcd)'\necho 'go version go1.26.1'\n"
    )
    (fake_bin / "k3s").chmod(0o755)
    started = subprocess.run(
        k3s_restart_command(rancher).split(),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert started.returncode == 0, started.stdout + started.stderr
    wait_lab_healthy()
    yield {"dir": rancher, "dropin": dropin, "path_prefix": f"{fake_bin}:"}
    if manifest_bytes() != found:
        for name, data in found.items():
            (C.MANIFESTS / name).write_bytes(data)
        time.sleep(2)
    wait_lab_healthy()


def test_k3s_rollout_merges_the_drop_in_and_restarts_the_service(k3s, kubectl):
    commands = running_commands()
    assert commands["kube-apiserver"][:1] == [f"--advertise-address={C.HOST}"]  # k3s-sorted flags
    assert "--audit-log-maxage=7" in commands["kube-apiserver"]
    assert f"--feature-gates={EARLIER_GATE}=true" in commands["kube-scheduler"]
    assert API not in served(kubectl)
    before, gens, earlier = gate_values(), generations(), k3s["dropin"].read_text()
    assert {c: v["gate"] for c, v in before.items()} == dict.fromkeys(COMPONENTS, 0.0)

    rc, out, _ = run_playbook(k3s_vars(k3s, {GATE: True}), path_prefix=k3s["path_prefix"])
    assert rc == 0, out[-6000:]
    assert task_status(out, "Merge the gates into the drop-in") == "changed"
    assert task_status(out, "Restart the service") == "changed"
    assert task_status(out, "Wait until every component runs with the gates") == "ok"

    # the drop-in: GenericWorkload added, the earlier run's gate kept, the API version for it
    gates = f"feature-gates={EARLIER_GATE}=true,{GATE}=true"
    assert k3s["dropin"].read_text() == (
        f"# {DROPIN_HEADER}\n"
        "kube-apiserver-arg+:\n"
        f"  - {gates}\n"
        f"  - runtime-config={API}=true\n"
        "kube-scheduler-arg+:\n"
        f"  - {gates}\n"
        "kube-controller-manager-arg+:\n"
        f"  - {gates}\n"
    )
    assert sorted(p.name for p in (k3s["dir"] / "config.yaml.d").iterdir()) == [DROPIN]
    assert stat.S_IMODE(k3s["dropin"].stat().st_mode) == 0o600
    backups = sorted((C.LAB / "backups").glob(f"{DROPIN}.*.bak"))
    assert backups and backups[-1].read_text() == earlier

    # every component was restarted by the "service" and runs with them; config.yaml's arg stays
    commands = running_commands()
    for component in COMPONENTS:
        assert f"--{gates}" in commands[component]
    assert "--audit-log-maxage=7" in commands["kube-apiserver"]
    assert API in served(kubectl)
    after = gate_values()
    assert {c: v["gate"] for c, v in after.items()} == dict.fromkeys(COMPONENTS, 1.0)
    assert all(after[c]["started"] > before[c]["started"] for c in COMPONENTS)
    assert generations() == {c: n + 1 for c, n in gens.items()}
    assert manifest_dir_names() == EXPECTED_MANIFESTS

    # a re-run writes nothing and restarts nothing
    dropin_now = k3s["dropin"].read_bytes()
    rc, out, _ = run_playbook(k3s_vars(k3s, {GATE: True}), path_prefix=k3s["path_prefix"])
    assert rc == 0, out[-4000:]
    assert recap(out)["changed"] == 0
    assert task_status(out, "Restart the service") == "skipping"
    assert k3s["dropin"].read_bytes() == dropin_now
    assert generations() == {c: n + 1 for c, n in gens.items()}


def test_k3s_unknown_gate_puts_the_previous_drop_in_back(k3s, kubectl):
    before, gens, manifests = k3s["dropin"].read_bytes(), generations(), manifest_bytes()
    rc, out, _ = run_playbook(
        k3s_vars(
            k3s,
            {GATE: True, "NoSuchGateForGpusplit": True},
            gpusplit_cp_skip_preflight=True,
            gpusplit_cp_health_timeout=40,
        ),
        path_prefix=k3s["path_prefix"],
    )
    assert rc != 0
    text = " ".join(out.split())
    assert task_status(out, "Restart the service") == "changed"
    assert 'err="unrecognized feature gate: NoSuchGateForGpusplit"' in out, out[-5000:]
    assert "k3s on lab-cp-01 did not come back healthy with the new flags" in text
    assert "The previous drop-in was put back from" in text
    assert "k3s restarted; the control plane is healthy again" in text, out[-5000:]
    assert "The rollout stops here" in text
    assert recap(out)["rescued"] == 1

    # the drop-in and the components are as before, and nothing else appeared next to them
    assert k3s["dropin"].read_bytes() == before
    assert sorted(p.name for p in (k3s["dir"] / "config.yaml.d").iterdir()) == [DROPIN]
    assert manifest_bytes() == manifests and manifest_dir_names() == EXPECTED_MANIFESTS
    wait_lab_healthy()
    assert API not in served(kubectl)
    assert {c: v["gate"] for c, v in gate_values().items()} == dict.fromkeys(COMPONENTS, 0.0)
    now = generations()
    assert all(now[c] >= gens[c] + 2 for c in COMPONENTS)  # the broken start, then the restored one


# --------------------------------------------------------------------------------------------
# the role's own stops and reports, run for real (the module-level logic has unit tests)

FIXTURE_136 = ROOT / "tests" / "fixtures" / "kubeadm" / "v1beta4-1.36-gates"


def test_upgrade_preflight_reports_the_gates_the_target_removed(control_plane, tmp_path):
    """kubeadm-generated 1.36 manifests that set GangScheduling and WorkloadAwarePreemption: with
    gpusplit_upgrade_target_version 1.37 the role reports, per component, that they would stop it."""
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    for name in COMPONENTS:
        (manifests / f"{name}.yaml").write_bytes((FIXTURE_136 / f"{name}.yaml").read_bytes())
    before = {p.name: p.read_bytes() for p in manifests.iterdir()}
    lab_before = manifest_bytes()
    rc, out, _ = run_playbook(
        {
            "gpusplit_feature_gates": {GATE: True},
            "gpusplit_cp_manifest_dir": str(manifests),
            "gpusplit_upgrade_target_version": "1.37",
        },
        "--check",
    )
    flat = " ".join(out.split())
    assert "Report what would stop a component after the upgrade" in out, out[-4000:]
    report = flat.split("Report what would stop a component after the upgrade", 1)[1]
    assert "target: '1.37'" in report or "target: 1.37" in report
    for gate in ("GangScheduling", "WorkloadAwarePreemption"):
        assert gate in report.split("requested_gate_errors", 1)[0], report[:3000]
    assert {p.name: p.read_bytes() for p in manifests.iterdir()} == before  # check mode, and a report only
    assert manifest_bytes() == lab_before


def test_a_managed_control_plane_stops_the_play_and_says_why(control_plane, kubectl, tmp_path):
    """No manifests, no k3s/rke2 configuration, and a node label of a managed offering: the play stops
    on that host, naming the provider, and changes nothing."""
    empty = tmp_path / "manifests"
    empty.mkdir()
    node = kubectl.json("get", "nodes")["items"][0]["metadata"]["name"]
    kubectl("label", "node", node, "eks.amazonaws.com/nodegroup=gpu-workers", "--overwrite")
    lab_before, gens = manifest_bytes(), generations()
    try:
        rc, out, _ = run_playbook(
            {
                "gpusplit_feature_gates": {GATE: True},
                "gpusplit_cp_manifest_dir": str(empty),
                "gpusplit_cp_rancher_dirs": {
                    "k3s": str(tmp_path / "no-k3s"),
                    "rke2": str(tmp_path / "no-rke2"),
                },
            }
        )
    finally:
        kubectl("label", "node", node, "eks.amazonaws.com/nodegroup-")
    flat = " ".join(out.split())
    assert rc != 0
    assert "Stop, the control plane cannot be changed from this host" in out, out[-4000:]
    assert "the control plane is managed by Amazon EKS" in flat
    assert "cannot be changed by gpusplit" in flat and "Nothing was changed." in flat
    assert manifest_bytes() == lab_before and generations() == gens
