"""plugin_utils/lean_module.py and module_utils/_lean/bootstrap.py: a module's work run on the host without an
AnsiballZ execution (the GPU discovery's action plugin).

The program is run as the action plugin runs it, by a real Python in its own process (its source on stdin, or
as a file), against the fake NVML binding and the stand-in nvidia-smi; its answer is compared with the module's
own (the module file run as Ansible runs it, with ansible-core's AnsibleModule)."""

from __future__ import annotations

import ast
import base64
import json
import os
import re
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpusplit.k8s.plugins.module_utils._gpu import facts
from ansible_collections.gpusplit.k8s.plugins.modules import nvidia_gpu_facts as module
from ansible_collections.gpusplit.k8s.plugins.plugin_utils import lean_module as lean
from ansible_collections.gpusplit.k8s.tests.unit.module_run import run_module_file, run_program

ROOT = Path(__file__).resolve().parents[4]
FAKES = ROOT / "tests" / "fakes"
FIXTURES = ROOT / "tests" / "fixtures" / "gpus"
PROC = ROOT / "tests" / "fixtures" / "proc"
ENTRY = lean.PREFIX + "._gpu.facts"
GPU_FIXTURES = sorted(p.name for p in FIXTURES.glob("*.json") if json.loads(p.read_text())["gpus"])


def host_env(fixture="dgx-h100.json", no_binding=None, **extra):
    """The host's environment: the fixture, the fake NVML binding, nothing of the controller's Python path
    (the host's Python has no ansible). With ``no_binding`` (a folder), ``import pynvml`` fails there as on a
    host without the binding, whatever this machine's Python has installed."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PYTHON", "ANSIBLE"))}
    env["GPUSPLIT_FAKE_NVML_FIXTURE"] = str(FIXTURES / fixture)
    env["PYTHONPATH"] = str(FAKES)
    if no_binding:
        Path(no_binding, "pynvml.py").write_text("raise ImportError(\"No module named 'pynvml'\")\n")
        env["PYTHONPATH"] = str(no_binding)
    env.update(extra)
    return env


def module_answer(args, env):
    """The module's answer for ``args``: its file run as Ansible runs it, AnsibleModule and all."""
    run_env = dict(env, PYTHONPATH=os.pathsep.join([env.get("PYTHONPATH", ""), *sys.path]))
    return run_module_file(module.__file__, args, env["TMPDIR_FOR_ARGS"], run_env)


def warning_texts(answer):
    """A module's warnings are events (ansible-core 2.19); the program's are texts: compare the texts."""
    texts = []
    for warning in answer.pop("warnings", []):
        texts.append(warning if isinstance(warning, str) else warning["event"]["msg"])
    return texts


def lean_answer(args, env, check_mode=False, **kwargs):
    params, message = lean.check_options(facts.ARGUMENT_SPEC, args, "nvidia_gpu_facts")
    assert message is None
    program = lean.build_program(
        ENTRY, params, check_mode=check_mode, path_options=lean.path_options(facts.ARGUMENT_SPEC)
    )
    return run_program(program, env, **kwargs)


# --- what goes to the host ----------------------------------------------------------------------------------


def test_the_bundle_has_every_module_the_work_imports_the_lazy_ones_too():
    sources, packages = lean.module_closure(ENTRY)
    # what the work imports, asked of a Python that imports it (the nvidia-smi reader only where it is used)
    probe = (
        "import sys; from ansible_collections.gpusplit.k8s.plugins.module_utils._gpu import facts, smi; "
        "print('\\n'.join(name for name in sys.modules if name.startswith('ansible_collections.gpusplit')))"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, env=env)
    imported = set(done.stdout.split())
    assert imported and imported <= set(sources), imported - set(sources)
    assert lean.PREFIX + "._gpu.smi_parse" in sources  # imported only by smi, inside the lazy import
    assert {"ansible_collections", lean.PREFIX, lean.PREFIX + "._gpu", lean.PREFIX + "._host"} <= set(
        packages
    )
    # the collection's own files only, nothing else of ansible (the host's Python has no ansible)
    assert all(
        name.startswith("ansible_collections.gpusplit") or name == "ansible_collections" for name in sources
    )


def test_nothing_the_work_runs_on_the_host_imports_ansible_core():
    # The lean runner carries only the collection's module_utils: an import of ansible.module_utils in any of
    # them would fail on the host. Said here with the file and the line, before a host says it.
    sources, _packages = lean.module_closure(ENTRY)
    found = []
    for name, source in sources.items():
        for node in ast.walk(ast.parse(source)):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            found += [
                f"{name}:{node.lineno}: {n}" for n in names if n == "ansible" or n.startswith("ansible.")
            ]
    assert found == []


def test_imported_names_tells_a_module_from_a_name_in_it():
    source = (
        f"from {lean.PREFIX}._gpu import binding as gpu_binding\n"
        f"from {lean.PREFIX}._gpu.schema import GpuFactsError, HEALTH_OK\n"
        f"import {lean.PREFIX}._errors\n"
        "import json\n"
        "def later():\n"
        f"    from {lean.PREFIX}._gpu import smi\n"
    )
    assert lean.imported_names(source) == {
        lean.PREFIX + "._gpu.binding",
        lean.PREFIX + "._gpu.schema",
        lean.PREFIX + "._errors",
        lean.PREFIX + "._gpu.smi",
    }


def test_a_module_that_is_not_there_is_refused_on_the_controller():
    with pytest.raises(ValueError, match=r"_gpu\.nothing: no such module in the collection's module_utils"):
        lean.module_closure(lean.PREFIX + "._gpu.nothing")


def test_the_bundle_is_built_once_per_run_and_shared(tmp_path):
    first = lean.cached_bundle(ENTRY, tmp_path)
    cached = tmp_path / "gpusplit_lean" / f"{ENTRY}.b64"
    assert cached.read_text() == first == lean.bundle(ENTRY)
    cached.write_text("dGhlIGNhY2hlZCBvbmU=")  # what another worker of the run wrote is what is used
    assert lean.cached_bundle(ENTRY, tmp_path) == "dGhlIGNhY2hlZCBvbmU="
    unpacked = json.loads(zlib.decompress(base64.b64decode(first)))
    assert unpacked["sources"][ENTRY] == (ROOT / "plugins" / "module_utils" / "_gpu" / "facts.py").read_text()


def test_the_first_batch_of_workers_builds_the_bundle_once(tmp_path, monkeypatch):
    """Workers forked at once (the first batch, as many as the forks) wait for one build instead of each
    building its own."""
    builds = tmp_path / "builds"
    real = lean.bundle

    def slow_bundle(entry):
        with builds.open("a") as handle:
            handle.write(f"{os.getpid()}\n")
        time.sleep(0.3)  # the others arrive while it builds
        return real(entry)

    monkeypatch.setattr(lean, "bundle", slow_bundle)
    folder = tmp_path / "run"
    folder.mkdir()
    children = []
    for index in range(6):
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            code = 1
            try:
                (tmp_path / f"got-{index}").write_text(lean.cached_bundle(ENTRY, folder))
                code = 0
            finally:
                os._exit(code)
        children.append(pid)
    assert [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in children] == [0] * 6
    assert len(builds.read_text().split()) == 1
    assert {(tmp_path / f"got-{index}").read_text() for index in range(6)} == {real(ENTRY)}


# --- the options, checked on the controller --------------------------------------------------------------------


BAD_OPTIONS = [
    {"backend": "dcgm"},
    {"bogus": 1},
    {"bogus": 1, "backend": "dcgm"},
    {"timeout": "soon"},
    {"required": "maybe"},
    {"pod_resources_timeout": [1]},
]


@pytest.mark.parametrize("options", BAD_OPTIONS, ids=lambda options: ",".join(options))
def test_a_bad_option_gets_the_modules_own_message(options, capsys):
    # the name is the task's action, as ansible-core gives it to the module
    params, message = lean.check_options(facts.ARGUMENT_SPEC, options, "gpusplit.k8s.nvidia_gpu_facts")
    assert params is None
    with (
        patch_module_args({**options, "_ansible_module_name": "gpusplit.k8s.nvidia_gpu_facts"}),
        pytest.raises(SystemExit),
    ):
        module.main()
    said = json.loads(capsys.readouterr().out)
    assert said["failed"] is True and message == said["msg"]


def test_checked_options_are_completed_and_paths_left_to_the_host():
    params, message = lean.check_options(
        facts.ARGUMENT_SPEC, {"proc_root": "~/proc", "required": "yes", "timeout": "3"}, "nvidia_gpu_facts"
    )
    assert message is None
    assert params["proc_root"] == "~/proc"  # the host's home, not the controller's
    assert params["required"] is True and params["timeout"] == 3.0
    assert params["backend"] == "auto" and params["sysfs_root"] == "/sys"
    assert set(params) == set(facts.ARGUMENT_SPEC)
    assert "proc_root" in lean.path_options(facts.ARGUMENT_SPEC)
    assert "backend" not in lean.path_options(facts.ARGUMENT_SPEC)


# --- the program on the host, against the module ------------------------------------------------------------------


CASES = [pytest.param(name, "nvml", id=f"{name}-nvml") for name in GPU_FIXTURES] + [
    pytest.param(name, "nvidia-smi", id=f"{name}-nvidia-smi") for name in GPU_FIXTURES[:3]
]


@pytest.mark.parametrize(("fixture", "backend"), CASES)
def test_the_program_answers_as_the_module(fixture, backend, tmp_path):
    args = {"backend": backend, "nvidia_smi_path": str(FAKES / "bin" / "nvidia-smi"), "proc_root": str(PROC)}
    env = host_env(fixture, TMPDIR_FOR_ARGS=str(tmp_path))
    rc, answer = lean_answer(args, env)
    module_rc, expected = module_answer(args, env)
    assert (rc, warning_texts(answer)) == (module_rc, warning_texts(expected))
    assert answer["ansible_facts"]["nvidia_gpus"], answer
    assert answer == expected


@pytest.mark.parametrize(
    ("args", "said"),
    [
        ({"backend": "nvml"}, "backend=nvml needs the Python module pynvml"),
        ({"backend": "nvidia-smi"}, "backend=nvidia-smi but nvidia-smi was not found on PATH"),
        ({"timeout": -1}, "timeout"),
    ],
    ids=["nvml-missing", "nvidia-smi-missing", "bad-timeout"],
)
def test_a_refusal_is_the_modules_refusal(args, said, tmp_path):
    env = host_env(no_binding=tmp_path, TMPDIR_FOR_ARGS=str(tmp_path), PATH="/nonexistent")
    rc, answer = lean_answer(args, env)
    module_rc, expected = module_answer(args, env)
    assert rc == module_rc == 1
    assert answer["failed"] is True and answer["msg"] == expected["msg"]
    assert answer["errors"] == expected["errors"] == [expected["msg"]]
    assert said in answer["msg"]


def test_check_mode_reaches_the_work(tmp_path):
    # install_binding where the binding is missing: in check mode, said and not done (pip is not run)
    args = {"install_binding": True, "nvidia_smi_path": str(FAKES / "bin" / "nvidia-smi")}
    env = host_env(no_binding=tmp_path)
    rc, answer = lean_answer(args, env, check_mode=True)
    assert rc == 0 and answer["changed"] is True
    assert answer["nvml_binding"]["would_install"].startswith("nvidia-ml-py==")
    assert answer["nvml_binding"]["installed"] is None


def test_paths_are_expanded_with_the_hosts_home(tmp_path):
    home = tmp_path / "home"
    (home / "proc").mkdir(parents=True)
    rc, answer = lean_answer(
        {"proc_root": "~/proc", "nvidia_smi_path": str(FAKES / "bin" / "nvidia-smi")},
        host_env(HOME=str(home)),
    )
    assert rc == 0
    assert answer["invocation"]["module_args"]["proc_root"] == str(home / "proc")


def test_a_file_in_the_programs_folder_cannot_stand_in_for_a_standard_module(tmp_path):
    # the current folder (program on stdin) and the program's own folder (as a file) are off sys.path
    for name in ("json", "zlib", "base64", "importlib"):
        (tmp_path / f"{name}.py").write_text(
            "raise SystemExit('the folder of the program was imported from')\n"
        )
    args = {"nvidia_smi_path": str(FAKES / "bin" / "nvidia-smi")}
    rc, answer = lean_answer(args, host_env(), cwd=tmp_path)
    assert rc == 0 and answer["ansible_facts"]["nvidia_gpus"]
    rc, answer = lean_answer(args, host_env(), as_file=tmp_path / "gpusplit_lean.py")
    assert rc == 0 and answer["ansible_facts"]["nvidia_gpus"]


def test_a_crash_is_failed_with_its_traceback_and_source_lines():
    boom, packed = own_bundle(
        "def execute(params, check_mode=False, diff=False):\n    return {'x': 1}['the missing key']\n"
    )
    program = lean.build_program(boom, {}, packed=packed)
    rc, answer = run_program(program, host_env())
    assert rc == 1 and answer["failed"] is True
    assert answer["msg"] == "The module failed on the host: KeyError: 'the missing key'"
    assert "return {'x': 1}['the missing key']" in answer["exception"]
    assert "_work.py" in answer["exception"]


OLDER = []
try:
    from ansible_collections.gpusplit.k8s.tests.unit.plugins.modules.test_managed_host_pythons import FOUND

    OLDER = [pytest.param(FOUND[minor][0], id=f"python{minor[0]}.{minor[1]}") for minor in sorted(FOUND)]
except ImportError:  # pragma: no cover
    pass


@pytest.mark.parametrize(
    "python", OLDER or [pytest.param(None, marks=pytest.mark.skip(reason="no Python 3.8-3.10 here"))]
)
def test_the_program_runs_on_an_older_host_python(python, tmp_path):
    args = {
        "nvidia_smi_path": str(FAKES / "bin" / "nvidia-smi"),
        "backend": "nvidia-smi",
        "proc_root": str(PROC),
    }
    env = host_env(TMPDIR_FOR_ARGS=str(tmp_path))
    rc, answer = lean_answer(args, env, python=python)
    _module_rc, expected = module_answer(args, env)
    assert rc == 0
    assert warning_texts(answer) == warning_texts(expected)
    assert answer["nvml_binding"].pop("python") == python  # the host's Python, where the module's is this one
    expected["nvml_binding"].pop("python")
    assert answer == expected


@pytest.mark.parametrize(
    ("source", "said"),
    [
        ("from . import sibling\n", "x.py:1: a relative import"),
        (
            "def f():\n    from ansible.module_utils.basic import AnsibleModule\n",
            "x.py:2: imports ansible.module_utils.basic",
        ),
        ("import ansible\n", "x.py:1: imports ansible,"),
    ],
    ids=["relative", "ansible-core-in-a-function", "ansible"],
)
def test_what_the_program_could_not_carry_is_refused_on_the_controller(source, said):
    with pytest.raises(ValueError, match=re.escape(said)):
        lean.imported_names(source, "x.py")


@pytest.mark.parametrize("what", lean.NOT_CARRIED)
def test_a_spec_with_what_only_ansiblemodule_carries_out_is_refused(what):
    spec = {**facts.ARGUMENT_SPEC, "token": {"type": "str", what: ["tok"] if "aliases" in what else True}}
    with pytest.raises(ValueError, match=rf"the lean runner does not carry out token\.{what}"):
        lean.check_options(spec, {}, "gpusplit.k8s.x")


def own_bundle(work_source):
    """A bundle with the error root and one module ``._work`` of ``work_source``."""
    work = lean.PREFIX + "._work"
    sources = {
        "ansible_collections": "",
        "ansible_collections.gpusplit": "",
        "ansible_collections.gpusplit.k8s": "",
        "ansible_collections.gpusplit.k8s.plugins": "",
        lean.PREFIX: "",
        lean.PREFIX + "._errors": (ROOT / "plugins" / "module_utils" / "_errors.py").read_text(),
        work: work_source,
    }
    packages = [name for name in sources if name not in (work, lean.PREFIX + "._errors")]
    packed = base64.b64encode(
        zlib.compress(json.dumps({"sources": sources, "packages": packages}).encode())
    ).decode()
    return work, packed


def test_an_answer_json_cannot_hold_is_still_an_answer():
    work, packed = own_bundle(
        "def execute(params, check_mode=False, diff=False):\n    return {'when': object()}\n"
    )
    rc, answer = run_program(lean.build_program(work, {}, packed=packed), host_env())
    assert rc == 1 and answer["failed"] is True
    assert answer["msg"].startswith("The module failed on the host: TypeError: <object object at")


def test_each_warning_is_said_once():
    work, packed = own_bundle(
        "def execute(params, check_mode=False, diff=False):\n    return {'warnings': ['a', 'b', 'a']}\n"
    )
    rc, answer = run_program(lean.build_program(work, {}, packed=packed), host_env())
    assert rc == 0 and answer["warnings"] == ["a", "b"] and answer["changed"] is False


def test_options_reach_the_host_as_ansible_core_encodes_a_modules_arguments():
    # a YAML date or a set in an option's value: what the module would get, not a crash on the controller
    import datetime

    program = lean.build_program(ENTRY, {"when": datetime.date(2026, 12, 3), "which": {"a"}}, packed="x")
    request = program.rsplit('", "', 1)[1].split('"')[0]
    params = json.loads(base64.b64decode(request))["params"]
    assert params == {"when": "2026-12-03", "which": ["a"]}


# --- the code cache: the bundle's modules kept compiled on the host ---------------------------------------------


def cached_program(work_source, cache, check_mode=False):
    """``(program, cache file)``: own_bundle's program for ``work_source`` with the code cache ``cache``."""
    work, packed = own_bundle(work_source)
    program = lean.build_program(work, {}, packed=packed, code_cache=str(cache), check_mode=check_mode)
    name = f"{work[len(lean.PREFIX) + 1 :]}.{sys.implementation.cache_tag}.code"
    return program, cache / name


def answering(value):
    return f"def execute(params, check_mode=False, diff=False):\n    return {{'answer': {value!r}}}\n"


def plant(path, program, work_source):
    """Put in the cache file ``path`` the modules of ``program``'s bundle with the work module compiled from
    ``work_source`` instead: what the program answers then says whether it ran the kept code."""
    import marshal
    from importlib.util import MAGIC_NUMBER

    request = json.loads(base64.b64decode(program.rsplit('", "', 1)[1].split('"')[0]))
    packed = program.rsplit('main("', 1)[1].split('"')[0]
    sources = json.loads(zlib.decompress(base64.b64decode(packed)))["sources"]
    codes = {name: compile(source, name, "exec") for name, source in sources.items()}
    codes[request["entry"]] = compile(work_source, "planted", "exec")
    digest = request["code_cache"]["digest"]
    path.write_bytes(marshal.dumps((1, MAGIC_NUMBER, digest, codes)))
    path.chmod(0o600)


def test_the_modules_are_kept_compiled_in_a_private_folder_and_run_from_there(tmp_path):
    cache = tmp_path / "cache"
    program, kept = cached_program(answering(1), cache)
    rc, answer = run_program(program, host_env())
    assert rc == 0 and answer["answer"] == 1
    assert (cache.stat().st_mode & 0o777, kept.stat().st_mode & 0o777) == (0o700, 0o600)
    assert [p.name for p in cache.iterdir()] == [kept.name]  # no partial file left
    # the next run runs what is kept, not the source: a planted module answers instead
    plant(kept, program, answering("kept"))
    assert run_program(program, host_env())[1]["answer"] == "kept"


def test_a_changed_bundle_is_compiled_again_and_kept_in_the_same_file(tmp_path):
    cache = tmp_path / "cache"
    first, kept = cached_program(answering(1), cache)
    run_program(first, host_env())
    before = kept.read_bytes()
    second, same = cached_program(answering(2), cache)
    assert same == kept
    assert run_program(second, host_env())[1]["answer"] == 2
    assert kept.read_bytes() != before and [p.name for p in cache.iterdir()] == [kept.name]


@pytest.mark.parametrize(
    "damage",
    [
        "garbage",
        "empty",
        "other-python",
        "open-to-others",
        "a-link",
        "folder-open-to-group",
        "above-open-to-all",
    ],
)
def test_what_others_could_have_written_or_a_damaged_file_is_not_run(damage, tmp_path):
    above = tmp_path / "above"
    cache = above / "cache"
    program, kept = cached_program(answering("source"), cache)
    run_program(program, host_env())
    plant(kept, program, answering("kept"))
    if damage == "garbage":
        kept.write_bytes(b"\x00not marshal at all")
    elif damage == "empty":
        kept.write_bytes(b"")
    elif damage == "other-python":  # another bytecode magic number (another Python wrote it under this name)
        import marshal

        version, _magic, digest, codes = marshal.loads(kept.read_bytes())
        kept.write_bytes(marshal.dumps((version, b"\x00\x00\r\n", digest, codes)))
    elif damage == "open-to-others":
        kept.chmod(0o644)
    elif damage == "a-link":
        target = tmp_path / "elsewhere.code"
        kept.rename(target)
        kept.symlink_to(target)
    elif damage == "folder-open-to-group":
        cache.chmod(0o770)
    elif damage == "above-open-to-all":
        above.chmod(0o777)
    left = kept.read_bytes()
    rc, answer = run_program(program, host_env())
    assert rc == 0 and answer["answer"] == "source"
    if damage in (
        "folder-open-to-group",
        "above-open-to-all",
    ):  # left alone in a folder that cannot be trusted
        assert kept.read_bytes() == left
    else:  # compiled from source and kept again, this user's own file
        assert kept.is_file() and not kept.is_symlink() and kept.stat().st_mode & 0o777 == 0o600
        assert run_program(program, host_env())[1]["answer"] == "source"


def test_a_folder_above_open_to_all_with_its_sticky_bit_is_trusted(tmp_path):
    above = tmp_path / "shared"
    above.mkdir()
    above.chmod(0o1777)  # as /tmp: nobody else can rename or replace what this user made in it
    program, kept = cached_program(answering("source"), above / "cache")
    run_program(program, host_env())
    plant(kept, program, answering("kept"))
    assert run_program(program, host_env())[1]["answer"] == "kept"


def test_check_mode_keeps_nothing_and_runs_what_is_kept(tmp_path):
    cache = tmp_path / "cache"
    program, kept = cached_program(answering("source"), cache, check_mode=True)
    assert run_program(program, host_env())[1]["answer"] == "source"
    assert not cache.exists()
    cache.mkdir(mode=0o700)
    plant(kept, program, answering("kept"))
    assert run_program(program, host_env())[1]["answer"] == "kept"


def test_a_folder_that_cannot_be_made_leaves_the_program_as_without_a_cache(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    program, _kept = cached_program(answering("source"), blocker / "cache")
    rc, answer = run_program(program, host_env())
    assert rc == 0 and answer["answer"] == "source"


def test_the_discovery_answers_the_same_from_the_cache(tmp_path):
    args = {"nvidia_smi_path": str(FAKES / "bin" / "nvidia-smi"), "proc_root": str(PROC)}
    params, _ = lean.check_options(facts.ARGUMENT_SPEC, args, "nvidia_gpu_facts")
    answers = []
    for cache in (None, tmp_path / "cache", tmp_path / "cache"):
        program = lean.build_program(
            ENTRY,
            params,
            path_options=lean.path_options(facts.ARGUMENT_SPEC),
            code_cache=cache and str(cache),
        )
        answers.append(run_program(program, host_env()))
    assert answers[0][1]["ansible_facts"]["nvidia_gpus"]
    assert answers[0] == answers[1] == answers[2]
    assert [p.suffix for p in (tmp_path / "cache").iterdir()] == [".code"]


@pytest.mark.parametrize(
    ("value", "folder"),
    [
        (None, None),
        ("", None),
        ("/var/cache/gpusplit", "/var/cache/gpusplit"),
        ("//lab/h1//var/cache/", "/lab/h1/var/cache"),
    ],
)
def test_the_code_cache_variable_names_an_absolute_folder(value, folder):
    assert lean.code_cache_dir(value) == folder


@pytest.mark.parametrize("value", ["var/cache", "~/cache", 3, ["/var/cache"]])
def test_a_code_cache_that_is_not_an_absolute_path_is_refused(value):
    with pytest.raises(
        ValueError, match=r"gpusplit_code_cache_dir: .* is not an absolute path; name a folder"
    ):
        lean.code_cache_dir(value)


def test_the_bundle_is_the_same_text_in_every_run():
    # each run builds it anew, in a process of its own: its digest names what a host keeps compiled
    probe = "from ansible_collections.gpusplit.k8s.plugins.plugin_utils import lean_module; print(lean_module.bundle(%r))"
    texts = {
        subprocess.run(
            [sys.executable, "-c", probe % ENTRY],
            env=dict(os.environ, PYTHONHASHSEED=seed, PYTHONPATH=os.pathsep.join(sys.path)),
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in ("1", "2", "3")
    }
    assert len(texts) == 1 and texts.pop().strip() == lean.bundle(ENTRY)


# --- what the program imports ---------------------------------------------------------------------------------


def imported_modules(program, env):
    """The modules the program imported, by name (the interpreter's own import-time report on stderr)."""
    from ansible_collections.gpusplit.k8s.tests.unit.module_run import STDIN_LOADER

    done = subprocess.run(
        [sys.executable, "-c", STDIN_LOADER],
        input=program,
        capture_output=True,
        text=True,
        env=dict(env, PYTHONPROFILEIMPORTTIME="1"),
        timeout=120,
        check=True,
    )
    assert json.loads(done.stdout)["ansible_facts"]["nvidia_gpus"]
    return {
        line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")
    }


@pytest.mark.parametrize("backend", ["nvml", "nvidia-smi"])
def test_the_discovery_imports_what_its_reading_uses_and_no_more(backend, tmp_path):
    """Every GPU host runs the discovery on every run: the standard modules only some readings need (subprocess for
    nvidia-smi, tempfile and shutil for a write) are imported where they are used, each several ms of the program's
    CPU (docs/performance.md, seventeenth round); the NVML reading, from the cache, imports none of them."""
    args = {"backend": backend, "nvidia_smi_path": str(FAKES / "bin" / "nvidia-smi"), "proc_root": str(PROC)}
    params, _ = lean.check_options(facts.ARGUMENT_SPEC, args, "nvidia_gpu_facts")
    program = lean.build_program(
        ENTRY, params, path_options=lean.path_options(facts.ARGUMENT_SPEC), code_cache=str(tmp_path / "cache")
    )
    imported_modules(program, host_env())  # compiles the modules and keeps them
    assert [p.suffix for p in (tmp_path / "cache").iterdir()] == [".code"]
    imported = imported_modules(program, host_env())
    assert "json" in imported and "pickle" in imported  # (the report lists what the program did import)
    assert {"tempfile", "shutil"}.isdisjoint(imported)
    assert ("subprocess" in imported) is (backend == "nvidia-smi")
