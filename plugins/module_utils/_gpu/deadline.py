# Copyright: gpusplit contributors
# Apache-2.0
"""Time limits around what reads the GPUs: nvidia-smi runs and NVML calls. Private to the collection.

A wedged GPU (fallen off the bus, a driver stuck in an ioctl) makes nvidia-smi and NVML calls hang,
often in an uninterruptible sleep that no signal ends. So:

* :func:`run_command` runs a command through AnsibleModule's ``run_command`` in a forked child of its
  own session, with a deadline; past it the session's process group (the child and the command) is
  killed and abandoned (not waited for), and :class:`GpuTimeout` names the command and the limit;
* :func:`call_in_child` runs a function (the NVML collection) in a forked child process and takes
  its result back through a pipe; past the deadline the child is killed and abandoned. A thread
  would not do: a thread stuck in the kernel keeps the module's process from exiting, so Ansible
  would wait for that host anyway. The child reports each call it starts, so the error names the
  NVML call that hung.

Standard library only; POSIX (where ``os.fork`` is missing, the function runs in-process without
a limit).
"""

from __future__ import annotations

import os
import pickle
import select
import signal
import struct
import time

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import MAX_SECONDS, check_number, type_name
from ansible_collections.gpusplit.k8s.plugins.module_utils._gpu.schema import GpuFactsError

DEFAULT_TIMEOUT = 30
# how long a killed process is given to go away before it is left behind
_REAP_WAIT = 2.0


class GpuTimeout(GpuFactsError):
    """A command or an NVML call did not finish within the time limit."""


def _wedged_hint():
    return (
        "a wedged GPU or driver makes it hang: check the kernel log (dmesg) for NVIDIA Xid errors and "
        "reset the GPU or reboot the host, or raise the module's timeout if the host is only slow"
    )


def check_timeout(value, name="timeout"):
    """``value`` as a float of seconds above 0 and at most a day; GpuFactsError naming ``name`` otherwise
    (nan, inf, 1e300, a negative number or no number at all: refused here, not later by select or signal)."""
    return float(check_number(value, name, 0, MAX_SECONDS, above=True, unit="seconds", error=GpuFactsError))


def run_command(module, argv, timeout, environ_update=None):
    """Run ``argv`` with ``module.run_command`` (``module``: the AnsibleModule), stdin closed; ``(rc, stdout,
    stderr)`` as text, GpuTimeout after ``timeout`` s, GpuFactsError where it cannot start."""

    def run(progress):
        progress(argv[0])
        try:
            return module.run_command(
                list(argv),
                environ_update=environ_update or {},
                handle_exceptions=False,
                errors="surrogate_then_replace",
            )
        except OSError as exc:
            raise GpuFactsError(f"cannot run {argv[0]}: {exc.strerror or exc}") from None

    try:
        return call_in_child(run, timeout, " ".join(argv), session=True)
    except GpuTimeout:
        raise GpuTimeout(
            f"{' '.join(argv)} did not finish within {timeout:g} s (timeout) and was killed; {_wedged_hint()}"
        ) from None


# ---- a function in a child process -----------------------------------------------------------

_CALL, _RESULT, _ERROR, _CRASH = b"C", b"R", b"E", b"X"
_HEADER = struct.Struct("!cI")


def _send(fd, kind, payload):
    data = _HEADER.pack(kind, len(payload)) + payload
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _frames(data):
    """Complete frames in ``data``; a cut-off last frame (the child was killed) is dropped."""
    pos = 0
    while pos + _HEADER.size <= len(data):
        kind, size = _HEADER.unpack_from(data, pos)
        start = pos + _HEADER.size
        if start + size > len(data):
            return
        yield kind, data[start : start + size]
        pos = start + size


def _child(fn, write_fd):
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)

    def progress(name):
        _send(write_fd, _CALL, str(name).encode("utf-8", errors="replace"))

    try:
        result = fn(progress)
        payload = (_RESULT, pickle.dumps(result))
    except GpuFactsError as exc:
        try:
            payload = (_ERROR, pickle.dumps(exc))
        except Exception:  # noqa: BLE001 - an unpicklable refusal still ends as its text
            payload = (_CRASH, str(exc).encode("utf-8", errors="replace"))
    except BaseException as exc:  # noqa: BLE001 - the child must always report and exit
        payload = (_CRASH, f"{type_name(exc)}: {exc}".encode("utf-8", errors="replace"))
    _send(write_fd, *payload)


def call_in_child(fn, timeout, what, session=False):
    """``fn(progress)`` run in a forked child; its result (or its GpuFactsError) here.

    ``fn`` calls ``progress(name)`` before each step that may hang; after ``timeout`` seconds the
    child is killed and GpuTimeout names ``what``, the last step started and the limit. The result
    must pickle. An unexpected exception in the child becomes a GpuFactsError with its text.
    ``session``: the child starts a session of its own, and past the deadline its whole process group
    (what it started too) is killed.
    """
    if not hasattr(os, "fork"):  # pragma: no cover - managed hosts are POSIX
        return fn(lambda name: None)
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child (coverage does not follow forks)
        try:
            os.close(read_fd)
            if session:
                os.setsid()
            _child(fn, write_fd)
        finally:
            os._exit(0)
    os.close(write_fd)
    data = bytearray()
    deadline = time.monotonic() + timeout
    finished = False
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            ready, _unused, _unused2 = select.select([read_fd], [], [], left)
            if not ready:
                break
            chunk = os.read(read_fd, 65536)
            if not chunk:
                finished = True
                break
            data.extend(chunk)
    finally:
        os.close(read_fd)
    frames = list(_frames(bytes(data)))
    if not finished:
        try:
            os.killpg(pid, signal.SIGKILL) if session else os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
        _reap(pid, _REAP_WAIT)
        calls = [payload.decode("utf-8", errors="replace") for kind, payload in frames if kind == _CALL]
        step = f" (it hung in {calls[-1]})" if calls else ""
        raise GpuTimeout(f"{what} did not answer within {timeout:g} s (timeout){step}; {_wedged_hint()}")
    _reap(pid, _REAP_WAIT)
    for kind, payload in frames:
        if kind == _RESULT:
            return pickle.loads(payload)  # noqa: S301 - written by our own child just now
        if kind == _ERROR:
            raise pickle.loads(payload)  # noqa: S301
        if kind == _CRASH:
            raise GpuFactsError(f"{what} failed: {payload.decode('utf-8', errors='replace')}")
    raise GpuFactsError(f"{what} ended without an answer (the child process exited early)")


def _reap(pid, wait):
    """Collect the child's exit status if it goes away within ``wait`` seconds; else leave it."""
    end = time.monotonic() + wait
    while True:
        try:
            done, _unused = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return
        if done or time.monotonic() >= end:
            return
        time.sleep(0.01)
