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
  - Read-only, it changes nothing on the host, in check mode or not. Whether the NVML binding imports, and in which
    Python, is returned as RV(nvml_binding); the role C(gpusplit.k8s.gpu_discovery) installs the binding with
    M(ansible.builtin.pip) where it is missing and C(gpusplit_install_nvml_binding) asks for it.
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
      - Above V(0) and at most V(86400) (nan, inf or 1e300 are refused before anything runs).
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
      - Seconds for the whole pod-resources call, connecting included; above V(0) and at most V(86400).
    type: float
    default: 10
  host_state_path:
    description:
      - Also read back, in the same call, the record that M(gpusplit.k8s.gpu_host_files) left on the host
        (its option C(state_path)), and look at the files it lists again; returned as
        RV(host_state). The role C(gpusplit.k8s.gpu_host) skips gpu_host_files on a host whose record holds this
        run's digest and whose files are as recorded (docs/performance.md). Not read when unset.
    type: path
  binding_missing:
    description:
      - What a host whose NVML binding does not import gets, with O(backend=auto) or O(backend=nvml).
      - Unset, the backend decides. V(nvml) fails the host, naming the import error; V(auto) reads with
        C(nvidia-smi).
      - V(fail) fails the host with either backend; the failed result still holds RV(nvml_binding)
        (C(importable=false), C(pip)), for a caller that installs the binding and reads again (the role
        C(gpusplit.k8s.gpu_discovery) with C(gpusplit_install_nvml_binding), in a C(rescue) that only such a
        host reaches).
      - V(return) returns no GPUs, the reason in C(msg) and C(importable=false) in RV(nvml_binding). A host whose
        facts are used must not stop at such a reading.
    type: str
    choices: [fail, return]
notes:
  - Supports C(check_mode), and changes nothing either way.
  - GPU indices are not stable across reboots; use C(uuid) or C(pci_bus_id) to name a GPU.
  - The C(nvidia-smi) backend takes the minor number and the CUDA version from C(nvidia-smi -q -x),
    MIG device UUIDs and profiles from C(nvidia-smi -L), everything else from C(--query-gpu).
  - Runs on the Pythons that the controller's ansible-core supports on managed hosts, with the standard library
    only (and C(nvidia-ml-py) where NVML is read).
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

- name: Read NVML only (fails where the binding nvidia-ml-py does not import)
  gpusplit.k8s.nvidia_gpu_facts:
    backend: nvml

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
      that Python (C(python), its C(sys.executable)), the import error (C(error), null when importable) and, where
      it does not import, whether that Python has pip (C(pip), null otherwise).
    - Not asked for (C(importable) null) with O(backend=nvidia-smi).
  returned: always
  type: dict
  sample: {importable: false, python: /usr/bin/python3, error: "No module named 'pynvml'", pip: true}
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

# The work is module_utils/_gpu/facts.py's.
from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import fail_on_refusal
from ansible_collections.gpusplit.k8s.plugins.module_utils._gpu.facts import ARGUMENT_SPEC, execute


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    with fail_on_refusal(module):
        result = execute(module.params, module)
    for warning in result.pop("warnings"):
        module.warn(warning)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
