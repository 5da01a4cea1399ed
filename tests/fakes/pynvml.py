"""A stand-in for nvidia-ml-py's `pynvml` module, fed by a JSON fixture instead of libnvidia-ml.

Put tests/fakes first on PYTHONPATH (or load this file directly) and name the fixture in the environment
variable GPUSPLIT_FAKE_NVML_FIXTURE. Function names, constants, return types (str from the string
wrappers, bytes in structure fields, lists for mode pairs) and the NVMLError subclass hierarchy follow the
real binding, so code written against this fake runs unchanged against nvidia-ml-py.

Fixture keys read here (see tests/fixtures/gpus/*.json):
  nvml_init_error         null, or an NVML_ERROR_* name nvmlInit raises (no driver, no library)
  nvml_missing_functions  wrappers this binding pretends not to have (an older nvidia-ml-py)
  nvml_bus_id_legacy      busId in the old 4-digit-domain form ("0000:17:00.0")
  driver_version, cuda_driver_version (int, 12080 = 12.8), gpus[]
  gpus[].unsupported / no_permission   NVML function names answering NOT_SUPPORTED / NO_PERMISSION
  gpus[].lost, lost_readable           every call raises GPU_IS_LOST except the listed ones
  gpus[].lost_at_handle                even nvmlDeviceGetHandleByIndex raises GPU_IS_LOST
                                       (nvidia-smi: lost_hidden, no row, only a complaint)
  gpus[].handle_error                  an NVML_ERROR_* name nvmlDeviceGetHandleByIndex raises
  nvml_hangs_in           NVML functions that never return (nvmlInit, nvmlDeviceGetHandleByIndex), as
                                       on a wedged GPU whose driver is stuck in an ioctl
  "nvmlDeviceGetHandleByIndex" in gpus[].no_permission / unsupported: the handle call raises
                                       NO_PERMISSION / NOT_SUPPORTED, as libnvidia-ml does for a GPU
                                       it will not open (a lost GPU still gives a handle otherwise)
"""

import json
import os
import string
import time

FIXTURE_ENV = "GPUSPLIT_FAKE_NVML_FIXTURE"

# ---- constants (values from nvml.h, as in nvidia-ml-py) -------------------------------------------

NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_ALREADY_INITIALIZED = 5
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_INSUFFICIENT_SIZE = 7
NVML_ERROR_INSUFFICIENT_POWER = 8
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_IRQ_ISSUE = 11
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_CORRUPTED_INFOROM = 14
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_RESET_REQUIRED = 16
NVML_ERROR_OPERATING_SYSTEM = 17
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_ERROR_IN_USE = 19
NVML_ERROR_MEMORY = 20
NVML_ERROR_NO_DATA = 21
NVML_ERROR_UNKNOWN = 999

NVML_FEATURE_DISABLED = 0
NVML_FEATURE_ENABLED = 1
NVML_DEVICE_MIG_DISABLE = 0
NVML_DEVICE_MIG_ENABLE = 1

NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_VOLATILE_ECC = 0
NVML_AGGREGATE_ECC = 1

NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS = 0
NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR = 1

# A100/H100 offer seven MIG slices.
_MAX_MIG_DEVICES = 7
_MIB = 1024 * 1024
# Drivers keep a little framebuffer for themselves; the byte totals are not exact MiB multiples.
_MEMORY_SLACK_BYTES = 393216


# ---- errors, built the way nvidia-ml-py builds them ------------------------------------------------


class NVMLLibraryMismatchError(Exception):
    pass


class NVMLError(Exception):
    _valClassMapping = {}
    _errcode_to_string = {
        NVML_ERROR_UNINITIALIZED: "Uninitialized",
        NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
        NVML_ERROR_NOT_SUPPORTED: "Not Supported",
        NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
        NVML_ERROR_ALREADY_INITIALIZED: "Already Initialized",
        NVML_ERROR_NOT_FOUND: "Not Found",
        NVML_ERROR_INSUFFICIENT_SIZE: "Insufficient Size",
        NVML_ERROR_INSUFFICIENT_POWER: "Insufficient External Power",
        NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
        NVML_ERROR_TIMEOUT: "Timeout",
        NVML_ERROR_IRQ_ISSUE: "Interrupt Request Issue",
        NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
        NVML_ERROR_FUNCTION_NOT_FOUND: "Function Not Found",
        NVML_ERROR_CORRUPTED_INFOROM: "Corrupted infoROM",
        NVML_ERROR_GPU_IS_LOST: "GPU is lost",
        NVML_ERROR_RESET_REQUIRED: "GPU requires restart",
        NVML_ERROR_OPERATING_SYSTEM: "The operating system has blocked the request.",
        NVML_ERROR_LIB_RM_VERSION_MISMATCH: "RM has detected an NVML/RM version mismatch.",
        NVML_ERROR_MEMORY: "Insufficient Memory",
        NVML_ERROR_UNKNOWN: "Unknown Error",
    }

    def __new__(typ, value):
        # NVMLError(code) returns an instance of the subclass for that code, as in the real binding.
        if typ == NVMLError:
            typ = NVMLError._valClassMapping.get(value, typ)
        obj = Exception.__new__(typ)
        obj.value = value
        return obj

    def __str__(self):
        return NVMLError._errcode_to_string.get(self.value, f"NVML Error with code {self.value}")

    def __eq__(self, other):
        return self.value == other.value

    def __hash__(self):
        return hash(self.value)


def nvmlExceptionClass(nvmlErrorCode):
    if nvmlErrorCode not in NVMLError._valClassMapping:
        raise ValueError(f"nvmlErrorCode {nvmlErrorCode} is not valid")
    return NVMLError._valClassMapping[nvmlErrorCode]


def _make_error_classes():
    """NVML_ERROR_GPU_IS_LOST -> class NVMLError_GpuIsLost(NVMLError), one per code."""
    namespace = globals()
    for constant in [name for name in namespace if name.startswith("NVML_ERROR_")]:
        words = constant.replace("NVML_ERROR_", "")
        class_name = "NVMLError_" + string.capwords(words, "_").replace("_", "")
        code = namespace[constant]

        def make_new(value):
            def new(typ, *args):
                return NVMLError.__new__(typ, value)

            return new

        error_class = type(class_name, (NVMLError,), {"__new__": make_new(code)})
        error_class.__module__ = __name__
        namespace[class_name] = error_class
        NVMLError._valClassMapping[code] = error_class


_make_error_classes()


# ---- structures -----------------------------------------------------------------------------------


class nvmlFriendlyObject:
    def __init__(self, dictionary):
        for key, value in dictionary.items():
            setattr(self, key, value)

    def __str__(self):
        return str(self.__dict__)


class c_nvmlMemory_t:
    def __init__(self, total):
        self.total = total
        self.used = 0
        self.free = total


class nvmlPciInfo_t:
    def __init__(self, bus_id, legacy_only):
        domain_text, bus_text, rest = bus_id.split(":")
        device_text = rest.split(".")[0]
        self.domain = int(domain_text, 16)
        self.bus = int(bus_text, 16)
        self.device = int(device_text, 16)
        self.pciDeviceId = 0x233010DE
        self.pciSubSystemId = 0x16C110DE
        legacy = f"{self.domain:04X}:{self.bus:02X}:{self.device:02X}.0".encode()
        # ctypes char arrays come back as bytes.
        self.busIdLegacy = legacy
        self.busId = legacy if legacy_only else bus_id.encode()


class c_nvmlDevice_t:
    """An opaque handle: the GPU (and MIG device) it stands for."""

    def __init__(self, gpu, mig=None):
        self._gpu = gpu
        self._mig = mig


# ---- state ----------------------------------------------------------------------------------------

_state = {"fixture": None, "refcount": 0}


def _load_fixture():
    path = os.environ.get(FIXTURE_ENV)
    if not path:
        raise NVMLError(NVML_ERROR_LIBRARY_NOT_FOUND)
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def _fixture():
    if _state["refcount"] <= 0 or _state["fixture"] is None:
        raise NVMLError(NVML_ERROR_UNINITIALIZED)
    return _state["fixture"]


def _gpus():
    return sorted(_fixture()["gpus"], key=lambda gpu: gpu["index"])


def _check(handle, function):
    """Raise what the fixture says this call on this GPU raises."""
    _fixture()
    if not isinstance(handle, c_nvmlDevice_t):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    gpu = handle._gpu
    if gpu.get("lost") and function not in gpu.get("lost_readable", []):
        raise NVMLError(NVML_ERROR_GPU_IS_LOST)
    if function in gpu.get("no_permission", []):
        raise NVMLError(NVML_ERROR_NO_PERMISSION)
    if function in gpu.get("unsupported", []):
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    return gpu, handle._mig


def _check_open(gpu, function):
    """Raise what the fixture says opening this GPU raises (the handle calls)."""
    if gpu.get("lost_at_handle") or gpu.get("lost_hidden"):
        raise NVMLError(NVML_ERROR_GPU_IS_LOST)
    error = gpu.get("handle_error")
    if error:
        raise NVMLError(globals()[error])
    if function in gpu.get("no_permission", []):
        raise NVMLError(NVML_ERROR_NO_PERMISSION)
    if function in gpu.get("unsupported", []):
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)


def _not_supported_if_none(value):
    if value is None:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    return value


def _enabled(word):
    return NVML_FEATURE_ENABLED if word == "enabled" else NVML_FEATURE_DISABLED


# ---- library --------------------------------------------------------------------------------------


def _hang_if_asked(fixture, name):
    while name in fixture.get("nvml_hangs_in", []):
        time.sleep(3600)


def nvmlInitWithFlags(flags):
    fixture = _load_fixture()
    _hang_if_asked(fixture, "nvmlInit")
    error = fixture.get("nvml_init_error")
    if error:
        raise NVMLError(globals()[error])
    _state["fixture"] = fixture
    _state["refcount"] += 1


def nvmlInit():
    nvmlInitWithFlags(0)


def nvmlShutdown():
    _fixture()
    _state["refcount"] -= 1
    if _state["refcount"] <= 0:
        _state["refcount"] = 0
        _state["fixture"] = None


def nvmlErrorString(result):
    return NVMLError._errcode_to_string.get(result, "Unknown Error")


def nvmlSystemGetDriverVersion():
    return _fixture()["driver_version"]


def nvmlSystemGetCudaDriverVersion():
    return _fixture()["cuda_driver_version"]


def nvmlSystemGetCudaDriverVersion_v2():
    return nvmlSystemGetCudaDriverVersion()


def nvmlSystemGetProcessName(pid):
    for gpu in _gpus():
        for process in gpu.get("processes", []):
            if process["pid"] == pid:
                if process.get("name") is None:
                    raise NVMLError(NVML_ERROR_NOT_FOUND)
                return process["name"]
    raise NVMLError(NVML_ERROR_NOT_FOUND)


def nvmlDeviceGetCount():
    return len(_gpus())


def nvmlDeviceGetHandleByIndex(index):
    _hang_if_asked(_fixture(), "nvmlDeviceGetHandleByIndex")
    gpus = _gpus()
    if not 0 <= index < len(gpus):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    gpu = gpus[index]
    _check_open(gpu, "nvmlDeviceGetHandleByIndex")
    return c_nvmlDevice_t(gpu)


def nvmlDeviceGetHandleByUUID(uuid):
    for gpu in _gpus():
        if gpu["uuid"] == uuid:
            _check_open(gpu, "nvmlDeviceGetHandleByIndex")
            return c_nvmlDevice_t(gpu)
    raise NVMLError(NVML_ERROR_NOT_FOUND)


# ---- per device -----------------------------------------------------------------------------------


def nvmlDeviceGetUUID(handle):
    gpu, mig = _check(handle, "nvmlDeviceGetUUID")
    return mig["uuid"] if mig else gpu["uuid"]


def nvmlDeviceGetName(handle):
    gpu, mig = _check(handle, "nvmlDeviceGetName")
    if mig:
        return f"{gpu['name']} MIG {mig['profile']}"
    return gpu["name"]


def nvmlDeviceGetPciInfo_v3(handle):
    gpu, _ = _check(handle, "nvmlDeviceGetPciInfo")
    return nvmlPciInfo_t(gpu["pci_bus_id"], bool(_fixture().get("nvml_bus_id_legacy")))


def nvmlDeviceGetPciInfo(handle):
    return nvmlDeviceGetPciInfo_v3(handle)


def nvmlDeviceGetMinorNumber(handle):
    gpu, _ = _check(handle, "nvmlDeviceGetMinorNumber")
    return _not_supported_if_none(gpu["minor_number"])


def nvmlDeviceGetMemoryInfo(handle, version=None):
    gpu, mig = _check(handle, "nvmlDeviceGetMemoryInfo")
    mib = mig["memory_total_mib"] if mig else gpu["memory_total_mib"]
    return c_nvmlMemory_t(mib * _MIB + _MEMORY_SLACK_BYTES)


def nvmlDeviceGetMigMode(device):
    gpu, _ = _check(device, "nvmlDeviceGetMigMode")
    mode = _not_supported_if_none(gpu["mig_mode"])
    return [_enabled(mode["current"]), _enabled(mode["pending"])]


def nvmlDeviceGetMaxMigDeviceCount(device):
    gpu, _ = _check(device, "nvmlDeviceGetMaxMigDeviceCount")
    _not_supported_if_none(gpu["mig_mode"])
    return _MAX_MIG_DEVICES


def nvmlDeviceGetMigDeviceHandleByIndex(device, index):
    gpu, _ = _check(device, "nvmlDeviceGetMigDeviceHandleByIndex")
    mode = _not_supported_if_none(gpu["mig_mode"])
    if mode["current"] != "enabled":
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    for mig in gpu.get("mig_devices", []):
        if mig["index"] == index:
            return c_nvmlDevice_t(gpu, mig)
    raise NVMLError(NVML_ERROR_NOT_FOUND)


def nvmlDeviceIsMigDeviceHandle(device):
    _check(device, "nvmlDeviceIsMigDeviceHandle")
    return 1 if device._mig else 0


def nvmlDeviceGetGpuInstanceId(device):
    _, mig = _check(device, "nvmlDeviceGetGpuInstanceId")
    if not mig:
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return mig["gpu_instance_id"]


def nvmlDeviceGetComputeInstanceId(device):
    _, mig = _check(device, "nvmlDeviceGetComputeInstanceId")
    if not mig:
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return mig["compute_instance_id"]


def nvmlDeviceGetEccMode(handle):
    gpu, _ = _check(handle, "nvmlDeviceGetEccMode")
    ecc = _not_supported_if_none(gpu["ecc"])
    mode = _enabled(_not_supported_if_none(ecc["mode_current"]))
    return [mode, mode]


def nvmlDeviceGetTotalEccErrors(handle, errorType, counterType):
    gpu, _ = _check(handle, "nvmlDeviceGetTotalEccErrors")
    ecc = _not_supported_if_none(gpu["ecc"])
    if errorType != NVML_MEMORY_ERROR_TYPE_UNCORRECTED:
        return 0
    key = "uncorrected_volatile" if counterType == NVML_VOLATILE_ECC else "uncorrected_aggregate"
    return _not_supported_if_none(ecc[key])


def nvmlDeviceGetRemappedRows(device):
    gpu, _ = _check(device, "nvmlDeviceGetRemappedRows")
    rows = _not_supported_if_none(gpu["remapped_rows"])
    return (rows["correctable"], rows["uncorrectable"], int(rows["pending"]), int(rows["failure"]))


def nvmlDeviceGetRetiredPagesPendingStatus(device):
    gpu, _ = _check(device, "nvmlDeviceGetRetiredPagesPendingStatus")
    pages = _not_supported_if_none(gpu["retired_pages"])
    return int(pages["double_bit_pending"])


def nvmlDeviceGetRetiredPages(device, sourceFilter):
    gpu, _ = _check(device, "nvmlDeviceGetRetiredPages")
    pages = _not_supported_if_none(gpu["retired_pages"])
    if sourceFilter != NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR:
        return []
    return [0x3F2A4000 + 0x1000 * n for n in range(pages["double_bit_count"])]


def nvmlDeviceGetNumaNodeId(handle):
    gpu, _ = _check(handle, "nvmlDeviceGetNumaNodeId")
    return _not_supported_if_none(gpu["numa_node"])


def nvmlDeviceGetPersistenceMode(handle):
    gpu, _ = _check(handle, "nvmlDeviceGetPersistenceMode")
    value = _not_supported_if_none(gpu["persistence_mode"])
    return NVML_FEATURE_ENABLED if value else NVML_FEATURE_DISABLED


def nvmlDeviceGetComputeRunningProcesses_v3(handle):
    gpu, _ = _check(handle, "nvmlDeviceGetComputeRunningProcesses")
    processes = []
    for process in gpu.get("processes", []):
        used = process.get("used_memory_mib")
        processes.append(
            nvmlFriendlyObject(
                {
                    "pid": process["pid"],
                    "usedGpuMemory": None if used is None else used * _MIB,
                    "gpuInstanceId": 0xFFFFFFFF,
                    "computeInstanceId": 0xFFFFFFFF,
                }
            )
        )
    return processes


def nvmlDeviceGetComputeRunningProcesses(handle):
    return nvmlDeviceGetComputeRunningProcesses_v3(handle)


# An older nvidia-ml-py lacks some wrappers: drop the ones the fixture named (read at import).
def _drop_missing_functions():
    path = os.environ.get(FIXTURE_ENV)
    if not path or not os.path.exists(path):
        return
    with open(path, encoding="utf-8") as handle:
        missing = json.load(handle).get("nvml_missing_functions", [])
    namespace = globals()
    for name in missing:
        namespace.pop(name, None)


_drop_missing_functions()
