# Copyright: gpusplit contributors
# Apache-2.0
"""``systemctl daemon-reload`` after gpu_host_files wrote or removed a drop-in. Private to the collection.

The role gpu_host used to spend a task per host on ``ansible.builtin.systemd_service: daemon_reload``;
the module now does it in its own call (option ``daemon_reload``), so a host costs one task:

* :func:`find_systemctl` before anything is written: when a drop-in changes and the reload is asked
  for, a host without ``systemctl`` is refused with nothing changed (in check mode too: the real run
  would fail there);
* :func:`reload_systemd` after the files were written (and recorded): runs the command and sets
  ``daemon_reloaded`` in the result; a failure says that the files are already written and what to do.

``module`` is the AnsibleModule (``get_bin_path``, ``run_command``) or a stand-in with the same two
methods. Standard library only: managed hosts run Python 3.8 to 3.13.
"""

from __future__ import annotations

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError

COMMAND = "daemon-reload"


class SystemdReloadError(GpusplitError):
    """systemctl is missing, or ``systemctl daemon-reload`` failed."""


def _units(result):
    return list(result.get("restart_units") or []) + list(result.get("released_units") or [])


def _systemctl(module):
    # (get_bin_path of ansible.module_utils.common.process raises where the module's returns None)
    try:
        return module.get_bin_path("systemctl") or None
    except ValueError:
        return None


def find_systemctl(module, units, check_mode=False):
    """The path of systemctl on the host; SystemdReloadError (nothing written yet) when there is none.

    ``units``: the units whose drop-in changes, for the message.
    """
    path = _systemctl(module)
    if path:
        return path
    names = ", ".join(units) or "no unit"
    written = "Nothing was written (check mode)" if check_mode else "Nothing was written"
    raise SystemdReloadError(
        f"the drop-ins of {names} change and systemd must re-read them (systemctl daemon-reload), but"
        f" systemctl is not on this host (looked in PATH and the sbin folders). {written}: install"
        " systemd's systemctl, or set gpusplit_systemd_reload: false for a host whose services systemd"
        " does not manage (a container, a chroot)"
    )


def reload_systemd(module, result, wanted, check_mode=False):
    """Run ``systemctl daemon-reload`` when ``wanted`` and ``result`` (host_files') says a drop-in changed.

    Sets ``result["daemon_reloaded"]``: True only when the command ran and succeeded; False without a
    changed drop-in, when not wanted, and in check mode (nothing runs there, whatever would change).
    Raises SystemdReloadError when systemctl is missing or the command fails; the files are written by
    then, and the message says so. Returns ``result``.
    """
    result["daemon_reloaded"] = False
    if not wanted or check_mode or not result.get("dropins_changed"):
        return result
    names = ", ".join(_units(result)) or "no unit"
    systemctl = _systemctl(module)
    if systemctl is None:  # (host_files looked for it before writing: it went away since)
        command, status, said = f"systemctl {COMMAND}", "not run", "systemctl is not on this host"
    else:
        command = f"{systemctl} {COMMAND}"
        try:
            rc, out, err = module.run_command([systemctl, COMMAND], handle_exceptions=False)
        except OSError as exc:
            rc, out, err = None, "", str(exc)
        if rc == 0:
            result["daemon_reloaded"] = True
            return result
        said = (err or "").strip() or (out or "").strip() or "no output"
        status = "could not run" if rc is None else f"rc {rc}"
    raise SystemdReloadError(
        f"`{command}` failed ({status}: {said}). The files were already written (drop-ins of {names}), but"
        " systemd still holds the drop-ins it read before: run `systemctl daemon-reload` on the host once"
        " systemd answers (a re-run does not reload: its drop-ins are then as written), or set"
        " gpusplit_systemd_reload: false for a host whose services systemd does not manage (a container, a chroot)"
    )
