"""Filter gpusplit.k8s.gpu_table: render a fleet GPU report as a plain-text table.

Documented in plugins/filter/gpu_table.yml (ansible-doc -t filter gpusplit.k8s.gpu_table).
"""

from __future__ import annotations

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


def gpu_table(report):
    if not isinstance(report, dict):
        raise TypeError(f"gpu_table expects a dict host -> report, got {type(report).__name__}")
    rows = [COLUMNS]
    notes = []
    for host in sorted(report):
        entry = report[host] or {}
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
        return {"gpu_table": gpu_table}
