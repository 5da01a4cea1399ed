# Copyright: gpusplit contributors
# Apache-2.0
"""Reading nvidia-smi's output: CSV queries, ``-L``, ``-q -x`` and its placeholders. Private to the collection.

Pure: smi.py runs nvidia-smi and hands the text to these functions. Whatever cannot be read is an
:class:`SmiParseError` that quotes the offending line.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from ansible_collections.gpusplit.k8s.plugins.module_utils._gpu.ids import require_pci_bus_id
from ansible_collections.gpusplit.k8s.plugins.module_utils._gpu.schema import (
    GpuFactsError,
    ecc_or_none,
    new_gpu,
    remapped_rows_or_none,
    retired_pages_or_none,
)


class SmiParseError(GpuFactsError):
    """nvidia-smi printed something this module cannot read; the message quotes the offending line."""


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

    {'driver_version', 'cuda_version', 'attached_gpus' (int or None),
     'gpus': {bus id: {'minor_number', 'uuid', 'mig_devices': {index: {...}}}}}
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
        "attached_gpus": _xml_int(root, "attached_gpus"),
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
        uuid = _xml_text(gpu, "uuid")
        result["gpus"][bus_id] = {
            "minor_number": _xml_int(gpu, "minor_number"),
            "uuid": uuid if uuid and uuid.startswith("GPU-") else None,
            "mig_devices": migs,
        }
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
        shown = ", ".join(field for field, _unused in lost_fields[:4])
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
