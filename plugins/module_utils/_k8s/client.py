# Copyright: gpusplit contributors
# Apache-2.0
"""The one way gpusplit's modules connect to a cluster. Private to the collection.

Options in doc fragment gpusplit.k8s.cluster_auth (the action group gpusplit.k8s.cluster). Like
kubernetes.core: ``kubeconfig`` and ``context`` fall back to K8S_AUTH_KUBECONFIG and
K8S_AUTH_CONTEXT, then to the kubernetes client's default (KUBECONFIG, else ~/.kube/config).

The kubernetes client is imported guarded: a module calls require_kubernetes() before anything
here touches it. A module catches ``API_ERRORS`` (and
nothing wider) around its requests, so that a bug in its own logic is not reported as a failed
request.
"""

from __future__ import annotations

import json
import os
import traceback

from ansible.module_utils.basic import env_fallback

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError

try:
    from kubernetes import config
    from kubernetes.client.exceptions import OpenApiException
    from kubernetes.config.config_exception import ConfigException
    from kubernetes.dynamic.exceptions import ResourceNotFoundError, ResourceNotUniqueError
    from urllib3.exceptions import HTTPError

    HAS_K8S = True
    K8S_IMPORT_ERROR = None

    class KubeconfigError(GpusplitError, ConfigException):
        """No usable kubeconfig: a refusal, and what reaching the cluster raises (API_ERRORS)."""

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

    class KubeconfigError(GpusplitError):
        """No usable kubeconfig."""


# the variables kubernetes.core reads too, so that one setting serves both collections
KUBECONFIG_ENV = "K8S_AUTH_KUBECONFIG"
CONTEXT_ENV = "K8S_AUTH_CONTEXT"
DEFAULT_KUBECONFIG = "~/.kube/config"

CLUSTER_ARGS = {
    "kubeconfig": {"type": "path", "fallback": (env_fallback, [KUBECONFIG_ENV])},
    "context": {"type": "str", "fallback": (env_fallback, [CONTEXT_ENV])},
}


def cluster_params(params, environ=None):
    """``{"kubeconfig", "context"}`` to connect with, after the fallbacks.

    ``kubeconfig``: the option (its argument spec already falls back to K8S_AUTH_KUBECONFIG), else
    None when KUBECONFIG is set (the client reads that list itself), else ~/.kube/config. A named
    file that does not exist is refused here, naming where the name came from, before any request.
    """
    environ = os.environ if environ is None else environ
    kubeconfig = params.get("kubeconfig") or environ.get(KUBECONFIG_ENV) or None
    context = params.get("context") or environ.get(CONTEXT_ENV) or None
    if kubeconfig:
        path = os.path.expanduser(str(kubeconfig))
        if not os.path.isfile(path):
            raise KubeconfigError(
                f"kubeconfig {path} does not exist (from the module's kubeconfig option or {KUBECONFIG_ENV}): "
                "give the path of a kubeconfig file"
            )
        return {"kubeconfig": path, "context": context}
    if environ.get("KUBECONFIG"):
        return {"kubeconfig": None, "context": context}
    path = os.path.expanduser(DEFAULT_KUBECONFIG)
    if not os.path.isfile(path):
        raise KubeconfigError(
            f"no kubeconfig: the module's kubeconfig option, {KUBECONFIG_ENV} and KUBECONFIG are not set and "
            f"{path} does not exist; set one of them (module_defaults for group/gpusplit.k8s.cluster sets it "
            "once for every cluster module)"
        )
    return {"kubeconfig": path, "context": context}


def require_kubernetes(module):
    """Fail the module with Ansible's usual message when the kubernetes client is missing."""
    if not HAS_K8S:
        from ansible.module_utils.basic import missing_required_lib

        module.fail_json(msg=missing_required_lib("kubernetes"), exception=K8S_IMPORT_ERROR)


def api_client(params):
    """A kubernetes ApiClient from the module's kubeconfig/context parameters (see cluster_params)."""
    if not HAS_K8S:
        raise GpusplitError(
            "the Python library kubernetes is needed to reach the cluster; it is not installed"
        )
    found = cluster_params(params)
    return config.new_client_from_config(config_file=found["kubeconfig"], context=found["context"])


def list_json(call, *args, **kwargs):
    """The items of a typed client's LIST call (``core.list_node``, ...) as plain dicts.

    The answer's JSON is read as it is (``_preload_content=False``): the client's models and
    ``sanitize_for_serialization`` back to dicts would cost most of a read at fleet size, for
    dicts of the same shape (docs/dev/measurements.md).
    """
    answer = call(*args, _preload_content=False, **kwargs)
    return json.loads(answer.data).get("items") or []


def get_json(api, path, **query):
    """The JSON of a GET of ``path`` (``/api/v1/nodes``) through the ApiClient ``api``, as the server wrote it;
    ``query``: its parameters (``field_selector`` as ``fieldSelector``; None left out). An answer that is not
    2xx raises the client's ApiException with the server's message, as a typed call does.

    No typed API class on the way: the client (37.x) builds the pydantic models of a whole API group when its
    class is first used, ``CoreV1Api`` about 0.6 s of CPU, which a verify or a diagnosis paid for two lists
    whose JSON it reads as it is (docs/dev/measurements.md)."""
    from kubernetes.client.exceptions import ApiException

    params = [(_camel(key), value) for key, value in query.items() if value is not None]
    request = api.param_serialize(
        "GET",
        path,
        query_params=params,
        header_params={"Accept": "application/json"},
        auth_settings=["BearerToken"],
    )
    answer = api.call_api(*request)
    answer.read()
    if not 200 <= answer.status <= 299:
        raise ApiException.from_response(http_resp=answer, body=None, data=None)
    return json.loads(answer.data)


def list_path(api, path, **query):
    """The items of a LIST at ``path`` (:func:`get_json`) as plain dicts."""
    return get_json(api, path, **query).get("items") or []


def _camel(name):
    head, *rest = name.split("_")
    return head + "".join(word.title() for word in rest)


def error_text(exc):
    """The API server's own message when there is one, else the exception text."""
    return getattr(exc, "body", None) or str(exc)
