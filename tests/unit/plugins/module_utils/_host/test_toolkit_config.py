"""Text editing of the nvidia-container-runtime config.toml (plugins/module_utils/_host/toolkit_config.py)
and the module gpusplit.k8s.nvidia_toolkit_config."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpusplit.k8s.plugins.module_utils._host import files, toml_read
from ansible_collections.gpusplit.k8s.plugins.module_utils._host import toolkit_config as tc
from ansible_collections.gpusplit.k8s.plugins.modules import nvidia_toolkit_config
from ansible_collections.gpusplit.k8s.tests.unit.textdiff import changed_lines

ROOT = Path(__file__).resolve().parents[5]
FIXTURE = ROOT / "tests" / "fixtures" / "nvidia-container-toolkit" / "config.toml"
ENVVAR = tc.ENVVAR_WHEN_UNPRIVILEGED
MOUNTS = tc.AS_VOLUME_MOUNTS


try:
    import tomllib as _stdlib_toml
except ImportError:  # Python < 3.11: only the collection's reader
    _stdlib_toml = None


def read_toml(text):
    """Parse with the collection's reader and, where the standard library has tomllib, check it agrees."""
    data = toml_read.loads(text)
    if _stdlib_toml is not None:
        assert data == _stdlib_toml.loads(text)
    return data


def generated() -> str:
    return FIXTURE.read_text(encoding="utf-8")


# --------------------------------------------------------------------------------------------
# the toolkit's generated file


def test_fixture_is_the_toolkit_layout():
    data = read_toml(generated())
    assert ENVVAR not in data and MOUNTS not in data  # both are commented-out defaults
    assert data["nvidia-container-runtime"]["modes"]["cdi"]["spec-dirs"] == ["/etc/cdi", "/var/run/cdi"]
    assert data["nvidia-container-cli"]["ldconfig"] == "@/sbin/ldconfig"
    assert data["nvidia-ctk"]["path"] == "nvidia-ctk"


def test_hardening_uncomments_the_two_defaults_and_nothing_else():
    before = generated()
    edit = tc.edit_config(before, tc.HARDENING_SETTINGS, name="config.toml")
    assert edit["changed"] is True
    removed, added = changed_lines(before, edit["text"])
    assert removed == [
        "#accept-nvidia-visible-devices-as-volume-mounts = false\n",
        "#accept-nvidia-visible-devices-envvar-when-unprivileged = true\n",
    ]
    assert added == [
        "accept-nvidia-visible-devices-as-volume-mounts = true\n",
        "accept-nvidia-visible-devices-envvar-when-unprivileged = false\n",
    ]
    # same place: line 1 and 2
    assert edit["text"].splitlines()[:2] == [line.rstrip("\n") for line in added]
    assert edit["before"] == {ENVVAR: None, MOUNTS: None}
    assert edit["after"] == {ENVVAR: False, MOUNTS: True}
    assert {c["action"] for c in edit["changes"]} == {"uncommented"}
    parsed = read_toml(edit["text"])
    assert parsed[ENVVAR] is False and parsed[MOUNTS] is True


def test_hardening_is_idempotent():
    once = tc.edit_config(generated(), tc.HARDENING_SETTINGS)["text"]
    twice = tc.edit_config(once, tc.HARDENING_SETTINGS)
    assert twice["changed"] is False and twice["text"] == once
    assert [c["action"] for c in twice["changes"]] == ["unchanged", "unchanged"]
    assert twice["before"] == {ENVVAR: False, MOUNTS: True}


def test_existing_assignment_keeps_spelling_spacing_and_comment():
    text = (
        "accept-nvidia-visible-devices-envvar-when-unprivileged   =   true   # the package default\n"
        "disable-require = false\n"
    )
    edit = tc.edit_config(text, {ENVVAR: False})
    assert edit["text"] == (
        "accept-nvidia-visible-devices-envvar-when-unprivileged   =   false   # the package default\n"
        "disable-require = false\n"
    )
    assert edit["changes"][0]["action"] == "replaced"
    assert edit["changes"][0]["before"] is True


def test_active_assignment_wins_over_a_commented_one():
    text = f"#{ENVVAR} = true\n{ENVVAR} = true\n"
    edit = tc.edit_config(text, {ENVVAR: False})
    assert edit["text"] == f"#{ENVVAR} = true\n{ENVVAR} = false\n"


def test_top_level_key_without_a_comment_goes_before_the_first_table():
    text = "disable-require = false\n\n[nvidia-container-cli]\nload-kmods = true\n"
    edit = tc.edit_config(text, {MOUNTS: True})
    assert edit["text"] == (
        f"disable-require = false\n{MOUNTS} = true\n\n[nvidia-container-cli]\nload-kmods = true\n"
    )
    assert edit["changes"][0]["action"] == "inserted"


def test_top_level_key_in_a_file_that_starts_with_a_table():
    text = "[nvidia-container-cli]\nload-kmods = true\n"
    edit = tc.edit_config(text, {MOUNTS: True})
    assert edit["text"] == f"{MOUNTS} = true\n\n[nvidia-container-cli]\nload-kmods = true\n"
    assert read_toml(edit["text"])["nvidia-container-cli"] == {"load-kmods": True}


def test_key_inside_a_table_uncomments_the_default_of_that_table():
    before = generated()
    edit = tc.edit_config(before, {"nvidia-container-cli.no-cgroups": True})
    removed, added = changed_lines(before, edit["text"])
    assert removed == ["#no-cgroups = false\n"] and added == ["no-cgroups = true\n"]
    assert read_toml(edit["text"])["nvidia-container-cli"]["no-cgroups"] is True


def test_same_commented_key_in_another_table_is_not_touched():
    # debug is commented out in both [nvidia-container-cli] and [nvidia-container-runtime]
    before = generated()
    edit = tc.edit_config(before, {"nvidia-container-runtime.debug": "/var/log/ncr.log"})
    removed, added = changed_lines(before, edit["text"])
    assert removed == ['#debug = "/var/log/nvidia-container-runtime.log"\n']
    assert added == ['debug = "/var/log/ncr.log"\n']
    data = read_toml(edit["text"])
    assert "debug" not in data["nvidia-container-cli"]


def test_new_key_goes_to_the_end_of_its_table_section():
    before = generated()
    edit = tc.edit_config(before, {"nvidia-container-runtime.modes.cdi.annotation-prefixes": ["x/"]})
    assert edit["changes"][0]["action"] == "replaced"
    edit = tc.edit_config(before, {"nvidia-container-runtime-hook.extra": 3})
    lines = edit["text"].splitlines()
    at = lines.index("extra = 3")
    assert lines[at - 1] == "skip-mode-detection = false" and lines[at + 1] == ""
    assert lines[at + 2] == "[nvidia-ctk]"


def test_new_table_is_appended():
    before = generated()
    edit = tc.edit_config(before, {"features.allow-ldconfig-from-container": False})
    assert edit["text"].startswith(before)
    assert edit["text"][len(before) :] == "\n[features]\nallow-ldconfig-from-container = false\n"


def test_table_defined_by_dotted_keys_in_its_parent():
    text = (
        '[nvidia-container-runtime]\nmodes.cdi.default-kind = "nvidia.com/gpu"\n\n[nvidia-ctk]\npath = "x"\n'
    )
    edit = tc.edit_config(text, {"nvidia-container-runtime.modes.cdi.spec-dirs": ["/etc/cdi"]})
    assert edit["text"] == (
        '[nvidia-container-runtime]\nmodes.cdi.default-kind = "nvidia.com/gpu"\n'
        'modes.cdi.spec-dirs = ["/etc/cdi"]\n\n[nvidia-ctk]\npath = "x"\n'
    )
    edit = tc.edit_config(text, {"nvidia-container-runtime.modes.cdi.default-kind": "example.com/gpu"})
    assert 'modes.cdi.default-kind = "example.com/gpu"' in edit["text"]


def test_top_level_dotted_assignment_is_found():
    text = "nvidia-container-cli.no-cgroups = false\n"
    edit = tc.edit_config(text, {"nvidia-container-cli.no-cgroups": True})
    assert edit["text"] == "nvidia-container-cli.no-cgroups = true\n"


def test_multiline_array_is_replaced_whole():
    text = '[nvidia-container-runtime]\nruntimes = [\n  "docker-runc",  # old\n  "runc",\n]  # list\nmode = "auto"\n'
    edit = tc.edit_config(text, {"nvidia-container-runtime.runtimes": ["runc", "crun"]})
    assert edit["text"] == '[nvidia-container-runtime]\nruntimes = ["runc", "crun"]  # list\nmode = "auto"\n'


def test_header_lookalikes_inside_strings_are_not_tables():
    text = 'note = """\n[nvidia-container-cli]\nno-cgroups = true\n"""\n[nvidia-container-cli]\nload-kmods = true\n'
    edit = tc.edit_config(text, {"nvidia-container-cli.no-cgroups": False})
    data = read_toml(edit["text"])
    assert data["note"] == "[nvidia-container-cli]\nno-cgroups = true\n"
    assert data["nvidia-container-cli"] == {"load-kmods": True, "no-cgroups": False}


def test_hash_inside_a_string_is_not_a_comment():
    text = 'ldconfig = "@/sbin/ldconfig#real"  # keep\n'
    edit = tc.edit_config(text, {"ldconfig": "@/sbin/ldconfig.real"})
    assert edit["text"] == 'ldconfig = "@/sbin/ldconfig.real"  # keep\n'


def test_crlf_and_missing_final_newline_are_kept():
    text = 'disable-require = false\r\n\r\n[nvidia-ctk]\r\npath = "nvidia-ctk"'
    edit = tc.edit_config(text, {MOUNTS: True, "nvidia-ctk.extra": 1})
    assert edit["text"] == (
        f'disable-require = false\r\n{MOUNTS} = true\r\n\r\n[nvidia-ctk]\r\npath = "nvidia-ctk"\r\nextra = 1\r\n'
    )


def test_bool_is_not_int():
    edit = tc.edit_config("x = 1\n", {"x": True})
    assert edit["changed"] and edit["text"] == "x = true\n"
    assert tc.edit_config("x = true\n", {"x": True})["changed"] is False


def test_strings_are_escaped():
    edit = tc.edit_config("", {"a": 'say "hi"\\ \n'})
    assert read_toml(edit["text"])["a"] == 'say "hi"\\ \n'


def test_empty_file_gets_the_keys():
    text = tc.render_new(tc.HARDENING_SETTINGS)
    assert read_toml(text) == {ENVVAR: False, MOUNTS: True}


@pytest.mark.parametrize(
    "text, needle",
    [
        ("disable-require = \n", r"config.toml is not valid TOML: invalid value \(at line 1, column 19\)"),
        (
            "[a]\nx = 1\n[a]\ny = 2\n",
            r"config.toml is not valid TOML: table \[a\] is defined twice \(at line 3",
        ),
    ],
)
def test_broken_file_is_refused(text, needle):
    with pytest.raises(tc.TomlEditError, match=needle):
        tc.edit_config(text, tc.HARDENING_SETTINGS, name="config.toml")


@pytest.mark.parametrize(
    "settings, needle",
    [
        ({}, "non-empty mapping"),
        ({"a b": True}, "not a bare TOML key"),
        ({"a..b": True}, "not a bare TOML key"),
        ({"a": {"b": 1}}, r"\(mapping\) is not a boolean, number, string or list"),
        ({"a": None}, r"None \(null\) is not a boolean, number, string or list"),
        ({"disable-require.x": True}, "disable-require is a value, not a table"),
        ({"nvidia-container-cli": True}, "is a table, not a value"),
    ],
)
def test_bad_settings_are_refused(settings, needle):
    with pytest.raises(tc.TomlEditError, match=needle):
        tc.edit_config(generated(), settings)


def test_array_of_tables_is_refused():
    text = '[[runtimes]]\nname = "runc"\n'
    with pytest.raises(tc.TomlEditError):
        tc.edit_config(text, {"runtimes.path": "/x"})


# --------------------------------------------------------------------------------------------
# the module


def run_module(args, capsys):
    with patch_module_args(args), pytest.raises(SystemExit) as exc:
        nvidia_toolkit_config.main()
    return exc.value.code, json.loads(capsys.readouterr().out)


@pytest.fixture
def config(tmp_path):
    path = tmp_path / "etc" / "nvidia-container-runtime" / "config.toml"
    path.parent.mkdir(parents=True)
    path.write_text(generated(), encoding="utf-8")
    path.chmod(0o640)
    return path


def backups(path: Path) -> list[Path]:
    return sorted(path.parent.glob(path.name + ".gpusplit-*.bak"))


def test_module_missing_file_says_the_toolkit_is_not_installed(tmp_path, capsys):
    path = tmp_path / "config.toml"
    rc, out = run_module({"path": str(path)}, capsys)
    assert rc == 1 and out["failed"] is True
    assert out["msg"] == f"nvidia-container-toolkit is not installed on this host: {path} not found"
    assert not path.exists()


def test_module_create(tmp_path, capsys):
    path = tmp_path / "new" / "config.toml"
    rc, out = run_module({"path": str(path), "create": True}, capsys)
    assert rc == 0 and out["changed"] is True and out["created"] is True
    assert read_toml(path.read_text()) == {ENVVAR: False, MOUNTS: True}
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert "backup_file" not in out


def test_module_check_mode_changes_nothing(config, capsys):
    before = config.read_text()
    rc, out = run_module({"path": str(config), "_ansible_check_mode": True, "_ansible_diff": True}, capsys)
    assert rc == 0 and out["changed"] is True
    assert config.read_text() == before and backups(config) == []
    assert out["diff"]["before"] == before
    assert f"{ENVVAR} = false" in out["diff"]["after"]


def test_module_writes_with_backup_keeps_mode_and_is_idempotent(config, capsys):
    before = config.read_text()
    rc, out = run_module({"path": str(config)}, capsys)
    assert rc == 0 and out["changed"] is True
    assert out["after"] == {ENVVAR: False, MOUNTS: True}
    (backup,) = backups(config)
    assert out["backup_file"] == str(backup) and backup.read_text() == before
    assert stat.S_IMODE(config.stat().st_mode) == 0o640
    after = config.read_text()
    assert read_toml(after)[ENVVAR] is False
    assert [p.name for p in config.parent.iterdir() if p.name.startswith(".")] == []

    rc, out = run_module({"path": str(config)}, capsys)
    assert rc == 0 and out["changed"] is False and "backup_file" not in out
    assert config.read_text() == after and len(backups(config)) == 1


def test_module_without_backup(config, capsys):
    rc, out = run_module({"path": str(config), "backup": False}, capsys)
    assert rc == 0 and out["changed"] is True and "backup_file" not in out
    assert backups(config) == []


def test_module_extra_table_setting(config, capsys):
    settings = {ENVVAR: False, MOUNTS: True, "nvidia-container-cli.no-cgroups": True}
    rc, out = run_module({"path": str(config), "settings": settings}, capsys)
    assert rc == 0 and out["changed"] is True
    assert read_toml(config.read_text())["nvidia-container-cli"]["no-cgroups"] is True


def test_module_refuses_a_broken_file(config, capsys):
    config.write_text(generated() + '\n[nvidia-ctk]\npath = "again"\n')
    before = config.read_text()
    rc, out = run_module({"path": str(config)}, capsys)
    assert rc == 1 and out["failed"] is True
    assert out["msg"].startswith(f"refusing to edit {config}: {config} is not valid TOML: ")
    assert config.read_text() == before and backups(config) == []


def test_module_refuses_a_directory(tmp_path, capsys):
    rc, out = run_module({"path": str(tmp_path)}, capsys)
    assert rc == 1 and "is not a regular file" in out["msg"]


def test_backup_name_never_overwrites(tmp_path):
    path = str(tmp_path / "config.toml")
    first = files.backup_name(path, now=0)
    assert first == path + ".gpusplit-19700101T000000Z.bak"
    Path(first).write_text("x")
    assert files.backup_name(path, now=0) == path + ".gpusplit-19700101T000000Z.1.bak"


def test_module_symlinked_config_is_refused_unless_followed(config, tmp_path, capsys):
    """issue 43: a link was written through to its target without being asked to; with follow it is, and the
    target keeps its mode (0600 here) and the link stays a link."""
    link = tmp_path / "link.toml"
    os.symlink(config, link)
    config.chmod(0o600)
    before = config.read_text()
    rc, out = run_module({"path": str(link)}, capsys)
    assert rc == 1 and out["changed"] is False
    assert f"{link} is a symbolic link to {config}: refusing to write through it" in out["msg"]
    assert "follow: true" in out["msg"] and config.read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["etc", "link.toml"]  # no backup either
    rc, out = run_module({"path": str(link), "follow": True}, capsys)
    assert rc == 0 and out["changed"] is True
    assert link.is_symlink() and read_toml(config.read_text())[MOUNTS] is True
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    backup = Path(out["backup_file"])
    assert backup.parent == tmp_path and backup.read_text() == before and not backup.is_symlink()
    assert stat.S_IMODE(backup.stat().st_mode) == 0o600


def test_module_a_refused_write_leaves_no_backup(config, capsys, monkeypatch):
    """issue 43: the backup was made, the write refused, and the backup of an unchanged file stayed."""

    def refuse(module, src, dest):
        raise OSError(28, "No space left on device", dest)

    monkeypatch.setattr(files, "move", refuse)
    rc, out = run_module({"path": str(config)}, capsys)
    assert rc == 1 and "No space left on device" in out["msg"] and out["changed"] is False
    assert sorted(p.name for p in config.parent.iterdir()) == ["config.toml"]


def test_module_documentation_matches_its_arguments():
    import yaml

    doc = yaml.safe_load(nvidia_toolkit_config.DOCUMENTATION)
    yaml.safe_load(nvidia_toolkit_config.EXAMPLES)
    yaml.safe_load(nvidia_toolkit_config.RETURN)
    assert set(doc["options"]) == {"path", "settings", "backup", "create", "state", "follow"}
    assert doc["options"]["path"]["default"] == tc.DEFAULT_PATH
    assert doc["options"]["settings"]["default"] == tc.HARDENING_SETTINGS


def test_edits_on_a_python_without_tomllib():
    """Managed hosts run Python 3.8+ (tomllib is 3.11+): editing must work without it."""
    code = (
        "import sys; sys.modules['tomllib'] = None\n"
        "from ansible_collections.gpusplit.k8s.plugins.module_utils._host import toolkit_config as tc\n"
        "import json\n"
        "edit = tc.edit_config(sys.stdin.read(), tc.HARDENING_SETTINGS)\n"
        "print(json.dumps(edit['after']))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        input=generated(),
        capture_output=True,
        text=True,
        check=False,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)),
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {ENVVAR: False, MOUNTS: True}


def test_module_refuses_a_file_that_is_not_utf8(config, capsys):
    config.write_bytes(b"x = '\xff'\n")
    rc, out = run_module({"path": str(config)}, capsys)
    assert rc == 1 and out["msg"] == (
        f"{config} is not UTF-8 text: byte 0xff on line 1, column 6 is no UTF-8 character; save the file as UTF-8"
    )  # never Python's "'utf-8' codec can't decode ..."
    assert out["path"] == str(config) and backups(config) == []


def test_a_setting_name_that_is_not_a_string_is_refused():
    with pytest.raises(tc.TomlEditError, match="setting name 1 is not a non-empty string"):
        tc.edit_config(generated(), {1: True, ENVVAR: False})


# --------------------------------------------------------------------------------------------
# value types: the toolkit reads each key as one type


@pytest.mark.parametrize("word", ["false", "False", " no "])
def test_a_string_for_the_envvar_key_is_refused_with_the_reason(word):
    """issue 18 case 7: "false" would be written as a TOML string; the toolkit reads a bool, so nothing hardens."""
    with pytest.raises(tc.TomlEditError) as exc:
        tc.edit_config(generated(), {ENVVAR: word, MOUNTS: True})
    assert str(exc.value) == (
        f"setting {ENVVAR}: {word!r} is a string, but the NVIDIA Container Toolkit reads {ENVVAR} as a boolean; "
        "written as given it would not take effect (write false as a YAML boolean, without quotes)"
    )


def test_a_value_from_a_play_is_named_by_its_yaml_type():
    """What a play hands over is tagged (ansible-core 2.19: _AnsibleTaggedStr): the message says
    "string", never the Python class."""
    from ansible._internal._datatag._tags import Origin

    tagged = Origin(path="/inventory/group_vars/gpu.yml", line_num=3).tag("false")
    assert type(tagged).__name__ != "str"
    with pytest.raises(tc.TomlEditError) as exc:
        tc.edit_config(generated(), {ENVVAR: tagged})
    assert f"setting {ENVVAR}: 'false' is a string, but" in str(exc.value)
    with pytest.raises(
        tc.TomlEditError, match=r"\(integer\) is not a boolean, number, string or list|is an integer"
    ):
        tc.edit_config(generated(), {MOUNTS: 1})


@pytest.mark.parametrize(
    "key, value, kind, hint",
    [
        (MOUNTS, "true", "boolean", "write true as a YAML boolean, without quotes"),
        (MOUNTS, 1, "boolean", "give true or false"),
        ("nvidia-container-cli.no-cgroups", "yes", "boolean", "write true as a YAML boolean"),
        ("features.disable-imex-channel-creation", "true", "boolean", "write true"),
        ("nvidia-container-runtime.log-level", 5, "string", "quote the value"),
        ("nvidia-container-runtime.runtimes", "runc", "list of strings", "give a list of strings"),
        ("nvidia-container-runtime.modes.cdi.spec-dirs", ["/etc/cdi", 1], "list of strings", "give a list"),
    ],
)
def test_sibling_keys_are_checked_for_their_type(key, value, kind, hint):
    before = generated()
    with pytest.raises(tc.TomlEditError, match=rf"reads {key} as a {kind}; .*\({hint}"):
        tc.edit_config(before, {key: value})


def test_right_types_and_unknown_keys_pass():
    edit = tc.edit_config(
        generated(),
        {
            "nvidia-container-runtime.log-level": "debug",
            "nvidia-container-cli.environment": ["A=1"],
            "features.disable-imex-channel-creation": True,
            "some-future-key": "anything",
        },
    )
    data = read_toml(edit["text"])
    assert data["features"] == {"disable-imex-channel-creation": True}
    assert data["some-future-key"] == "anything"


def test_module_refuses_a_string_bool_and_leaves_the_file(config, capsys):
    before = config.read_text()
    rc, out = run_module({"path": str(config), "settings": {ENVVAR: "false"}}, capsys)
    assert rc == 1 and out["msg"].startswith(
        f"refusing to edit {config}: setting {ENVVAR}: 'false' is a string"
    )
    assert "reads" in out["msg"] and "as a boolean" in out["msg"]
    assert config.read_text() == before and backups(config) == []


# ---- issue 43: lines split where TOML does not; comparisons a valid value defeats; numbers out of range


@pytest.mark.parametrize(
    "text",
    [
        "a = 'x\u2028y'\n",  # issue 43: "Module failed: substring not found"
        "# a comment with \x85 in it\nb = 1\n",  # issue 43: "cannot read a key"
        'k = """one\u2029two"""\n[nvidia-container-cli]\nroot = "/"\n',  # a multi-line string with U+2029
        "[t]\nk = 'a\u2028b = 1' # x\x85y = 2\n",  # LS in a literal string, NEL in a comment
        "x = [\n  'a\x85', # \u2029\n  'b',\n]\n",  # an array over lines, NEL and PS inside
    ],
)
def test_line_like_characters_do_not_end_a_line(text):
    result = tc.edit_config(text, {ENVVAR: False})
    data = read_toml(result["text"])
    assert data[ENVVAR] is False
    del data[ENVVAR]
    assert data == read_toml(text)


def test_split_lines_splits_at_lf_only():
    assert toml_read.split_lines("a\u2028b\x85c\x0bd\x0ce\x1cf\rg\r\nh\ni") == [
        "a\u2028b\x85c\x0bd\x0ce\x1cf\rg\r\n",
        "h\n",
        "i",
    ]
    assert toml_read.split_lines("") == []
    assert toml_read.split_lines("a\n") == ["a\n"]


def test_line_like_characters_are_written_escaped_and_read_back():
    """issue 43: a list holding U+2028 was written unescaped, and the next run could not read the file."""
    key = "nvidia-container-runtime.runtimes"
    value = ["a\u2028b", "c\x85", "d\u2029"]
    first = tc.edit_config("", {key: value})
    assert "\u2028" not in first["text"] and "\x85" not in first["text"] and "\\u2028" in first["text"]
    assert read_toml(first["text"])["nvidia-container-runtime"]["runtimes"] == value
    assert not tc.edit_config(first["text"], {key: value})["changed"]


@pytest.mark.parametrize(
    "text",
    [
        "n = nan\n",  # issue 43: "the edit would change other settings too"
        "[t]\nx = [1.0, -nan]\n",
        "t = {x = +nan}\n",
        "[[a]]\nv = nan\n[[a]]\nv = 1\n",
    ],
)
def test_nan_elsewhere_does_not_stop_an_edit(text):
    result = tc.edit_config(text, {ENVVAR: False})
    assert result["changed"]
    assert toml_read.loads(result["text"])[ENVVAR] is False


@pytest.mark.parametrize(
    "old, new",
    [
        (1, True),  # true == 1 in Python
        (1, 1.0),  # 1 == 1.0
        (0.0, -0.0),  # 0.0 == -0.0
        (float("nan"), 1.0),
        ([1], [True]),
        ({"a": 1}, {"a": 1.0}),
    ],
)
def test_same_tells_toml_values_apart(old, new):
    assert not tc._same(old, new)
    assert tc._same(old, old) and tc._same(new, new)


def test_same_keeps_a_date_times_offset():
    import datetime as dt

    utc = dt.datetime(1979, 5, 27, 7, 32, tzinfo=dt.timezone.utc)  # noqa: UP017 - runs on 3.8+
    minus7 = dt.datetime(1979, 5, 27, 0, 32, tzinfo=dt.timezone(dt.timedelta(hours=-7)))
    assert utc == minus7  # the same instant for Python
    assert not tc._same(utc, minus7)


def test_a_changed_type_elsewhere_is_seen_as_a_change():
    """The check that nothing else changed compared with ==, to which true equals 1: a table whose value
    changed from 1 to true passed as unchanged."""
    with pytest.raises(tc.TomlEditError, match="change other settings too"):
        tc._check_rest_unchanged({"a": 1, "k": 1}, {"a": True, "k": 2}, [("k",)], "config.toml")
    with pytest.raises(tc.TomlEditError, match="change other settings too"):
        tc._check_rest_unchanged({"t": {"a": 0.0}}, {"t": {"a": -0.0}}, [], "config.toml")


@pytest.mark.parametrize("value", [10**30, -(10**30), 1 << 63, -(1 << 63) - 1, [1, 1 << 64]])
def test_integers_beyond_64_bit_are_refused(value):
    """issue 43: settings {x: 10**30} was written into config.toml, which the toolkit then cannot read."""
    with pytest.raises(
        tc.TomlEditError, match=r"expected a whole number from -9223372036854775808 to 9223372036854775807"
    ):
        tc.edit_config("", {"x": value})


def test_the_64_bit_edges_are_written():
    for value in ((1 << 63) - 1, -(1 << 63)):
        assert read_toml(tc.edit_config("", {"x": value})["text"])["x"] == value
