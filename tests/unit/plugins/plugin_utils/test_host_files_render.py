"""The host side of a node's split (plugins/plugin_utils/host_files_render.py and its filters)."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpusplit.k8s.plugins.filter import host_files as host_share_filter
from ansible_collections.gpusplit.k8s.plugins.module_utils._split.planner import plan_node
from ansible_collections.gpusplit.k8s.plugins.plugin_utils import host_files_render as hs

# an 8-GPU H100 host, listed out of PCI order on purpose
UUIDS_BY_PCI = [
    ("00000000:18:00.0", "GPU-d17388da-cce8-eb28-c8fa-9f8f1d69497d"),
    ("00000000:2A:00.0", "GPU-e19fbd40-cad5-96c4-25fd-6c41471faa42"),
    ("00000000:3A:00.0", "GPU-006eea3e-5529-2fb7-f170-bc1c26dda554"),
    ("00000000:5D:00.0", "GPU-2d01f9cf-26c0-9b49-ea41-3a2c46093f70"),
    ("00000000:9A:00.0", "GPU-26c3ac3d-af99-63fa-fdd2-9f160bfad213"),
    ("00000000:AB:00.0", "GPU-216a5fe2-7e50-d66c-2fcf-547680c088a5"),
    ("00000000:BA:00.0", "GPU-3aa114f5-7c14-b7a0-70f7-1f46544af7bb"),
    ("00000000:DB:00.0", "GPU-c163a604-e1ff-9748-11d9-7fb9940460ab"),
]
HOST = [u for _, u in UUIDS_BY_PCI[:2]]
KUBE = [u for _, u in UUIDS_BY_PCI[2:]]


def facts():
    out = []
    for i, (pci, uuid) in enumerate(UUIDS_BY_PCI):
        out.append(
            {"index": i, "minor_number": i, "uuid": uuid, "pci_bus_id": pci, "name": "NVIDIA H100 80GB HBM3"}
        )
    return list(reversed(out))


def plan(split=None, mode="device_plugin", **kw):
    return plan_node("gpu-01", facts(), mode, {"host_count": 2} if split is None else split, **kw)


def env_dict(text):
    out = {}
    for line in text.splitlines():
        if line.startswith("#") or "=" not in line:
            continue
        key, value = line.split("=", 1)
        out[key] = value
    return out


# --------------------------------------------------------------------------------------------
# rendering


def test_split_node_env_and_dropin_exactly():
    share = hs.host_files(plan(), ["trainer.service", "jupyter"], "/")
    assert share["host_uuids"] == HOST and share["kubernetes_uuids"] == KUBE
    assert share["cuda_visible_devices"] == ",".join(HOST)
    assert share["nvidia_visible_devices"] == ",".join(HOST)
    summary = "# node gpu-01, mode device_plugin: 2 GPU(s) for the host, 6 for Kubernetes, 0 excluded."
    assert share["dropin_text"] == (
        "# Managed by gpusplit (gpusplit.k8s.gpu_host).\n"
        "# Gives this service the host's share of the GPUs only (by UUID, in PCI bus order). Do not edit:\n"
        "# the next run rewrites it; take the unit out of gpusplit_host_services to remove it.\n"
        "# Takes effect when the service restarts.\n"
        f"{summary}\n"
        "[Service]\n"
        "Environment=CUDA_DEVICE_ORDER=PCI_BUS_ID\n"
        f"Environment=CUDA_VISIBLE_DEVICES={','.join(HOST)}\n"
        f"Environment=NVIDIA_VISIBLE_DEVICES={','.join(HOST)}\n"
    )
    env = env_dict(share["env_text"])
    assert share["env_text"].startswith(hs.MARKER + "\n")
    assert env == {
        "GPUSPLIT_NODE": "gpu-01",
        "GPUSPLIT_MODE": "device_plugin",
        "GPUSPLIT_HOST_GPUS": ",".join(HOST),
        "GPUSPLIT_KUBERNETES_GPUS": ",".join(KUBE),
        "GPUSPLIT_EXCLUDED_GPUS": "",
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "CUDA_VISIBLE_DEVICES": ",".join(HOST),
        "NVIDIA_VISIBLE_DEVICES": ",".join(HOST),
    }
    assert share["env_path"] == "/etc/gpusplit/host-gpus.env"
    assert share["dropins"] == [
        {
            "unit": "trainer.service",
            "dir": "/etc/systemd/system/trainer.service.d",
            "path": "/etc/systemd/system/trainer.service.d/50-gpusplit.conf",
        },
        {
            "unit": "jupyter.service",
            "dir": "/etc/systemd/system/jupyter.service.d",
            "path": "/etc/systemd/system/jupyter.service.d/50-gpusplit.conf",
        },
    ]
    assert share["warnings"] == []


def test_rendering_is_deterministic():
    a = hs.host_files(plan(), ["a.service"], "/")
    b = hs.host_files(plan(), ["a.service"], "/")
    assert a == b


def test_host_uuids_follow_pci_order_even_if_the_plan_lists_them_otherwise():
    p = plan()
    p["host_uuids"] = list(reversed(p["host_uuids"]))
    assert hs.host_files(p)["host_uuids"] == HOST


def test_minimal_plan_without_gpus_keeps_the_given_order():
    p = {"host": "h", "mode": "device_plugin", "host_uuids": list(reversed(HOST)), "kubernetes_uuids": []}
    share = hs.host_files(p)
    assert share["host_uuids"] == list(reversed(HOST)) and share["node"] == "h"


def test_empty_host_share_hides_every_gpu():
    share = hs.host_files(plan({"host_count": 0}), ["trainer.service"])
    assert share["host_uuids"] == [] and len(share["kubernetes_uuids"]) == 8
    assert share["cuda_visible_devices"] == ""
    assert share["nvidia_visible_devices"] == "none"
    lines = share["dropin_text"].splitlines()
    assert "Environment=CUDA_VISIBLE_DEVICES=" in lines
    assert "Environment=NVIDIA_VISIBLE_DEVICES=none" in lines
    env = env_dict(share["env_text"])
    assert env["CUDA_VISIBLE_DEVICES"] == "" and env["GPUSPLIT_HOST_GPUS"] == ""


def test_mode_none_gives_the_host_every_gpu():
    share = hs.host_files(plan(mode="none"))
    assert share["mode"] == "none"
    assert share["host_uuids"] == [u for _, u in UUIDS_BY_PCI] and share["kubernetes_uuids"] == []


def test_excluded_gpus_are_in_neither_share():
    p = plan({"count": 2})
    p["host_uuids"] = p["host_uuids"][:-1]
    p["excluded"] = [
        {"uuid": UUIDS_BY_PCI[-1][1], "pci_bus_id": UUIDS_BY_PCI[-1][0], "reason": "health lost"}
    ]
    share = hs.host_files(p)
    assert UUIDS_BY_PCI[-1][1] not in share["cuda_visible_devices"]
    assert env_dict(share["env_text"])["GPUSPLIT_EXCLUDED_GPUS"] == UUIDS_BY_PCI[-1][1]


def test_mig_enabled_host_gpu_is_warned_about():
    p = plan()
    p["gpus"][0]["mig_enabled"] = True
    share = hs.host_files(p)
    assert len(share["warnings"]) == 1 and HOST[0] in share["warnings"][0]


def test_scratch_root():
    share = hs.host_files(plan(), ["t"], "/tmp/scratch//hostroot/")
    assert share["root"] == "/tmp/scratch/hostroot"
    assert share["env_path"] == "/tmp/scratch/hostroot/etc/gpusplit/host-gpus.env"
    assert (
        share["dropins"][0]["path"] == "/tmp/scratch/hostroot/etc/systemd/system/t.service.d/50-gpusplit.conf"
    )
    assert hs.host_files(plan(), [], "//")["root"] == "/"


@pytest.mark.parametrize(
    "name, unit",
    [
        ("trainer", "trainer.service"),
        ("trainer.service", "trainer.service"),
        ("jobs.timer", "jobs.timer"),
        ("worker@.service", "worker@.service"),
        ("worker@3", "worker@3.service"),
        ("app.v2", "app.v2.service"),
        (" padded.service ", "padded.service"),
        ("", None),
        (".service", None),
        ("../etc/passwd", None),
        ("a/b.service", None),
        ("a b", None),
        (3, None),
    ],
)
def test_unit_names(name, unit):
    assert hs.unit_name(name) == unit


def test_duplicate_services_collapse():
    share = hs.host_files(plan(), ["trainer", "trainer.service"])
    assert [d["unit"] for d in share["dropins"]] == ["trainer.service"]


# --------------------------------------------------------------------------------------------
# refusals


@pytest.mark.parametrize(
    "mutate, needle",
    [
        (lambda p: p.pop("host_uuids"), "missing key(s) host_uuids"),
        (lambda p: p.update(mode="cluster"), "mode 'cluster' is not one of"),
        (lambda p: p.update(host_uuids="GPU-1"), "host_uuids must be a list"),
        (lambda p: p.update(host_uuids=["0"]), "holds '0', not a GPU UUID"),
        (lambda p: p.update(host_uuids=["GPU-1;rm -rf"]), "not a GPU UUID"),
        (lambda p: p.update(host_uuids=[HOST[0], HOST[0]]), "names " + HOST[0] + " twice"),
        (lambda p: p.update(host_uuids=[KUBE[0]]), "in both the host and the Kubernetes share"),
        (lambda p: p.update(mode="none"), "mode none gives Kubernetes no GPU"),
    ],
)
def test_bad_plans_are_refused(mutate, needle):
    p = plan()
    mutate(p)
    with pytest.raises(hs.HostShareError) as exc:
        hs.host_files(p)
    assert any(needle in e for e in exc.value.errors), exc.value.errors
    assert all(e.startswith("gpu-01: ") for e in exc.value.errors)


def test_not_a_plan():
    with pytest.raises(hs.HostShareError, match="expected a mapping"):
        hs.host_files(["GPU-x"])


@pytest.mark.parametrize(
    "services, root, needle",
    [
        ("trainer.service", "/", "must be a list of systemd unit names"),
        (["ok", "bad/name"], "/", "'bad/name' is not a systemd unit name"),
        ([], "relative/root", "gpusplit_host_root must be an absolute path"),
    ],
)
def test_bad_services_and_root_are_refused(services, root, needle):
    with pytest.raises(hs.HostShareError, match=needle):
        hs.host_files(plan(), services, root)


def test_all_errors_at_once():
    p = plan()
    p["host_uuids"] = ["bad"]
    with pytest.raises(hs.HostShareError) as exc:
        hs.host_files(p, ["x/y"], "rel")
    assert len(exc.value.errors) == 3


# --------------------------------------------------------------------------------------------
# stale drop-ins and the filters


def test_stale_dropins():
    share = hs.host_files(plan(), ["trainer"], "/r")
    found = [
        "/r/etc/systemd/system/trainer.service.d/50-gpusplit.conf",
        "/r/etc/systemd/system/old.service.d/50-gpusplit.conf",
    ]
    assert hs.stale_dropins(found, share) == ["/r/etc/systemd/system/old.service.d/50-gpusplit.conf"]
    assert hs.stale_dropins([], share) == []


def test_marker_regex_matches_only_the_marker_line():
    import re

    share = hs.host_files(plan())
    assert re.match(share["marker_regex"], share["dropin_text"])
    assert not re.match(share["marker_regex"], "[Service]\nEnvironment=FOREIGN=1\n")


def test_filters():
    filters = host_share_filter.FilterModule().filters()
    share = filters["host_files"](plan(), ["a"], "/x")
    assert share["dropins"][0]["unit"] == "a.service"
    assert hs.stale_dropins([], share) == []
    with pytest.raises(AnsibleFilterError, match="gpusplit host share refused:\n- gpu-01: "):
        filters["host_files"](dict(plan(), mode="bogus"))


# --------------------------------------------------------------------------------------------
# the texts work where they are used


@pytest.mark.skipif(shutil.which("sh") is None, reason="needs a POSIX shell")
@pytest.mark.parametrize("split", [{"host_count": 2}, {"host_count": 0}])
def test_env_file_sources_in_a_shell(tmp_path, split):
    share = hs.host_files(plan(split))
    path = tmp_path / "host-gpus.env"
    path.write_text(share["env_text"])
    out = subprocess.run(
        ["sh", "-c", 'set -a; . "$1"; set +a; env', "sh", str(path)],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin"},
    ).stdout
    env = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    assert env["CUDA_VISIBLE_DEVICES"] == share["cuda_visible_devices"]
    assert env["NVIDIA_VISIBLE_DEVICES"] == share["nvidia_visible_devices"]
    assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert env["GPUSPLIT_KUBERNETES_GPUS"] == ",".join(share["kubernetes_uuids"])


def test_node_name_needing_quotes_is_quoted_and_unsafe_one_refused():
    p = plan()
    p["node"] = "node with space"
    assert "GPUSPLIT_NODE='node with space'" in hs.host_files(p)["env_text"]
    p["node"] = "it's"
    with pytest.raises(hs.HostShareError, match="cannot write GPUSPLIT_NODE"):
        hs.host_files(p)


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze")
@pytest.mark.parametrize("split", [{"host_count": 2}, {"host_count": 0}])
def test_dropin_is_clean_for_systemd(tmp_path, split):
    """systemd-analyze verify loads the unit with its drop-in and complains about any bad line."""
    share = hs.host_files(plan(split), ["trainer"])
    (tmp_path / "trainer.service").write_text("[Unit]\nDescription=t\n[Service]\nExecStart=/bin/true\n")
    dropin_dir = tmp_path / "trainer.service.d"
    dropin_dir.mkdir()
    (dropin_dir / hs.DROPIN_NAME).write_text(share["dropin_text"])
    result = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", str(tmp_path / "trainer.service")],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "SYSTEMD_UNIT_PATH": f"{tmp_path}:"},
    )
    assert hs.DROPIN_NAME not in result.stderr + result.stdout, result.stderr
    # control: the same call does read the drop-in and reports a broken line in it
    (dropin_dir / hs.DROPIN_NAME).write_text(share["dropin_text"] + "Environment=BROKEN LINE\n")
    result = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", str(tmp_path / "trainer.service")],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "SYSTEMD_UNIT_PATH": f"{tmp_path}:"},
    )
    assert hs.DROPIN_NAME in result.stderr
