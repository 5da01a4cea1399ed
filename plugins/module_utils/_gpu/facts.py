# Copyright: gpusplit contributors
# Apache-2.0
"""What nvidia_gpu_facts does on a host, as plain functions. Private to the collection.

``execute(params)`` is the whole module: the GPUs (NVML, or nvidia-smi), who holds them (the kubelet's
pod-resources answer) and the record gpu_host_files left. It reads and never writes: the module changes
nothing on the host. It returns the module's result with its ``warnings``; a refusal raises a
GpusplitError. Standard library only: managed hosts run the Pythons their ansible-core supports.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError
from ansible_collections.gpusplit.k8s.plugins.module_utils._gpu import deadline
from ansible_collections.gpusplit.k8s.plugins.module_utils._gpu import nvml as gpu_nvml
from ansible_collections.gpusplit.k8s.plugins.module_utils._gpu.processes import annotate_processes
from ansible_collections.gpusplit.k8s.plugins.module_utils._gpu.schema import (
    HEALTH_DEGRADED,
    HEALTH_LOST,
    HEALTH_OK,
    GpuFactsError,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._host.host_files_record import read_state
from ansible_collections.gpusplit.k8s.plugins.module_utils._kubelet.pod_resources import (
    DEFAULT_TIMEOUT as POD_RESOURCES_TIMEOUT,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._kubelet.pod_resources import read_pod_resources

ARGUMENT_SPEC = {
    "backend": {"type": "str", "default": "auto", "choices": ["auto", "nvml", "nvidia-smi"]},
    "required": {"type": "bool", "default": False},
    "nvidia_smi_path": {"type": "path"},
    "proc_root": {"type": "path", "default": "/proc"},
    "sysfs_root": {"type": "path", "default": "/sys"},
    "timeout": {"type": "float", "default": deadline.DEFAULT_TIMEOUT},
    "fallback_warning": {"type": "bool", "default": True},
    "pod_resources_socket": {"type": "path"},
    "pod_resources": {"type": "bool", "default": True},
    "pod_resources_timeout": {"type": "float", "default": POD_RESOURCES_TIMEOUT},
    "host_state_path": {"type": "path"},
    "binding_missing": {"type": "str", "choices": ["fail", "return"]},
}


class HostIO:
    """Everything the module reads from the host, in one place so that tests can replace it."""

    def __init__(self, module, timeout=deadline.DEFAULT_TIMEOUT):
        self.module = module
        self.timeout = timeout

    def import_nvml(self):
        return importlib.import_module("pynvml")

    def which(self, name):
        """The first ``name`` on PATH, then in the sbin folders; None where there is none."""
        return self.module.get_bin_path(name)

    def is_executable(self, path):
        return os.path.isfile(path) and os.access(path, os.X_OK)

    def run(self, argv):
        """(rc, stdout, stderr) of ``argv``; GpuTimeout when it takes longer than ``timeout``."""
        return deadline.run_command(self.module, argv, self.timeout, environ_update={"LC_ALL": "C"})

    def read_text(self, path):
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                return handle.read()
        except OSError:
            return None


def empty_facts():
    return {
        "nvidia_gpus": [],
        "nvidia_driver_version": None,
        "nvidia_cuda_driver_version": None,
        "nvidia_gpu_backend": None,
    }


def _summary(backend, data):
    gpus = data["gpus"]
    via = "NVML" if backend == "nvml" else "nvidia-smi"
    if not gpus and data.get("missing"):
        return (
            f"nvidia-smi --query-gpu reports no GPU, but other nvidia-smi outputs list "
            f"{len(data['missing'])}: {', '.join(data['missing'])} (see the warning)"
        )
    if not gpus:
        driver = f" {data['driver_version']}" if data["driver_version"] else ""
        return f"The NVIDIA driver{driver} is loaded but reports no GPU (asked through {via})"
    counts = {}
    for gpu in gpus:
        status = gpu["health"]["status"]
        counts[status] = counts.get(status, 0) + 1
    order = (HEALTH_OK, HEALTH_DEGRADED, HEALTH_LOST)
    verdict = ", ".join(f"{counts[status]} {status}" for status in order if counts.get(status))
    return (
        f"{len(gpus)} NVIDIA GPU(s) through {via}, driver {data['driver_version']}, "
        f"CUDA {data['cuda_driver_version']}: {verdict}"
    )


def _no_gpu(params, reason, warnings, binding):
    if params["required"]:
        raise GpuFactsError(f"{reason} (required=true)")
    return {
        "changed": False,
        "msg": reason,
        "ansible_facts": empty_facts(),
        "warnings": warnings,
        "nvml_binding": binding,
    }


def _collect_nvml(nvml, timeout):
    """gpu_nvml.collect in a child process with a deadline (deadline.call_in_child)."""
    return deadline.call_in_child(
        lambda progress: gpu_nvml.collect(gpu_nvml.TracedBinding(nvml, progress)),
        timeout,
        "NVML (the pynvml binding)",
    )


def gather(params, io):
    """The module's work, with the host behind io. Returns the result; raises GpuFactsError to fail."""
    backend = params["backend"]
    timeout = deadline.check_timeout(params.get("timeout", deadline.DEFAULT_TIMEOUT))
    warnings = []
    no_driver = []
    data = None
    used = None
    binding = {"importable": None, "python": sys.executable, "error": None, "pip": None}

    if backend in ("auto", "nvml"):
        try:
            nvml = io.import_nvml()
        except ImportError as exc:
            # whether this Python has pip, for the role that installs the binding (ansible.builtin.pip)
            binding.update(importable=False, error=str(exc), pip=importlib.util.find_spec("pip") is not None)
            needed = (
                f"backend={backend} needs the Python module pynvml (PyPI package nvidia-ml-py) in the Python "
                f"that runs this module: {exc}"
            )
            missing = params.get("binding_missing") or ("fail" if backend == "nvml" else None)
            if missing == "return":  # the caller installs it and reads again
                return {
                    "changed": False,
                    "msg": needed,
                    "ansible_facts": empty_facts(),
                    "warnings": warnings,
                    "nvml_binding": binding,
                }
            if missing == "fail":  # the caller may install it (a rescue) and read again
                error = GpuFactsError(needed)
                error.result = {"nvml_binding": binding}
                raise error from None
            if params.get("fallback_warning", True):
                warnings.append(
                    f"the NVML binding pynvml (nvidia-ml-py) is not importable ({exc}); using nvidia-smi instead"
                )
        else:
            binding["importable"] = True
            try:
                data = _collect_nvml(nvml, timeout)
                used = "nvml"
            except gpu_nvml.NvmlInitError as exc:
                if backend == "nvml" and not exc.no_driver:
                    raise
                if backend == "nvml":
                    return _no_gpu(
                        params, f"No NVIDIA driver on this host: NVML says {exc}", warnings, binding
                    )
                no_driver.append(f"NVML: {exc}")
                warnings.append(f"NVML is not usable ({exc}); using nvidia-smi instead")

    if data is None:
        smi = params.get("nvidia_smi_path")
        if smi:
            if not io.is_executable(smi):
                raise GpuFactsError(f"nvidia_smi_path {smi} does not exist or is not executable")
        else:
            smi = io.which("nvidia-smi")
        if not smi:
            if backend == "nvidia-smi":
                raise GpuFactsError(
                    "backend=nvidia-smi but nvidia-smi was not found on PATH; install the NVIDIA driver "
                    "utilities or set nvidia_smi_path"
                )
            no_driver.append("nvidia-smi: not found on PATH")
            return _no_gpu(
                params, "No NVIDIA driver on this host: " + "; ".join(no_driver), warnings, binding
            )
        # imported here: most hosts read NVML, and every import costs each module execution its compile
        from ansible_collections.gpusplit.k8s.plugins.module_utils._gpu import smi as gpu_smi

        try:
            data = gpu_smi.collect(io.run, smi, read_text=io.read_text, sysfs_root=params["sysfs_root"])
            used = "nvidia-smi"
        except gpu_smi.SmiNoDriver as exc:
            no_driver.append(f"nvidia-smi: {exc}")
            return _no_gpu(
                params, "No NVIDIA driver on this host: " + "; ".join(no_driver), warnings, binding
            )

    warnings.extend(data["warnings"])
    annotate_processes(data["gpus"], io.read_text, params["proc_root"])
    facts = {
        "nvidia_gpus": data["gpus"],
        "nvidia_driver_version": data["driver_version"],
        "nvidia_cuda_driver_version": data["cuda_driver_version"],
        "nvidia_gpu_backend": used,
    }
    msg = _summary(used, data)
    if not data["gpus"]:
        result = _no_gpu(params, msg, warnings, binding)
        result["ansible_facts"].update(
            nvidia_driver_version=data["driver_version"],
            nvidia_cuda_driver_version=data["cuda_driver_version"],
            nvidia_gpu_backend=used,
        )
        return result
    return {
        "changed": False,
        "msg": msg,
        "ansible_facts": facts,
        "warnings": warnings,
        "nvml_binding": binding,
    }


def read_holders(params):
    """The kubelet's pod-resources answer when ``pod_resources_socket`` is set and ``pod_resources`` is
    not false (None otherwise). A
    failure is returned, not raised: the GPU facts stand without it (``error``, the reason)."""
    socket = params.get("pod_resources_socket")
    if not socket or params.get("pod_resources") is False:
        return None
    try:
        return read_pod_resources(
            socket_path=socket, timeout=params["pod_resources_timeout"], missing_ok=True
        )
    except GpusplitError as exc:
        return {"available": False, "socket": socket, "pods": [], "holders": [], "error": str(exc)}


def execute(params, module):
    """The module's whole work on this host: ``params`` are its options as its argument spec checked them,
    ``module`` the AnsibleModule (it runs nvidia-smi). Reads only: the same in check mode.

    Returns the result with ``changed`` (always false) and ``warnings`` (a list of texts); raises a
    GpusplitError (GpuFactsError, a bad timeout) to refuse."""
    timeout = deadline.check_timeout(params["timeout"])
    if params.get("pod_resources_socket") and params.get("pod_resources") is not False:
        deadline.check_timeout(
            params.get("pod_resources_timeout", POD_RESOURCES_TIMEOUT), "pod_resources_timeout"
        )
    result = gather(params, HostIO(module, timeout))
    holders = read_holders(params)
    if holders is not None:
        result["pod_resources"] = holders
    if params.get("host_state_path"):
        result["host_state"] = read_state(params["host_state_path"])
    result["changed"] = False
    return result
