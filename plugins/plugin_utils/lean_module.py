# Copyright: gpusplit contributors
# Apache-2.0
"""Action plugins that run a module's work on the host without an AnsiballZ execution. Private.

What a module execution costs a host is mostly not the module's: ansible-core's payload (a zip of
module_utils that Python compiles from source, twice, on every execution), its loader and
``ansible.module_utils.basic`` took about 0.27 s of the 0.35 to 0.40 s of CPU the GPU discovery cost each
host on every run (docs/performance.md, eleventh round). :class:`LeanModuleAction` runs the module's work
(a function of module_utils, the module's own ``main`` calls the same one) with the host's Python through
module_utils/_lean/bootstrap.py instead:

1. the task's options are checked on the controller against the module's argument spec (the same
   validator and the same messages as AnsibleModule's; options of type path are expanded on the host);
   a bad option fails the task before anything reaches the host;
2. the interpreter is the module's (``ansible_python_interpreter`` or its discovery, through ansible-core's
   own ``_get_shebang`` and ``discover_interpreter``; not ``_configure_module``, which builds the module's
   whole AnsiballZ payload to give the same line), the environment the task's, become the task's;
3. the program (the bootstrap, the module_utils the work imports, the options) goes through the
   connection's stdin where it pipelines, or where the task becomes no one and the connection can pipe
   (:meth:`LeanModuleAction._pipes`), else as a file in the remote temporary folder, which is removed
   afterwards as a module's is;
4. its output is read as a module's (``_parse_returned_data``), so a missing interpreter or a crash reads
   as it would for the module.

An asynchronous task (``async``) runs the module itself: ansible-core's async wrapper needs a module.
"""

from __future__ import annotations

import ast
import base64
import fcntl
import hashlib
import json
import os
import re
import zlib
from pathlib import Path

from ansible import constants as C
from ansible.errors import AnsibleActionFail
from ansible.executor.interpreter_discovery import InterpreterDiscoveryRequiredError, discover_interpreter
from ansible.executor.module_common import _get_shebang
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.module_utils.common.json import Direction, get_module_encoder
from ansible.module_utils.errors import UnsupportedError
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display
from ansible.vars.clean import remove_internal_keys

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError
from ansible_collections.gpusplit.k8s.plugins.module_utils._lean.bootstrap import RUN_MODULE, STDIN_LOADER

display = Display()

MODULE_UTILS = Path(__file__).resolve().parents[1] / "module_utils"
PREFIX = "ansible_collections.gpusplit.k8s.plugins.module_utils"
BOOTSTRAP = MODULE_UTILS / "_lean" / "bootstrap.py"
# the serialization profile of a module's answer that has no tags (ansible-core's name)
PROFILE = "legacy"


def module_file(name):
    """The file of module_utils module ``name`` (dotted, under PREFIX) and whether it is a package;
    (None, False) where there is none. The packages above module_utils have no file here (None, True)."""
    if PREFIX.startswith(name + "."):
        return None, True
    if name != PREFIX and not name.startswith(PREFIX + "."):
        return None, False
    base = MODULE_UTILS.joinpath(*name[len(PREFIX) + 1 :].split(".")) if name != PREFIX else MODULE_UTILS
    if (base / "__init__.py").is_file():
        return base / "__init__.py", True
    if base.is_dir():
        return None, True
    path = base.with_suffix(".py")
    return (path, False) if path.is_file() else (None, False)


def imported_names(source, name="<source>"):
    """The collection's module_utils modules that ``source`` (module ``name``) imports, anywhere in it (a
    function's own import too): ``from <module_utils...> import x`` names x where x is a module, else the module
    itself. ValueError for what the program could not carry: a relative import, or anything of ansible-core
    (the host's Python has no ansible)."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            imported = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                raise ValueError(
                    f"{name}:{node.lineno}: a relative import; the lean runner carries absolute ones"
                )
            imported = [node.module or ""]
        else:
            continue
        for module in imported:
            if module == "ansible" or module.startswith("ansible."):
                raise ValueError(
                    f"{name}:{node.lineno}: imports {module}, which a host's Python does not have; the lean runner"
                    " carries the collection's module_utils only"
                )
        if isinstance(node, ast.Import):
            names.update(module for module in imported if module.startswith(PREFIX))
        elif (node.module or "").startswith(PREFIX):
            for alias in node.names:
                child = f"{node.module}.{alias.name}"
                names.add(child if module_file(child) != (None, False) else node.module)
    return names


def module_closure(entry):
    """``(sources, packages)`` for module ``entry`` of module_utils: every module it imports, directly
    or not, with its source, and every package above them (empty source where it has no __init__.py)."""
    sources, packages, todo = {}, set(), [entry]
    while todo:
        name = todo.pop()
        if name in sources:
            continue
        path, is_package = module_file(name)
        if path is None and not is_package:
            raise ValueError(f"{name}: no such module in the collection's module_utils ({MODULE_UTILS})")
        sources[name] = path.read_text(encoding="utf-8") if path else ""
        if is_package:
            packages.add(name)
        todo.extend(imported_names(sources[name], name) - set(sources))
        # the packages above it, read as any module is (their __init__.py may import too)
        parts = name.split(".")
        todo.extend(".".join(parts[:depth]) for depth in range(1, len(parts)))
    return sources, sorted(packages)


def bundle(entry):
    """The module_utils ``entry`` needs on the host, packed for the bootstrap: base64 of zlib of JSON
    ``{"sources": ..., "packages": ...}``."""
    sources, packages = module_closure(entry)
    # the same text for the same files in every run (the modules are found in the order of a set, which differs
    # between processes): its digest names what the hosts keep compiled (build_program's code_cache)
    text = json.dumps({"sources": sources, "packages": packages}, sort_keys=True)
    packed = zlib.compress(text.encode("utf-8"), 6)
    return base64.b64encode(packed).decode("ascii")


def cached_bundle(entry, folder=None):
    """:func:`bundle`, kept in ``folder`` (the run's local temporary folder, which ansible-core removes at
    the end of the run; its AnsiballZ payloads are cached there too) for the other workers of the run:
    finding and packing the files costs more than the rest of the task's worker. One worker builds it
    while the others of the first batch wait for it (a lock file beside it), as ansible-core builds an
    AnsiballZ payload once: without the lock every worker of the first batch (as many as the forks)
    built its own."""
    if not folder:
        return bundle(entry)
    path = Path(folder) / "gpusplit_lean" / f"{entry}.b64"
    try:
        return path.read_text(encoding="ascii")
    except FileNotFoundError:
        pass
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = os.open(path.with_name(f".{path.name}.lock"), os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:  # not kept for the other workers: each builds its own
        return bundle(entry)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file is closed, by the process's end too
        try:
            return path.read_text(encoding="ascii")  # built by the worker that held the lock before
        except FileNotFoundError:
            pass
        text = bundle(entry)
        try:
            partial = path.with_name(f".{path.name}.{os.getpid()}")
            partial.write_text(text, encoding="ascii")
            os.replace(partial, path)  # whole or not at all, for a worker reading it without the lock
        except OSError:  # not kept for the other workers: each builds its own
            pass
        return text
    finally:
        os.close(lock)


def build_program(
    entry,
    params,
    check_mode=False,
    path_options=(),
    function="execute",
    packed=None,
    diff=False,
    code_cache=None,
):
    """The program for the host's Python: the bootstrap and its call with the bundle (``packed``, or
    :func:`bundle`'s) and the request. ``code_cache``: the host's folder where the program keeps the bundle's
    modules compiled for the next run (the bootstrap's ``cached_codes``); None: compiled on every run."""
    packed = packed or bundle(entry)
    request = {
        "entry": entry,
        "function": function,
        "params": params,
        "check_mode": bool(check_mode),
        "diff": bool(diff),
        "path_options": sorted(path_options),
    }
    if code_cache:
        request["code_cache"] = {
            "dir": code_cache,
            "digest": hashlib.sha256(packed.encode("ascii")).hexdigest(),
        }
    # encoded as ansible-core encodes a module's arguments (a date or a set in an option's value as the module gets it)
    encoder = get_module_encoder(PROFILE, Direction.CONTROLLER_TO_MODULE)
    encoded = base64.b64encode(json.dumps(request, cls=encoder).encode("utf-8")).decode("ascii")
    return BOOTSTRAP.read_text(encoding="utf-8") + f'\n\nmain("{packed}", "{encoded}")\n'


# the host variable that names the folder where a host keeps the lean runner's compiled modules (the bootstrap's
# cached_codes); undefined or empty: none is kept
CODE_CACHE_VAR = "gpusplit_code_cache_dir"


def code_cache_dir(value):
    """The code cache folder that ``value`` (the variable's templated value) names, ``//`` made ``/``; None for
    none. GpusplitError for what is not an absolute path: the program runs from a folder it does not choose."""
    if value is None or value == "":
        return None
    if not isinstance(value, str) or not value.startswith("/"):
        raise GpusplitError(
            f"gpusplit_code_cache_dir: {value!r} is not an absolute path; name a folder of the host (e.g. /var/cache/gpusplit),"
            " or leave it empty to compile the lean runner's modules on every run"
        )
    return re.sub("/+", "/", value).rstrip("/") or "/"


# what AnsibleModule does with an option beyond checking it, which check_options does not: masking a
# secret's value (no_log), warning of an alias or a removal, a default from the host's environment (fallback:
# the controller's environment is not the host's)
NOT_CARRIED = ("no_log", "aliases", "deprecated_aliases", "removed_in_version", "removed_at_date", "fallback")
# the rules between options that AnsibleModule takes beside the spec (ArgumentSpecValidator takes the same)
RULES = ("mutually_exclusive", "required_together", "required_one_of", "required_if", "required_by")


def spec_items(spec, prefix=""):
    """``(name, option)`` for every option of ``spec``, a sub-option (``options``) named by its keys
    (``dropins.path``)."""
    for key, value in spec.items():
        yield prefix + key, value
        yield from spec_items(value.get("options") or {}, f"{prefix}{key}.")


def host_spec(spec):
    """``spec`` with every option of type path (or list of paths), sub-options too, checked as strings."""
    checked = {}
    for key, value in spec.items():
        value = dict(value)
        for field in ("type", "elements"):
            if value.get(field) == "path":
                value[field] = "str"
        if value.get("options"):
            value["options"] = host_spec(value["options"])
        checked[key] = value
    return checked


def check_options(spec, options, module_name, rules=None):
    """``(params, None)`` with the options checked and completed by ``spec`` (an AnsibleModule argument
    spec) and ``rules`` (its keyword arguments of RULES), or ``(None, message)`` with AnsibleModule's message
    for the first error. Options of type path are checked as strings: their ``~`` and variables are the
    host's (the bootstrap expands them). ValueError for a spec with what only AnsibleModule carries out
    (NOT_CARRIED), or a rule it does not know: such a module is not for the lean runner."""
    unsupported = sorted(
        f"{name}.{what}" for name, value in spec_items(spec) for what in NOT_CARRIED if value.get(what)
    )
    unsupported += sorted(set(rules or {}) - set(RULES))
    if unsupported:
        raise ValueError(f"{module_name}: the lean runner does not carry out {', '.join(unsupported)}")
    checked = ArgumentSpecValidator(host_spec(spec), **(rules or {})).validate(dict(options))
    if len(checked.errors.errors):  # (the errors object itself is always true)
        message = checked.errors.msg
        if isinstance(checked.errors.errors[0], UnsupportedError):
            message = f"Unsupported parameters for ({module_name}) module: {message}"
        return None, message
    return checked.validated_parameters, None


def path_options(spec):
    """The options of type path (or list of paths), sub-options named by their keys (``dropins.path``)."""
    return [name for name, value in spec_items(spec) if "path" in (value.get("type"), value.get("elements"))]


class LeanModuleAction(ActionBase):
    """The action plugin of a module whose work is ``ENTRY``'s ``execute(params, check_mode, diff)``, its
    options ``ARGUMENT_SPEC`` with ``SPEC_RULES`` (AnsibleModule's keyword arguments of RULES)."""

    TRANSFERS_FILES = False
    _supports_check_mode = True
    _supports_async = True

    ENTRY = ""  # the module_utils module with execute()
    ARGUMENT_SPEC: dict = {}
    SPEC_RULES: dict = {}

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        module_name = self._task.action  # as _execute_module names it (the messages, the module's search)
        if self._task.async_val:
            result.update(self._run_module(task_vars))
            return result
        # named as the task names it, as ansible-core names it to the module
        params, message = check_options(self.ARGUMENT_SPEC, self._task.args, module_name, self.SPEC_RULES)
        if message:
            result.update(failed=True, changed=False, msg=message)
            return result
        try:  # before the interpreter's discovery, which already reaches the host
            code_cache = code_cache_dir(self._host_var(task_vars, CODE_CACHE_VAR))
        except GpusplitError as exc:
            result.update(failed=True, changed=False, msg=str(exc), errors=exc.errors)
            return result
        shebang = self._shebang(task_vars)
        program = build_program(
            self.ENTRY,
            params,
            check_mode=self._task.check_mode,
            path_options=path_options(self.ARGUMENT_SPEC),
            packed=cached_bundle(self.ENTRY, C.DEFAULT_LOCAL_TMP),
            diff=self._task.diff,
            code_cache=code_cache,
        )
        answer = self._run_program(shebang, program.encode("utf-8"))
        if RUN_MODULE in answer:  # the work changed nothing and asked for the module (SELinux labels)
            display.vvv(
                f"{module_name}: {answer[RUN_MODULE]}; running the module",
                host=self._play_context.remote_addr,
            )
            answer = self._run_module(task_vars)
        result.update(answer)
        return result

    def _target_vars(self, task_vars):
        """The variables of the host the task runs on: the delegated host's where it is delegated."""
        delegate = self._task.delegate_to
        return task_vars["ansible_delegated_vars"][delegate] if delegate else task_vars

    def _host_var(self, task_vars, name):
        """Host variable ``name`` of the host the task runs on, templated; None where it is not defined."""
        host_vars = self._target_vars(task_vars)
        return self._templar.template(host_vars[name]) if name in host_vars else None

    def _shebang(self, task_vars):
        """The line ``_configure_module`` would give the module (``#!`` and its interpreter), without building the
        module's payload: ``_configure_module`` builds the whole AnsiballZ zip for it (the first worker of a run
        under a lock the others wait on; then on every host, the payload read back and wrapped). The interpreter
        discovery, where the host's interpreter is ``auto``, runs and is returned as a fact as ``_configure_module``
        does it (a delegated task's on the delegated host's facts)."""
        delegate = self._task.delegate_to
        host_vars = self._target_vars(task_vars)
        remote_is_local = bool(getattr(self._connection, "_remote_is_local", False))
        for _attempt in (1, 2):  # a second time with the discovered interpreter
            try:
                # our modules' own line is #!/usr/bin/python, which _get_shebang reads as ansible_python_interpreter
                return _get_shebang(
                    "/usr/bin/python", host_vars, self._templar, remote_is_local=remote_is_local
                )[0]
            except InterpreterDiscoveryRequiredError as needed:
                self._discovered_interpreter = discover_interpreter(
                    action=self,
                    interpreter_name=needed.interpreter_name,
                    discovery_mode=needed.discovery_mode,
                    task_vars=host_vars,
                )
                key = f"discovered_interpreter_{needed.interpreter_name}"
                host_vars.setdefault("ansible_facts", {})[key] = self._discovered_interpreter
                if not delegate or self._task.delegate_facts:
                    self._discovered_interpreter_key = key  # returned to the controller with the answer
        raise AnsibleActionFail("the interpreter discovery gave no interpreter")

    def _run_module(self, task_vars):
        """The module itself, as ansible-core's own action runs it (an asynchronous task wrapped where the
        connection has no async of its own)."""
        wrap_async = bool(self._task.async_val) and not self._connection.has_native_async
        answer = self._execute_module(task_vars=task_vars, wrap_async=wrap_async)
        if not wrap_async:
            self._remove_tmp_path(self._connection._shell.tmpdir)
        return answer

    def _pipes(self):
        """Whether the program goes on the connection's stdin: wherever ansible-core pipelines a module, and also
        with ``pipelining`` off where the task becomes no one. ansible-core leaves pipelining off by default for
        the become methods that need a terminal (sudo with ``requiretty``) or cannot pipe (su); a connection that
        can pipe and runs the program as its own user needs neither. On stdin the program costs one command on
        the host; as a file five (the home folder's path, the temporary folder, the permissions, the program,
        the removal). Kept remote files (``ANSIBLE_KEEP_REMOTE_FILES``) keep the file, as for a module."""
        if self._is_pipelining_enabled("new"):
            return True
        connection = self._connection
        return bool(connection.has_pipelining and not connection.become and not C.DEFAULT_KEEP_REMOTE_FILES)

    def _run_program(self, shebang, program):
        """Run ``program`` with the interpreter of ``shebang`` on the host; its result, read as a module's."""
        self._used_interpreter = shebang
        environment = self._compute_environment_string()
        shell = self._connection._shell
        if self._pipes():
            in_data, own_tmp = program, False
            command = shell.build_module_command(environment, shebang, "-c", arg_path=STDIN_LOADER).strip()
        else:
            own_tmp = shell.tmpdir is None
            tmpdir = shell.tmpdir or self._make_tmp_path()
            script = shell.join_path(tmpdir, "gpusplit_lean.py")
            self._transfer_data(script, program)
            # read by the interpreter, not executed: no execute bit (without become, nothing to change)
            self._fixup_perms2([tmpdir, script], self._get_remote_user(), execute=False)
            in_data = None
            command = shell.build_module_command(environment, shebang, script).strip()
        answer = self._low_level_execute_command(command, sudoable=True, in_data=in_data)
        if own_tmp:  # (where the command raised, the task's cleanup removes it, as for a module)
            self._remove_tmp_path(shell.tmpdir)
        data = self._parse_returned_data(answer, PROFILE)
        remove_internal_keys(data)
        if self._discovered_interpreter_key:
            if data.get("ansible_facts") is None:
                data["ansible_facts"] = {}
            data["ansible_facts"][self._discovered_interpreter_key] = self._discovered_interpreter
        return data
