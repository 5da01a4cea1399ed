# Copyright: gpusplit contributors
# Apache-2.0
"""Collect GPU facts through NVML. Private to the collection.

NVML is reached through an injected pynvml-like module (nvidia-ml-py, or a test fake). Every
per-device call is made on its own: NVML_ERROR_NOT_SUPPORTED leaves that fact null,
NVML_ERROR_NO_PERMISSION leaves it null with a warning, NVML_ERROR_GPU_IS_LOST marks the GPU lost and the
collection goes on with the next call and the next GPU. A GPU NVML will not open at all
(nvmlDeviceGetHandleByIndex fails) is reported with its index and a health verdict naming the NVML error
and what to do about it. nvmlShutdown is always called after nvmlInit.
"""

from __future__ import annotations

import re

from ansible_collections.gpusplit.k8s.plugins.module_utils._gpu.health import (
    UNOPENED_ADVICE,
    UNOPENED_ADVICE_DEFAULT,
    compute_health,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._gpu.ids import require_pci_bus_id, to_text
from ansible_collections.gpusplit.k8s.plugins.module_utils._gpu.schema import (
    HEALTH_DEGRADED,
    HEALTH_LOST,
    GpuFactsError,
    ecc_or_none,
    new_gpu,
    new_mig_device,
    new_process,
    remapped_rows_or_none,
    retired_pages_or_none,
    sort_gpus,
)

# NVML return codes (nvml.h); read from the binding when it has them.
_CODES = {
    "NVML_ERROR_UNINITIALIZED": 1,
    "NVML_ERROR_INVALID_ARGUMENT": 2,
    "NVML_ERROR_NOT_SUPPORTED": 3,
    "NVML_ERROR_NO_PERMISSION": 4,
    "NVML_ERROR_NOT_FOUND": 6,
    "NVML_ERROR_DRIVER_NOT_LOADED": 9,
    "NVML_ERROR_LIBRARY_NOT_FOUND": 12,
    "NVML_ERROR_FUNCTION_NOT_FOUND": 13,
    "NVML_ERROR_GPU_IS_LOST": 15,
    "NVML_ERROR_RESET_REQUIRED": 16,
}
_CONSTANTS = {
    "NVML_MEMORY_ERROR_TYPE_UNCORRECTED": 1,
    "NVML_VOLATILE_ECC": 0,
    "NVML_AGGREGATE_ECC": 1,
    "NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR": 1,
}


class NvmlInitError(GpuFactsError):
    """nvmlInit failed. no_driver is True when the library or the kernel driver is missing."""

    def __init__(self, message, code=None, no_driver=False):
        super().__init__(message)
        self.code = code
        self.no_driver = no_driver


class NvmlCollectError(GpuFactsError):
    """A host-wide NVML call failed after nvmlInit succeeded."""


# What NVML hands back, as the facts spell it.

MIB = 1024 * 1024


def cuda_version_string(value):
    """nvmlSystemGetCudaDriverVersion() 12080 -> '12.8' (major*1000 + minor*10)."""
    if value is None:
        return None
    value = int(value)
    if value <= 0:
        return None
    return f"{value // 1000}.{(value % 1000) // 10}"


def bytes_to_mib(value):
    if value is None:
        return None
    return int(value) // MIB


_MIG_NAME_RE = re.compile(r"\bMIG\s+(\S+)\s*$")


def mig_profile_from_name(name):
    """NVML names a MIG device after its parent plus the profile: 'NVIDIA A100-SXM4-80GB MIG 1g.10gb'."""
    match = _MIG_NAME_RE.search(to_text(name) or "")
    return match.group(1) if match else None


def mode_string(value):
    """NVML enable states (1/0, True/False) -> 'enabled'/'disabled'; None stays None."""
    if value is None:
        return None
    return "enabled" if int(value) else "disabled"


def _code(nvml, name):
    return getattr(nvml, name, _CODES[name])


def _constant(nvml, name):
    return getattr(nvml, name, _CONSTANTS[name])


def _error_code(exc):
    return getattr(exc, "value", None)


def _error_text(exc):
    try:
        return str(exc)
    except Exception:  # the binding formats some codes through the library itself
        return f"NVML error {_error_code(exc)}"


def _error_name(nvml, code):
    """NVML_ERROR_NO_PERMISSION for 4: the binding's own constant names first, then nvml.h's."""
    for name in sorted(dir(nvml)):
        if name.startswith("NVML_ERROR_") and getattr(nvml, name, None) == code:
            return name
    for name, value in _CODES.items():
        if value == code:
            return name
    return f"NVML error code {code}"


def _unopened_gpu(index, status, said, advice, warnings):
    """The record of a GPU nvmlDeviceGetHandleByIndex refused: only its index is known."""
    gpu = new_gpu(index)
    gpu["health"] = {
        "status": status,
        "reasons": [f"NVML cannot open GPU {index}: nvmlDeviceGetHandleByIndex {said}; {advice}"],
    }
    warnings.append(
        f"GPU {index}: nvmlDeviceGetHandleByIndex {said}; reported with its index only, health {status}"
    )
    return gpu


def _open_device(nvml, reader, index, warnings):
    """(handle, None), or (None, record) for a GPU NVML will not open."""
    try:
        return nvml.nvmlDeviceGetHandleByIndex(index), None
    except reader.mismatch_error as exc:
        advice = "install the nvidia-ml-py release that matches the driver"
        return None, _unopened_gpu(index, HEALTH_DEGRADED, f"failed ({exc})", advice, warnings)
    except reader.nvml_error as exc:
        code = _error_code(exc)
        name = _error_name(nvml, code)
        status = HEALTH_LOST if code in reader.lost_codes else HEALTH_DEGRADED
        advice = UNOPENED_ADVICE.get(name, UNOPENED_ADVICE_DEFAULT)
        said = f"returned {name} ({_error_text(exc)})"
        return None, _unopened_gpu(index, status, said, advice, warnings)


class _DeviceReader:
    """Calls NVML for one GPU and sorts the failures into null facts, warnings and lost reasons."""

    def __init__(self, nvml, label, warnings):
        self.nvml = nvml
        self.label = label
        self.warnings = warnings
        self.lost_calls = []
        self.lost_code = None
        nvml_error = getattr(nvml, "NVMLError", None)
        self.nvml_error = nvml_error if isinstance(nvml_error, type) else Exception
        mismatch = getattr(nvml, "NVMLLibraryMismatchError", None)
        self.mismatch_error = mismatch if isinstance(mismatch, type) else ()
        self.lost_codes = (_code(nvml, "NVML_ERROR_GPU_IS_LOST"), _code(nvml, "NVML_ERROR_RESET_REQUIRED"))
        self.quiet_codes = (
            _code(nvml, "NVML_ERROR_NOT_SUPPORTED"),
            _code(nvml, "NVML_ERROR_FUNCTION_NOT_FOUND"),
        )
        self.no_permission = _code(nvml, "NVML_ERROR_NO_PERMISSION")

    def call(self, function, *args, fact=None, expected=()):
        """The call's result, or None when it could not be answered. expected: codes that mean 'none'."""
        fn = getattr(self.nvml, function, None)
        if fn is None:
            # An older nvidia-ml-py without this wrapper: the fact is simply unknown.
            return None
        try:
            return fn(*args)
        except self.mismatch_error as exc:
            self.warnings.append(f"{self.label}: {function}: {exc}")
            return None
        except self.nvml_error as exc:
            code = _error_code(exc)
            if code in self.lost_codes:
                self.lost_calls.append(function)
                if self.lost_code is None:
                    self.lost_code = code
            elif code in expected or code in self.quiet_codes:
                pass
            elif code == self.no_permission:
                self.warnings.append(
                    f"{self.label}: {function}: insufficient permissions; {fact or 'this fact'} is null"
                )
            else:
                self.warnings.append(
                    f"{self.label}: {function} failed ({_error_text(exc)}); {fact or 'this fact'} is null"
                )
            return None

    def lost_reasons(self):
        if not self.lost_calls:
            return []
        name = "NVML_ERROR_GPU_IS_LOST"
        if self.lost_code == _code(self.nvml, "NVML_ERROR_RESET_REQUIRED"):
            name = "NVML_ERROR_RESET_REQUIRED"
        calls = ", ".join(self.lost_calls[:3])
        more = f" and {len(self.lost_calls) - 3} more calls" if len(self.lost_calls) > 3 else ""
        return [
            f"NVML reports {name} ({calls}{more}): the GPU is lost or needs a reset "
            "(reset it or reboot the host)"
        ]


def _pci_bus_id(info):
    if info is None:
        return None
    for attribute in ("busId", "busIdLegacy"):
        value = getattr(info, attribute, None)
        if value:
            try:
                return require_pci_bus_id(value)
            except ValueError:
                continue
    try:
        return require_pci_bus_id(f"{int(info.domain):x}:{int(info.bus):x}:{int(info.device):x}.0")
    except (AttributeError, TypeError, ValueError):
        return None


def _pair(value):
    """NVML returns [current, pending] for modes; tolerate tuples and missing values."""
    if value is None:
        return None, None
    try:
        current, pending = value[0], value[1]
    except (TypeError, IndexError):
        return None, None
    return current, pending


def _mig_devices(nvml, reader, handle):
    count = reader.call("nvmlDeviceGetMaxMigDeviceCount", handle, fact="mig_devices") or 0
    not_found = (_code(nvml, "NVML_ERROR_NOT_FOUND"), _code(nvml, "NVML_ERROR_INVALID_ARGUMENT"))
    devices = []
    for slot in range(int(count)):
        mig_handle = reader.call(
            "nvmlDeviceGetMigDeviceHandleByIndex", handle, slot, fact="mig_devices", expected=not_found
        )
        if mig_handle is None:
            continue
        device = new_mig_device(len(devices))
        device["uuid"] = to_text(reader.call("nvmlDeviceGetUUID", mig_handle, fact="mig_devices.uuid"))
        name = reader.call("nvmlDeviceGetName", mig_handle, fact="mig_devices.profile")
        device["profile"] = mig_profile_from_name(name) if name is not None else None
        device["gpu_instance_id"] = reader.call(
            "nvmlDeviceGetGpuInstanceId", mig_handle, fact="mig_devices.gpu_instance_id"
        )
        device["compute_instance_id"] = reader.call(
            "nvmlDeviceGetComputeInstanceId", mig_handle, fact="mig_devices.compute_instance_id"
        )
        memory = reader.call("nvmlDeviceGetMemoryInfo", mig_handle, fact="mig_devices.memory_total_mib")
        device["memory_total_mib"] = bytes_to_mib(getattr(memory, "total", None))
        devices.append(device)
    return devices


def _processes(nvml, reader, handle):
    running = reader.call("nvmlDeviceGetComputeRunningProcesses", handle, fact="processes")
    if running is None:
        return None
    processes = []
    for info in running:
        pid = getattr(info, "pid", None)
        if pid is None:
            continue
        used = getattr(info, "usedGpuMemory", None)
        # nvmlSystemGetProcessName fails for processes that just exited or live in a PID namespace we
        # cannot see: the name stays null, which is no reason to warn.
        name = None
        get_name = getattr(nvml, "nvmlSystemGetProcessName", None)
        if get_name is not None:
            try:
                name = to_text(get_name(pid)) or None
            except Exception:
                name = None
        processes.append(new_process(int(pid), bytes_to_mib(used), name))
    return processes


def _collect_device(nvml, index, warnings):
    reader = _DeviceReader(nvml, f"GPU {index}", warnings)
    handle, unopened = _open_device(nvml, reader, index, warnings)
    if unopened is not None:
        return unopened
    gpu = new_gpu(index)

    gpu["uuid"] = to_text(reader.call("nvmlDeviceGetUUID", handle, fact="uuid"))
    if gpu["uuid"]:
        reader.label = gpu["uuid"]
    gpu["name"] = to_text(reader.call("nvmlDeviceGetName", handle, fact="name"))
    gpu["pci_bus_id"] = _pci_bus_id(reader.call("nvmlDeviceGetPciInfo", handle, fact="pci_bus_id"))
    gpu["minor_number"] = reader.call("nvmlDeviceGetMinorNumber", handle, fact="minor_number")
    memory = reader.call("nvmlDeviceGetMemoryInfo", handle, fact="memory_total_mib")
    gpu["memory_total_mib"] = bytes_to_mib(getattr(memory, "total", None))

    mig_current, mig_pending = _pair(reader.call("nvmlDeviceGetMigMode", handle, fact="mig_mode"))
    gpu["mig_mode"] = {"current": mode_string(mig_current), "pending": mode_string(mig_pending)}
    if gpu["mig_mode"]["current"] == "enabled":
        gpu["mig_devices"] = _mig_devices(nvml, reader, handle)

    ecc_current, _unused = _pair(reader.call("nvmlDeviceGetEccMode", handle, fact="ecc.mode_current"))
    uncorrected = _constant(nvml, "NVML_MEMORY_ERROR_TYPE_UNCORRECTED")
    volatile = reader.call(
        "nvmlDeviceGetTotalEccErrors",
        handle,
        uncorrected,
        _constant(nvml, "NVML_VOLATILE_ECC"),
        fact="ecc.uncorrected_volatile",
    )
    aggregate = reader.call(
        "nvmlDeviceGetTotalEccErrors",
        handle,
        uncorrected,
        _constant(nvml, "NVML_AGGREGATE_ECC"),
        fact="ecc.uncorrected_aggregate",
    )
    gpu["ecc"] = ecc_or_none(mode_string(ecc_current), volatile, aggregate)

    rows = reader.call("nvmlDeviceGetRemappedRows", handle, fact="remapped_rows")
    if rows is not None:
        correctable, uncorrectable, pending, failure = rows
        gpu["remapped_rows"] = remapped_rows_or_none(
            int(correctable), int(uncorrectable), bool(pending), bool(failure)
        )

    pages_pending = reader.call("nvmlDeviceGetRetiredPagesPendingStatus", handle, fact="retired_pages")
    pages = reader.call(
        "nvmlDeviceGetRetiredPages",
        handle,
        _constant(nvml, "NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR"),
        fact="retired_pages.double_bit_count",
    )
    gpu["retired_pages"] = retired_pages_or_none(
        None if pages_pending is None else bool(pages_pending), None if pages is None else len(pages)
    )

    numa = reader.call("nvmlDeviceGetNumaNodeId", handle, fact="numa_node")
    gpu["numa_node"] = int(numa) if numa is not None and int(numa) >= 0 else None
    persistence = reader.call("nvmlDeviceGetPersistenceMode", handle, fact="persistence_mode")
    gpu["persistence_mode"] = None if persistence is None else bool(persistence)
    gpu["processes"] = _processes(nvml, reader, handle)
    gpu["health"] = compute_health(gpu, reader.lost_reasons())
    return gpu


class TracedBinding:
    """The binding ``nvml`` with ``progress(name)`` called before each of its ``nvml*`` functions.

    deadline.call_in_child uses it to name the NVML call that hung.
    """

    def __init__(self, nvml, progress):
        self._nvml = nvml
        self._progress = progress

    def __getattr__(self, name):
        value = getattr(self._nvml, name)
        if not name.startswith("nvml") or not callable(value):
            return value
        progress = self._progress

        def traced(*args, **kwargs):
            progress(name)
            return value(*args, **kwargs)

        return traced

    def __dir__(self):
        return dir(self._nvml)


def collect(nvml):
    """Read every GPU through NVML. Returns {driver_version, cuda_driver_version, gpus, warnings}.

    Raises NvmlInitError when NVML cannot start, NvmlCollectError when a host-wide call fails.
    """
    nvml_error = getattr(nvml, "NVMLError", Exception)
    try:
        nvml.nvmlInit()
    except nvml_error as exc:
        code = _error_code(exc)
        no_driver = code in (
            _code(nvml, "NVML_ERROR_DRIVER_NOT_LOADED"),
            _code(nvml, "NVML_ERROR_LIBRARY_NOT_FOUND"),
        )
        raise NvmlInitError(f"nvmlInit failed: {_error_text(exc)}", code=code, no_driver=no_driver) from None
    try:
        return _collect(nvml, nvml_error)
    finally:
        try:
            nvml.nvmlShutdown()
        except nvml_error:
            pass


def _collect(nvml, nvml_error):
    warnings = []
    try:
        driver = to_text(nvml.nvmlSystemGetDriverVersion())
        count = int(nvml.nvmlDeviceGetCount())
    except nvml_error as exc:
        raise NvmlCollectError(f"NVML could not list the GPUs: {_error_text(exc)}") from None
    try:
        cuda = cuda_version_string(nvml.nvmlSystemGetCudaDriverVersion())
    except (nvml_error, AttributeError) as exc:
        cuda = None
        warnings.append(f"nvmlSystemGetCudaDriverVersion failed ({exc}); nvidia_cuda_driver_version is null")
    gpus = [_collect_device(nvml, index, warnings) for index in range(count)]
    return {
        "driver_version": driver,
        "cuda_driver_version": cuda,
        "gpus": sort_gpus(gpus),
        "warnings": warnings,
    }
