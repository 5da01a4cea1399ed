# Copyright: gpusplit contributors
# Apache-2.0
"""Collect GPU facts by running nvidia-smi. Private to the collection.

nvidia-smi runs through an injected runner, run(argv) -> (rc, stdout, stderr), in four read-only
invocations, each for what it is best at:
  nvidia-smi --query-gpu=<fields> --format=csv        identity, memory, modes, ECC, row remapping, pages
  nvidia-smi --query-compute-apps=...  --format=csv   compute processes per GPU UUID
  nvidia-smi -L                                        MIG device UUIDs and profiles
  nvidia-smi -q -x                                     minor numbers, CUDA version, MIG instance ids/memory
(--query-gpu has no field for the minor number, the CUDA version or MIG devices.) What they print is
read by smi_parse.py; the NUMA node comes from sysfs, read through an injected reader.
"""

from __future__ import annotations

from ansible_collections.gpusplit.k8s.plugins.module_utils._gpu.health import (
    compute_health,
    smi_unopened_cause,
    unopened_health,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._gpu.ids import sysfs_pci_address
from ansible_collections.gpusplit.k8s.plugins.module_utils._gpu.schema import (
    GpuFactsError,
    new_gpu,
    new_mig_device,
    new_process,
    sort_gpus,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._gpu.smi_parse import (
    SMI_APPS_FIELDS,
    SMI_OPTIONAL_FIELDS,
    SMI_REQUIRED_FIELDS,
    SmiParseError,
    first_line,
    gpu_from_smi_row,
    parse_compute_apps,
    parse_gpu_query,
    parse_list_gpus,
    parse_query_xml,
    parse_unopenable_gpus,
    smi_says_no_devices,
    smi_says_no_driver,
    smi_unknown_field,
    token_kind,
)


class SmiNoDriver(GpuFactsError):
    """nvidia-smi says there is no NVIDIA driver to talk to."""


class SmiError(GpuFactsError):
    """nvidia-smi failed in a way that leaves nothing to report."""


def _describe(argv):
    return " ".join(argv[1:])


def _failure(argv, rc, stdout, stderr):
    said = first_line(stderr) or first_line(stdout) or "no output"
    return f"nvidia-smi {_describe(argv)} failed with exit code {rc}: {said}"


def _query_gpus(run, smi_path, warnings):
    """Run --query-gpu, dropping optional fields this nvidia-smi does not know. None: no GPUs at all."""
    fields = list(SMI_REQUIRED_FIELDS + SMI_OPTIONAL_FIELDS)
    while True:
        argv = [smi_path, "--query-gpu=" + ",".join(fields), "--format=csv"]
        rc, stdout, stderr = run(argv)
        if smi_says_no_driver(rc, stdout, stderr):
            raise SmiNoDriver(first_line(stdout) or first_line(stderr) or f"nvidia-smi exited with code {rc}")
        if smi_says_no_devices(stdout, stderr):
            return None, []
        unknown = smi_unknown_field(stdout, stderr)
        if rc != 0 and unknown:
            if unknown in fields and unknown in SMI_OPTIONAL_FIELDS:
                fields.remove(unknown)
                warnings.append(
                    f"this nvidia-smi does not know the query field {unknown}; the fact it feeds is null"
                )
                continue
            raise SmiError(_failure(argv, rc, stdout, stderr))
        break
    unopenable = parse_unopenable_gpus(stdout, stderr)
    if rc != 0:
        try:
            rows = parse_gpu_query(stdout, fields)
        except SmiParseError:
            if not unopenable:
                raise SmiError(_failure(argv, rc, stdout, stderr)) from None
            rows = []
        said = f" ({first_line(stderr)})" if first_line(stderr) else ""
        warnings.append(
            f"nvidia-smi --query-gpu exited with code {rc}{said}; using the {len(rows)} GPU row(s) it printed"
        )
        return rows, unopenable
    return parse_gpu_query(stdout, fields), unopenable


def _query_apps(run, smi_path, warnings):
    argv = [smi_path, "--query-compute-apps=" + ",".join(SMI_APPS_FIELDS), "--format=csv"]
    rc, stdout, stderr = run(argv)
    if rc != 0:
        warnings.append(f"{_failure(argv, rc, stdout, stderr)}; processes are null")
        return None
    return parse_compute_apps(stdout)


def _list_gpus(run, smi_path, warnings):
    """``nvidia-smi -L``: (listed GPUs {uuid: [MIG devices]}, [(bus id, why)] of GPUs it could not open)."""
    argv = [smi_path, "-L"]
    rc, stdout, stderr = run(argv)
    listed = parse_list_gpus(stdout)
    if rc != 0 and not listed:
        warnings.append(f"{_failure(argv, rc, stdout, stderr)}; MIG device UUIDs and profiles are null")
    return listed, parse_unopenable_gpus(stdout, stderr)


def cross_check(gpus, listed, listed_unopenable, xml):
    """Warnings when ``-L`` or ``-q -x`` know GPUs that ``--query-gpu`` (the facts) does not.

    ``gpus``: the records built from --query-gpu; ``listed``: {uuid: ...} from -L and the bus ids
    -L could not open; ``xml``: parse_query_xml's result or None. Each warning names the missing
    GPUs by bus id (by UUID where no output gives its bus id). Returns (warnings, missing names).
    """
    known_bus = {gpu["pci_bus_id"] for gpu in gpus if gpu.get("pci_bus_id")}
    known_uuid = {gpu["uuid"] for gpu in gpus if gpu.get("uuid")}
    xml_gpus = (xml or {}).get("gpus", {})
    bus_of_uuid = {details["uuid"]: bus for bus, details in xml_gpus.items() if details.get("uuid")}
    counts = {"--query-gpu": len(gpus)}
    missing = {}
    if listed or listed_unopenable:
        counts["-L"] = len(listed) + len({bus for bus, _unused in listed_unopenable})
        for uuid in listed:
            bus = bus_of_uuid.get(uuid)
            if uuid not in known_uuid and (bus is None or bus not in known_bus):
                missing.setdefault(bus or uuid, "-L")
        for bus, _why in listed_unopenable:
            if bus not in known_bus:
                missing.setdefault(bus, "-L")
    if xml is not None:
        attached = xml.get("attached_gpus")
        counts["-q -x"] = attached if attached is not None else len(xml_gpus)
        for bus in xml_gpus:
            if bus not in known_bus:
                missing.setdefault(bus, "-q -x")
    most = max(counts.values())
    if most <= len(gpus) and not missing:
        return [], []
    said = ", ".join(f"nvidia-smi {what} {count}" for what, count in counts.items())
    names = sorted(missing)
    unnamed = most - len(gpus) - len(names)
    named = ", ".join(names) if names else "none of them named by bus id"
    if unnamed > 0 and names:
        named += f" and {unnamed} more not named by any output"
    return [
        f"nvidia-smi reports different GPU counts ({said}); the facts have the {len(gpus)} of --query-gpu, "
        f"missing: {named}. A GPU missing from --query-gpu is often falling off the bus or not initialised: "
        "check the kernel log (dmesg) for NVIDIA Xid errors and run nvidia-smi by hand"
    ], names


def _query_xml(run, smi_path, warnings):
    argv = [smi_path, "-q", "-x"]
    rc, stdout, stderr = run(argv)
    if rc != 0:
        try:
            return parse_query_xml(stdout)
        except SmiParseError:
            warnings.append(
                f"{_failure(argv, rc, stdout, stderr)}; minor numbers, the CUDA version and MIG instance "
                "ids are null"
            )
            return None
    return parse_query_xml(stdout)


def numa_node_from_sysfs(text):
    """Content of /sys/bus/pci/devices/<addr>/numa_node: '-1' means no NUMA affinity -> None."""
    if text is None:
        return None
    try:
        value = int(text.strip())
    except ValueError:
        return None
    return value if value >= 0 else None


def _numa_node(read_text, sysfs_root, bus_id):
    if read_text is None or not bus_id:
        return None
    root = (sysfs_root or "/sys").rstrip("/")
    return numa_node_from_sysfs(read_text(f"{root}/bus/pci/devices/{sysfs_pci_address(bus_id)}/numa_node"))


def _mig_devices(listed, xml_migs):
    """Join `nvidia-smi -L` (uuid, profile) and `-q -x` (instance ids, memory) by MIG device index."""
    by_index = {entry["index"]: entry for entry in listed}
    devices = []
    for index in sorted(set(by_index) | set(xml_migs)):
        device = new_mig_device(index)
        entry = by_index.get(index, {})
        device["uuid"] = entry.get("uuid")
        device["profile"] = entry.get("profile")
        details = xml_migs.get(index, {})
        device["gpu_instance_id"] = details.get("gpu_instance_id")
        device["compute_instance_id"] = details.get("compute_instance_id")
        device["memory_total_mib"] = details.get("memory_total_mib")
        devices.append(device)
    return devices


def collect(run, smi_path, read_text=None, sysfs_root="/sys"):
    """Read every GPU through nvidia-smi. Returns {driver_version, cuda_driver_version, gpus, warnings, missing}.

    ``missing``: GPUs (bus ids, else UUIDs) that ``-L`` or ``-q -x`` list but ``--query-gpu`` does not;
    a warning names them.

    Raises SmiNoDriver when nvidia-smi cannot reach a driver, SmiError when it fails outright and
    SmiParseError when it prints something unreadable.
    """
    warnings = []
    rows, unopenable = _query_gpus(run, smi_path, warnings)
    if rows is None:
        return {
            "driver_version": None,
            "cuda_driver_version": None,
            "gpus": [],
            "warnings": warnings,
            "missing": [],
        }
    apps = _query_apps(run, smi_path, warnings)
    listed, listed_unopenable = _list_gpus(run, smi_path, warnings)
    xml = _query_xml(run, smi_path, warnings)
    xml_gpus = (xml or {}).get("gpus", {})

    driver = None
    gpus = []
    for row in rows:
        gpu, lost, row_warnings = gpu_from_smi_row(row)
        warnings.extend(row_warnings)
        raw_driver = row.get("driver_version")
        if driver is None and raw_driver and not token_kind(raw_driver):
            driver = raw_driver
        details = xml_gpus.get(gpu["pci_bus_id"], {})
        gpu["minor_number"] = details.get("minor_number")
        if gpu["mig_mode"]["current"] == "enabled":
            gpu["mig_devices"] = _mig_devices(listed.get(gpu["uuid"], []), details.get("mig_devices", {}))
        gpu["numa_node"] = _numa_node(read_text, sysfs_root, gpu["pci_bus_id"])
        if apps is not None and not lost:
            gpu["processes"] = [
                new_process(app["pid"], app["used_memory_mib"], app["name"])
                for app in apps
                if app["gpu_uuid"] == gpu["uuid"]
            ]
        gpu["health"] = compute_health(gpu, lost)
        gpus.append(gpu)
    # GPUs nvidia-smi could not open print no row, only a complaint naming their bus id.
    known = {gpu["pci_bus_id"] for gpu in gpus}
    for bus_id, why in unopenable:
        if bus_id in known:
            continue
        known.add(bus_id)
        gpu = new_gpu()
        gpu["pci_bus_id"] = bus_id
        gpu["minor_number"] = xml_gpus.get(bus_id, {}).get("minor_number")
        gpu["health"] = unopened_health(smi_unopened_cause(why), f"nvidia-smi cannot open this GPU ({why})")
        gpus.append(gpu)
    if driver is None and xml:
        driver = xml.get("driver_version")
    count_warnings, missing = cross_check(gpus, listed, listed_unopenable, xml)
    warnings.extend(count_warnings)
    return {
        "driver_version": driver,
        "cuda_driver_version": (xml or {}).get("cuda_version"),
        "gpus": sort_gpus(gpus),
        "warnings": warnings,
        "missing": missing,
    }
