#!/usr/bin/python
# Copyright: gpusplit contributors
# Apache-2.0
"""Ansible module gpusplit.k8s.gpu_pod_resources: which pod holds which GPU, from the kubelet's pod-resources API."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_pod_resources
short_description: Read which pods hold which GPUs on a node, from the kubelet's pod-resources API
version_added: "0.1.0"
description:
  - Calls C(v1.PodResourcesLister/List) of the kubelet's pod-resources API on its unix socket and returns every pod
    the kubelet runs with the devices allocated to each container, by resource name (device plugins, such as
    C(nvidia.com/gpu) with GPU UUIDs as device ids) and by DRA claim (driver, pool, device).
  - This is the authority on who holds a GPU. A pod keeps the devices it was given for as long as it lives, even
    after the device plugin stops advertising them (for example when a GPU moves from the Kubernetes share to the
    host), so the node's allocatable count cannot tell; this can.
  - The call is made by a small gRPC client of the collection's own (HTTP/2 over the unix socket, standard
    library only), so nothing needs to be installed on the host; the answer is decoded field by field after the
    kubelet's C(podresources/v1/api.proto), and fields it does not know are skipped.
  - Read-only. It runs the same in check mode and never reports a change.
author:
  - gpusplit team (!UNKNOWN)
options:
  socket:
    description:
      - The kubelet's pod-resources socket. A path longer than a unix socket address may be (about 107 octets)
        is reached through its directory.
    type: path
    default: /var/lib/kubelet/pod-resources/kubelet.sock
  timeout:
    description:
      - Seconds for the whole call, connecting included. A server that sends frames without end, or slowly, is cut
        off at this limit too.
      - Above V(0) and at most V(86400) (nan, inf or 1e300 are refused).
    type: float
    default: 10
  missing_ok:
    description:
      - When the socket does not exist (a node without a kubelet yet), return RV(available=false) and no pods instead
        of failing. Any other failure (permission denied, a socket nobody serves, not a gRPC server, a timeout, a gRPC
        error status) still fails.
    type: bool
    default: false
  resource_prefixes:
    description:
      - The resource names (by prefix) whose device ids are listed in RV(holders). DRA claims' devices are always
        listed there. RV(pods) has every resource.
    type: list
    elements: str
    default: ["nvidia.com/"]
notes:
  - "The socket belongs to root: run the task with C(become: true)."
  - The kubelet serves C(v1) of this API since Kubernetes 1.20 (on by default); C(dynamic_resources) are filled
    by kubelets with DRA (1.31 and later have the shape read here).
  - Runs on every managed-host Python the controller's ansible-core supports (3.8 and later with 2.19, 3.9 and
    later with 2.20 and 2.21) with the standard library only.
seealso:
  - name: Kubernetes documentation, Monitor Device Plugin Resources
    description: The pod-resources API of the kubelet.
    link: https://kubernetes.io/docs/concepts/extend-kubernetes/compute-storage-net/device-plugins/#monitoring-device-plugin-resources
extends_documentation_fragment:
  - gpusplit.k8s.attributes.check_mode_no_diff
"""

EXAMPLES = r"""
- name: Read who holds each GPU of the node
  gpusplit.k8s.gpu_pod_resources:
  become: true
  register: held

- name: Show the pods on each GPU
  ansible.builtin.debug:
    msg: "{{ held.holders | map(attribute='device_id') | zip(held.holders | map(attribute='pod')) | list }}"

- name: A node that may not run a kubelet yet
  gpusplit.k8s.gpu_pod_resources:
    socket: /var/lib/kubelet/pod-resources/kubelet.sock
    missing_ok: true
    timeout: 5
  become: true
  register: held
"""

RETURN = r"""
available:
  description: Whether the socket was there and answered (false only with O(missing_ok=true) and no socket).
  returned: always
  type: bool
  sample: true
socket:
  description: The socket that was read.
  returned: always
  type: str
  sample: /var/lib/kubelet/pod-resources/kubelet.sock
pods:
  description: Every pod the kubelet reports, with every container and its devices (all resource names).
  returned: always
  type: list
  elements: dict
  contains:
    namespace:
      description: The pod's namespace.
      type: str
    name:
      description: The pod's name.
      type: str
    containers:
      description: The pod's containers.
      type: list
      elements: dict
      contains:
        name:
          description: The container's name.
          type: str
        devices:
          description:
            - Devices from device plugins, one entry per resource name (the kubelet sends one per device and NUMA
              node; they are merged here, each device id once).
          type: list
          elements: dict
          contains:
            resource_name:
              description: The extended resource, for example C(nvidia.com/gpu) or C(nvidia.com/mig-1g.10gb).
              type: str
            device_ids:
              description: The devices' ids as the plugin named them (GPU or MIG UUIDs for NVIDIA's plugin).
              type: list
              elements: str
            numa_nodes:
              description: The NUMA nodes of these devices (sorted, each once), when the plugin reported them.
              type: list
              elements: int
        dynamic_resources:
          description: Devices from DRA ResourceClaims, one entry per claim.
          type: list
          elements: dict
          contains:
            claim_name:
              description: The ResourceClaim's name.
              type: str
            claim_namespace:
              description: The ResourceClaim's namespace.
              type: str
            devices:
              description: The claim's allocated devices, each with C(driver), C(pool), C(device) and C(cdi_devices).
              type: list
              elements: dict
  sample:
    - namespace: ml
      name: trainer-0
      containers:
        - name: main
          devices:
            - resource_name: nvidia.com/gpu
              device_ids: [GPU-3d5c1f8e-6a4b-4a1e-9f0a-2b7c8d9e0f13]
              numa_nodes: []
          dynamic_resources: []
holders:
  description:
    - One entry per device held by a container, for the resource names of O(resource_prefixes) (one per device
      id) and for every DRA claim device. Every entry has all the keys below, null where they do not apply.
  returned: always
  type: list
  elements: dict
  contains:
    namespace:
      description: The pod's namespace.
      type: str
    pod:
      description: The pod's name.
      type: str
    container:
      description: The container's name.
      type: str
    resource_name:
      description: The extended resource (null for a DRA claim's device).
      type: str
    device_id:
      description: The device id (null for a DRA claim's device).
      type: str
    claim_name:
      description: The ResourceClaim (null for a device plugin's device).
      type: str
    claim_namespace:
      description: The ResourceClaim's namespace (null for a device plugin's device).
      type: str
    driver:
      description: The DRA driver, for example C(gpu.nvidia.com) (null for a device plugin's device).
      type: str
    pool:
      description: The DRA pool, the node's name for NVIDIA's driver (null for a device plugin's device).
      type: str
    device:
      description: The DRA device, for example C(gpu-0) (null for a device plugin's device).
      type: str
  sample:
    - namespace: ml
      pod: trainer-0
      container: main
      resource_name: nvidia.com/gpu
      device_id: GPU-3d5c1f8e-6a4b-4a1e-9f0a-2b7c8d9e0f13
      claim_name: null
      claim_namespace: null
      driver: null
      pool: null
      device: null
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import fail_on_refusal
from ansible_collections.gpusplit.k8s.plugins.module_utils._kubelet.pod_resources import (
    DEFAULT_PREFIXES,
    DEFAULT_SOCKET,
    DEFAULT_TIMEOUT,
    read_pod_resources,
)


def run(module):
    p = module.params
    with fail_on_refusal(module, "reading the kubelet's pod resources", changed=False, socket=p["socket"]):
        result = read_pod_resources(
            socket_path=p["socket"],
            timeout=p["timeout"],
            missing_ok=p["missing_ok"],
            prefixes=p["resource_prefixes"],
        )
    return dict(result, changed=False)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            socket=dict(type="path", default=DEFAULT_SOCKET),
            timeout=dict(type="float", default=DEFAULT_TIMEOUT),
            missing_ok=dict(type="bool", default=False),
            resource_prefixes=dict(type="list", elements="str", default=list(DEFAULT_PREFIXES)),
        ),
        supports_check_mode=True,
    )
    module.exit_json(**run(module))


if __name__ == "__main__":
    main()
