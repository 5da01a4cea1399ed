"""Filter gpusplit.k8s.gpu_table: render a fleet GPU report as a plain-text table.

Documented in plugins/filter/gpu_table.yml (ansible-doc -t filter gpusplit.k8s.gpu_table).
"""

from __future__ import annotations

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError, type_name
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.filter_errors import filters as wrap_filters

COLUMNS = ("NODE", "IDX", "BUS ID", "UUID", "NAME", "MEMORY", "MIG", "HEALTH")


def _text(value, default="-"):
    return default if value is None else str(value)


def _mig(gpu):
    mode = gpu.get("mig_mode") or {}
    current, pending = mode.get("current"), mode.get("pending")
    if current is None:
        return "n/a"
    text = "on" if current == "enabled" else "off"
    devices = gpu.get("mig_devices") or []
    if devices:
        profiles = {}
        for device in devices:
            profile = device.get("profile") or "?"
            profiles[profile] = profiles.get(profile, 0) + 1
        text += " " + ",".join(f"{count}x{profile}" for profile, count in sorted(profiles.items()))
    if pending and pending != current:
        text += f" (-> {'on' if pending == 'enabled' else 'off'})"
    return text


def _memory(gpu):
    mib = gpu.get("memory_total_mib")
    return "-" if mib is None else f"{mib} MiB"


def _entry_problems(host, entry):
    """What in one host's report is not shaped as gpusplit.k8s.nvidia_gpu_facts returns it."""
    if entry is None:
        return []
    if not isinstance(entry, dict):
        return [f"{host}: expected the nvidia_gpu_facts result (a mapping), got {type_name(entry)}"]
    gpus = entry.get("gpus") or []
    if not isinstance(gpus, list):
        return [f"{host}.gpus: expected a list of GPUs, got {type_name(gpus)}"]
    problems = []
    for i, gpu in enumerate(gpus):
        if not isinstance(gpu, dict):
            problems.append(f"{host}.gpus[{i}]: expected a mapping, got {type_name(gpu)}")
            continue
        for key in ("health", "mig_mode"):
            if not isinstance(gpu.get(key) or {}, dict):
                problems.append(f"{host}.gpus[{i}].{key}: expected a mapping, got {type_name(gpu[key])}")
        if not isinstance(gpu.get("mig_devices") or [], list):
            problems.append(
                f"{host}.gpus[{i}].mig_devices: expected a list, got {type_name(gpu['mig_devices'])}"
            )
    return problems


def gpu_table(report):
    """The fleet GPU report ({host: nvidia_gpu_facts result}) as a plain-text table."""
    if not isinstance(report, dict):
        raise GpusplitError(f"expected a mapping of host to its GPU report, got {type_name(report)}")
    problems = [
        problem for host in sorted(report, key=str) for problem in _entry_problems(host, report[host])
    ]
    if problems:
        raise GpusplitError(problems)
    rows = [COLUMNS]
    notes = []
    for key in sorted(report, key=str):
        host, entry = str(key), report[key] or {}
        gpus = entry.get("gpus") or []
        if not gpus:
            rows.append((host, "-", "-", "-", _text(entry.get("msg"), "no GPU"), "", "", ""))
            continue
        for gpu in gpus:
            health = gpu.get("health") or {}
            status = _text(health.get("status"), "?")
            rows.append(
                (
                    host,
                    _text(gpu.get("index")),
                    _text(gpu.get("pci_bus_id")),
                    _text(gpu.get("uuid")),
                    _text(gpu.get("name")),
                    _memory(gpu),
                    _mig(gpu),
                    status,
                )
            )
            for reason in health.get("reasons") or []:
                notes.append(f"{host} GPU {_text(gpu.get('index'))} ({status}): {reason}")
    widths = [max(len(row[column]) for row in rows) for column in range(len(COLUMNS))]
    lines = [
        "  ".join(cell.ljust(widths[column]) for column, cell in enumerate(row)).rstrip() for row in rows
    ]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines + notes)


class FilterModule:
    def filters(self):
        return wrap_filters((gpu_table,))
