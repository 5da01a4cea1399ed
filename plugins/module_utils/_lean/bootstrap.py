# Copyright: gpusplit contributors
# Apache-2.0
"""The lean runner: a module's work run on a host without ansible-core's module machinery.
Private to the collection.

An AnsiballZ module execution (ansible-core's payload: its zip of module_utils, its loader and
``ansible.module_utils.basic``) costs a host about 0.3 s of CPU before the module does anything; Python
compiles every file of the zip from source, twice, on every execution (docs/performance.md). For the one
module every GPU host runs on every run, the GPU discovery, that was three quarters of its cost.

This file is the whole program the action plugins of plugin_utils/lean_module.py send to the host's
Python (on stdin, read by a one-line ``-c`` loader, where the connection pipes, else as a file in the remote
temporary folder), with one line appended: ``main("<bundle>", "<request>")``. The bundle (JSON, zlib, base64; the same for every
host, built once per run on the controller) carries:

* ``sources``: the collection's module_utils the work imports (module name -> source), found on the
  controller; imported from memory by :class:`SourceImporter`, each compiled once, only when imported;
* ``packages``: which of those names are packages;

and the request (JSON, base64):

* ``entry`` and ``function``: what to call, ``function(params, check_mode=..., diff=...)``, which returns
  the module's result with ``warnings`` (a list of texts), or raises a GpusplitError to refuse (its
  ``result``, what was already done, goes into the answer), or ``_errors.RunTheModule`` before any change
  where the host needs the module itself (the answer is then only ``{RUN_MODULE: why}``);
* ``params``: the options, checked on the controller against the module's argument spec; ``path_options``
  the ones of type path, expanded here (``~`` and variables are the host's, as in a module), each named by
  its keys (``dropins.path``: the key ``path`` of each item of ``dropins``).
* ``code_cache`` (optional): ``{"dir": ..., "digest": ...}``, a folder of the host where the bundle's modules
  are kept compiled for the next run (see :func:`cached_codes`) and the digest of the bundle they were
  compiled from.

The result is printed as one JSON object, as a module's; a refusal is ``failed`` with ``msg`` and
``errors``, any other exception ``failed`` with the traceback in ``exception``.

Standard library only, and only ``sys`` at import: the folder the program runs from (the current one when
it comes on stdin, the temporary one otherwise) is taken off ``sys.path`` before anything else is
imported, so that a file there cannot stand in for a standard module. Managed hosts run Python 3.8 to 3.13.
"""

import sys

PREFIX = "ansible_collections.gpusplit.k8s.plugins.module_utils"
ORIGIN = "<gpusplit-lean>"
# the answer's one key where the work raised _errors.RunTheModule (the text: why); the action plugin then runs
# the module itself
# how the action plugin has the interpreter read the program from stdin (``python -c STDIN_LOADER``): read whole and
# run. Given the program itself on stdin, Python tokenizes it from C stdio, which reads a byte per system call where
# stdio is unbuffered (PYTHONUNBUFFERED or -u in the task's environment): 69,000 reads and about 65 ms more of CPU
# for the discovery's program (2026-12-04)
STDIN_LOADER = 'import sys;exec(compile(sys.stdin.buffer.read(),"gpusplit_lean","exec"))'
RUN_MODULE = "gpusplit_lean_run_module"


def clean_sys_path(script=None):
    """Take the program's own folder (and the current one) off sys.path."""
    import os.path

    excluded = {"", "."}
    if script:
        excluded.add(os.path.dirname(os.path.realpath(script)))
    sys.path[:] = [entry for entry in sys.path if entry not in excluded]


class SourceImporter:
    """Finds and loads the modules of ``sources`` (name -> source text) from memory; those of ``codes`` (name ->
    code object, already compiled) without compiling them."""

    def __init__(self, sources, packages, codes=None):
        self.sources = dict(sources)
        self.packages = set(packages)
        self.codes = dict(codes or {})

    def filename(self, fullname):
        return module_filename(fullname, self.packages)

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in self.sources and fullname not in self.packages:
            return None
        import importlib.machinery

        return importlib.machinery.ModuleSpec(
            fullname, self, origin=self.filename(fullname), is_package=fullname in self.packages
        )

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        name = module.__spec__.name
        module.__file__ = self.filename(name)
        code = self.codes.get(name)
        if code is None:
            code = compile_source(name, self.sources.get(name, ""), self.packages)
        exec(code, module.__dict__)

    def get_source(self, fullname):
        """For tracebacks (linecache)."""
        return self.sources.get(fullname, "")


def module_filename(name, packages):
    """The file name a carried module's code and tracebacks name."""
    tail = "/__init__.py" if name in packages else ".py"
    return ORIGIN + "/" + name.replace(".", "/") + tail


def compile_source(name, source, packages=()):
    return compile(source, module_filename(name, packages), "exec", dont_inherit=True)


# --- the code cache -----------------------------------------------------------------------------------------
#
# Compiling the bundle's modules from source is about a third of what the GPU discovery's program costs a host
# (30 of 80 to 110 ms of CPU, docs/performance.md). The program keeps them compiled in a folder of the host
# (``code_cache``), one file per entry and Python, and loads them from there on the next run while the bundle
# is the same. The file is code that runs as the program's user (root where the task becomes root), so it is
# used only where nobody else could have written it: the folder and the file belong to that user and nobody
# else may write them or the folders above them (a folder that others may write is trusted only with its
# sticky bit). Anything else, a missing or damaged file included, reads as no cache: the modules are compiled
# from source as without one, and the file is written again (not in check mode).

CACHE_VERSION = 1


def cache_path(cache, entry):
    """The cache file of ``entry`` for this Python, or None where this Python has no cache tag."""
    import os.path

    tag = getattr(sys.implementation, "cache_tag", None)
    if not tag or not cache.get("dir") or not cache.get("digest"):
        return None
    short = entry[len(PREFIX) + 1 :] if entry.startswith(PREFIX + ".") else entry
    return os.path.join(cache["dir"], f"{short}.{tag}.code")


def trusted_folder(path):
    """Whether nobody but this user (and root) could have put or replaced what is in folder ``path``."""
    import os
    import stat

    uid = os.geteuid()
    real = os.path.realpath(path)  # the folders checked are those the file's path goes through
    try:
        info = os.lstat(real)
    except OSError:
        return False
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != uid or info.st_mode & 0o077:
        return False
    parent = os.path.dirname(real)
    while True:
        try:
            info = os.lstat(parent)
        except OSError:
            return False
        if info.st_uid not in (0, uid):
            return False
        if info.st_mode & 0o022 and not info.st_mode & stat.S_ISVTX:
            return False
        above = os.path.dirname(parent)
        if above == parent:
            return True
        parent = above


def read_codes(path, digest):
    """The code objects kept in ``path`` for the bundle of ``digest``, or None."""
    import marshal
    import os
    import stat
    from _frozen_importlib_external import MAGIC_NUMBER

    try:
        handle = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    try:
        info = os.fstat(handle)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o077:
            return None
        with os.fdopen(handle, "rb") as stream:
            handle = None
            kept = marshal.loads(stream.read())
    except (OSError, EOFError, ValueError, TypeError):
        return None
    finally:
        if handle is not None:
            os.close(handle)
    if not (isinstance(kept, tuple) and len(kept) == 4 and kept[:3] == (CACHE_VERSION, MAGIC_NUMBER, digest)):
        return None
    codes = kept[3]
    return codes if isinstance(codes, dict) else None


def write_codes(path, digest, codes):
    """Keep ``codes`` in ``path``, whole or not at all; nothing where the folder cannot be made or trusted."""
    import marshal
    import os
    from _frozen_importlib_external import MAGIC_NUMBER

    folder = os.path.dirname(path)
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
    except OSError:
        return False
    if not trusted_folder(folder):
        return False
    partial = f"{path}.{os.getpid()}.partial"
    try:
        handle = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
        with os.fdopen(handle, "wb") as stream:
            stream.write(marshal.dumps((CACHE_VERSION, MAGIC_NUMBER, digest, codes)))
        os.replace(partial, path)
    except (OSError, ValueError):
        try:
            os.unlink(partial)
        except OSError:
            pass
        return False
    return True


def cached_codes(request):
    """The bundle's modules compiled, from the request's ``code_cache`` where it holds them, else compiled here
    and kept there for the next run (not in check mode); ``{}`` without a code cache (each module is then
    compiled when it is imported, only those the work imports)."""
    cache = request.get("code_cache") or {}
    path = cache_path(cache, request["entry"])
    if path is None:
        return {}
    import os.path

    if trusted_folder(os.path.dirname(path)):
        codes = read_codes(path, cache["digest"])
        if codes is not None:
            return codes
    packages = set(request["packages"])
    try:
        codes = {name: compile_source(name, source, packages) for name, source in request["sources"].items()}
    except (SyntaxError, ValueError):  # said where the module is imported, as without a cache
        return {}
    if not request.get("check_mode"):
        write_codes(path, cache["digest"], codes)
    return codes


def jsonable(value):
    """What json cannot write itself: sets and tuples as lists, bytes as text."""
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    raise TypeError(f"{value!r} cannot be written as JSON")


def decode(bundle, request):
    """The request, with the bundle's ``sources`` and ``packages`` added."""
    import base64
    import json
    import zlib

    decoded = json.loads(base64.b64decode(request).decode("utf-8"))
    decoded.update(json.loads(zlib.decompress(base64.b64decode(bundle)).decode("utf-8")))
    return decoded


def crashed(exc):
    """The answer for an exception that is not a refusal: a bug, said with its traceback as a module's is."""
    import traceback

    return {
        "failed": True,
        "changed": False,
        "msg": "The module failed on the host: "
        + traceback.format_exception_only(type(exc), exc)[-1].strip(),
        "exception": traceback.format_exc(),
    }


def expand_paths(value, parts):
    """``value`` with the option at ``parts`` (a path of keys; lists are walked, each item) expanded as
    AnsibleModule expands an option of type path: ``~`` and variables, the host's."""
    import os.path

    if isinstance(value, list):
        return [expand_paths(item, parts) for item in value]
    if not parts:
        return os.path.expanduser(os.path.expandvars(value)) if isinstance(value, str) else value
    if isinstance(value, dict) and value.get(parts[0]) is not None:
        return dict(value, **{parts[0]: expand_paths(value[parts[0]], parts[1:])})
    return value


def run(request):
    """The module's result for ``request`` (decoded, with its bundle), its importer installed first."""
    import importlib

    if not any(isinstance(finder, SourceImporter) for finder in sys.meta_path):
        sys.meta_path.insert(
            0, SourceImporter(request["sources"], request["packages"], cached_codes(request))
        )
    params = dict(request["params"])
    for name in request.get("path_options") or ():
        params = expand_paths(params, name.split("."))
    try:
        errors = importlib.import_module(PREFIX + "._errors")
        work = getattr(importlib.import_module(request["entry"]), request["function"])
        try:
            result = dict(
                work(params, check_mode=bool(request.get("check_mode")), diff=bool(request.get("diff")))
            )
        except errors.RunTheModule as exc:
            return {RUN_MODULE: str(exc) or "this host needs the module"}
        except errors.GpusplitError as exc:
            answer = errors.refusal_answer(exc, changed=False)
            answer.update(failed=True, invocation={"module_args": params})
            return answer
        warnings = []
        for text in result.pop("warnings", None) or []:
            if str(text) not in warnings:  # each warning once, as AnsibleModule.warn keeps them
                warnings.append(str(text))
    except Exception as exc:
        return crashed(exc)
    if warnings:
        result["warnings"] = warnings
    result.setdefault("changed", False)
    result["invocation"] = {"module_args": params}
    return result


def readable_cwd():
    """Stay in the current folder where it can be read, else go home, else to /: Python and the work need a
    folder they can read (a become user may start in one it cannot)."""
    import os

    try:
        if os.access(os.getcwd(), os.R_OK | os.X_OK):
            return
    except OSError:  # the folder was removed
        pass
    home = os.path.expanduser("~")
    os.chdir(home if os.access(home, os.R_OK | os.X_OK) else "/")


def main(bundle, request):
    """Run the request's work and print its result; the exit status is 1 when it failed."""
    main_module = sys.modules.get("__main__")
    clean_sys_path(getattr(main_module, "__file__", None))
    import json

    readable_cwd()
    result = run(decode(bundle, request))
    try:
        text = json.dumps(result, default=jsonable)
    except Exception as exc:  # the work returned what JSON cannot hold: still an answer, not silence
        result = crashed(exc)
        text = json.dumps(result)
    sys.stdout.write(text + "\n")
    sys.stdout.flush()
    # the exit status a module's fail_json gives (this program stands in for AnsibleModule, whose exit_json
    # and fail_json it cannot call)
    raise SystemExit(1 if result.get("failed") else 0)
