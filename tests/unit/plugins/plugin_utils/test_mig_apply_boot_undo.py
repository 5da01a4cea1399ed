"""The MIG apply's boot selection and undo (mode device_plugin): the host's own config that
nvidia-mig-manager.service selects at boot is refused before any change (gpusplit's drop-in would replace it),
read by the role's own command from a scratch root laid out as systemd's folders; the unsplit removes gpusplit's
config, its drop-in, and the drop-in folder only where nothing else is in it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from ansible_collections.gpusplit.k8s.plugins.plugin_utils import mig_apply
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.role_steps import StepContext, run_step

SERVICE = "nvidia-mig-manager.service"
ETC_D = f"etc/systemd/system/{SERVICE}.d"
USR_D = f"usr/lib/systemd/system/{SERVICE}.d"
# the package's unit (no Environment) and its override.conf, as NVIDIA/mig-parted deployments/systemd installs them
PACKAGE = {
    f"usr/lib/systemd/system/{SERVICE}": "[Unit]\nDescription=Configure MIG on NVIDIA GPUs\n\n[Service]\n"
    "Type=oneshot\nExecStart=/bin/bash /etc/nvidia-mig-manager/service.sh\n",
    f"{ETC_D}/override.conf": '[Service]\nEnvironment="MIG_PARTED_SELECTED_CONFIG=all-disabled"\n',
}
OURS = mig_apply.dropin_text("gpusplit-gpu-a")
PLAN = {"node": "gpu-a", "host": "gpu-a"}


def lay_out(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def read(root: Path) -> str:
    """What the role's command prints on a host with that root."""
    proc = subprocess.run(mig_apply.read_unit_argv(str(root)), capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def boot(root: Path, files: dict[str, str]):
    lay_out(root, files)
    return run_step(
        "mig_apply",
        {"part": "boot", "plan": PLAN, "selected": "gpusplit-gpu-a", "stdout": read(root), "root": str(root)},
        StepContext(),
    )


@pytest.mark.parametrize(
    "files",
    [
        pytest.param({}, id="no-service"),
        pytest.param(PACKAGE, id="package-all-disabled"),
        pytest.param({**PACKAGE, f"{ETC_D}/zz-gpusplit.conf": OURS}, id="package-and-gpusplit"),
        # the host selects gpusplit's own config itself
        pytest.param(
            {
                **PACKAGE,
                f"{ETC_D}/override.conf": "[Service]\nEnvironment=MIG_PARTED_SELECTED_CONFIG=gpusplit-gpu-a\n",
            },
            id="host-selects-gpusplit",
        ),
    ],
)
def test_nothing_of_the_host_s_own_is_selected_at_boot_so_the_apply_goes_on(tmp_path, files):
    got = boot(tmp_path, files)
    assert got.get("failed") is not True, got
    assert got["boot_selection"] in (None, "all-disabled", "gpusplit-gpu-a")


def test_the_host_s_own_selection_is_refused_naming_the_file_and_what_to_do(tmp_path):
    got = boot(
        tmp_path,
        {
            **PACKAGE,
            f"{ETC_D}/override.conf": '[Service]\nEnvironment="MIG_PARTED_SELECTED_CONFIG=all-1g.10gb"\n',
            f"{ETC_D}/zz-gpusplit.conf": OURS,
        },
    )
    assert got["failed"] is True
    text = " ".join(got["msg"].split())
    assert (
        "gpu-a: nvidia-mig-manager.service applies the host's own MIG config 'all-1g.10gb' at boot "
        f"(MIG_PARTED_SELECTED_CONFIG in /{ETC_D}/override.conf)" in text
    )
    assert (
        f"gpusplit's drop-in /{ETC_D}/zz-gpusplit.conf would replace that selection with 'gpusplit-gpu-a'"
        in text
    )
    assert "Either select all-disabled there" in text and "leave gpusplit_mig_geometry unset" in text
    assert text.endswith("Nothing was changed.")


@pytest.mark.parametrize(
    ("files", "want"),
    [
        # a drop-in after the package's wins: systemd reads them by name, the last assignment winning
        (
            {
                **PACKAGE,
                f"{ETC_D}/site.conf": "[Service]\nEnvironment=A=1 'MIG_PARTED_SELECTED_CONFIG=custom' B=2\n",
            },
            ("custom", f"/{ETC_D}/site.conf"),
        ),
        # one before it loses
        (
            {
                **PACKAGE,
                f"{ETC_D}/50-host.conf": "[Service]\nEnvironment=MIG_PARTED_SELECTED_CONFIG=custom\n",
            },
            ("all-disabled", f"/{ETC_D}/override.conf"),
        ),
        # one after gpusplit's own name too: at boot it would win over gpusplit's
        (
            {
                **PACKAGE,
                f"{ETC_D}/zz-gpusplit.conf": OURS,
                f"{ETC_D}/zzz-host.conf": OURS.replace("gpusplit-gpu-a", "mine"),
            },
            ("mine", f"/{ETC_D}/zzz-host.conf"),
        ),
        # an empty Environment= resets every assignment before it
        ({**PACKAGE, f"{ETC_D}/site.conf": "[Service]\nEnvironment=\n"}, (None, None)),
        # the package's folder under /usr/lib: /etc's file of the same name hides it
        (
            {
                **PACKAGE,
                f"{USR_D}/override.conf": "[Service]\nEnvironment=MIG_PARTED_SELECTED_CONFIG=vendor\n",
                f"{USR_D}/10-vendor.conf": "[Service]\nEnvironment=MIG_PARTED_SELECTED_CONFIG=early\n",
            },
            ("all-disabled", f"/{ETC_D}/override.conf"),
        ),
        # the unit file itself sets it, /etc's copy hiding the package's; [Unit] and comments are not the service's
        (
            {
                f"usr/lib/systemd/system/{SERVICE}": "[Service]\nEnvironment=MIG_PARTED_SELECTED_CONFIG=pkg\n",
                f"etc/systemd/system/{SERVICE}": "[Unit]\nEnvironment=MIG_PARTED_SELECTED_CONFIG=unit\n"
                "[Service]\n# Environment=MIG_PARTED_SELECTED_CONFIG=comment\nEnvironment=MIG_PARTED_SELECTED_CONFIG=etc\n",
            },
            ("etc", f"/etc/systemd/system/{SERVICE}"),
        ),
    ],
    ids=["later-drop-in", "earlier-drop-in", "after-gpusplit", "reset", "etc-hides-usr", "unit-file"],
)
def test_the_selection_is_what_systemd_makes_of_the_unit_and_its_drop_ins(tmp_path, files, want):
    lay_out(tmp_path, files)
    got = mig_apply.boot_selection(mig_apply.parse_unit_read(read(tmp_path)), str(tmp_path))
    assert got == want
    problem = mig_apply.boot_selection_problem(
        "gpu-a", mig_apply.parse_unit_read(read(tmp_path)), "gpusplit-gpu-a", str(tmp_path)
    )
    assert (problem is None) == (want[0] in (None, "all-disabled"))


def test_a_read_that_is_not_the_command_s_output_is_refused():
    with pytest.raises(mig_apply.MigApplyError, match="expected a path and its base64 on two lines each"):
        mig_apply.parse_unit_read("/etc/x.conf\n")
    with pytest.raises(mig_apply.MigApplyError, match=r"/etc/x.conf: its content is not base64"):
        mig_apply.parse_unit_read("/etc/x.conf\nnot base64!\n")
    refused = run_step("mig_apply", {"part": "boot", "plan": "x", "stdout": ""}, StepContext())
    assert "plan: expected the node's plan" in refused["msg"]
    refused = run_step("mig_apply", {"part": "nope"}, StepContext())
    assert "part: expected apply, boot or undo, got 'nope'" in refused["msg"]


def test_the_apply_hands_the_role_the_command_that_reads_below_its_root(tmp_path):
    argv = mig_apply.read_unit_argv(str(tmp_path))
    assert argv[4] == SERVICE
    assert [Path(d).relative_to(tmp_path).as_posix() for d in argv[5:]] == [
        d.lstrip("/") for d in mig_apply.UNIT_DIRS
    ]


def listed(root: Path) -> list[str]:
    proc = subprocess.run(mig_apply.undo_list_argv(str(root)), capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


@pytest.mark.parametrize(
    ("files", "folder_goes"),
    [
        ({f"{ETC_D}/zz-gpusplit.conf": OURS}, True),  # the apply made the folder
        ({}, True),  # nothing there: removing what is absent changes nothing
        ({**PACKAGE, f"{ETC_D}/zz-gpusplit.conf": OURS}, False),  # the package's override.conf stays
        ({f"{ETC_D}/.hidden": ""}, False),
    ],
    ids=["only-gpusplit", "absent", "package", "hidden-file"],
)
def test_the_undo_removes_gpusplit_s_files_and_the_folder_only_where_nothing_else_is_in_it(
    tmp_path, files, folder_goes
):
    lay_out(tmp_path, files)
    paths = run_step("mig_apply", {"part": "undo", "root": str(tmp_path)}, StepContext())
    assert paths["list_argv"] == mig_apply.undo_list_argv(str(tmp_path))
    got = run_step(
        "mig_apply", {"part": "undo", "root": str(tmp_path), "names": listed(tmp_path)}, StepContext()
    )
    removed = [Path(r["path"]).relative_to(tmp_path).as_posix() for r in got["remove"]]
    assert removed == ["etc/gpusplit/mig-parted.yaml", f"{ETC_D}/zz-gpusplit.conf"] + (
        [ETC_D] if folder_goes else []
    )
    assert all(r["why"] for r in got["remove"])
    assert Path(got["dropin_path"]) == tmp_path / ETC_D / "zz-gpusplit.conf"


def test_the_undo_refuses_a_bad_root_or_listing():
    with pytest.raises(mig_apply.MigApplyError, match="expected an absolute path, got 'etc'"):
        mig_apply.undo_paths("etc")
    with pytest.raises(mig_apply.MigApplyError, match="names: expected the names in"):
        mig_apply.undo_removals("/", "override.conf")
    assert [r["path"] for r in mig_apply.undo_removals("/", [])] == [
        mig_apply.CONFIG_PATH,
        mig_apply.DROPIN_PATH,
        mig_apply.DROPIN_DIR,
    ]
