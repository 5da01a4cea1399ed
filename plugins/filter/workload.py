"""Filters rendering gang jobs (PodGroup + member Pods) for kubernetes.core.

    {{ {'name': 'train', 'replicas': 4, 'min_count': 4, 'gpus_per_pod': 1}
       | gpusplit.k8s.gpusplit_gang_job('1.37') }}          -> [PodGroup, Pod x4]
    {{ spec | gpusplit.k8s.gpusplit_podgroup(gpusplit_kube_version) }}
    {{ '1.36.3' | gpusplit.k8s.gpusplit_podgroup_api_version }}  -> scheduling.k8s.io/v1alpha2

Every refusal becomes one AnsibleFilterError listing all reasons.
"""

from __future__ import annotations

from ansible_collections.gpusplit.k8s.plugins.plugin_utils import workload
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.filter_errors import filters as wrap_filters

REFUSALS = {workload.WorkloadError: "gpusplit gang job"}


def gpusplit_gang_job(spec, version="1.37"):
    """The PodGroup and its member Pods, in creation order."""
    return workload.render_gang_job(spec, version)


def gpusplit_podgroup(spec, version="1.37"):
    """The PodGroup of a gang job."""
    return workload.render_podgroup(spec, version)


def gpusplit_podgroup_api_version(version):
    """The PodGroup apiVersion of a Kubernetes version (1.36 v1alpha2, 1.37 v1beta1)."""
    return workload.podgroup_api_version(version)


class FilterModule:
    def filters(self):
        return wrap_filters((gpusplit_gang_job, gpusplit_podgroup, gpusplit_podgroup_api_version), REFUSALS)
