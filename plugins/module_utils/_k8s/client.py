# Copyright: gpusplit contributors
# Apache-2.0
"""The one way gpusplit's modules connect to a cluster. Private to the collection.

Options in doc fragment gpusplit.k8s.cluster. The kubernetes client is imported guarded: a module
calls require_kubernetes() before anything here touches it. A module catches ``API_ERRORS`` (and
nothing wider) around its requests, so that a bug in its own logic is not reported as a failed
request.
"""

from __future__ import annotations

import traceback

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError

try:
    from kubernetes import config
    from kubernetes.client.exceptions import OpenApiException
    from kubernetes.config.config_exception import ConfigException
    from kubernetes.dynamic.exceptions import ResourceNotFoundError, ResourceNotUniqueError
    from urllib3.exceptions import HTTPError

    HAS_K8S = True
    K8S_IMPORT_ERROR = None
    # what reaching the cluster can raise: the API's answers (ApiException, DynamicApiError), a
    # kind the API does not serve, an unusable kubeconfig, the connection (urllib3, sockets, TLS)
    API_ERRORS = (
        OpenApiException,
        ResourceNotFoundError,
        ResourceNotUniqueError,
        ConfigException,
        HTTPError,
        OSError,
    )
except ImportError:  # pragma: no cover - the venv and the collection's requirements bring it
    HAS_K8S = False
    K8S_IMPORT_ERROR = traceback.format_exc()
    API_ERRORS = (OSError,)

CLUSTER_ARGS = {
    "kubeconfig": {"type": "path"},
    "context": {"type": "str"},
}


def require_kubernetes(module):
    """Fail the module with Ansible's usual message when the kubernetes client is missing."""
    if not HAS_K8S:
        from ansible.module_utils.basic import missing_required_lib

        module.fail_json(msg=missing_required_lib("kubernetes"), exception=K8S_IMPORT_ERROR)


def api_client(params):
    """A kubernetes ApiClient from the module's kubeconfig/context parameters."""
    if not HAS_K8S:
        raise GpusplitError(
            "the Python library kubernetes is needed to reach the cluster; it is not installed"
        )
    return config.new_client_from_config(config_file=params.get("kubeconfig"), context=params.get("context"))


def error_text(exc):
    """The API server's own message when there is one, else the exception text."""
    return getattr(exc, "body", None) or str(exc)
