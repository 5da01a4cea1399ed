"""Pure logic behind gpusplit.k8s.nvidia_gpu_facts: the facts schema, normalising, parsing and health.

Nothing in this file touches the host. The collectors (gpu_nvml, gpu_smi) read NVML or run nvidia-smi and
hand what they got to these functions; the functions that need a file (process cgroups, sysfs NUMA node)
take a reader callable so that tests can feed them fixtures.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError
from ansible_collections.gpusplit.k8s.plugins.module_utils._gpu.ids import require_pci_bus_id

# The keys of one GPU in ansible_facts.nvidia_gpus, in documentation order. Every GPU carries all of them.
GPU_KEYS = (
    "uuid",
    "index",
    "minor_number",
    "pci_bus_id",
    "name",
    "memory_total_mib",
    "mig_mode",
    "mig_devices",
    "ecc",
    "remapped_rows",
    "retired_pages",
    "numa_node",
    "persistence_mode",
    "processes",
    "health",
)
MIG_DEVICE_KEYS = ("uuid", "index", "profile", "gpu_instance_id", "compute_instance_id", "memory_total_mib")
PROCESS_KEYS = ("pid", "used_memory_mib", "name", "in_container", "container_id")

HEALTH_OK = "ok"
HEALTH_DEGRADED = "degraded"
HEALTH_LOST = "lost"

MIB = 1024 * 1024


class GpuFactsError(GpusplitError):
    """A failure the module reports as is (the message is meant for the operator)."""


class SmiParseError(GpuFactsError):
    """nvidia-smi printed something this module cannot read; the message quotes the offending line."""


# --------------------------------------------------------------------------------------------------
# Schema helpers
# --------------------------------------------------------------------------------------------------


def new_gpu(index=None):
    """A GPU record with every key present and nothing known yet."""
    return {
        "uuid": None,
        "index": index,
        "minor_number": None,
        "pci_bus_id": None,
        "name": None,
        "memory_total_mib": None,
        "mig_mode": {"current": None, "pending": None},
        "mig_devices": [],
        "ecc": None,
        "remapped_rows": None,
        "retired_pages": None,
        "numa_node": None,
        "persistence_mode": None,
        "processes": None,
        "health": {"status": HEALTH_OK, "reasons": []},
    }


def new_mig_device(index=None):
    return {
        "uuid": None,
        "index": index,
        "profile": None,
        "gpu_instance_id": None,
        "compute_instance_id": None,
        "memory_total_mib": None,
    }


def new_process(pid, used_memory_mib=None, name=None):
    return {
        "pid": pid,
        "used_memory_mib": used_memory_mib,
        "name": name,
        "in_container": None,
        "container_id": None,
    }


def gpu_sort_key(gpu):
    """Sort by PCI bus id (stable across reboots); GPUs whose bus id is unknown go last, by index."""
    bus = gpu.get("pci_bus_id")
    index = gpu.get("index")
    return (bus is None, bus or "", index if index is not None else 1 << 30)


def sort_gpus(gpus):
    return sorted(gpus, key=gpu_sort_key)


def ecc_or_none(mode_current, uncorrected_volatile, uncorrected_aggregate):
    """The ecc dict, or None when the GPU reports none of it (no ECC support)."""
    if mode_current is None and uncorrected_volatile is None and uncorrected_aggregate is None:
        return None
    return {
        "mode_current": mode_current,
        "uncorrected_volatile": uncorrected_volatile,
        "uncorrected_aggregate": uncorrected_aggregate,
    }


def remapped_rows_or_none(correctable, uncorrectable, pending, failure):
    if correctable is None and uncorrectable is None and pending is None and failure is None:
        return None
    return {
        "correctable": correctable,
        "uncorrectable": uncorrectable,
        "pending": pending,
        "failure": failure,
    }


def retired_pages_or_none(pending, double_bit_count):
    if pending is None and double_bit_count is None:
        return None
    return {"double_bit_pending": pending, "double_bit_count": double_bit_count}


# --------------------------------------------------------------------------------------------------
# Normalisation
# --------------------------------------------------------------------------------------------------


def to_text(value):
    """NVML strings come back as str from nvidia-ml-py's wrappers but as bytes from its structures."""
    if value is None:
        return None
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    return str(value).rstrip("\x00").strip()


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


# --------------------------------------------------------------------------------------------------
# Health
# --------------------------------------------------------------------------------------------------


# Why a GPU cannot be opened at all (nvmlDeviceGetHandleByIndex's error codes, nvml.h; nvidia-smi prints
# the same causes as text) and what the operator can do about it. Lost causes make the GPU lost; every
# other cause leaves a GPU that is there but cannot be used: degraded. Used by both backends.
UNOPENED_ADVICE = {
    "NVML_ERROR_GPU_IS_LOST": "the GPU fell off the bus or stopped answering (reset it or reboot the host)",
    "NVML_ERROR_RESET_REQUIRED": "the GPU needs a reset (reset it or reboot the host)",
    "NVML_ERROR_NO_PERMISSION": (
        "the user running the module may not open this GPU: run the task as root (become: true) or give "
        "that user read/write access to /dev/nvidiactl and the GPU's /dev/nvidia<minor> device file "
        "(in a container: expose that device to it)"
    ),
    "NVML_ERROR_NOT_SUPPORTED": (
        "the installed driver cannot manage this GPU through NVML (a GPU this driver branch does not "
        "support): install a driver that supports it; nvidia-smi and the kernel log (dmesg) say more"
    ),
    "NVML_ERROR_INSUFFICIENT_POWER": (
        "the GPU's external power cables are not connected properly: connect them and power-cycle the host"
    ),
    "NVML_ERROR_IRQ_ISSUE": (
        "the kernel driver saw an interrupt problem with this GPU: look for Xid errors in the kernel log "
        "(dmesg)"
    ),
}
UNOPENED_ADVICE_DEFAULT = "nvidia-smi and the kernel log (dmesg) may say why"
UNOPENED_LOST = ("NVML_ERROR_GPU_IS_LOST", "NVML_ERROR_RESET_REQUIRED")
# nvidia-smi's "Unable to determine the device handle for GPU<bus id>: <cause>" causes, as NVML errors
_SMI_UNOPENED_CAUSES = (
    ("insufficient permissions", "NVML_ERROR_NO_PERMISSION"),
    ("not supported", "NVML_ERROR_NOT_SUPPORTED"),
    ("external power", "NVML_ERROR_INSUFFICIENT_POWER"),
    ("requires reset", "NVML_ERROR_RESET_REQUIRED"),
    ("reset required", "NVML_ERROR_RESET_REQUIRED"),
    ("gpu is lost", "NVML_ERROR_GPU_IS_LOST"),
)


def smi_unopened_cause(text):
    """The NVML error name behind nvidia-smi's cause text; an unknown cause counts as a lost GPU."""
    low = str(text or "").lower()
    for needle, name in _SMI_UNOPENED_CAUSES:
        if needle in low:
            return name
    return "NVML_ERROR_GPU_IS_LOST"


def unopened_health(error_name, what):
    """The health of a GPU that could not be opened: lost or degraded, with ``what`` and the advice."""
    status = HEALTH_LOST if error_name in UNOPENED_LOST else HEALTH_DEGRADED
    advice = UNOPENED_ADVICE.get(error_name, UNOPENED_ADVICE_DEFAULT)
    return {"status": status, "reasons": [f"{what}; {advice}"]}


def compute_health(gpu, lost_reasons=()):
    """Judge one GPU record: lost > degraded > ok, with one reason per finding.

    lost_reasons: what the collector saw that says the GPU is gone (NVML_ERROR_GPU_IS_LOST, nvidia-smi's
    '[GPU requires reset]'). A lost GPU is not judged further: its counters could not be read.
    """
    lost_reasons = [reason for reason in lost_reasons if reason]
    if lost_reasons:
        return {"status": HEALTH_LOST, "reasons": lost_reasons}
    reasons = []
    ecc = gpu.get("ecc") or {}
    volatile = ecc.get("uncorrected_volatile")
    if volatile:
        reasons.append(f"{volatile} uncorrected ECC error(s) since the driver loaded (volatile counter)")
    rows = gpu.get("remapped_rows") or {}
    if rows.get("failure"):
        reasons.append("row remapping failed on this GPU: it cannot repair its memory any more")
    if rows.get("pending"):
        reasons.append("row remapping pending: reset the GPU to apply it")
    pages = gpu.get("retired_pages") or {}
    if pages.get("double_bit_pending"):
        reasons.append("page retirement pending: reset the GPU or reboot to apply it")
    return {"status": HEALTH_DEGRADED if reasons else HEALTH_OK, "reasons": reasons}


# --------------------------------------------------------------------------------------------------
# Processes: which ones run in a container
# --------------------------------------------------------------------------------------------------

_CONTAINER_ID_RE = re.compile(r"(?<![0-9a-f])([0-9a-f]{64})(?![0-9a-f])")
_CONTAINER_MARKERS = ("kubepods", "docker", "containerd", "crio", "cri-o", "libpod", "podman")


def classify_cgroup(text):
    """Read /proc/<pid>/cgroup text: (in_container, container_id).

    Recognised: Kubernetes pods (kubepods, cgroupfs or systemd drivers), containerd
    ('cri-containerd-<id>.scope'), Docker ('docker-<id>.scope', '/docker/<id>'), CRI-O ('crio-<id>.scope')
    and Podman ('libpod-<id>.scope'). The container id is the innermost 64-hex id on the path.
    None text (no such file: the process is gone or not ours to read) -> (None, None).
    """
    if text is None:
        return None, None
    in_container = False
    container_id = None
    for line in text.splitlines():
        parts = line.strip().split(":", 2)
        if len(parts) != 3:
            continue
        path = parts[2].lower()
        ids = _CONTAINER_ID_RE.findall(path)
        if ids or any(marker in path for marker in _CONTAINER_MARKERS):
            in_container = True
            if ids and container_id is None:
                container_id = ids[-1]
    return in_container, container_id


def annotate_processes(gpus, read_text, proc_root):
    """Fill in_container/container_id of every process from <proc_root>/<pid>/cgroup."""
    cache = {}
    root = (proc_root or "/proc").rstrip("/") or "/"
    for gpu in gpus:
        for process in gpu.get("processes") or []:
            pid = process.get("pid")
            if pid is None:
                continue
            if pid not in cache:
                cache[pid] = classify_cgroup(read_text(f"{root}/{pid}/cgroup"))
            process["in_container"], process["container_id"] = cache[pid]
    return gpus


def numa_node_from_sysfs(text):
    """Content of /sys/bus/pci/devices/<addr>/numa_node: '-1' means no NUMA affinity -> None."""
    if text is None:
        return None
    try:
        value = int(text.strip())
    except ValueError:
        return None
    return value if value >= 0 else None


# --------------------------------------------------------------------------------------------------
# nvidia-smi output
# --------------------------------------------------------------------------------------------------

# What nvidia-smi prints instead of a value the GPU cannot give.
NA_TOKENS = frozenset(
    {
        "",
        "n/a",
        "[n/a]",
        "not supported",
        "[not supported]",
        "not available",
        "[not available]",
        "[not found]",
        "none",
        "requested functionality has been deprecated",
    }
)
NO_PERMISSION_TOKENS = frozenset(
    {"[insufficient permissions]", "insufficient permissions", "[no permission]"}
)
# What nvidia-smi prints for a GPU that fell off the bus or needs a reset.
LOST_TOKENS = frozenset(
    {
        "[gpu requires reset]",
        "gpu requires reset",
        "[gpu is lost]",
        "gpu is lost",
        "[unknown error]",
        "unknown error",
    }
)

NO_DRIVER_MARKERS = (
    "couldn't communicate with the nvidia driver",
    "couldn't find libnvidia-ml.so",
    "nvml shared library not found",
    "driver not loaded",
)
NO_DEVICES_MARKER = "no devices were found"

# --query-gpu fields, checked against `nvidia-smi --help-query-gpu`. The required ones exist in every
# driver this collection supports; an optional one an older nvidia-smi does not know is dropped with a
# warning (the fact then stays null).
SMI_REQUIRED_FIELDS = ("index", "uuid", "name", "pci.bus_id", "memory.total")
SMI_OPTIONAL_FIELDS = (
    "driver_version",
    "persistence_mode",
    "mig.mode.current",
    "mig.mode.pending",
    "ecc.mode.current",
    "ecc.errors.uncorrected.volatile.total",
    "ecc.errors.uncorrected.aggregate.total",
    "retired_pages.double_bit.count",
    "retired_pages.pending",
    "remapped_rows.correctable",
    "remapped_rows.uncorrectable",
    "remapped_rows.pending",
    "remapped_rows.failure",
)
SMI_APPS_FIELDS = ("gpu_uuid", "pid", "process_name", "used_memory")
# nvidia-smi answers some queries with a different column name than the one asked for.
_HEADER_ALIASES = {"used_gpu_memory": "used_memory", "gpu_name": "name", "gpu_bus_id": "pci.bus_id"}

_UNKNOWN_FIELD_RE = re.compile(r'Field "([^"]+)" is not a valid field to query', re.IGNORECASE)
# nvidia-smi's line for a GPU it cannot even open (fell off the bus); it prints no row for that GPU.
_NO_HANDLE_RE = re.compile(
    r"Unable to determine the device handle for GPU\s*(?:\d+:\s*)?"
    r"([0-9A-Fa-f]{1,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s*:\s*(.*?)\s*$",
    re.IGNORECASE,
)


def token_kind(raw):
    """'na', 'noperm', 'lost' for nvidia-smi's placeholders, None for a real value."""
    text = (raw or "").strip().lower()
    if text in NA_TOKENS:
        return "na"
    if text in NO_PERMISSION_TOKENS:
        return "noperm"
    if text in LOST_TOKENS:
        return "lost"
    return None


def smi_says_no_driver(rc, stdout, stderr):
    text = f"{stdout}\n{stderr}".lower()
    return rc in (9, 12) or any(marker in text for marker in NO_DRIVER_MARKERS)


def smi_says_no_devices(stdout, stderr):
    return NO_DEVICES_MARKER in f"{stdout}\n{stderr}".lower()


def smi_unknown_field(stdout, stderr):
    match = _UNKNOWN_FIELD_RE.search(f"{stdout}\n{stderr}")
    return match.group(1) if match else None


def first_line(text, limit=300):
    for line in (text or "").splitlines():
        if line.strip():
            line = line.strip()
            return line if len(line) <= limit else line[:limit] + "..."
    return ""


def _header_name(column):
    name = re.sub(r"\s*\[[^\]]*\]\s*$", "", column.strip())
    return _HEADER_ALIASES.get(name, name)


def _content_lines(stdout):
    return [line for line in (stdout or "").splitlines() if line.strip() and not _NO_HANDLE_RE.search(line)]


def parse_unopenable_gpus(*texts):
    """'Unable to determine the device handle for GPU 0000:4C:00.0: GPU is lost...' -> [(bus id, why)]."""
    found = []
    for text in texts:
        for line in (text or "").splitlines():
            match = _NO_HANDLE_RE.search(line)
            if match:
                found.append((require_pci_bus_id(match.group(1)), match.group(2)))
    return found


def _check_header(header_line, fields, what):
    columns = [_header_name(column) for column in header_line.split(",")]
    if columns != list(fields):
        raise SmiParseError(
            f"unexpected header from nvidia-smi {what}: asked for {', '.join(fields)}, "
            f"got line {header_line.strip()!r}"
        )


def parse_gpu_query(stdout, fields):
    """`nvidia-smi --query-gpu=<fields> --format=csv` -> one {field: raw text} per GPU row.

    GPU names and every queried value are free of commas, so a row must split into exactly len(fields)
    columns; anything else is an error that quotes the line.
    """
    lines = _content_lines(stdout)
    if not lines:
        raise SmiParseError("nvidia-smi --query-gpu printed nothing")
    _check_header(lines[0], fields, "--query-gpu")
    rows = []
    for line in lines[1:]:
        values = [value.strip() for value in line.split(",")]
        if len(values) != len(fields):
            raise SmiParseError(
                f"cannot parse nvidia-smi --query-gpu output: expected {len(fields)} columns, "
                f"got {len(values)} in line {line.strip()!r}"
            )
        row = {field: values[position] for position, field in enumerate(fields)}
        row["__line__"] = line.strip()
        rows.append(row)
    return rows


def parse_compute_apps(stdout):
    """`nvidia-smi --query-compute-apps=gpu_uuid,pid,process_name,used_memory --format=csv`.

    Process names may contain commas (command lines), so the name is everything between the second
    column and the last one.
    """
    lines = _content_lines(stdout)
    if not lines:
        return []
    if "no running" in lines[0].lower():
        return []
    _check_header(lines[0], SMI_APPS_FIELDS, "--query-compute-apps")
    apps = []
    for line in lines[1:]:
        if "no running" in line.lower():
            continue
        head = line.split(",", 2)
        tail = head[-1].rsplit(",", 1) if len(head) == 3 else []
        if len(tail) != 2:
            raise SmiParseError(
                f"cannot parse nvidia-smi --query-compute-apps output: expected 4 columns "
                f"in line {line.strip()!r}"
            )
        gpu_uuid, pid_text = head[0].strip(), head[1].strip()
        name, memory_text = tail[0].strip(), tail[1].strip()
        try:
            pid = int(pid_text)
        except ValueError:
            raise SmiParseError(
                f"cannot parse nvidia-smi --query-compute-apps output: pid {pid_text!r} is not a number "
                f"in line {line.strip()!r}"
            ) from None
        apps.append(
            {
                "gpu_uuid": gpu_uuid,
                "pid": pid,
                "name": None if token_kind(name) else name,
                "used_memory_mib": smi_int(memory_text, "used_memory", line),
            }
        )
    return apps


_LIST_GPU_RE = re.compile(r"^GPU\s+(\d+):\s+(.*?)\s+\(UUID:\s*(GPU-[^)\s]+)\)\s*$")
_LIST_MIG_RE = re.compile(r"^\s+MIG\s+(\S+)\s+Device\s+(\d+):\s+\(UUID:\s*(MIG-[^)\s]+)\)\s*$")


def parse_list_gpus(stdout):
    """`nvidia-smi -L` -> {gpu uuid: [{index, profile, uuid}, ...]} for the MIG devices of each GPU.

    Lines that are neither a GPU nor a MIG device (nvidia-smi's complaints about a lost GPU) are skipped.
    """
    result = {}
    current = None
    for line in (stdout or "").splitlines():
        gpu = _LIST_GPU_RE.match(line)
        if gpu:
            current = gpu.group(3)
            result.setdefault(current, [])
            continue
        mig = _LIST_MIG_RE.match(line)
        if mig and current is not None:
            result[current].append(
                {"index": int(mig.group(2)), "profile": mig.group(1), "uuid": mig.group(3)}
            )
    return result


def _xml_text(element, path):
    found = element.find(path)
    if found is None or found.text is None:
        return None
    return found.text.strip()


def _xml_int(element, path):
    text = _xml_text(element, path)
    if text is None or token_kind(text):
        return None
    text = re.sub(r"\s*MiB$", "", text)
    try:
        return int(text)
    except ValueError:
        return None


def parse_query_xml(stdout):
    """`nvidia-smi -q -x` -> the facts --query-gpu has no field for.

    {'driver_version', 'cuda_version', 'gpus': {bus id: {'minor_number', 'mig_devices': {index: {...}}}}}
    """
    text = (stdout or "").strip()
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        raise SmiParseError(
            f"cannot parse nvidia-smi -q -x output as XML ({exc}); it starts with {first_line(text)!r}"
        ) from None
    if root.tag != "nvidia_smi_log":
        raise SmiParseError(f"nvidia-smi -q -x printed <{root.tag}>, expected <nvidia_smi_log>")
    cuda = _xml_text(root, "cuda_version")
    result = {
        "driver_version": _xml_text(root, "driver_version"),
        "cuda_version": None if token_kind(cuda) else cuda,
        "gpus": {},
    }
    for gpu in root.findall("gpu"):
        try:
            bus_id = require_pci_bus_id(gpu.get("id") or _xml_text(gpu, "pci/pci_bus_id") or "")
        except ValueError:
            continue
        migs = {}
        for mig in gpu.findall("mig_devices/mig_device"):
            index = _xml_int(mig, "index")
            if index is None:
                continue
            migs[index] = {
                "gpu_instance_id": _xml_int(mig, "gpu_instance_id"),
                "compute_instance_id": _xml_int(mig, "compute_instance_id"),
                "memory_total_mib": _xml_int(mig, "fb_memory_usage/total"),
            }
        result["gpus"][bus_id] = {"minor_number": _xml_int(gpu, "minor_number"), "mig_devices": migs}
    return result


def _parse_error(field, raw, line, expected):
    return SmiParseError(
        f"cannot parse nvidia-smi output: {field} is {raw!r}, expected {expected}, in line {line.strip()!r}"
    )


def smi_int(raw, field, line):
    """'81559 MiB', '81559', '0' -> int; placeholders -> None; anything else is an error quoting line."""
    if token_kind(raw):
        return None
    text = re.sub(r"\s*(MiB|%)$", "", (raw or "").strip())
    try:
        return int(text)
    except ValueError:
        raise _parse_error(field, raw, line, "a number") from None


_TRUE_WORDS = frozenset({"enabled", "yes", "true", "1", "on"})
_FALSE_WORDS = frozenset({"disabled", "no", "false", "0", "off"})


def smi_bool(raw, field, line):
    if token_kind(raw):
        return None
    text = (raw or "").strip().lower()
    if text in _TRUE_WORDS:
        return True
    if text in _FALSE_WORDS:
        return False
    raise _parse_error(field, raw, line, "Enabled/Disabled or Yes/No")


def smi_mode(raw, field, line):
    value = smi_bool(raw, field, line)
    if value is None:
        return None
    return "enabled" if value else "disabled"


def gpu_from_smi_row(row):
    """One --query-gpu row -> (gpu record, lost reasons, warnings). Health is left to the caller."""
    line = row.get("__line__", "")
    warnings = []
    lost_fields = []
    noperm_fields = []
    for field, raw in row.items():
        if field == "__line__":
            continue
        kind = token_kind(raw)
        if kind == "lost":
            lost_fields.append((field, raw))
        elif kind == "noperm":
            noperm_fields.append(field)

    gpu = new_gpu(smi_int(row["index"], "index", line))
    uuid = row.get("uuid")
    gpu["uuid"] = None if token_kind(uuid) else uuid
    name = row.get("name")
    gpu["name"] = None if token_kind(name) else name
    bus = row.get("pci.bus_id")
    if bus is not None and not token_kind(bus):
        try:
            gpu["pci_bus_id"] = require_pci_bus_id(bus)
        except ValueError:
            raise _parse_error("pci.bus_id", bus, line, "a PCI bus id like 00000000:17:00.0") from None
    gpu["memory_total_mib"] = smi_int(row.get("memory.total"), "memory.total", line)
    gpu["persistence_mode"] = smi_bool(row.get("persistence_mode"), "persistence_mode", line)
    gpu["mig_mode"] = {
        "current": smi_mode(row.get("mig.mode.current"), "mig.mode.current", line),
        "pending": smi_mode(row.get("mig.mode.pending"), "mig.mode.pending", line),
    }
    gpu["ecc"] = ecc_or_none(
        smi_mode(row.get("ecc.mode.current"), "ecc.mode.current", line),
        smi_int(
            row.get("ecc.errors.uncorrected.volatile.total"), "ecc.errors.uncorrected.volatile.total", line
        ),
        smi_int(
            row.get("ecc.errors.uncorrected.aggregate.total"), "ecc.errors.uncorrected.aggregate.total", line
        ),
    )
    gpu["remapped_rows"] = remapped_rows_or_none(
        smi_int(row.get("remapped_rows.correctable"), "remapped_rows.correctable", line),
        smi_int(row.get("remapped_rows.uncorrectable"), "remapped_rows.uncorrectable", line),
        smi_bool(row.get("remapped_rows.pending"), "remapped_rows.pending", line),
        smi_bool(row.get("remapped_rows.failure"), "remapped_rows.failure", line),
    )
    gpu["retired_pages"] = retired_pages_or_none(
        smi_bool(row.get("retired_pages.pending"), "retired_pages.pending", line),
        smi_int(row.get("retired_pages.double_bit.count"), "retired_pages.double_bit.count", line),
    )

    label = gpu["uuid"] or f"GPU {gpu['index']}"
    lost = []
    if lost_fields:
        shown = ", ".join(field for field, _ in lost_fields[:4])
        more = f" and {len(lost_fields) - 4} more" if len(lost_fields) > 4 else ""
        lost.append(
            f"nvidia-smi reports {lost_fields[0][1]} for {shown}{more}: "
            "the GPU is lost or needs a reset (reset it or reboot the host)"
        )
    if noperm_fields:
        warnings.append(
            f"{label}: nvidia-smi has no permission to read {', '.join(noperm_fields)}; those facts are null"
        )
    return gpu, lost, warnings
