"""Applying 1,000 split DaemonSets to the lab apiserver: cluster_apply against kubectl.

    make bench     (or GPUSPLIT_BENCH_APPLY=1 pytest tests/bench/test_bench_apply.py -s)

The same 1,000 rendered DaemonSets go into two namespaces, once through gpusplit's batched
server-side apply and once through `kubectl apply --server-side` of one YAML stream; then each
is applied again unchanged. Prints the times and the ratios. A measurement, no assertion on time;
it does assert that the second gpusplit run sent no write.
"""

from __future__ import annotations

import os
import subprocess
import time
import uuid

import pytest
import yaml
from fleetgen import synthetic_fleet

from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s import apply
from ansible_collections.gpusplit.k8s.plugins.module_utils._split.planner import plan_fleet
from ansible_collections.gpusplit.k8s.plugins.plugin_utils.split_render import render_daemonsets
from lab import components as C

N = 1000

pytestmark = pytest.mark.integration


def _daemonsets(namespace: str) -> list[dict]:
    hosts = synthetic_fleet(N * 2)
    hosts = {h: {**v, "mode": "device_plugin", "split": {"count": 6}} for h, v in list(hosts.items())[:N]}
    return render_daemonsets(plan_fleet(hosts), {"namespace": namespace})


def _settled(item: dict) -> dict:
    meta = {k: v for k, v in item["metadata"].items() if k not in ("resourceVersion", "managedFields")}
    return {**{k: v for k, v in item.items() if k != "status"}, "metadata": meta}


def _kubectl(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "KUBECONFIG": str(C.KUBECONFIG)}
    return subprocess.run(
        ["kubectl", *args], input=stdin, capture_output=True, text=True, env=env, check=True
    )


@pytest.mark.skipif(
    not (
        os.environ.get("GPUSPLIT_BENCH_APPLY") == "1"
        or "--benchmark-enable" in os.environ.get("PYTEST_ADDOPTS", "")
    ),
    reason="applies 2,000 DaemonSets: runs with make bench (GPUSPLIT_BENCH_APPLY=1)",
)
def test_bench_apply_1000_daemonsets(lab, request):
    run = uuid.uuid4().hex[:5]
    ns_ours, ns_kubectl = f"bench-ours-{run}", f"bench-kubectl-{run}"
    ours = _daemonsets(ns_ours)
    theirs = _daemonsets(ns_kubectl)
    assert len(ours) == len(theirs) == N
    stream = yaml.safe_dump_all(theirs)
    _kubectl("create", "namespace", ns_ours)
    _kubectl("create", "namespace", ns_kubectl)
    try:
        t0 = time.perf_counter()
        first = apply.run(apply.Cluster(str(C.KUBECONFIG)), ours)
        t_ours = time.perf_counter() - t0
        t0 = time.perf_counter()
        again = apply.run(apply.Cluster(str(C.KUBECONFIG)), ours)
        t_ours_again = time.perf_counter() - t0

        # reading them back: the answer's JSON as it is (Cluster.list_items) against the dynamic
        # client's objects turned back into dicts (what it did before the seventh round)
        cluster = apply.Cluster(str(C.KUBECONFIG))
        t0 = time.perf_counter()
        raw = cluster.list_items("apps/v1", "DaemonSet", namespace=ns_ours)
        t_read = time.perf_counter() - t0
        res = cluster.resource("apps/v1", "DaemonSet")
        t0 = time.perf_counter()
        objects = cluster.client.get(res, namespace=ns_ours).to_dict()["items"]
        t_read_objects = time.perf_counter() - t0

        t0 = time.perf_counter()
        _kubectl("apply", "--server-side", "--field-manager=bench", "-f", "-", stdin=stream)
        t_kubectl = time.perf_counter() - t0
        t0 = time.perf_counter()
        _kubectl("apply", "--server-side", "--field-manager=bench", "-f", "-", stdin=stream)
        t_kubectl_again = time.perf_counter() - t0
    finally:
        _kubectl("delete", "namespace", ns_ours, ns_kubectl, "--wait=false")
    assert len(first["created"]) == N and again["api_writes"] == 0 and again["unchanged"] == N
    # the same objects, field for field, except what the DaemonSet controller may have written
    # between the two reads (status, and with it resourceVersion and its managedFields entry)
    assert len(raw) == len(objects) == N
    assert [_settled(i) for i in raw] == [
        _settled({"apiVersion": "apps/v1", "kind": "DaemonSet", **i}) for i in objects
    ]
    lines = [
        f"{N} DaemonSets, first apply:  gpusplit cluster_apply {t_ours:6.2f}s   kubectl --server-side {t_kubectl:6.2f}s   "
        f"ratio kubectl/gpusplit {t_kubectl / t_ours:5.2f}",
        f"{N} DaemonSets, unchanged:    gpusplit cluster_apply {t_ours_again:6.2f}s   kubectl --server-side {t_kubectl_again:6.2f}s   "
        f"ratio kubectl/gpusplit {t_kubectl_again / t_ours_again:5.2f}   (gpusplit writes: {again['api_writes']})",
        f"{N} DaemonSets, one LIST:     the answer's JSON {t_read:6.2f}s   the client's objects {t_read_objects:6.2f}s   "
        f"ratio objects/JSON {t_read_objects / t_read:5.2f}",
    ]
    print("\n" + "\n".join(lines))
    cache = getattr(request.config, "cache", None)  # absent under -p no:cacheprovider
    if cache is not None:
        cache.set("gpusplit/bench_apply", lines)
