"""The node hardening, run on the real NVIDIA Container Toolkit (built by `lab/build.sh toolkit` from
the Go module pinned in lab/versions.env, NVIDIA_CONTAINER_TOOLKIT_VERSION).

For each case an OCI bundle is laid out the way containerd lays it out for a Kubernetes container
(environment, capabilities from the securityContext, mounts, annotations), and handed to
- the real hook (`nvidia-container-runtime-hook prestart`, container state on stdin, run in the
  bundle directory as runc runs hooks): it decides in Go whether the container is privileged,
  whether the volume-mount device list or the environment variable counts, and which `--device=`
  list nvidia-container-cli gets. The stand-in tests/fakes/bin/nvidia-container-cli resolves that
  list against the fixture's GPUs as the real one does and records it;
- the real runtime (`nvidia-container-runtime create`) in its `cdi` mode with a CDI spec for the
  fixture's GPUs, and in `auto` mode, which is `jit-cdi` on an NVML host (here too, as no platform
  is detected). It edits the bundle and execs the low-level runtime, the stand-in
  tests/fakes/bin/fake-runc, which records the config.json it received.

The toolkit's config.toml is the one `nvidia-ctk config default` generates, with the test's plumbing
(stand-in paths, log, CDI spec dir) set by `nvidia-ctk config --set`, and then hardened with
gpusplit's own editor (plugins/module_utils/_host/toolkit_config.py), exactly as
`gpusplit.k8s.nvidia_toolkit_config` edits a host's file. The GPU Operator's way is the toolkit's own
installer (`nvidia-ctk-installer`, the operator's toolkit container program) run with the
`toolkit.env` that gpusplit renders into the ClusterPolicy.

docs/dev/hardening-tests.md ("Matrix on the real toolkit") shows the results as a table; the test checks that table against what
the toolkit did.
"""

from __future__ import annotations

import json
import re
import subprocess
import tomllib
from pathlib import Path

import pytest

from ansible_collections.gpusplit.k8s.plugins.module_utils._host import toolkit_config as tc
from ansible_collections.gpusplit.k8s.plugins.module_utils._split.planner import plan_node
from ansible_collections.gpusplit.k8s.plugins.plugin_utils import gpu_operator
from ansible_collections.gpusplit.k8s.plugins.plugin_utils import split_render as render
from ansible_collections.gpusplit.k8s.plugins.plugin_utils import workload_checks as wl
from lab.components import versions

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / ".lab" / "bin"
FAKES = ROOT / "tests" / "fakes" / "bin"
FAKE_CLI = FAKES / "nvidia-container-cli"
FAKE_RUNC = FAKES / "fake-runc"
GPU_FIXTURE = ROOT / "tests" / "fixtures" / "gpus" / "dgx-h100.json"
DOCS = ROOT / "docs" / "dev" / "hardening-tests.md"
VERSION = versions()["NVIDIA_CONTAINER_TOOLKIT_VERSION"]
TOOLKIT = (
    "nvidia-container-runtime-hook",
    "nvidia-container-runtime",
    "nvidia-ctk",
    "nvidia-ctk-installer",
    "nvidia-cdi-hook",
    "nvidia-container-runtime.cdi",
    "nvidia-container-runtime.legacy",
)


def _missing():
    out = []
    for name in TOOLKIT:
        stamp = BIN / f".{name}.version"
        if not (BIN / name).is_file() or not stamp.is_file() or stamp.read_text().strip() != VERSION:
            out.append(name)
    return out


pytestmark = pytest.mark.skipif(
    bool(_missing()),
    reason=f"NVIDIA Container Toolkit v{VERSION} binaries not built ({', '.join(_missing())}): "
    "run lab/build.sh toolkit (make lab-build does)",
)

ENVVAR = tc.ENVVAR_WHEN_UNPRIVILEGED
MOUNTS = tc.AS_VOLUME_MOUNTS
DEVICE_LIST_ROOT = "/var/run/nvidia-container-devices"  # the toolkit's DeviceListAsVolumeMountsRoot

FIXTURE = json.loads(GPU_FIXTURE.read_text())
GPUS = sorted(FIXTURE["gpus"], key=lambda g: g["index"])
INDEX_OF = {g["uuid"]: g["index"] for g in GPUS}
MINOR_TO_UUID = {g["minor_number"]: g["uuid"] for g in GPUS}
PLAN = plan_node("dgx-h100-01", FIXTURE["gpus"], "device_plugin", {"host_count": 2})
HOST = PLAN["host_uuids"]
KUBE = PLAN["kubernetes_uuids"]
ALLOCATED = KUBE[2]  # the GPU the split plugin gave the pod in the allocation cases

# --------------------------------------------------------------------------------------------
# what containerd puts into config.json for a Kubernetes container

# containerd's default capability set for an unprivileged container (pkg/oci/spec.go,
# populateDefaultUnixSpec) and every capability a privileged one gets (WithPrivileged: all known)
DEFAULT_CAPS = [
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_FSETID",
    "CAP_FOWNER",
    "CAP_MKNOD",
    "CAP_NET_RAW",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETFCAP",
    "CAP_SETPCAP",
    "CAP_NET_BIND_SERVICE",
    "CAP_SYS_CHROOT",
    "CAP_KILL",
    "CAP_AUDIT_WRITE",
]
ALL_CAPS = DEFAULT_CAPS + [
    "CAP_DAC_READ_SEARCH",
    "CAP_LINUX_IMMUTABLE",
    "CAP_NET_BROADCAST",
    "CAP_NET_ADMIN",
    "CAP_IPC_LOCK",
    "CAP_IPC_OWNER",
    "CAP_SYS_MODULE",
    "CAP_SYS_RAWIO",
    "CAP_SYS_PTRACE",
    "CAP_SYS_PACCT",
    "CAP_SYS_ADMIN",
    "CAP_SYS_BOOT",
    "CAP_SYS_NICE",
    "CAP_SYS_RESOURCE",
    "CAP_SYS_TIME",
    "CAP_SYS_TTY_CONFIG",
    "CAP_LEASE",
    "CAP_AUDIT_CONTROL",
    "CAP_MAC_OVERRIDE",
    "CAP_MAC_ADMIN",
    "CAP_SYSLOG",
    "CAP_WAKE_ALARM",
    "CAP_BLOCK_SUSPEND",
    "CAP_AUDIT_READ",
    "CAP_PERFMON",
    "CAP_BPF",
    "CAP_CHECKPOINT_RESTORE",
]
DEFAULT_MOUNTS = [
    {"destination": "/proc", "type": "proc", "source": "proc", "options": ["nosuid", "noexec", "nodev"]},
    {
        "destination": "/dev",
        "type": "tmpfs",
        "source": "tmpfs",
        "options": ["nosuid", "strictatime", "mode=755"],
    },
    {"destination": "/dev/pts", "type": "devpts", "source": "devpts", "options": ["nosuid", "noexec"]},
    {
        "destination": "/dev/mqueue",
        "type": "mqueue",
        "source": "mqueue",
        "options": ["nosuid", "noexec", "nodev"],
    },
    {
        "destination": "/sys",
        "type": "sysfs",
        "source": "sysfs",
        "options": ["nosuid", "noexec", "nodev", "ro"],
    },
    {
        "destination": "/sys/fs/cgroup",
        "type": "cgroup",
        "source": "cgroup",
        "options": ["nosuid", "noexec", "ro"],
    },
]


def oci_capabilities(security_context):
    """containerd's CRI mapping of a securityContext to the OCI capability sets
    (internal/cri/opts/spec_linux_opts.go WithCapabilities, WithPrivileged)."""
    sc = security_context or {}
    if sc.get("privileged"):
        caps = list(ALL_CAPS)
    else:
        caps = list(DEFAULT_CAPS)
        add = [c.upper() for c in (sc.get("capabilities") or {}).get("add", [])]
        drop = [c.upper() for c in (sc.get("capabilities") or {}).get("drop", [])]
        if "ALL" in add:
            caps = list(ALL_CAPS)
        if "ALL" in drop:
            caps = []
        caps += [f"CAP_{c}" for c in add if c != "ALL" and f"CAP_{c}" not in caps]
        caps = [c for c in caps if c[4:] not in drop]
    return {"bounding": caps, "effective": caps, "permitted": caps}


def bind(host_path, container_path):
    """A CRI mount (a volume, or a device plugin's Allocate mount) as containerd writes it."""
    return {
        "destination": container_path,
        "type": "bind",
        "source": host_path,
        "options": ["rbind", "rprivate", "rw"],
    }


def container_spec(env=(), security_context=None, mounts=(), annotations=None):
    """config.json of a Kubernetes container as containerd gives it to the runtime. ``env`` in the
    kubelet's order (device-plugin variables, then the pod's own); a later entry wins (containerd's
    WithEnv replaces an existing name)."""
    merged = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOSTNAME": "pod"}
    for item in env:
        name, _, value = item.partition("=")
        merged[name] = value
    return {
        "ociVersion": "1.2.1",
        "process": {
            "user": {"uid": 0, "gid": 0},
            "args": ["sleep", "infinity"],
            "env": [f"{k}={v}" for k, v in merged.items()],
            "cwd": "/",
            "capabilities": oci_capabilities(security_context),
        },
        "root": {"path": "rootfs"},
        "hostname": "pod",
        "mounts": DEFAULT_MOUNTS
        + [bind("/var/lib/kubelet/pods/0d3c/etc-hosts", "/etc/hosts")]
        + list(mounts),
        "annotations": {
            "io.kubernetes.cri.container-type": "container",
            "io.kubernetes.cri.container-name": "ctr",
            "io.kubernetes.cri.sandbox-namespace": "default",
            "io.kubernetes.cri.sandbox-name": "pod",
            **(annotations or {}),
        },
        "linux": {"namespaces": [{"type": "pid"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"}]},
    }


def k8s_env(container):
    return [f"{e['name']}={e['value']}" for e in container.get("env", [])]


def split_plugin_container(hardening):
    """The split device plugin's container exactly as gpusplit renders it for the fixture host."""
    ds = render.render_split_daemonset(PLAN, {"hardening": hardening})
    return ds["spec"]["template"]["spec"]["containers"][0]


def allocated(uuid):
    """What the split plugin's Allocate returns under DEVICE_LIST_STRATEGY=volume-mounts (NVIDIA/
    k8s-device-plugin internal/plugin/server.go getAllocateResponse, apiMounts): the list variable
    pointing at the mount root, and one /dev/null mount per device."""
    return [f"NVIDIA_VISIBLE_DEVICES={DEVICE_LIST_ROOT}"], [bind("/dev/null", f"{DEVICE_LIST_ROOT}/{uuid}")]


# --------------------------------------------------------------------------------------------
# the cases


def case_specs():
    plugin = split_plugin_container("volume-mounts")
    plugin_envvar = split_plugin_container("envvar")
    alloc_env, alloc_mounts = allocated(ALLOCATED)
    cdi_key = "cdi.k8s.io/gpusplit-matrix"
    return {
        "env-all": container_spec(["NVIDIA_VISIBLE_DEVICES=all"]),
        "env-host-uuid": container_spec([f"NVIDIA_VISIBLE_DEVICES={HOST[0]}"]),
        "split-plugin": container_spec(k8s_env(plugin), plugin["securityContext"]),
        "split-plugin-envvar": container_spec(k8s_env(plugin_envvar), plugin_envvar["securityContext"]),
        "allocated-pod": container_spec(alloc_env, mounts=alloc_mounts),
        "allocated-pod-env-all": container_spec(
            alloc_env + ["NVIDIA_VISIBLE_DEVICES=all"], mounts=alloc_mounts
        ),
        "hostpath-dev-null": container_spec(mounts=[bind("/dev/null", f"{DEVICE_LIST_ROOT}/{HOST[0]}")]),
        # what the admission guard refuses beyond the plain path (the toolkit cleans the mount point
        # and needs no separator after the root), and a mount the toolkit ignores (not /dev/null)
        "hostpath-dev-null-unclean": container_spec(
            mounts=[bind("/dev/null", f"/var/run/./nvidia-container-devices//{HOST[0]}")]
        ),
        "hostpath-dev-null-no-separator": container_spec(
            mounts=[bind("/dev/null", f"{DEVICE_LIST_ROOT}all")]
        ),
        "emptydir-device-mount": container_spec(
            mounts=[
                bind(
                    "/var/lib/kubelet/pods/0d3c/volumes/kubernetes.io~empty-dir/gpu",
                    f"{DEVICE_LIST_ROOT}/all",
                )
            ]
        ),
        "privileged": container_spec(["NVIDIA_VISIBLE_DEVICES=all"], {"privileged": True}),
        "sys-admin": container_spec(["NVIDIA_VISIBLE_DEVICES=all"], {"capabilities": {"add": ["SYS_ADMIN"]}}),
        "cdi-annotation": container_spec(annotations={cdi_key: f"nvidia.com/gpu={HOST[0]}"}),
    }


# --------------------------------------------------------------------------------------------
# running the toolkit


def run(argv, **kw):
    kw.setdefault("timeout", 60)
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, **kw)


def describe(uuids):
    """A granted or requested device set in words: GPU indices of the fixture host."""
    if not uuids:
        return "no GPU"
    idx = sorted(INDEX_OF[u] for u in uuids)
    return ("GPU " if len(idx) == 1 else "GPUs ") + ",".join(str(i) for i in idx)


def describe_ids(ids):
    """Device names as the toolkit requests them (``all``, an index or a UUID)."""
    uuids, unknown = set(), []
    for d in ids:
        if d == "all":
            uuids |= set(INDEX_OF)
        elif d.isdigit():
            uuids.add(GPUS[int(d)]["uuid"])
        elif d in INDEX_OF:
            uuids.add(d)
        else:
            unknown.append(d)  # not a GPU: the device lookup fails on a real host
    return " and ".join(([describe(uuids)] if uuids else []) + unknown) or describe(())


def lay_out(tmp, spec):
    bundle = tmp / "bundle"
    (bundle / "rootfs").mkdir(parents=True)
    (bundle / "config.json").write_text(json.dumps(spec, indent=1))
    return bundle


def records(path):
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def hook(config, spec, tmp, hook_binary=None):
    """Run the real hook's prestart on ``spec``; the outcome in words and the CLI's records."""
    bundle = lay_out(tmp, spec)
    record = tmp / "cli.jsonl"
    state = {"ociVersion": "1.2.1", "id": "ctr", "status": "creating", "pid": 4242, "bundle": str(bundle)}
    argv = [hook_binary] if hook_binary else [BIN / "nvidia-container-runtime-hook", "-config", config]
    env = {
        "PATH": "/usr/bin:/bin",
        "GPUSPLIT_FAKE_CLI_RECORD": str(record),
        "GPUSPLIT_FAKE_NVML_FIXTURE": str(GPU_FIXTURE),
    }
    proc = run([*argv, "prestart"], input=json.dumps(state), cwd=bundle, env=env)
    calls = records(record)
    if proc.returncode != 0:
        # the container fails to start: the hook's (or the CLI's) error, as runc would report it
        msg = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit {proc.returncode}"
        return f"fails: {msg.removeprefix('nvidia-container-cli: ')}", calls
    assert len(calls) <= 1
    if not calls:
        return "no GPU (hook does nothing)", calls
    assert calls[0]["rootfs"] == str(bundle / "rootfs") and calls[0]["pid"] == "4242"
    return describe(calls[0]["devices"]), calls


def cdi_spec(path):
    """A CDI spec (nvidia.com/gpu) for the fixture's GPUs, named by index, UUID and `all`, as
    `nvidia-ctk cdi generate` names them; device nodes with explicit numbers (no host lookup)."""
    devices, nodes = [], []
    for g in GPUS:
        node = {
            "path": f"/dev/nvidia{g['minor_number']}",
            "type": "c",
            "major": 195,
            "minor": g["minor_number"],
        }
        nodes.append(node)
        for name in (str(g["index"]), g["uuid"]):
            devices.append({"name": name, "containerEdits": {"deviceNodes": [node]}})
    devices.append({"name": "all", "containerEdits": {"deviceNodes": nodes}})
    spec = {
        "cdiVersion": "0.5.0",
        "kind": "nvidia.com/gpu",
        "devices": devices,
        "containerEdits": {
            "deviceNodes": [{"path": "/dev/nvidiactl", "type": "c", "major": 195, "minor": 255}],
        },
    }
    path.mkdir(parents=True, exist_ok=True)
    (path / "nvidia.json").write_text(json.dumps(spec, indent=1))


def runtime(config, spec, tmp, binary=None):
    """Run the real runtime's `create` on ``spec``; the outcome in words, what the low-level runtime
    got (or None), and the runtime's log."""
    bundle = lay_out(tmp, spec)
    record = tmp / "runc.jsonl"
    env = {
        "PATH": "/usr/bin:/bin",
        "NVIDIA_CTK_CONFIG_FILE_PATH": str(config),
        "GPUSPLIT_FAKE_RUNTIME_RECORD": str(record),
    }
    argv = [binary or BIN / "nvidia-container-runtime", "--root", "/run/containerd/runc/k8s.io"]
    argv += ["create", "--bundle", bundle, "--pid-file", tmp / "ctr.pid", "ctr"]
    proc = run(argv, env=env)
    log_path = tmp / "runtime.log"
    log = log_path.read_text() if log_path.exists() else ""
    calls = records(record)
    if proc.returncode != 0:
        assert not calls, "the low-level runtime ran although the NVIDIA runtime failed"
        asked = re.findall(r"Generating in-memory CDI specs for devices \[([^\]]*)\]", log)
        if asked:  # jit-cdi: the spec would come from NVML, which this machine lacks
            ids = [d.removeprefix("runtime.nvidia.com/gpu=") for d in asked[-1].split()]
            return f"requests {describe_ids(ids)} (needs NVML)", None, log
        lines = [ln for ln in proc.stderr.splitlines() if "level=error" in ln] or proc.stderr.splitlines()
        return f"fails: {lines[-1] if lines else proc.returncode}", None, log
    assert len(calls) == 1 and calls[0]["command"] == "create"
    got = calls[0]["config"]
    nodes = [d["path"] for d in (got.get("linux") or {}).get("devices", [])]
    gpus = [
        MINOR_TO_UUID[int(p.removeprefix("/dev/nvidia"))] for p in nodes if re.fullmatch(r"/dev/nvidia\d+", p)
    ]
    if got == spec:
        return "no GPU (spec unchanged)", got, log
    return describe(gpus), got, log


# --------------------------------------------------------------------------------------------
# the toolkit's config.toml: generated by the toolkit, hardened by gpusplit


@pytest.fixture(scope="module")
def generated_default():
    proc = run([BIN / "nvidia-ctk", "config", "default"])
    assert proc.returncode == 0, proc.stderr
    assert "#accept-nvidia-visible-devices-envvar-when-unprivileged = true" in proc.stdout
    return proc.stdout


def harden(text, name="config.toml"):
    """gpusplit's edit (the module's editor) on ``text``."""
    return tc.edit_config(text, tc.HARDENING_SETTINGS, name=name)["text"]


def ctk_set(source, target, settings):
    """The test's plumbing, set with the toolkit's own `nvidia-ctk config --set`."""
    argv = [BIN / "nvidia-ctk", "config", "--config-file", source, "--output", target]
    for key, value in settings.items():
        argv += ["--set", f"{key}={value}"]
    proc = run(argv)
    assert proc.returncode == 0, proc.stderr


def make_config(tmp, default_text, hardened, mode="auto"):
    """config.toml: the generated default, the stand-ins and a debug log set by nvidia-ctk, then
    (``hardened``) gpusplit's edit. Returns its path."""
    tmp.mkdir(parents=True, exist_ok=True)
    base = tmp / "generated.toml"
    base.write_text(default_text)
    cdi_dir = tmp / "cdi"
    cdi_spec(cdi_dir)
    path = tmp / "config.toml"
    ctk_set(
        base,
        path,
        {
            "nvidia-container-cli.path": FAKE_CLI,
            "nvidia-container-runtime.runtimes": FAKE_RUNC,
            "nvidia-container-runtime.debug": tmp / "runtime.log",
            "nvidia-container-runtime.log-level": "debug",
            "nvidia-container-runtime.mode": mode,
            "nvidia-container-runtime.modes.cdi.spec-dirs": cdi_dir,
        },
    )
    if hardened:
        before = path.read_text()
        after = harden(before)
        changed = [(a, b) for a, b in zip(before.splitlines(), after.splitlines(), strict=True) if a != b]
        assert changed == [
            ("#accept-nvidia-visible-devices-as-volume-mounts = false", f"{MOUNTS} = true"),
            ("#accept-nvidia-visible-devices-envvar-when-unprivileged = true", f"{ENVVAR} = false"),
        ]
        path.write_text(after)
    return path


# case -> (stock toolkit, after gpusplit's hardening); checked against the toolkit and the docs
HOOK_EXPECTED = {
    "env-all": ("GPUs 0,1,2,3,4,5,6,7", "no GPU (hook does nothing)"),
    "env-host-uuid": ("GPU 0", "no GPU (hook does nothing)"),
    "split-plugin": ("GPUs 2,3,4,5,6,7", "GPUs 2,3,4,5,6,7"),
    "split-plugin-envvar": ("GPUs 2,3,4,5,6,7", "no GPU (hook does nothing)"),
    "allocated-pod": (f"fails: device error: {DEVICE_LIST_ROOT}: unknown device", "GPU 4"),
    "allocated-pod-env-all": ("GPUs 0,1,2,3,4,5,6,7", "GPU 4"),
    "hostpath-dev-null": ("no GPU (hook does nothing)", "GPU 0"),
    "hostpath-dev-null-unclean": ("no GPU (hook does nothing)", "GPU 0"),
    "hostpath-dev-null-no-separator": ("no GPU (hook does nothing)", "GPUs 0,1,2,3,4,5,6,7"),
    "emptydir-device-mount": ("no GPU (hook does nothing)", "no GPU (hook does nothing)"),
    "privileged": ("GPUs 0,1,2,3,4,5,6,7", "GPUs 0,1,2,3,4,5,6,7"),
    "sys-admin": ("GPUs 0,1,2,3,4,5,6,7", "GPUs 0,1,2,3,4,5,6,7"),
    "cdi-annotation": ("no GPU (hook does nothing)", "no GPU (hook does nothing)"),
}
CDI_EXPECTED = {
    "env-all": ("GPUs 0,1,2,3,4,5,6,7", "no GPU (spec unchanged)"),
    "split-plugin": ("GPUs 2,3,4,5,6,7", "GPUs 2,3,4,5,6,7"),
    "allocated-pod": (
        "fails: unresolvable CDI devices nvidia.com/gpu=/var/run/nvidia-container-devices",
        "GPU 4",
    ),
    "hostpath-dev-null": ("no GPU (spec unchanged)", "GPU 0"),
    "cdi-annotation": ("GPU 0", "GPU 0"),
}
AUTO_EXPECTED = {
    "env-all": ("requests GPUs 0,1,2,3,4,5,6,7 (needs NVML)", "no GPU (spec unchanged)"),
    "split-plugin": ("requests GPUs 2,3,4,5,6,7 (needs NVML)", "requests GPUs 2,3,4,5,6,7 (needs NVML)"),
    "allocated-pod": (f"requests {DEVICE_LIST_ROOT} (needs NVML)", "requests GPU 4 (needs NVML)"),
    "cdi-annotation": ("GPU 0", "GPU 0"),
}
OPERATOR_EXPECTED = {
    "env-all": HOOK_EXPECTED["env-all"],
    "split-plugin": HOOK_EXPECTED["split-plugin"],
    "allocated-pod": HOOK_EXPECTED["allocated-pod"],
}


@pytest.fixture(scope="module")
def outcomes(generated_default, tmp_path_factory):
    """{(path, case): (stock, hardened)} for every case, run on the real binaries."""
    specs = case_specs()
    out = {}
    base = tmp_path_factory.mktemp("matrix")

    def both(label, fn):
        got = []
        for hardened in (False, True):
            tmp = base / f"{label}-{'hardened' if hardened else 'stock'}"
            got.append(fn(tmp, hardened))
        return tuple(got)

    for case in HOOK_EXPECTED:
        out[("hook", case)] = both(
            f"hook-{case}",
            lambda tmp, h, case=case: hook(
                make_config(tmp, generated_default, h, "legacy"), specs[case], tmp
            )[0],
        )
    for mode, table in (("cdi", CDI_EXPECTED), ("auto", AUTO_EXPECTED)):
        for case in table:
            out[(mode, case)] = both(
                f"{mode}-{case}",
                lambda tmp, h, case=case, mode=mode: runtime(
                    make_config(tmp, generated_default, h, mode), specs[case], tmp
                )[0],
            )
    return out


def normalize_error(text):
    """CDI's 'unresolvable CDI devices' error names the devices after a colon; keep that part."""
    m = re.search(r"(unresolvable CDI devices [^\"]*)", text)
    return f"fails: {m.group(1).strip()}" if m else text


@pytest.mark.parametrize("case", list(HOOK_EXPECTED))
def test_hook_before_and_after_hardening(outcomes, case):
    assert outcomes[("hook", case)] == HOOK_EXPECTED[case]


@pytest.mark.parametrize("case", list(CDI_EXPECTED))
def test_runtime_cdi_mode_before_and_after_hardening(outcomes, case):
    got = tuple(normalize_error(o) for o in outcomes[("cdi", case)])
    assert got == CDI_EXPECTED[case]


@pytest.mark.parametrize("case", list(AUTO_EXPECTED))
def test_runtime_auto_mode_is_jit_cdi_and_the_hardening_gates_its_requests(outcomes, case):
    assert outcomes[("auto", case)] == AUTO_EXPECTED[case]


def test_the_admission_guard_refuses_every_mount_point_the_hardened_toolkit_reads(outcomes):
    """The guard (plugins/plugin_utils/workload_checks.py, DEVICE_LIST_MOUNT_PATTERN) matches each
    mount point through which a pod got a GPU here, and it is built from the toolkit's own root."""
    assert wl.DEVICE_LIST_MOUNT_ROOT == DEVICE_LIST_ROOT
    specs = case_specs()
    granted = [
        case
        for case, (_, hardened) in HOOK_EXPECTED.items()
        if outcomes[("hook", case)][1] == hardened and hardened.startswith("GPU")
    ]
    assert {"hostpath-dev-null", "hostpath-dev-null-unclean", "hostpath-dev-null-no-separator"} <= set(
        granted
    )
    for case in granted:  # the toolkit reads only mounts of /dev/null
        device_lists = [m["destination"] for m in specs[case]["mounts"] if m["source"] == "/dev/null"]
        assert all(re.search(wl.DEVICE_LIST_MOUNT_PATTERN, d) for d in device_lists), (case, device_lists)
    assert not any(re.search(wl.DEVICE_LIST_MOUNT_PATTERN, m["destination"]) for m in DEFAULT_MOUNTS)


def test_the_split_plugin_sees_exactly_its_share_and_the_cli_gets_it_as_uuids(generated_default, tmp_path):
    config = make_config(tmp_path, generated_default, hardened=True, mode="legacy")
    outcome, calls = hook(config, case_specs()["split-plugin"], tmp_path)
    assert outcome == describe(KUBE)
    assert calls[0]["options"]["--device"] == ",".join(KUBE)  # passed on as rendered, in order
    assert calls[0]["devices"] == KUBE and not set(calls[0]["devices"]) & set(HOST)
    # what the plugin asks for: compute,utility only (NVIDIA_DRIVER_CAPABILITIES in the template)
    assert calls[0]["options"].get("--compute") and calls[0]["options"].get("--utility")
    assert not calls[0]["options"].get("--graphics")


def test_the_hardened_hook_logs_why_it_ignores_the_variable(generated_default, tmp_path):
    config = make_config(tmp_path, generated_default, hardened=True, mode="legacy")
    bundle = lay_out(tmp_path, case_specs()["env-all"])
    state = {"ociVersion": "1.2.1", "id": "ctr", "status": "creating", "pid": 1, "bundle": str(bundle)}
    proc = run(
        [BIN / "nvidia-container-runtime-hook", "-config", config, "prestart"],
        input=json.dumps(state),
        cwd=bundle,
        env={"PATH": "/usr/bin:/bin", "GPUSPLIT_FAKE_CLI_RECORD": str(tmp_path / "cli.jsonl")},
    )
    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / "cli.jsonl").exists()
    assert (
        'level=warning msg="Ignoring devices requested by environment variable(s) in unprivileged '
        'container: [NVIDIA_VISIBLE_DEVICES]"' in proc.stderr
    )


def test_the_cdi_runtime_injects_exactly_the_allocated_device(generated_default, tmp_path):
    config = make_config(tmp_path, generated_default, hardened=True, mode="cdi")
    outcome, got, log = runtime(config, case_specs()["allocated-pod"], tmp_path)
    assert outcome == "GPU 4"
    paths = [d["path"] for d in got["linux"]["devices"]]
    assert paths == ["/dev/nvidiactl", f"/dev/nvidia{GPUS[4]['minor_number']}"]
    assert f"nvidia.com/gpu={ALLOCATED}" in log


def test_auto_mode_resolves_to_jit_cdi_here(generated_default, tmp_path):
    config = make_config(tmp_path, generated_default, hardened=True, mode="auto")
    _, _, log = runtime(config, case_specs()["env-all"], tmp_path)
    assert "Auto-detected mode as 'jit-cdi'" in log
    assert "Ignoring devices requested by environment variable(s) in unprivileged container" in log


# --------------------------------------------------------------------------------------------
# the GPU Operator's way: the toolkit container's installer, with gpusplit's toolkit.env


def gpusplit_toolkit_env():
    spec, _notes = gpu_operator.owned_spec(None, gpu_operator.resolve_settings(), None, "gpusplit")
    cp = gpu_operator.render_clusterpolicy("cluster-policy", spec)
    return {e["name"]: e["value"] for e in cp["spec"]["toolkit"]["env"]}


def artifacts(root):
    """The installer's source root: the toolkit's programs built from the module, and the
    stand-ins for libnvidia-container's C parts (the CLI and its two libraries, copied only)."""
    usr_bin = root / "usr" / "bin"
    libs = root / "usr" / "lib" / "x86_64-linux-gnu"
    usr_bin.mkdir(parents=True)
    libs.mkdir(parents=True)
    for name in TOOLKIT:
        if name != "nvidia-ctk-installer":
            (usr_bin / name).write_bytes((BIN / name).read_bytes())
            (usr_bin / name).chmod(0o755)
    (usr_bin / "nvidia-container-cli").write_bytes(FAKE_CLI.read_bytes())
    (usr_bin / "nvidia-container-cli").chmod(0o755)
    for lib in ("libnvidia-container.so.1", "libnvidia-container-go.so.1"):
        (libs / lib).write_bytes(b"")
    return root


def install(tmp, extra_env):
    """Run nvidia-ctk-installer as the operator's toolkit container does (no daemon, the runtime's
    own config left alone); returns the toolkit directory."""
    src = artifacts(tmp / "artifacts")
    root = tmp / "usr-local-nvidia"
    env = {"PATH": "/usr/bin:/bin", **extra_env}
    proc = run(
        [
            BIN / "nvidia-ctk-installer",
            "--no-daemon",
            "--no-runtime-config",
            f"--toolkit-install-dir={root}",
            f"--toolkit-source-root={src}",
            f"--pid-file={tmp / 'toolkit.pid'}",
        ],
        env=env,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return root / "toolkit"


@pytest.fixture(scope="module")
def operator_installs(tmp_path_factory):
    base = tmp_path_factory.mktemp("operator")
    return {
        "stock": install(base / "stock", {}),
        "hardened": install(base / "hardened", gpusplit_toolkit_env()),
    }


def test_gpusplit_renders_the_two_installer_variables():
    assert gpusplit_toolkit_env() == {
        "ACCEPT_NVIDIA_VISIBLE_DEVICES_ENVVAR_WHEN_UNPRIVILEGED": "false",
        "ACCEPT_NVIDIA_VISIBLE_DEVICES_AS_VOLUME_MOUNTS": "true",
    }


def test_the_installer_writes_the_keys_from_toolkit_env(operator_installs):
    stock = tomllib.loads(
        (operator_installs["stock"] / ".config/nvidia-container-runtime/config.toml").read_text()
    )
    hard = tomllib.loads(
        (operator_installs["hardened"] / ".config/nvidia-container-runtime/config.toml").read_text()
    )
    assert (stock[ENVVAR], stock[MOUNTS]) == (True, False)
    assert (hard[ENVVAR], hard[MOUNTS]) == (False, True)
    for data in (stock, hard):
        data.pop(ENVVAR), data.pop(MOUNTS)
        data["nvidia-container-cli"].pop("path"), data["nvidia-container-cli"].pop("ldconfig")
        for section in ("nvidia-ctk", "nvidia-container-runtime-hook"):
            data[section].pop("path")
    assert stock == hard  # nothing else differs between the two installs


@pytest.mark.parametrize("case", list(OPERATOR_EXPECTED))
def test_operator_toolkit_hook_before_and_after_hardening(operator_installs, case, tmp_path):
    got = []
    for which in ("stock", "hardened"):
        tmp = tmp_path / which
        tmp.mkdir()
        # the installed wrapper, as the runtime's legacy mode puts it into the prestart hooks
        outcome, _ = hook(
            None,
            case_specs()[case],
            tmp,
            hook_binary=operator_installs[which] / "nvidia-container-runtime-hook",
        )
        got.append(outcome)
    assert tuple(got) == OPERATOR_EXPECTED[case]


def test_operator_cdi_mode_config_keeps_the_hardening(tmp_path):
    # the operator with cdi.enabled (its default) adds these to the toolkit container's env
    # (gpu-operator controllers/object_controls.go TransformToolkit) before the user's toolkit.env;
    # CDI_ENABLED=true is left out: it makes the installer generate a CDI spec and device nodes
    # from the driver (there is none here) and does not touch config.toml
    env = {"NVIDIA_RUNTIME_SET_AS_DEFAULT": "false", "NVIDIA_CONTAINER_RUNTIME_MODE": "cdi"}
    toolkit = install(tmp_path, {**env, **gpusplit_toolkit_env()})
    data = tomllib.loads((toolkit / ".config/nvidia-container-runtime/config.toml").read_text())
    assert data["nvidia-container-runtime"]["mode"] == "cdi"
    assert (data[ENVVAR], data[MOUNTS]) == (False, True)
    # the installed runtime (its .real binary: the wrapper first checks for the nvidia kernel
    # module) leaves an unprivileged NVIDIA_VISIBLE_DEVICES=all container alone
    config = toolkit / ".config/nvidia-container-runtime/config.toml"
    patched = tmp_path / "patched.toml"
    ctk_set(config, patched, {"nvidia-container-runtime.runtimes": FAKE_RUNC})
    outcome, got, _ = runtime(
        patched, case_specs()["env-all"], tmp_path / "run", binary=toolkit / "nvidia-container-runtime.real"
    )
    assert outcome == "no GPU (spec unchanged)"


# --------------------------------------------------------------------------------------------
# the toolkit reads what gpusplit writes


# the inputs of the editor's unit tests (tests/unit/plugins/module_utils/_host/test_toolkit_config.py)
EDGE_CASES = {
    "crlf-no-final-newline": 'disable-require = false\r\n\r\n[nvidia-ctk]\r\npath = "nvidia-ctk"',
    "existing-assignment-with-comment": (
        f"{ENVVAR}   =   true   # the package default\ndisable-require = false\n"
    ),
    "active-and-commented": f"#{ENVVAR} = true\n{ENVVAR} = true\n",
    "top-level-before-first-table": "disable-require = false\n\n[nvidia-container-cli]\nload-kmods = true\n",
    "starts-with-a-table": "[nvidia-container-cli]\nload-kmods = true\n",
    "dotted-keys-table": (
        '[nvidia-container-runtime]\nmodes.cdi.default-kind = "nvidia.com/gpu"\n\n[nvidia-ctk]\npath = "x"\n'
    ),
    "multiline-array": (
        '[nvidia-container-runtime]\nruntimes = [\n  "docker-runc",  # old\n  "runc",\n]  # list\nmode = "auto"\n'
    ),
    "hash-in-string": '[nvidia-container-cli]\nldconfig = "@/sbin/ldconfig#real"  # keep\n',
    "empty": "",
}


def ctk_print(path):
    """The file as the toolkit's loader reads it: `nvidia-ctk config --config-file`."""
    proc = run([BIN / "nvidia-ctk", "config", "--config-file", path])
    assert proc.returncode == 0, proc.stderr
    return tomllib.loads(proc.stdout)


@pytest.mark.parametrize("name", ["generated", *EDGE_CASES])
def test_the_toolkit_loader_reads_gpusplits_edit(name, generated_default, tmp_path):
    text = generated_default if name == "generated" else EDGE_CASES[name]
    before = tmp_path / "before.toml"
    after = tmp_path / "after.toml"
    before.write_bytes(text.encode())
    after.write_bytes(harden(text).encode())
    if name == "generated":  # the toolkit's own file: exactly the two commented defaults change
        changed = [
            (a, b) for a, b in zip(text.splitlines(), harden(text).splitlines(), strict=True) if a != b
        ]
        assert [b for _, b in changed] == [f"{MOUNTS} = true", f"{ENVVAR} = false"]
    read_before, read_after = ctk_print(before), ctk_print(after)
    assert read_after[ENVVAR] is False and read_after[MOUNTS] is True
    for data in (read_before, read_after):
        data.pop(ENVVAR, None), data.pop(MOUNTS, None)
    assert read_after == read_before  # every other value as the toolkit read it before


@pytest.mark.parametrize("name", ["generated", *EDGE_CASES])
def test_the_hook_obeys_the_edited_file(name, generated_default, tmp_path):
    """The hook's typed loader on gpusplit's edit: an unprivileged NVIDIA_VISIBLE_DEVICES=all
    container is not handed to nvidia-container-cli; on the same file before the edit it is (the
    hook tries to run the CLI, which these files do not point at, and fails to find it), unless
    the file already said false."""
    text = generated_default if name == "generated" else EDGE_CASES[name]
    spec = case_specs()["env-all"]
    edited = tmp_path / "after.toml"
    edited.write_bytes(harden(text).encode())
    outcome, _ = hook(edited, spec, tmp_path / "after")
    assert outcome == "no GPU (hook does nothing)"
    original = tmp_path / "before.toml"
    original.write_bytes(text.encode())
    outcome, _ = hook(original, spec, tmp_path / "before")
    assert "couldn't find binary nvidia-container-cli" in outcome


# --------------------------------------------------------------------------------------------
# the build


def test_a_second_toolkit_build_is_cached_and_leaves_the_binaries_alone():
    files = [BIN / name for name in TOOLKIT] + [BIN / f".{name}.version" for name in TOOLKIT]
    before = {f.name: f.stat().st_mtime_ns for f in files}
    proc = run([ROOT / "lab" / "build.sh", "toolkit"], timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert f"[lab-build] nvidia-container-toolkit v{VERSION} binaries cached ({' '.join(TOOLKIT)})" in (
        proc.stderr.splitlines()
    ), proc.stderr
    assert "building" not in proc.stderr
    assert {f.name: f.stat().st_mtime_ns for f in files} == before


def test_the_binaries_report_the_pinned_version():
    for name, banner in (
        ("nvidia-container-runtime-hook", "NVIDIA Container Runtime Hook version"),
        ("nvidia-ctk", "NVIDIA Container Toolkit CLI version"),
    ):
        proc = run([BIN / name, "--version" if name == "nvidia-ctk" else "-version"])
        assert f"{banner} {VERSION}" in proc.stdout, proc.stdout + proc.stderr


# --------------------------------------------------------------------------------------------
# the docs show what the toolkit did


def docs_matrix():
    """{(path, case): (stock, hardened)} from the table in docs/dev/hardening-tests.md ("Matrix on the real toolkit")."""
    text = DOCS.read_text()
    section = text.split("## Matrix on the real toolkit", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and cells[0].startswith("`"):
            path, case = cells[0].strip("`"), cells[1].strip("`")
            rows[(path, case)] = (cells[3], cells[4])
    return section, rows


def test_docs_show_the_matrix_and_the_version(outcomes):
    section, rows = docs_matrix()
    assert f"v{VERSION}" in section
    expected = {k: v for k, v in outcomes.items()}
    for case, pair in OPERATOR_EXPECTED.items():
        expected[("operator", case)] = pair
    expected = {k: tuple(normalize_error(x) for x in v) for k, v in expected.items()}
    assert rows == expected


def test_docs_matrix_cases_are_the_ones_described():
    _, rows = docs_matrix()
    assert {case for _, case in rows} <= set(case_specs())
