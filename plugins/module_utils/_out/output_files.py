# Copyright: gpusplit contributors
# Apache-2.0
"""Writing a run's output files (gpus.json, fleet-plan.json, the report, the picture) in one step.

Private to the collection.

Used by the module ``gpusplit.k8s.out_files`` and by its action plugin, which runs it on the controller
without a module execution: the output folder is the controller's, and each of these files used to
cost a ``file`` task for the folder and a ``copy`` task (two module executions) per file.

:func:`check_files` refuses bad input before anything is written; :func:`write_files` creates the
folder where it is missing, writes each file whose text or mode differs (through a dot-file beside
it and an atomic rename, so a reader never sees a part) and leaves the others alone.
"""

from __future__ import annotations

import os
import stat
import tempfile

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError, type_name

DIR_MODE = 0o755
FILE_MODE = 0o644

# the options of gpusplit.k8s.out_files, for the module and its action plugin alike
ARGUMENT_SPEC = {
    "dir": {"type": "path", "required": True},
    "files": {"type": "dict", "required": True},
}


def parse_mode(value, where):
    """An octal file mode given as a string (``"0644"``) or an integer (``0o644``)."""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise GpusplitError(f"{where}: expected an octal mode such as '0644', got {type_name(value)}")
    if isinstance(value, int):
        mode = value
    else:
        text = value.strip()
        try:
            mode = int(text, 8)
        except ValueError:
            raise GpusplitError(f"{where}: {value!r} is not an octal mode such as '0644'") from None
    if not 0 <= mode <= 0o7777:
        raise GpusplitError(f"{where}: {value!r} is not a file mode (0000 to 7777 in octal)")
    return mode


def check_files(directory, files):
    """The folder (absolute) and ``[(name, text, mode)]``, or a :class:`GpusplitError` with every problem.

    ``files`` maps each file name (a plain name in ``directory``, no ``/``) to its text, or to
    ``{content: text, mode: '0644'}``.
    """
    errors = []
    if not isinstance(directory, str) or not directory.strip():
        errors.append(f"dir: expected the output folder's path, got {type_name(directory)} {directory!r}")
    if not isinstance(files, dict) or not files:
        errors.append(
            f"files: expected a mapping of file name to text (at least one), got {type_name(files)}"
        )
    if errors:
        raise GpusplitError(errors)
    checked = []
    for name, spec in files.items():
        where = f"files[{name!r}]"
        if not isinstance(name, str) or not name or name in (".", "..") or "/" in name or "\0" in name:
            errors.append(f"{where}: a file name without '/' is expected (the file is written in dir)")
            continue
        mode = FILE_MODE
        if isinstance(spec, dict):
            unknown = sorted(set(spec) - {"content", "mode"})
            if unknown:
                errors.append(f"{where}: unknown key(s) {', '.join(map(str, unknown))} (content, mode)")
                continue
            try:
                mode = parse_mode(spec.get("mode", "0644"), f"{where}.mode")
            except GpusplitError as exc:
                errors.extend(exc.errors)
                continue
            spec = spec.get("content")
        if not isinstance(spec, str):
            errors.append(f"{where}: expected the file's text (a string), got {type_name(spec)}")
            continue
        checked.append((name, spec, mode))
    if errors:
        raise GpusplitError(errors)
    return os.path.abspath(os.path.expanduser(directory)), checked


def _read(path):
    """(text or None where missing or not UTF-8, mode or None where missing)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None, None
    if not stat.S_ISREG(st.st_mode):
        raise GpusplitError(f"{path}: exists and is not a regular file; move it away or choose another dir")
    try:
        with open(path, encoding="utf-8", newline="") as handle:
            return handle.read(), stat.S_IMODE(st.st_mode)
    except UnicodeDecodeError:
        return None, stat.S_IMODE(st.st_mode)


def _write(path, text, mode):
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.gpusplit-", dir=os.path.dirname(path))
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_files(directory, files, check_mode=False, diff=False):
    """Create ``directory`` where missing and write every file of ``files`` that differs.

    Returns ``changed``, ``dir``, ``created_dir``, ``written`` and ``unchanged`` (file names), the
    ``paths`` of every file, and with ``diff`` a before/after ``diff`` list of what changed. In
    check mode nothing is written and the result says what would be.
    """
    directory, checked = check_files(directory, files)
    if os.path.lexists(directory) and not os.path.isdir(directory):
        raise GpusplitError(f"dir: {directory} exists and is not a folder")
    created = not os.path.isdir(directory)
    names = [item[0] for item in checked]
    found = {name: (None, None) if created else _read(os.path.join(directory, name)) for name in names}
    written, unchanged, diffs = [], [], []
    for name, text, mode in checked:
        before, before_mode = found[name]
        if before == text and before_mode == mode:
            unchanged.append(name)
            continue
        written.append(name)
        if diff:
            path = os.path.join(directory, name)
            diffs.append(
                {
                    "before": before or "",
                    "after": text,
                    "before_header": path if before_mode is not None else f"{path} (absent)",
                    "after_header": path,
                }
            )
    if not check_mode:
        if created:
            os.makedirs(directory, DIR_MODE)
        for name, text, mode in checked:
            if name not in written:
                continue
            path = os.path.join(directory, name)
            if found[name][0] == text:
                os.chmod(path, mode)  # only the mode differs
            else:
                _write(path, text, mode)
    result = {
        "changed": created or bool(written),
        "dir": directory,
        "created_dir": created,
        "written": written,
        "unchanged": unchanged,
        "paths": [os.path.join(directory, name) for name in names],
    }
    if diff:
        result["diff"] = diffs
    return result
