# Copyright: gpusplit contributors
# Apache-2.0
"""Read Kubernetes manifests from YAML files on the controller, for the workload lint.

``read_manifests`` takes what a user writes (``-e gpusplit_lint_paths=deploy/app.yaml``: one path
or glob, or a list of them) and returns the objects of every file, or one :class:`ManifestError`
with every problem at once: a glob that matches nothing, a directory, a file that cannot be read
or is not UTF-8, a YAML error (file, line, column and the parser's words), a document that is not
a mapping. A run that reads no object at all is refused too, so that "no findings" always means
that something was read.
"""

from __future__ import annotations

import glob
import os

import yaml

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError, type_name
from ansible_collections.gpusplit.k8s.plugins.module_utils._host.files import read_text


class ManifestError(GpusplitError):
    """Manifest files that name nothing, cannot be read or are not YAML."""


def _patterns(paths, field):
    if isinstance(paths, str):
        paths = [paths]
    elif not isinstance(paths, (list, tuple)):
        raise ManifestError(f"{field}: expected a path or glob, or a list of them, got {type_name(paths)}")
    if not paths:
        raise ManifestError(f"{field}: names no file; give a path or glob such as deploy/*.yaml")
    return list(paths)


def _expand(pattern):
    """The files a path or glob names, sorted (``~`` expanded); [] when none."""
    path = os.path.expanduser(pattern)
    if glob.has_magic(path):
        return sorted(glob.glob(path))
    return [path] if os.path.lexists(path) else []


def _yaml_problem(exc):
    """The parser's own words with the line and column (1-based) where it stopped."""
    mark = getattr(exc, "problem_mark", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    words = [w for w in (getattr(exc, "context", None), getattr(exc, "problem", None)) if w]
    return where + ("; ".join(words) if words else str(exc).splitlines()[0])


def _read_file(path, problems):
    """The documents of one YAML file, or None after a problem."""
    try:
        text = read_text(path)
    except GpusplitError as exc:
        problems.extend(exc.errors)
        return None
    try:
        return list(yaml.safe_load_all(text))
    except yaml.YAMLError as exc:
        problems.append(f"{path}: not valid YAML: {_yaml_problem(exc)}")
        return None


def read_manifests(paths, field="paths"):
    """[object] of every YAML document in the files ``paths`` names, in order.

    ``paths``: a path or glob, or a list of them (relative to the working directory; ``~``
    expanded). ``field``: how the caller's input is called in messages (``gpusplit_lint_paths``).
    Empty documents are skipped; everything else must be a mapping. Raises ManifestError with
    every problem, and when the files hold no object at all.
    """
    problems, files = [], []
    patterns = _patterns(paths, field)
    for i, pattern in enumerate(patterns):
        at = field if len(patterns) == 1 else f"{field}[{i}]"
        if not isinstance(pattern, str) or not pattern.strip():
            problems.append(f"{at}: expected a path or glob, got {type_name(pattern)} {pattern!r}")
            continue
        matches = _expand(pattern.strip())
        if not matches:
            what = "matches no file" if glob.has_magic(pattern) else "no such file"
            problems.append(f"{at}: {pattern!r}: {what} (relative paths start at {os.getcwd()})")
        for path in matches:
            if os.path.isdir(path):
                problems.append(
                    f"{at}: {path} is a directory; name its files, e.g. {path.rstrip('/')}/*.yaml"
                )
            elif path not in files:
                files.append(path)
    manifests = []
    for path in files:
        docs = _read_file(path, problems)
        if docs is None:
            continue
        for number, doc in enumerate(docs, 1):
            if doc is None:
                continue
            if not isinstance(doc, dict):
                problems.append(
                    f"{path}: document {number}: expected a Kubernetes object (a mapping), got {type_name(doc)}"
                )
                continue
            manifests.append(doc)
    if not problems and not manifests:
        problems.append(f"{field}: {', '.join(files)} hold(s) no Kubernetes object; nothing to lint")
    if problems:
        raise ManifestError(problems)
    return manifests
