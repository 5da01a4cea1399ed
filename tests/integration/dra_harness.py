"""Lab harness for DRA mode: what the NVIDIA DRA driver would publish, on the lab's kwok nodes.

The lab has no GPUs and no kubelet, so no DRA driver runs. This harness plays the one part of the
driver that the control plane sees: for a node it publishes the ResourceSlice the driver's
kubelet plugin would publish (driver gpu.nvidia.com, pool = node name, one device gpu-<minor> per
GPU of the node's fixture, with the uuid / productName / resource.kubernetes.io/pciBusID
attributes), and the DeviceClass gpu.nvidia.com that the driver's chart installs. Both are
rendered by lab/dra_driver.py. Everything else (claims, allocation, DeviceTaintRules,
eviction) is the real kube-apiserver, kube-scheduler and kube-controller-manager.

It also writes a node's containerd config below the lab's host root for that host
(.lab/hosts/<host>/etc/containerd/config.toml), which the dra_driver role's preflight reads.

    python tests/integration/dra_harness.py publish <node> <fixture>
    python tests/integration/dra_harness.py unpublish <node>
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
for path in (ROOT / ".collections", ROOT):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from ansible_collections.gpusplit.k8s.plugins.module_utils._dra.names import (  # noqa: E402
    API_GROUP_VERSION,
    DEVICE_CLASS,
    DRIVER,
)
from lab import components as C
from lab.components import KUBECONFIG  # noqa: E402
from lab.dra_driver import render_device_class, render_resource_slice  # noqa: E402
from lab.nodes import FIXTURES, ensure_node  # noqa: E402

FIELD_MANAGER = "gpusplit-lab-dra-harness"
HARNESS_LABEL = {"gpusplit.io/lab-dra-harness": "true"}
HOST_ROOTS = C.HOSTS_ROOT


def retry(func, timeout: float = 180, interval: float = 2.0, what: str = "the lab API server"):
    """Call ``func`` until it does not fail with a connection error or a 5xx (the lab's apiserver
    is restarted by other tests now and then)."""
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    deadline = time.time() + timeout
    while True:
        try:
            return func()
        except (HTTPError, ConnectionError, OSError) as exc:
            err = exc
        except ApiException as exc:
            if exc.status and exc.status < 500 and exc.status != 429:
                raise
            err = exc
        if time.time() > deadline:
            raise AssertionError(f"{what} did not answer within {timeout}s: {err}")
        time.sleep(interval)


def api_client():
    from kubernetes import config

    return config.new_client_from_config(str(KUBECONFIG))


def dynamic():
    from kubernetes.dynamic import DynamicClient

    return DynamicClient(api_client())


def fixture_doc(fixture: str) -> dict:
    return json.loads((FIXTURES / f"{fixture}.json").read_text())


def apply(obj: dict) -> dict:
    """Server-side apply ``obj`` as the harness."""

    def run():
        client = dynamic()
        res = client.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        meta = obj["metadata"]
        return client.server_side_apply(
            res, body=obj, name=meta["name"], namespace=meta.get("namespace"), field_manager=FIELD_MANAGER
        ).to_dict()

    return retry(run)


def delete(api_version: str, kind: str, name: str, namespace: str | None = None) -> bool:
    """Delete if present; True when something was deleted."""
    from kubernetes.dynamic.exceptions import NotFoundError

    def run():
        client = dynamic()
        res = client.resources.get(api_version=api_version, kind=kind)
        try:
            client.delete(res, name=name, namespace=namespace)
            return True
        except NotFoundError:
            return False

    return retry(run)


def get(api_version: str, kind: str, name: str, namespace: str | None = None) -> dict | None:
    from kubernetes.dynamic.exceptions import NotFoundError

    def run():
        client = dynamic()
        res = client.resources.get(api_version=api_version, kind=kind)
        try:
            return client.get(res, name=name, namespace=namespace).to_dict()
        except NotFoundError:
            return None

    return retry(run)


def ensure_device_class() -> bool:
    """The chart's DeviceClass gpu.nvidia.com; True when the harness created it (then it deletes it)."""
    if get(API_GROUP_VERSION, "DeviceClass", DEVICE_CLASS) is not None:
        return False
    apply(render_device_class(labels=HARNESS_LABEL))
    return True


def resource_slice(node: str, fixture: str, generation: int = 1) -> dict:
    doc = fixture_doc(fixture)
    return render_resource_slice(
        node, doc.get("gpus") or [], generation, doc.get("driver_version"), labels=HARNESS_LABEL
    )


def publish(node: str, fixture: str, generation: int = 1) -> dict:
    """Make sure the kwok node exists, then publish its ResourceSlice as the driver would."""
    from kubernetes import client

    core = client.CoreV1Api(api_client())
    retry(lambda: ensure_node(core, node, fixture))
    return apply(resource_slice(node, fixture, generation))


def unpublish(node: str) -> bool:
    return delete(API_GROUP_VERSION, "ResourceSlice", f"{node}-{DRIVER}")


def host_root(host: str) -> Path:
    return HOST_ROOTS / host


def write_host_file(host: str, path: str, text: str | None) -> Path:
    """Write (or, with None, remove) ``path`` below the lab host root of ``host``."""
    target = host_root(host) / path.lstrip("/")
    if text is None:
        if target.exists():
            target.unlink()
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)
    return target


# containerd configs as they look on real nodes
CONTAINERD_2_CONFIG = """\
# containerd 2.x (config version 3): CDI is on unless enable_cdi = false
version = 3

[plugins.'io.containerd.cri.v1.runtime'.containerd]
  default_runtime_name = 'runc'
"""

CONTAINERD_17_CONFIG = """\
# containerd 1.7 (config version 2): CDI is off unless enable_cdi = true; the drop-ins may set it
version = 2
imports = ["/etc/containerd/conf.d/*.toml"]

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.10"
"""

CONTAINERD_17_CDI_DROPIN = """\
[plugins."io.containerd.grpc.v1.cri"]
  enable_cdi = true
  cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]
"""


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[0] == "publish":
        ensure_device_class()
        out = publish(argv[1], argv[2])
        print(json.dumps([d["name"] for d in out["spec"]["devices"]]))
        return 0
    if len(argv) == 2 and argv[0] == "unpublish":
        print("deleted" if unpublish(argv[1]) else "absent")
        return 0
    print(__doc__.strip().rsplit("\n\n", 1)[-1], file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
