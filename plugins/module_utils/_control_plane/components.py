# Copyright: gpusplit contributors
# Apache-2.0
"""The names of the Kubernetes components whose flags gpusplit reads and edits.

Private to the collection.
"""

from __future__ import annotations

APISERVER = "kube-apiserver"
SCHEDULER = "kube-scheduler"
CONTROLLER_MANAGER = "kube-controller-manager"
KUBELET = "kubelet"

#: The control-plane components, in the order gpusplit writes and reports them.
CONTROL_PLANE = (APISERVER, SCHEDULER, CONTROLLER_MANAGER)
