# Copyright: gpusplit contributors
# Apache-2.0
"""The entry point and the file access of the control-plane modules. Private to the collection.

Every control-plane module (static_pod_flags, kubeadm_config_flags, rancher_config_dropin,
feature_gate_preflight, control_plane_health) runs through :func:`run_module`: PyYAML present (else
``missing_required_lib`` with the install hint), every :class:`GpusplitError` a ``fail_json``
naming its file or field.  The file helpers here turn what the operating system says about a
control-plane file (a directory that does not take the temporary file, a backup directory that
cannot be written) into such a refusal, naming the file and what to do, so that an ``OSError``
never reaches the user as Python's own text. Files are read with ``_host/files.read_text``, the
collection's one reader (no regular file, unreadable, not UTF-8: refused by name).
"""

from __future__ import annotations

import contextlib
import os

from ansible.module_utils.basic import missing_required_lib

from ansible_collections.gpusplit.k8s.plugins.module_utils._control_plane.yaml_text import (
    YAML_IMPORT_ERROR,
    YAML_INSTALL_HINT,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError, fail_on_refusal
from ansible_collections.gpusplit.k8s.plugins.module_utils._host.files import os_reason


def run_module(module, run) -> None:
    """Run ``run(module)`` and exit with its result: the one entry of every control-plane module."""
    if YAML_IMPORT_ERROR is not None:
        module.fail_json(
            msg=f"{missing_required_lib('PyYAML')}. {YAML_INSTALL_HINT}", exception=YAML_IMPORT_ERROR
        )
    with fail_on_refusal(module):
        result = run(module)
    module.exit_json(**result)


@contextlib.contextmanager
def writing(path: str):
    """Around ``_host/files.write_atomic`` of ``path``: an OS refusal names the file, the step and the fix."""
    try:
        yield
    except OSError as exc:
        real = os.path.realpath(path)
        if exc.filename and os.path.basename(str(exc.filename)).startswith("."):
            step = (
                f"the temporary file .{os.path.basename(real)}.gpusplit-* cannot be created in "
                f"{os.path.dirname(real)} ({os_reason(exc)})"
            )
        else:
            step = f"writing failed ({os_reason(exc)})"
        raise GpusplitError(
            f"cannot write {path}: {step}; the directory must be writable by the user the module runs as "
            "(become: true) and on a writable, not full file system. The file was not changed"
        ) from None


@contextlib.contextmanager
def backing_up(path: str, backup_dir: str):
    """Around ``_host/files.backup_copy`` of ``path``: an OS refusal names both and the fix."""
    try:
        yield
    except OSError as exc:
        raise GpusplitError(
            f"cannot copy {path} into backup_dir {backup_dir} ({os_reason(exc)}); give a backup_dir that "
            "the user the module runs as can create and write. Nothing was changed"
        ) from None


def remove_file(path: str) -> None:
    """Remove ``path``; an OS refusal names the file and the fix."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise GpusplitError(
            f"cannot remove {path} ({os_reason(exc)}); its directory must be writable by the user the "
            "module runs as (become: true)"
        ) from None


def make_dirs(directory: str, mode: int = 0o755) -> None:
    """``os.makedirs(exist_ok=True)``; an OS refusal names the directory and the fix."""
    try:
        os.makedirs(directory, mode=mode, exist_ok=True)
    except OSError as exc:
        raise GpusplitError(
            f"cannot create the directory {directory} ({os_reason(exc)}); its parent must be writable by the "
            "user the module runs as (become: true). Nothing was changed"
        ) from None


def warn_unchecked(module, what: str, component: str) -> None:
    """The warning of a flag writer whose ``validate_version`` was turned off."""
    module.warn(
        f"{what}: validate_version=off, so the gates are written without checking them against the "
        f"Kubernetes version; a gate that version removed or does not know stops {component} at start"
    )
