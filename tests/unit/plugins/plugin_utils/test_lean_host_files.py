"""gpu_host_files through the lean runner (its action plugin) against the module itself.

Twin host roots get the same options: one the module's file, run as Ansible runs it (ansible-core's
AnsibleModule and its atomic_move), the other the lean runner's program, run as the action plugin runs it (a
Python without ansible, its own process). The answers (paths and backup stamps aside) and what is left on the
host (every file's text, mode and owner, every folder's mode) must be the same: a first run, an unchanged
one, check mode, diff, a refusal, a failed systemd reload, paths with ``~`` and variables. The mount table is a
stand-in (tests/fakes/mounts) so that a host with SELinux can be shown: there the program writes nothing and
asks for the module."""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import sys
from pathlib import Path

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpusplit.k8s.plugins.module_utils._host import host_files
from ansible_collections.gpusplit.k8s.plugins.module_utils._lean.bootstrap import RUN_MODULE
from ansible_collections.gpusplit.k8s.plugins.modules import gpu_host_files as module
from ansible_collections.gpusplit.k8s.plugins.plugin_utils import lean_module as lean
from ansible_collections.gpusplit.k8s.tests.unit.module_run import run_module_file, run_program

ROOT = Path(__file__).resolve().parents[4]
FAKES = ROOT / "tests" / "fakes"
TOOLKIT_FIXTURE = ROOT / "tests" / "fixtures" / "nvidia-container-toolkit" / "config.toml"
ENTRY = lean.PREFIX + "._host.host_files"
NAME = "gpusplit.k8s.gpu_host_files"
MARKER = "# Managed by gpusplit (gpusplit.k8s.gpu_host)."
ENV_TEXT = MARKER + "\nCUDA_VISIBLE_DEVICES=GPU-1\nNVIDIA_VISIBLE_DEVICES=GPU-1\n"
DROPIN = MARKER + "\n[Service]\nEnvironment=CUDA_VISIBLE_DEVICES=GPU-1\n"
STAMP = re.compile(r"\.gpusplit-\d{8}T\d{6}Z(\.\d+)?\.bak")


def build_host(root):
    """A host as a first run finds it: the toolkit's config, an env file of mode 0600, a stale drop-in of
    gpusplit's and a drop-in of someone else's, which stays."""
    toolkit = root / "etc" / "nvidia-container-runtime" / "config.toml"
    toolkit.parent.mkdir(parents=True)
    toolkit.write_text(TOOLKIT_FIXTURE.read_text())
    env = root / "etc" / "gpusplit" / "host-gpus.env"
    env.parent.mkdir(parents=True)
    env.write_text("# old\n")
    os.chmod(env, 0o600)
    systemd = root / "etc" / "systemd" / "system"
    for unit, text in (("old.service", MARKER + "\n[Service]\n"), ("theirs.service", "[Service]\n")):
        (systemd / f"{unit}.d").mkdir(parents=True)
        (systemd / f"{unit}.d" / "50-gpusplit.conf").write_text(text)
    return root


def options(root, units=("trainer.service", "jupyter.service"), **extra):
    """The options as the role gpu_host gives them, for the host at ``root``."""
    systemd = f"{root}/etc/systemd/system"
    args = {
        "toolkit_path": f"{root}/etc/nvidia-container-runtime/config.toml",
        "toolkit_backup": True,
        "env_path": f"{root}/etc/gpusplit/host-gpus.env",
        "env_content": ENV_TEXT,
        "dropins": [
            {"unit": u, "dir": f"{systemd}/{u}.d", "path": f"{systemd}/{u}.d/50-gpusplit.conf"} for u in units
        ],
        "dropin_content": DROPIN,
        "dropin_dir": systemd,
        "dropin_marker": MARKER,
        "state_path": f"{root}/var/lib/gpusplit/host-state.json",
        "state_digest": "digest-1",
        "daemon_reload": True,
    }
    args.update(extra)
    return args


@pytest.fixture
def twins(tmp_path):
    """Two copies of the host, each with its own systemctl log; the host's environment (the systemctl
    stand-in first on PATH, the mount-table stand-in, no controller Python path)."""
    hosts = {}
    for side in ("module", "lean"):
        hosts[side] = build_host(tmp_path / side / "host")
    table = tmp_path / "mounts"
    table.write_text("proc /proc proc rw 0 0\nsysfs /sys sysfs rw 0 0\n")
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PYTHON", "ANSIBLE"))}
    env.update(
        PATH=f"{FAKES / 'systemctl'}{os.pathsep}{env.get('PATH', '')}",
        PYTHONPATH=str(FAKES / "mounts"),
        GPUSPLIT_TEST_MOUNTS=str(table),
        STANDIN_ERR="reload refused",
    )
    return {"hosts": hosts, "env": env, "table": table, "tmp": tmp_path}


def side_env(twins, side, **extra):
    return dict(twins["env"], STANDIN_LOG=str(twins["tmp"] / side / "systemctl.log"), **extra)


def module_run(twins, args, check_mode=False, diff=False, **env):
    run_env = side_env(twins, "module", **env)
    run_env["PYTHONPATH"] = os.pathsep.join([run_env["PYTHONPATH"], *sys.path])
    flags = {"_ansible_check_mode": check_mode, "_ansible_diff": diff, "_ansible_module_name": NAME}
    return run_module_file(module.__file__, {**args, **flags}, twins["tmp"] / "module", run_env)


def lean_run(twins, args, check_mode=False, diff=False, **env):
    params, message = lean.check_options(host_files.ARGUMENT_SPEC, args, NAME, host_files.SPEC_RULES)
    assert message is None, message
    program = lean.build_program(
        ENTRY,
        params,
        check_mode=check_mode,
        diff=diff,
        path_options=lean.path_options(host_files.ARGUMENT_SPEC),
    )
    return run_program(program, side_env(twins, "lean", **env))


def normal(answer, root):
    """The answer with the host's root and the backups' stamps written alike, a warning as its text."""
    answer = dict(answer)
    answer["warnings"] = [w if isinstance(w, str) else w["event"]["msg"] for w in answer.get("warnings", [])]
    return json.loads(STAMP.sub(".gpusplit-<stamp>.bak", json.dumps(answer).replace(str(root), "<root>")))


def left_on(root):
    """Every file under ``root`` (backups by name without their stamp) with its text, mode and owner, every
    folder with its mode; the systemd calls."""
    out = {}
    for folder, _dirs, files in os.walk(root):
        out[folder.replace(str(root), "<root>")] = oct(stat.S_IMODE(os.stat(folder).st_mode))
        for name in files:
            path = os.path.join(folder, name)
            info = os.stat(path)
            text = Path(path).read_text()
            if name == "host-state.json":  # (its record holds the root's paths)
                text = text.replace(str(root), "<root>")
            key = STAMP.sub(".gpusplit-<stamp>.bak", path.replace(str(root), "<root>"))
            out[key] = (text, oct(stat.S_IMODE(info.st_mode)), info.st_uid, info.st_gid)
    return out


def calls(twins, side):
    log = twins["tmp"] / side / "systemctl.log"
    return log.read_text().splitlines() if log.exists() else []


def both(twins, make_args, **kwargs):
    """Run the module and the program on their twin; assert the same exit status, answer and host; return the
    program's answer."""
    hosts = twins["hosts"]
    module_rc, expected = module_run(twins, make_args(hosts["module"]), **kwargs)
    rc, answer = lean_run(twins, make_args(hosts["lean"]), **kwargs)
    assert normal(answer, hosts["lean"]) == normal(expected, hosts["module"])
    assert rc == module_rc
    assert left_on(hosts["lean"]) == left_on(hosts["module"])
    assert calls(twins, "lean") == calls(twins, "module")
    return answer


@pytest.mark.parametrize("diff", [False, True], ids=["plain", "diff"])
def test_a_first_run_and_an_unchanged_one_are_the_modules(diff, twins):
    first = both(twins, options, diff=diff)
    assert first["changed"] is True and first["daemon_reloaded"] is True
    assert first["released_units"] == ["old.service"] and first["toolkit"]["backup_file"]
    assert ("diff" in first) is diff
    assert calls(twins, "lean") == ["daemon-reload"]
    again = both(twins, options, diff=diff)
    assert again["changed"] is False and again["daemon_reloaded"] is False


def test_check_mode_with_diff_is_the_modules_and_changes_nothing(twins):
    before = left_on(twins["hosts"]["lean"])
    answer = both(twins, options, check_mode=True, diff=True)
    assert answer["changed"] is True and answer["diff"]
    assert left_on(twins["hosts"]["lean"]) == before and calls(twins, "lean") == []


def test_a_refusal_is_the_modules_and_nothing_is_written(twins):
    before = left_on(twins["hosts"]["lean"])
    answer = both(
        twins, lambda root: options(root, toolkit_refusal="node x: the split plugin would be blind")
    )
    assert answer["failed"] is True and "the split plugin would be blind" in answer["msg"]
    assert left_on(twins["hosts"]["lean"]) == before


def test_a_failed_reload_is_the_modules_with_the_files_written(twins):
    answer = both(twins, options, STANDIN_RC="1")
    assert answer["failed"] is True and answer["changed"] is True
    assert "daemon-reload` failed (rc 1: reload refused)" in answer["msg"]
    assert sorted(answer["restart_units"]) == ["jupyter.service", "trainer.service"]


def test_a_record_that_cannot_be_written_is_the_modules_warning(twins):
    for host in twins["hosts"].values():
        (host / "var" / "lib").mkdir(parents=True)
        (host / "var" / "lib" / "gpusplit").write_text("a file where the record's folder should be\n")
    answer = both(twins, options)
    assert answer["changed"] is True and answer["warnings"] and "state" not in answer


def test_paths_with_the_hosts_home_and_variables_are_the_modules(twins):
    def with_home(root):
        args = options(root, units=("trainer.service",))
        args["env_path"] = "~/etc/gpusplit/host-gpus.env"
        args["dropins"][0]["path"] = "$HOST_ROOT/etc/systemd/system/trainer.service.d/50-gpusplit.conf"
        return args

    hosts = twins["hosts"]
    module_rc, expected = module_run(
        twins, with_home(hosts["module"]), HOME=str(hosts["module"]), HOST_ROOT=str(hosts["module"])
    )
    rc, answer = lean_run(
        twins, with_home(hosts["lean"]), HOME=str(hosts["lean"]), HOST_ROOT=str(hosts["lean"])
    )
    assert (rc, normal(answer, hosts["lean"])) == (module_rc, normal(expected, hosts["module"]))
    assert (hosts["lean"] / "etc" / "gpusplit" / "host-gpus.env").read_text() == ENV_TEXT
    assert left_on(hosts["lean"]) == left_on(hosts["module"])


def test_where_selinux_is_on_the_program_writes_nothing_and_asks_for_the_module(twins):
    twins["table"].write_text("proc /proc proc rw 0 0\nselinuxfs /sys/fs/selinux selinuxfs rw 0 0\n")
    host = twins["hosts"]["lean"]
    before = left_on(host)
    rc, answer = lean_run(twins, options(host))
    assert rc == 0 and list(answer) == [RUN_MODULE] and "SELinux" in answer[RUN_MODULE]
    assert left_on(host) == before and calls(twins, "lean") == []
    # with nothing to write (check mode, or a host as the run leaves it) the program answers itself
    rc, answer = lean_run(twins, options(host), check_mode=True)
    assert rc == 0 and answer["changed"] is True and RUN_MODULE not in answer
    twins["table"].write_text("proc /proc proc rw 0 0\n")
    assert lean_run(twins, options(host))[1]["changed"] is True
    twins["table"].write_text("selinuxfs /sys/fs/selinux selinuxfs rw 0 0\n")
    rc, answer = lean_run(twins, options(host))
    assert rc == 0 and answer["changed"] is False


def test_where_selinux_is_on_a_mode_or_a_removal_alone_needs_no_module(twins):
    host = twins["hosts"]["lean"]
    assert lean_run(twins, options(host))[1]["changed"] is True
    env = host / "etc" / "gpusplit" / "host-gpus.env"
    os.chmod(env, 0o600)
    stale = host / "etc" / "systemd" / "system" / "gone.service.d" / "50-gpusplit.conf"
    stale.parent.mkdir()
    stale.write_text(MARKER + "\n")
    twins["table"].write_text("selinuxfs /sys/fs/selinux selinuxfs rw 0 0\n")
    rc, answer = lean_run(twins, options(host))
    assert rc == 0 and RUN_MODULE not in answer and answer["changed"] is True
    assert answer["released_units"] == ["gone.service"] and not stale.exists()
    assert stat.S_IMODE(os.stat(env).st_mode) == 0o644


def test_a_refusal_after_a_warning_keeps_both_as_the_module(twins):
    for host in twins["hosts"].values():
        (host / "var" / "lib").mkdir(parents=True)
        (host / "var" / "lib" / "gpusplit").write_text("a file where the record's folder should be\n")
    answer = both(twins, options, STANDIN_RC="1")
    assert answer["failed"] is True and answer["changed"] is True and answer["warnings"]


BAD_OPTIONS = [
    {"env_path": "/etc/gpusplit/host-gpus.env"},
    {"dropin_dir": "/etc/systemd/system"},
    {"dropins": [{"path": "/etc/systemd/system/a.service.d/50-gpusplit.conf"}]},
    {"dropins": [{"unit": "a.service", "path": "/x", "colour": "red"}]},
    {"dropins": "a.service"},
    {"toolkit_backup": "maybe"},
    {"toolkit_settings": ["a"]},
    {"bogus": 1},
]


@pytest.mark.parametrize("bad", BAD_OPTIONS, ids=lambda bad: ",".join(bad))
def test_a_bad_option_gets_the_modules_own_message(bad, capsys):
    params, message = lean.check_options(host_files.ARGUMENT_SPEC, bad, NAME, host_files.SPEC_RULES)
    assert params is None and message
    with patch_module_args({**bad, "_ansible_module_name": NAME}), pytest.raises(SystemExit):
        module.main()
    said = json.loads(capsys.readouterr().out)
    assert said["failed"] is True and message == said["msg"]


def test_sub_options_of_type_path_are_left_to_the_host():
    assert set(lean.path_options(host_files.ARGUMENT_SPEC)) == {
        "toolkit_path",
        "env_path",
        "dropin_dir",
        "state_path",
        "dropins.path",
        "dropins.dir",
    }
    params, message = lean.check_options(
        host_files.ARGUMENT_SPEC,
        {"dropins": [{"unit": "a.service", "path": "~/a.conf"}]},
        NAME,
        host_files.SPEC_RULES,
    )
    assert message is None and params["dropins"] == [
        {"unit": "a.service", "path": "~/a.conf", "dir": None, "content": None}
    ]


def test_the_twins_start_alike(twins):
    assert left_on(twins["hosts"]["lean"]) == left_on(twins["hosts"]["module"])
    shutil.rmtree(twins["hosts"]["lean"] / "etc" / "gpusplit")
    assert left_on(twins["hosts"]["lean"]) != left_on(twins["hosts"]["module"])
