"""module_utils/_k8s/client.py's get_json and list_path against the lab's apiserver: a GET's JSON as the server
wrote it, with its query parameters, and the server's error as the client's ApiException; no typed API class
on the way (the verify and the diagnosis read their lists this way)."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import pytest

from lab import components as C


@pytest.fixture(scope="module")
def api(lab):
    from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.client import api_client

    return api_client({"kubeconfig": str(C.KUBECONFIG)})


def names(items):
    return sorted(item["metadata"]["name"] for item in items)


def test_a_list_is_what_kubectl_lists(api, kubectl):
    from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.client import list_path

    assert names(list_path(api, "/api/v1/nodes")) == names(kubectl.json("get", "nodes")["items"])
    ns = f"getjson-{uuid.uuid4().hex[:6]}"
    kubectl.namespace(ns)
    try:
        for cm, side in (("a", "x"), ("b", "y")):
            kubectl("-n", ns, "create", "configmap", cm)
            kubectl("-n", ns, "label", "configmap", cm, f"side={side}")
        # query parameters reach the server, named as it names them (label_selector -> labelSelector)
        found = list_path(api, f"/api/v1/namespaces/{ns}/configmaps", label_selector="side=y")
        assert names(found) == ["b"]
        found = list_path(api, f"/api/v1/namespaces/{ns}/configmaps", field_selector="metadata.name=a")
        assert names(found) == ["a"]
        assert names(list_path(api, f"/api/v1/namespaces/{ns}/configmaps", label_selector=None)) == [
            "a",
            "b",
            "kube-root-ca.crt",
        ]
    finally:
        kubectl("delete", "namespace", ns, "--wait=false")


def test_the_servers_error_is_the_clients_exception_with_its_message(api):
    from kubernetes.client.exceptions import ApiException

    from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.client import (
        API_ERRORS,
        error_text,
        get_json,
    )

    with pytest.raises(ApiException) as missing:
        get_json(api, "/api/v1/namespaces/default/pods/no-such-pod")
    assert missing.value.status == 404
    assert json.loads(error_text(missing.value))["message"] == 'pods "no-such-pod" not found'
    with pytest.raises(
        API_ERRORS
    ) as unserved:  # an API the cluster does not serve: 404, as the module reads it
        get_json(api, "/apis/nothing.example.com/v1/things")
    assert unserved.value.status == 404


def test_no_typed_api_class_is_built(lab):
    # the point of get_json: CoreV1Api builds every model of its group when first used, about 0.6 s of CPU
    probe = (
        "import sys\n"
        "from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.client import api_client, list_path\n"
        f"items = list_path(api_client({{'kubeconfig': {str(C.KUBECONFIG)!r}}}), '/api/v1/nodes')\n"
        "print(len(items), sorted(m for m in sys.modules if m.startswith('kubernetes.client.api.')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": ":".join(sys.path)},
    )
    count, loaded = done.stdout.split(" ", 1)
    assert int(count) > 0 and loaded.strip() == "[]"
