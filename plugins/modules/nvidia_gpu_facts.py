#!/usr/bin/python
# Copyright: gpusplit contributors
# Apache-2.0
"""Ansible module gpusplit.k8s.nvidia_gpu_facts: the NVIDIA GPUs of a host, by UUID and PCI bus id."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: nvidia_gpu_facts
short_description: Gather facts about the NVIDIA GPUs of a host (UUIDs, bus ids, MIG, ECC, health)
version_added: "0.1.0"
description:
  - Enumerates the NVIDIA GPUs of the host and returns them as C(ansible_facts.nvidia_gpus), sorted by PCI
    bus id, with their UUIDs, minor numbers, memory, MIG mode and MIG devices, ECC counters, remapped rows,
    retired pages, NUMA node, persistence mode, compute processes and a health verdict.
  - Reads NVML through the Python binding C(pynvml) (PyPI package C(nvidia-ml-py)) when it is importable
    and NVML starts; otherwise runs C(nvidia-smi). The backend used is returned as
    C(ansible_facts.nvidia_gpu_backend).
  - Read-only, except for one thing asked for with O(install_binding). Where the NVML binding does not import,
    the module then pip-installs it into the Python that runs it and reads NVML in the same call. Check mode
    installs nothing and returns the facts read without it.
  - A host without an NVIDIA driver returns an empty list and says why in C(msg), unless O(required=true).
author:
  - gpusplit team (!UNKNOWN)
options:
  backend:
    description:
      - Where to read the GPUs from.
      - V(auto) uses NVML when C(import pynvml) works and C(nvmlInit) succeeds, else C(nvidia-smi), and says
        so in a warning.
      - V(nvml) fails when the binding cannot be imported.
      - V(nvidia-smi) fails when the C(nvidia-smi) binary cannot be found.
    type: str
    choices: [auto, nvml, nvidia-smi]
    default: auto
  required:
    description:
      - Fail when the host has no usable NVIDIA driver or no NVIDIA GPU.
      - When V(false), such a host returns C(nvidia_gpus=[]) and the reason in C(msg).
    type: bool
    default: false
  nvidia_smi_path:
    description:
      - Path of the C(nvidia-smi) binary. By default it is looked up on E(PATH) (and the usual sbin
        directories).
    type: path
  proc_root:
    description:
      - Where the proc filesystem is mounted. Each GPU process is classified as running in a container
        or not from C(<proc_root>/<pid>/cgroup).
      - Change it when the module runs in a container that mounts the host's C(/proc) elsewhere.
    type: path
    default: /proc
  sysfs_root:
    description:
      - Where sysfs is mounted. The C(nvidia-smi) backend reads each GPU's NUMA node from
        C(<sysfs_root>/bus/pci/devices/<address>/numa_node); NVML reports it itself.
    type: path
    default: /sys
  timeout:
    description:
      - Seconds each C(nvidia-smi) run, and the whole NVML collection (C(nvmlInit) and the GPU queries),
        may take. A wedged GPU or driver often makes them hang.
      - Past the limit the command (or the child process that talks to NVML) is killed and the host fails
        with a message naming the command (or the NVML call) and the limit; the other hosts go on.
        A hang is never taken for "no driver", and C(auto) does not fall back to C(nvidia-smi) after an
        NVML hang (it would hang the same way).
    type: float
    default: 30
  fallback_warning:
    description:
      - With O(backend=auto), warn on this host when the NVML binding is not importable and C(nvidia-smi)
        is used instead.
      - The role C(gpusplit.k8s.gpu_discovery) turns this off and says it once for the whole fleet instead.
        The result's C(nvml_binding) tells either way.
    type: bool
    default: true
  pod_resources_socket:
    description:
      - Also read, in the same call, which pods hold which GPUs from the kubelet's pod-resources API on this socket
        (what M(gpusplit.k8s.gpu_pod_resources) reads), and return it as RV(pod_resources). Not read when unset.
      - The role C(gpusplit.k8s.gpu_discovery) sets it, so that a run of C(site.yml) reads the GPUs and their
        holders with one module execution per host (docs/performance.md).
      - Never fails the module. A missing socket (no kubelet yet) gives C(available=false) in RV(pod_resources); any
        other failure is returned in its C(error), and the role C(gpusplit.k8s.gpu_resplit) stops with it before
        any change where a GPU may leave the host's Kubernetes share.
    type: path
  pod_resources:
    description:
      - Set to V(false) not to read O(pod_resources_socket) (no RV(pod_resources) then). The role
        C(gpusplit.k8s.gpu_discovery) passes C(gpusplit_discovery_pod_resources) here, so that a value that is not a
        boolean fails the host by name.
    type: bool
    default: true
  pod_resources_timeout:
    description:
      - Seconds for the pod-resources call, connecting included.
    type: float
    default: 10
  host_state_path:
    description:
      - Also read back, in the same call, the record that M(gpusplit.k8s.gpu_host_files) left on the host
        (its option C(state_path)), and look at the files it lists again; returned as
        RV(host_state). The role C(gpusplit.k8s.gpu_host) skips gpu_host_files on a host whose record holds this
        run's digest and whose files are as recorded (docs/performance.md). Not read when unset.
    type: path
  install_binding:
    description:
      - Where the NVML binding C(pynvml) does not import (and O(backend) is V(auto) or V(nvml)), run
        C(<the Python that runs this module> -m pip install nvidia-ml-py==<binding_version>) with a time limit of
        300 s, then read NVML in the same call. Where it imports, pip never runs, so a re-run touches no network.
      - A failed install fails the host with pip's last lines and what to do (no pip for that Python, an
        externally managed Python, no route to the package index).
      - The only change the module makes; the result is C(changed) when pip installed the binding (or, in check
        mode, would have run pip; nothing is installed then).
      - The role C(gpusplit.k8s.gpu_discovery) sets it from C(gpusplit_install_nvml_binding).
    type: bool
    default: false
  binding_version:
    description: The version of C(nvidia-ml-py) that O(install_binding) installs (pinned).
    type: str
    default: "13.615.71"
  break_system_packages:
    description:
      - Pass C(--break-system-packages) to pip, needed where the system Python is externally managed (PEP 668)
        and no virtual environment is used. Only with O(install_binding).
    type: bool
    default: false
notes:
  - Supports C(check_mode). Nothing but the NVML binding (O(install_binding)) is ever changed, and check mode
    does not install it.
  - GPU indices are not stable across reboots; use C(uuid) or C(pci_bus_id) to name a GPU.
  - The C(nvidia-smi) backend takes the minor number and the CUDA version from C(nvidia-smi -q -x),
    MIG device UUIDs and profiles from C(nvidia-smi -L), everything else from C(--query-gpu).
requirements:
  - An NVIDIA driver, and either the Python package C(nvidia-ml-py) (for NVML) or C(nvidia-smi) on the host.
seealso:
  - name: NVML API reference
    description: The library behind both backends.
    link: https://docs.nvidia.com/deploy/nvml-api/index.html
extends_documentation_fragment:
  - gpusplit.k8s.attributes.check_mode_no_diff
  - gpusplit.k8s.attributes.facts
"""

EXAMPLES = r"""
- name: Gather NVIDIA GPU facts
  gpusplit.k8s.nvidia_gpu_facts:

- name: Require GPUs and read them with nvidia-smi only
  gpusplit.k8s.nvidia_gpu_facts:
    backend: nvidia-smi
    required: true
    nvidia_smi_path: /usr/bin/nvidia-smi

- name: Read NVML, pip-installing the pinned binding where it is missing (no pip where it imports)
  gpusplit.k8s.nvidia_gpu_facts:
    backend: nvml
    install_binding: true
    binding_version: "13.615.71"

- name: Show the UUIDs of the healthy GPUs
  ansible.builtin.debug:
    msg: "{{ ansible_facts.nvidia_gpus | selectattr('health.status', 'equalto', 'ok')
             | map(attribute='uuid') }}"
"""

RETURN = r"""
msg:
  description: What was found, or why no GPU is reported.
  returned: always
  type: str
  sample: "8 NVIDIA GPU(s) through NVML, driver 570.172.08, CUDA 12.8: 8 ok"
ansible_facts:
  description: Facts added to the host.
  returned: always
  type: complex
  contains:
    nvidia_gpus:
      description:
        - The GPUs, sorted by PCI bus id. Every GPU has exactly the keys below. A value the GPU or the
          backend cannot report is null.
      returned: always
      type: list
      elements: dict
      contains:
        uuid:
          description: GPU UUID, C(GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx). Stable across reboots.
          type: str
          sample: GPU-3f1b2c4d-5e6f-7a8b-9c0d-1e2f3a4b5c6d
        index:
          description: NVML/nvidia-smi index. Not stable across reboots.
          type: int
          sample: 0
        minor_number:
          description: The N of C(/dev/nvidiaN); the NVIDIA DRA driver names the GPU C(gpu-<minor>).
          type: int
          sample: 0
        pci_bus_id:
          description: PCI bus id with an 8-digit upper-case domain, as nvidia-smi prints it.
          type: str
          sample: "00000000:18:00.0"
        name:
          description: Product name.
          type: str
          sample: NVIDIA H100 80GB HBM3
        memory_total_mib:
          description: Total framebuffer memory in MiB.
          type: int
          sample: 81559
        mig_mode:
          description: MIG mode, C(current) and C(pending) (after the next reset), each C(enabled),
            C(disabled) or null (no MIG support).
          type: dict
          sample: {current: disabled, pending: disabled}
        mig_devices:
          description:
            - MIG devices of the GPU (empty unless MIG is enabled), each with C(uuid) (C(MIG-...)),
              C(index), C(profile) (such as C(1g.10gb)), C(gpu_instance_id), C(compute_instance_id)
              and C(memory_total_mib).
          type: list
          elements: dict
        ecc:
          description:
            - C(mode_current) (C(enabled)/C(disabled)), C(uncorrected_volatile) (since the driver
              loaded) and C(uncorrected_aggregate) (lifetime) uncorrected ECC error counts; null when
              the GPU has no ECC.
          type: dict
          sample: {mode_current: enabled, uncorrected_volatile: 0, uncorrected_aggregate: 0}
        remapped_rows:
          description:
            - Row remapping (Ampere and later) C(correctable), C(uncorrectable) (counts), C(pending),
              C(failure) (booleans); null where unsupported (older GPUs, consumer GPUs, MIG in use).
          type: dict
          sample: {correctable: 0, uncorrectable: 0, pending: false, failure: false}
        retired_pages:
          description:
            - Dynamic page retirement (before Ampere) C(double_bit_pending) (a retirement waits for the
              next reset, NVML's pending status) and C(double_bit_count) (pages retired for double-bit
              errors); null where unsupported.
          type: dict
          sample: {double_bit_pending: false, double_bit_count: 0}
        numa_node:
          description: NUMA node the GPU is attached to, or null.
          type: int
          sample: 0
        persistence_mode:
          description: Whether persistence mode is on.
          type: bool
          sample: true
        processes:
          description:
            - Compute processes on the GPU, each with C(pid), C(used_memory_mib), C(name),
              C(in_container) and C(container_id) (64-hex id of its container; null on the host).
            - C(in_container) and C(container_id) are null when the process's cgroup file could not be
              read. The whole list is null when the GPU could not be asked.
          type: list
          elements: dict
        health:
          description:
            - C(status) is C(lost) (the GPU fell off the bus or needs a reset), C(degraded) (uncorrected
              volatile ECC errors, row remapping failed or pending, page retirement pending) or C(ok);
              C(reasons) lists one sentence per finding.
            - A GPU NVML will not open at all (C(nvmlDeviceGetHandleByIndex) fails) has only its C(index);
              its reason names the NVML error and what to do. C(NVML_ERROR_GPU_IS_LOST) and
              C(NVML_ERROR_RESET_REQUIRED) make it C(lost), any other error (C(NVML_ERROR_NO_PERMISSION),
              C(NVML_ERROR_NOT_SUPPORTED), ...) C(degraded).
          type: dict
          sample: {status: ok, reasons: []}
    nvidia_driver_version:
      description: NVIDIA driver version, null without a driver.
      returned: always
      type: str
      sample: 570.172.08
    nvidia_cuda_driver_version:
      description: Highest CUDA version the driver supports, null without a driver.
      returned: always
      type: str
      sample: "12.8"
    nvidia_gpu_backend:
      description: C(nvml) or C(nvidia-smi); null when no backend could reach a driver.
      returned: always
      type: str
      sample: nvml
nvml_binding:
  description:
    - Whether the NVML Python binding C(pynvml) imports in the Python that runs the module (C(importable)),
      that Python (C(python), its C(sys.executable)) and the import error (C(error), null when importable).
    - Not asked for (C(importable) null) with O(backend=nvidia-smi).
    - C(installed), the version of C(nvidia-ml-py) that O(install_binding) installed in this call (null when
      pip did not install it); in check mode C(would_install), the requirement pip would have installed.
  returned: always
  type: dict
  sample: {importable: false, python: /usr/bin/python3, error: "No module named 'pynvml'", installed: null}
pod_resources:
  description:
    - With O(pod_resources_socket), the kubelet's pod-resources answer, as M(gpusplit.k8s.gpu_pod_resources) returns
      it (C(available), C(socket), C(pods), C(holders)); with C(error) instead when it could not be read.
  returned: when O(pod_resources_socket) is set and O(pod_resources) is not false
  type: dict
  sample: {available: true, socket: /var/lib/kubelet/pod-resources/kubelet.sock, pods: [], holders: []}
host_state:
  description:
    - With O(host_state_path), the record read back, with C(path), C(digest), C(intact) (every file it lists is as it
      was left, and no other gpusplit drop-in appeared) and C(differs) (the files that are not). Null when there is
      no readable record (a host gpusplit has not written yet).
  returned: when O(host_state_path) is set
  type: dict
  sample: {path: /etc/gpusplit/host-state.json, digest: 5f1d..., intact: true, differs: []}
"""

import importlib
import os
import sys

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError, fail_on_refusal
from ansible_collections.gpusplit.k8s.plugins.module_utils._gpu import binding as gpu_binding
from ansible_collections.gpusplit.k8s.plugins.module_utils._gpu import deadline
from ansible_collections.gpusplit.k8s.plugins.module_utils._gpu import nvml as gpu_nvml
from ansible_collections.gpusplit.k8s.plugins.module_utils._gpu.processes import annotate_processes
from ansible_collections.gpusplit.k8s.plugins.module_utils._gpu.schema import (
    HEALTH_DEGRADED,
    HEALTH_LOST,
    HEALTH_OK,
    GpuFactsError,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._host import host_state
from ansible_collections.gpusplit.k8s.plugins.module_utils._host import pod_resources as host_pod_resources

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
    "pod_resources_timeout": {"type": "float", "default": host_pod_resources.DEFAULT_TIMEOUT},
    "host_state_path": {"type": "path"},
    "install_binding": {"type": "bool", "default": False},
    "binding_version": {"type": "str", "default": gpu_binding.DEFAULT_VERSION},
    "break_system_packages": {"type": "bool", "default": False},
}


class HostIO:
    """Everything the module reads from the host, in one place so that tests can replace it."""

    def __init__(self, module, timeout=deadline.DEFAULT_TIMEOUT):
        self.module = module
        self.timeout = timeout

    def import_nvml(self):
        return importlib.import_module("pynvml")

    def which(self, name):
        return self.module.get_bin_path(name, required=False)

    def is_executable(self, path):
        return os.path.isfile(path) and os.access(path, os.X_OK)

    @property
    def check_mode(self):
        return self.module.check_mode

    def run(self, argv):
        """(rc, stdout, stderr) of ``argv``; GpuTimeout when it takes longer than ``timeout``."""
        return deadline.run_command(argv, self.timeout, env=dict(os.environ, LC_ALL="C"))

    def install_binding(self, version, break_system_packages):
        """pip-install the NVML binding into this Python; True when pip installed it."""
        return gpu_binding.install(
            deadline.run_command,
            sys.executable,
            version,
            break_system_packages,
        )

    def read_text(self, path):
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                return handle.read()
        except OSError:
            return None


def _empty_facts():
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
        "ansible_facts": _empty_facts(),
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


def _import_binding(params, io, binding):
    """``import pynvml``; where it fails and ``install_binding`` asks for it, pip-install the binding into
    this Python first and import it again. Records in ``binding`` what was installed (``installed``, the
    version) or, in check mode, what would be (``would_install``). Raises ImportError when the binding is
    still missing (the caller falls back to nvidia-smi), GpuFactsError when pip fails."""
    try:
        return io.import_nvml()
    except ImportError as exc:
        if not params.get("install_binding"):
            raise
        version = params.get("binding_version") or gpu_binding.DEFAULT_VERSION
        if getattr(io, "check_mode", False):
            binding["would_install"] = f"{gpu_binding.PACKAGE}=={version}"
            raise
        missing = exc
    # pip's "Successfully installed": the binding was missing and is there now; without it (pip had
    # nothing to do) the import below still says whether it imports
    if io.install_binding(version, params.get("break_system_packages", False)):
        binding["installed"] = version
    importlib.invalidate_caches()
    try:
        return io.import_nvml()
    except ImportError as exc:
        raise GpuFactsError(
            f"gpusplit_install_nvml_binding: pip installed {gpu_binding.PACKAGE}=={version} into {sys.executable}, "
            f"but the binding still does not import there ({exc}; before the install: {missing}). Check that "
            "pip installs into that Python's site-packages (a user or target option in pip.conf may send it "
            "elsewhere)."
        ) from None


def gather(params, io):
    """The module's work, with the host behind io. Returns the result; raises GpuFactsError to fail."""
    backend = params["backend"]
    timeout = deadline.check_timeout(params.get("timeout", deadline.DEFAULT_TIMEOUT))
    warnings = []
    no_driver = []
    data = None
    used = None
    binding = {"importable": None, "python": sys.executable, "error": None, "installed": None}

    if backend in ("auto", "nvml"):
        try:
            nvml = _import_binding(params, io, binding)
        except ImportError as exc:
            binding.update(importable=False, error=str(exc))
            if backend == "nvml":
                raise GpuFactsError(
                    "backend=nvml needs the Python module pynvml (PyPI package nvidia-ml-py) in the Python "
                    f"that runs this module: {exc}"
                ) from None
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
        return host_pod_resources.read_pod_resources(
            socket_path=socket, timeout=params["pod_resources_timeout"], missing_ok=True
        )
    except GpusplitError as exc:
        return {"available": False, "socket": socket, "pods": [], "holders": [], "error": str(exc)}


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    with fail_on_refusal(module):
        timeout = deadline.check_timeout(module.params["timeout"])
        result = gather(module.params, HostIO(module, timeout))
    holders = read_holders(module.params)
    if holders is not None:
        result["pod_resources"] = holders
    if module.params["host_state_path"]:
        result["host_state"] = host_state.read_state(module.params["host_state_path"])
    binding = result.get("nvml_binding") or {}
    # the only change the module makes: the NVML binding, where install_binding asked for it
    result["changed"] = bool(binding.get("installed") or binding.get("would_install"))
    for warning in result.pop("warnings"):
        module.warn(warning)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
