"""Every file of the role gpu_host in one pass (plugins/module_utils/_host/host_files_apply.py).

Runs on the managed hosts' Pythons too (tools/multi_python_tests.py): standard library and pytest only.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError
from ansible_collections.gpusplit.k8s.plugins.module_utils._host.host_files_apply import (
    HostFilesError,
    find_managed_dropins,
    host_files,
    plan_host_files,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._host.systemd_reload import (
    SystemdReloadError,
    reload_systemd,
)
from ansible_collections.gpusplit.k8s.tests.unit.host_module import Host

ROOT = Path(__file__).resolve().parents[5]
TOOLKIT_FIXTURE = ROOT / "tests" / "fixtures" / "nvidia-container-toolkit" / "config.toml"
SYSTEMCTL_STANDIN = ROOT / "tests" / "fakes" / "systemctl" / "systemctl"
MARKER = "# Managed by gpusplit (gpusplit.k8s.gpu_host)."
HARDENING = {
    "accept-nvidia-visible-devices-envvar-when-unprivileged": False,
    "accept-nvidia-visible-devices-as-volume-mounts": True,
}
ENV = MARKER + "\nCUDA_VISIBLE_DEVICES=GPU-1\nNVIDIA_VISIBLE_DEVICES=GPU-1\n"
DROPIN = MARKER + "\n[Service]\nEnvironment=CUDA_VISIBLE_DEVICES=GPU-1\n"


def host_root(tmp_path, toolkit=True):
    root = tmp_path / "host"
    if toolkit:
        config = root / "etc" / "nvidia-container-runtime" / "config.toml"
        config.parent.mkdir(parents=True)
        config.write_text(TOOLKIT_FIXTURE.read_text())
    (root / "etc" / "systemd" / "system").mkdir(parents=True, exist_ok=True)
    return root


def params(root, units=("trainer.service",), toolkit=True, refuse=None):
    """The module's options for the host at ``root``, as the role gpu_host passes them."""
    systemd = f"{root}/etc/systemd/system"
    out = {
        "env_path": f"{root}/etc/gpusplit/host-gpus.env",
        "env_content": ENV,
        "dropins": [
            {"unit": u, "dir": f"{systemd}/{u}.d", "path": f"{systemd}/{u}.d/50-gpusplit.conf"} for u in units
        ],
        "dropin_content": DROPIN,
        "dropin_dir": systemd,
        "dropin_name": "50-gpusplit.conf",
        "dropin_marker": MARKER,
    }
    if toolkit:
        out.update(
            toolkit_path=f"{root}/etc/nvidia-container-runtime/config.toml",
            toolkit_settings=dict(HARDENING),
            toolkit_backup=True,
            toolkit_refusal=refuse,
        )
    return out


def snapshot(root):
    """Every file under root with its text and mode, every folder with its mode."""
    out = {}
    for folder, _dirs, files in os.walk(root):
        out[folder] = stat.S_IMODE(os.stat(folder).st_mode)
        for name in files:
            path = os.path.join(folder, name)
            out[path] = (Path(path).read_text(), stat.S_IMODE(os.stat(path).st_mode))
    return out


def test_first_run_writes_every_file_and_names_the_units_to_restart(tmp_path):
    root = host_root(tmp_path)
    result = host_files(Host(), params(root, units=("trainer.service", "jupyter.service")))
    assert result["changed"] is True
    assert result["restart_units"] == ["trainer.service", "jupyter.service"]
    assert result["released_units"] == []
    assert result["dropins_changed"] is True
    env = root / "etc" / "gpusplit" / "host-gpus.env"
    assert env.read_text() == ENV
    assert stat.S_IMODE(env.stat().st_mode) == 0o644
    assert stat.S_IMODE(env.parent.stat().st_mode) == 0o755
    for unit in ("trainer.service", "jupyter.service"):
        dropin = root / "etc" / "systemd" / "system" / f"{unit}.d" / "50-gpusplit.conf"
        assert dropin.read_text() == DROPIN
        assert stat.S_IMODE(dropin.stat().st_mode) == 0o644
    # the toolkit: only the two commented-out defaults became assignments, a backup holds the original
    config = root / "etc" / "nvidia-container-runtime" / "config.toml"
    original = TOOLKIT_FIXTURE.read_text()
    assert config.read_text() == original.replace(
        "#accept-nvidia-visible-devices-as-volume-mounts = false",
        "accept-nvidia-visible-devices-as-volume-mounts = true",
    ).replace(
        "#accept-nvidia-visible-devices-envvar-when-unprivileged = true",
        "accept-nvidia-visible-devices-envvar-when-unprivileged = false",
    )
    assert Path(result["toolkit"]["backup_file"]).read_text() == original
    assert result["toolkit"]["missing"] is False
    assert result["toolkit"]["after"] == HARDENING
    kinds = [(f["kind"], f["action"]) for f in result["files"]]
    assert ("toolkit", "write") in kinds and ("env", "create") in kinds and ("dropin", "create") in kinds


def test_second_run_changes_nothing(tmp_path):
    root = host_root(tmp_path)
    host_files(Host(), params(root))
    before = snapshot(root)
    again = host_files(Host(), params(root), with_diff=True)
    assert again["changed"] is False
    assert again["restart_units"] == [] and again["released_units"] == []
    assert again["dropins_changed"] is False
    assert again["diff"] == []
    assert all(not f["changed"] for f in again["files"])
    assert again["toolkit"]["changed"] is False and "backup_file" not in again["toolkit"]
    assert snapshot(root) == before


def test_check_mode_reports_every_change_with_a_diff_per_file_and_writes_nothing(tmp_path):
    root = host_root(tmp_path)
    stale = root / "etc" / "systemd" / "system" / "old.service.d" / "50-gpusplit.conf"
    stale.parent.mkdir(parents=True)
    stale.write_text(DROPIN)
    before = snapshot(root)
    result = host_files(Host(), params(root), check_mode=True, with_diff=True)
    assert snapshot(root) == before
    assert result["changed"] is True
    assert result["restart_units"] == ["trainer.service"]
    assert result["released_units"] == ["old.service"]
    by_path = {d["after_header"]: d for d in result["diff"]}
    env_path = f"{root}/etc/gpusplit/host-gpus.env"
    assert by_path[env_path]["before"] == "" and by_path[env_path]["before_header"] == env_path + " (absent)"
    assert by_path[env_path]["after"] == ENV
    gone = by_path[f"{stale} (absent)"]
    assert gone["before"] == DROPIN and gone["after"] == "" and gone["before_header"] == str(stale)
    toolkit = by_path[f"{root}/etc/nvidia-container-runtime/config.toml"]
    assert "accept-nvidia-visible-devices-as-volume-mounts = true" in toolkit["after"]
    assert "accept-nvidia-visible-devices-as-volume-mounts = true" not in toolkit["before"]
    # one diff per changed file, each also on its file entry; folders have none
    changed_files = [f for f in result["files"] if f["changed"] and f["kind"] != "directory"]
    assert len(result["diff"]) == len(changed_files) == 4
    assert all("diff" in f for f in changed_files)


def test_a_unit_taken_out_of_the_list_loses_only_gpusplits_drop_in(tmp_path):
    root = host_root(tmp_path, toolkit=False)
    host_files(Host(), params(root, units=("trainer.service", "old.service"), toolkit=False))
    systemd = root / "etc" / "systemd" / "system"
    foreign = systemd / "foreign.service.d" / "50-gpusplit.conf"
    foreign.parent.mkdir()
    foreign.write_text("[Service]\nEnvironment=FOREIGN=1\n")
    other_name = systemd / "old.service.d" / "10-operator.conf"
    other_name.write_text(MARKER + "\n")
    result = host_files(Host(), params(root, units=("trainer.service",), toolkit=False))
    assert result["changed"] is True
    assert result["released_units"] == ["old.service"]
    assert result["restart_units"] == []
    assert result["dropins_changed"] is True
    assert not (systemd / "old.service.d" / "50-gpusplit.conf").exists()
    assert foreign.read_text() == "[Service]\nEnvironment=FOREIGN=1\n"
    assert other_name.exists()
    assert (systemd / "trainer.service.d" / "50-gpusplit.conf").read_text() == DROPIN
    assert host_files(Host(), params(root, units=("trainer.service",), toolkit=False))["changed"] is False


def test_find_managed_dropins_looks_one_level_below_and_wants_the_marker(tmp_path):
    systemd = tmp_path / "system"
    (systemd / "a.service.d" / "deep").mkdir(parents=True)
    (systemd / "a.service.d" / "50-gpusplit.conf").write_text("# comment\n" + MARKER + "\n")
    (systemd / "a.service.d" / "deep" / "50-gpusplit.conf").write_text(MARKER + "\n")
    (systemd / "b.service.d").mkdir()
    (systemd / "b.service.d" / "50-gpusplit.conf").write_text("x " + MARKER + "\n")
    assert find_managed_dropins(str(systemd), "50-gpusplit.conf", MARKER) == [
        str(systemd / "a.service.d" / "50-gpusplit.conf")
    ]
    assert find_managed_dropins(str(tmp_path / "missing"), "50-gpusplit.conf", MARKER) == []


def test_an_edited_file_is_rewritten_and_a_wrong_mode_fixed(tmp_path):
    root = host_root(tmp_path, toolkit=False)
    host_files(Host(), params(root, toolkit=False))
    env = root / "etc" / "gpusplit" / "host-gpus.env"
    env.write_text("CUDA_VISIBLE_DEVICES=\n")
    dropin = root / "etc" / "systemd" / "system" / "trainer.service.d" / "50-gpusplit.conf"
    os.chmod(dropin, 0o600)
    result = host_files(Host(), params(root, toolkit=False), with_diff=True)
    actions = {f["path"]: f["action"] for f in result["files"]}
    assert actions[str(env)] == "write" and actions[str(dropin)] == "mode"
    assert env.read_text() == ENV
    assert stat.S_IMODE(dropin.stat().st_mode) == 0o644
    # a mode fix alone leaves the text systemd reads: no restart, no daemon-reload
    assert result["changed"] is True
    assert result["restart_units"] == []
    assert result["dropins_changed"] is False


def test_a_host_without_the_toolkit_is_reported_and_nothing_is_made_up(tmp_path):
    root = host_root(tmp_path, toolkit=False)
    result = host_files(Host(), params(root, refuse="would be refused where the toolkit is"))
    assert result["toolkit"] == {"path": f"{root}/etc/nvidia-container-runtime/config.toml", "missing": True}
    assert not (root / "etc" / "nvidia-container-runtime").exists()
    assert (root / "etc" / "gpusplit" / "host-gpus.env").read_text() == ENV


def test_the_controllers_refusal_applies_where_the_toolkit_is_and_changes_nothing(tmp_path):
    root = host_root(tmp_path)
    before = snapshot(root)
    with pytest.raises(HostFilesError) as caught:
        host_files(Host(), params(root, refuse="node x: the split device plugin would advertise 0"))
    assert caught.value.errors == ["node x: the split device plugin would advertise 0"]
    assert snapshot(root) == before


def test_no_toolkit_argument_leaves_the_toolkit_alone(tmp_path):
    root = host_root(tmp_path)
    config = root / "etc" / "nvidia-container-runtime" / "config.toml"
    result = host_files(Host(), params(root, toolkit=False))
    assert result["toolkit"] is None
    assert config.read_text() == TOOLKIT_FIXTURE.read_text()


def test_a_toolkit_file_that_does_not_parse_is_refused_before_anything_changes(tmp_path):
    root = host_root(tmp_path)
    config = root / "etc" / "nvidia-container-runtime" / "config.toml"
    config.write_text("[nvidia-container-cli\n")
    before = snapshot(root)
    with pytest.raises(GpusplitError) as caught:
        host_files(Host(), params(root))
    assert caught.value.errors[0].startswith(f"refusing to edit {config}: ")
    assert "not valid TOML" in caught.value.errors[0]
    assert snapshot(root) == before


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda p: p.update(env_path="relative/host-gpus.env"), "env_path: 'relative/host-gpus.env'"),
        (lambda p: p.update(env_content=3), "env_content must be a string, got integer"),
        (lambda p: p.update(env_content=None), "env_path is given without env_content"),
        (lambda p: p["dropins"][0].update(path=None), "dropins[0].path must be a string, got null"),
        (lambda p: p["dropins"].append(dict(p["dropins"][0])), "dropins[1].path: "),
        (
            lambda p: p["dropins"][0].update(dir="/elsewhere"),
            "dropins[0].dir: '/elsewhere' is not the folder",
        ),
        (lambda p: p["dropins"][0].update(mode="0600"), "dropins[0]: unknown key(s) mode"),
        (lambda p: p.pop("dropin_content"), "dropins[0].content: no text for"),
        (lambda p: p.update(dropin_marker=" "), "dropin_marker is empty"),
        (lambda p: p.update(dropin_marker=None), "dropin_dir is given without dropin_marker"),
        (lambda p: p.update(dropin_name="a/b"), "dropin_name: 'a/b' is not a file name"),
        (lambda p: p.update(toolkit_settings={}), "toolkit_settings must be a non-empty mapping"),
        (
            lambda p: p.update(toolkit_path="config.toml"),
            "toolkit_path: 'config.toml' is not an absolute path",
        ),
        (lambda p: p.update(dropins="trainer.service"), "dropins must be a list, got string"),
    ],
)
def test_bad_input_is_refused_naming_the_field_before_anything_changes(tmp_path, change, message):
    root = host_root(tmp_path)
    args = params(root)
    change(args)
    before = snapshot(root)
    with pytest.raises(HostFilesError) as caught:
        host_files(Host(), args)
    assert any(message in e for e in caught.value.errors), caught.value.errors
    assert snapshot(root) == before


def test_a_toolkit_setting_of_the_wrong_type_is_refused(tmp_path):
    root = host_root(tmp_path)
    args = params(root)
    args["toolkit_settings"]["accept-nvidia-visible-devices-envvar-when-unprivileged"] = "false"
    with pytest.raises(GpusplitError) as caught:
        plan_host_files(args)
    assert "write false as a YAML boolean" in caught.value.errors[0]


def test_a_folder_where_a_file_belongs_is_refused_naming_it(tmp_path):
    root = host_root(tmp_path, toolkit=False)
    env = root / "etc" / "gpusplit" / "host-gpus.env"
    env.mkdir(parents=True)
    with pytest.raises(GpusplitError) as caught:
        host_files(Host(), params(root, toolkit=False))
    assert caught.value.errors == [f"{env} is not a regular file"]


# --------------------------------------------------------------------------------------------
# systemctl daemon-reload (option daemon_reload; plugins/module_utils/_host/systemd_reload.py)


@pytest.fixture
def systemctl(tmp_path, monkeypatch):
    """The systemctl stand-in (tests/fakes/systemctl) alone on PATH: logs its arguments, answers with
    $STANDIN_RC and $STANDIN_ERR."""
    log = tmp_path / "systemctl.log"
    script = SYSTEMCTL_STANDIN
    monkeypatch.setenv("PATH", str(script.parent))
    monkeypatch.setenv("STANDIN_LOG", str(log))
    monkeypatch.delenv("STANDIN_RC", raising=False)
    monkeypatch.delenv("STANDIN_ERR", raising=False)

    def calls():
        return log.read_text().splitlines() if log.exists() else []

    return script, calls


def run_with_reload(module, args, check_mode=False):
    """As the module runs: host_files (systemctl looked for first), then the reload after writing."""
    result = host_files(module, args, check_mode=check_mode)
    return reload_systemd(module, result, args.get("daemon_reload"), check_mode=check_mode)


def test_a_changed_drop_in_reloads_systemd_once_after_writing_and_an_unchanged_one_does_not(
    tmp_path, systemctl
):
    script, calls = systemctl
    root = host_root(tmp_path, toolkit=False)
    args = dict(params(root, toolkit=False), daemon_reload=True)
    module = Host()
    result = run_with_reload(module, args)
    assert result["dropins_changed"] is True and result["daemon_reloaded"] is True
    assert module.commands == [[str(script), "daemon-reload"]]
    assert calls() == ["daemon-reload"]
    assert (
        root / "etc" / "systemd" / "system" / "trainer.service.d" / "50-gpusplit.conf"
    ).read_text() == DROPIN
    # nothing changed: no reload
    again = run_with_reload(Host(), args)
    assert again["changed"] is False and again["daemon_reloaded"] is False
    assert calls() == ["daemon-reload"]
    # only the env file changed: systemd has nothing to re-read
    (root / "etc" / "gpusplit" / "host-gpus.env").write_text("CUDA_VISIBLE_DEVICES=\n")
    env_only = run_with_reload(Host(), args)
    assert env_only["changed"] is True and env_only["daemon_reloaded"] is False
    # a removed (stale) drop-in reloads too
    removed = run_with_reload(Host(), dict(params(root, units=(), toolkit=False), daemon_reload=True))
    assert removed["released_units"] == ["trainer.service"] and removed["daemon_reloaded"] is True
    assert calls() == ["daemon-reload", "daemon-reload"]


def test_without_daemon_reload_systemctl_is_neither_looked_for_nor_run(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no systemctl anywhere
    root = host_root(tmp_path, toolkit=False)
    for wanted in (False, None):
        module = Host()
        result = run_with_reload(module, dict(params(root, toolkit=False), daemon_reload=wanted))
        assert result["daemon_reloaded"] is False and module.commands == []
    assert (
        root / "etc" / "systemd" / "system" / "trainer.service.d" / "50-gpusplit.conf"
    ).read_text() == DROPIN


def test_check_mode_runs_nothing_and_says_daemon_reloaded_false(tmp_path, systemctl):
    _script, calls = systemctl
    root = host_root(tmp_path, toolkit=False)
    before = snapshot(root)
    module = Host()
    result = run_with_reload(module, dict(params(root, toolkit=False), daemon_reload=True), check_mode=True)
    assert result["dropins_changed"] is True and result["daemon_reloaded"] is False
    assert module.commands == [] and calls() == []
    assert snapshot(root) == before


@pytest.mark.parametrize("check_mode", [False, True])
def test_no_systemctl_with_a_drop_in_to_change_is_refused_before_anything_is_written(
    tmp_path, monkeypatch, check_mode
):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    root = host_root(tmp_path)
    before = snapshot(root)
    with pytest.raises(SystemdReloadError) as caught:
        host_files(Host(), dict(params(root), daemon_reload=True), check_mode=check_mode)
    message = caught.value.errors[0]
    assert "systemctl is not on this host" in message and "trainer.service" in message
    assert "systemctl daemon-reload" in message and "gpusplit_systemd_reload: false" in message
    assert ("Nothing was written (check mode)" in message) is check_mode
    assert "Nothing was written" in message
    assert snapshot(root) == before


def test_a_failed_reload_names_the_command_rc_and_stderr_and_says_the_files_are_written(
    tmp_path, systemctl, monkeypatch
):
    script, calls = systemctl
    monkeypatch.setenv("STANDIN_RC", "3")
    monkeypatch.setenv("STANDIN_ERR", "Failed to connect to bus: No such file or directory")
    root = host_root(tmp_path, toolkit=False)
    args = dict(params(root, toolkit=False), daemon_reload=True)
    module = Host()
    result = host_files(module, args)
    with pytest.raises(SystemdReloadError) as caught:
        reload_systemd(module, result, True)
    message = caught.value.errors[0]
    assert (
        f"`{script} daemon-reload` failed (rc 3: Failed to connect to bus: No such file or directory)"
        in message
    )
    assert "The files were already written (drop-ins of trainer.service)" in message
    assert "gpusplit_systemd_reload: false" in message
    assert result["daemon_reloaded"] is False
    assert calls() == ["daemon-reload"]
    assert (
        root / "etc" / "systemd" / "system" / "trainer.service.d" / "50-gpusplit.conf"
    ).read_text() == DROPIN


def test_a_reload_that_cannot_start_is_reported_as_such(tmp_path):
    class Unstartable(Host):
        def get_bin_path(self, name):
            return "/usr/bin/systemctl"

        def run_command(self, args, handle_exceptions=True):
            assert handle_exceptions is False  # the module's message, not run_command's own failure
            raise PermissionError(13, "Permission denied", args[0])

    result = {"dropins_changed": True, "restart_units": ["a.service"], "released_units": ["b.service"]}
    with pytest.raises(SystemdReloadError) as caught:
        reload_systemd(Unstartable(), result, True)
    message = caught.value.errors[0]
    assert message.startswith("`/usr/bin/systemctl daemon-reload` failed (could not run: ")
    assert "Permission denied" in message and "drop-ins of a.service, b.service" in message


def test_systemctl_gone_after_writing_says_the_files_are_written(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    result = {"dropins_changed": True, "restart_units": ["trainer.service"], "released_units": []}
    with pytest.raises(SystemdReloadError) as caught:
        reload_systemd(Host(), result, True)
    message = caught.value.errors[0]
    assert message.startswith("`systemctl daemon-reload` failed (not run: systemctl is not on this host). ")
    assert "The files were already written (drop-ins of trainer.service)" in message
    assert "gpusplit_systemd_reload: false" in message


def test_a_write_that_fails_part_way_says_what_was_written(tmp_path):
    # each file is replaced whole or not at all; the refusal's result keeps the files written before the one
    # that failed (changed, their units), so that the run says the host changed
    class FailsSecond(Host):
        def __init__(self):
            super().__init__()
            self.moves = 0

        def atomic_move(self, src, dest):
            self.moves += 1
            if self.moves == 2:
                raise PermissionError(13, "Permission denied", dest)
            super().atomic_move(src, dest)

    root = host_root(tmp_path, toolkit=False)
    with pytest.raises(HostFilesError) as caught:
        host_files(FailsSecond(), params(root, units=("trainer.service", "jupyter.service"), toolkit=False))
    message = caught.value.errors[0]
    assert message.startswith("cannot write ") and message.endswith(": Permission denied")
    result = caught.value.result
    written = [f["path"] for f in result["files"] if f["changed"] and f["kind"] != "directory"]
    assert result["changed"] is True and len(written) == 1 and Path(written[0]).exists()
    failed = message[len("cannot write ") : -len(": Permission denied")]
    assert not Path(failed).exists() and failed not in written
    assert result["daemon_reloaded"] is False


def test_an_obsolete_folder_is_removed_once_and_what_is_not_a_folder_is_left(tmp_path):
    """obsolete_dirs: a folder an earlier version left goes, with what it holds (check mode says so and keeps it);
    a missing one, a file and a link of that name are left alone; the root folder is refused before anything."""
    root = host_root(tmp_path, toolkit=False)
    cache = root / "var" / "cache" / "gpusplit"
    (cache / "codes").mkdir(parents=True)
    (cache / "codes" / "x.pyc").write_bytes(b"\x00")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (root / "var" / "link").symlink_to(elsewhere)
    (root / "var" / "file").write_text("not ours\n")
    args = dict(
        params(root, units=(), toolkit=False),
        obsolete_dirs=[
            str(cache),
            str(root / "var" / "link"),
            str(root / "var" / "file"),
            str(root / "gone"),
        ],
    )

    checked = host_files(Host(), args, check_mode=True)
    assert cache.is_dir() and checked["changed"] is True
    kinds = [(f["path"], f["action"], f["changed"]) for f in checked["files"] if f["kind"] == "obsolete_dir"]
    assert kinds == [
        (str(cache), "remove", True),
        (str(root / "var" / "link"), "none", False),
        (str(root / "var" / "file"), "none", False),
        (str(root / "gone"), "none", False),
    ]
    done = host_files(Host(), args, with_diff=True)
    assert done["changed"] is True and not cache.exists()
    assert elsewhere.is_dir() and (root / "var" / "link").is_symlink() and (root / "var" / "file").is_file()
    assert host_files(Host(), args)["changed"] is False

    with pytest.raises(HostFilesError, match=r"obsolete_dirs\[0\]: '/' is the root folder"):
        host_files(Host(), dict(args, obsolete_dirs=["/"]))
    with pytest.raises(HostFilesError, match=r"obsolete_dirs\[0\]: 'var/cache' is not an absolute path"):
        host_files(Host(), dict(args, obsolete_dirs=["var/cache"]))


# ---- issue 43: links


def linked_env(root, tmp_path):
    """host-gpus.env as a link to another file of mode 0600."""
    target = tmp_path / "elsewhere" / "gpus.env"
    target.parent.mkdir()
    target.write_text("OTHER=1\n")
    target.chmod(0o600)
    env = root / "etc" / "gpusplit" / "host-gpus.env"
    env.parent.mkdir(parents=True)
    env.symlink_to(target)
    return env, target


def test_a_linked_env_file_is_refused_before_anything_changes(tmp_path):
    """issue 43: gpu_host_files wrote through a symlinked host-gpus.env and changed its target's mode from 0600 to
    0644."""
    root = host_root(tmp_path)
    env, target = linked_env(root, tmp_path)
    config = root / "etc" / "nvidia-container-runtime" / "config.toml"
    before = config.read_text()
    with pytest.raises(
        GpusplitError, match=f"{env} is a symbolic link to {target}: refusing to write through it"
    ):
        host_files(Host(), params(root))
    assert target.read_text() == "OTHER=1\n" and stat.S_IMODE(target.stat().st_mode) == 0o600
    assert config.read_text() == before and sorted(p.name for p in config.parent.iterdir()) == ["config.toml"]


def test_a_linked_env_file_is_written_through_with_follow_links_keeping_the_targets_mode(tmp_path):
    root = host_root(tmp_path)
    env, target = linked_env(root, tmp_path)
    result = host_files(Host(), dict(params(root), follow_links=True))
    assert result["changed"] is True and env.is_symlink()
    assert target.read_text() == ENV and stat.S_IMODE(target.stat().st_mode) == 0o600
    assert host_files(Host(), dict(params(root), follow_links=True))["changed"] is False


def test_a_linked_toolkit_config_is_refused_unless_followed(tmp_path):
    root = host_root(tmp_path)
    config = root / "etc" / "nvidia-container-runtime" / "config.toml"
    real = tmp_path / "real.toml"
    real.write_text(config.read_text())
    config.unlink()
    config.symlink_to(real)
    with pytest.raises(GpusplitError, match="set follow_links: true"):
        host_files(Host(), params(root))
    result = host_files(Host(), dict(params(root), follow_links=True))
    assert (
        result["changed"] is True
        and config.is_symlink()
        and "accept-nvidia-visible-devices" in real.read_text()
    )
