"""gpusplit's four cluster modules against their kubernetes.core counterparts, on the lab at N nodes.

The same job, on the same lab, once through the gpusplit module and once through the kubernetes.core module,
each in a playbook on localhost (the controller), the runs alternating (gpusplit, kubernetes.core, gpusplit, ...):

* ``read``: ``cluster_read``, one task with the queries the roles read before a change (the labelled Nodes with
  gpusplit's managed fields, the split device-plugin DaemonSets, every pod, each with the fields the roles keep),
  against ``k8s_info``, one task per kind; the cluster holds N labelled nodes, N split DaemonSets and their pods,
  and one workload pod per node;
* ``apply``: ``cluster_apply`` against ``k8s`` with ``apply`` and ``server_side_apply`` (the same field manager,
  conflicts forced), the N split device-plugin DaemonSets of the nodes in one task's ``definition``;
* ``taint``: ``node_taints``, one task for every node, against ``k8s_taint`` in a loop over the nodes (one
  module execution per node); the taint ``nvidia.com/gpu=present:NoSchedule`` on every node;
* ``evict``: ``pod_eviction``, one task naming one workload pod on each node, against ``k8s_drain`` in a loop
  over the nodes with the pods chosen by their label (it also cordons each node: it has no way not to); both
  wait until the pods are gone, reading every second.

Each job runs twice on the state the bench sets up before it: the first run does the work, the re-run finds it
done (for ``read``, the same read twice). Per run:

* wall seconds of ``ansible-playbook``;
* controller CPU seconds: ``ansible-playbook``, its workers and the module processes (all on this machine);
* module executions of the job's tasks (each loop item one);
* the module's API requests, counted by a TLS proxy of this bench between the modules and the apiserver (the
  playbooks' kubeconfig names it): reads (GET: lists, gets, the API's discovery), writes (POST, PUT, PATCH,
  DELETE) and dry runs (``dryRun=All``, which store nothing), and the bytes the apiserver answered; the proxy's
  own CPU is this bench's, counted nowhere above;
* the apiserver's own count of writes during the run (``apiserver_request_total`` of its /metrics, without
  dry runs and the lab's background, as ``tools/bench_fleet.py`` reads it): a cross-check of the proxy's, but it
  also counts what the cluster's controllers and kwok write meanwhile (the pods of new DaemonSets, the
  deletion of evicted pods);
* the apiserver's CPU seconds, ``changed`` of the play recap, and the load average before the run.

Both modules' clients keep what they read of the API's discovery in a file in the temporary folder (kubernetes.core
lazily, group by group; the kubernetes client's dynamic client, which gpusplit's read and apply use, every group at
once). The bench gives the playbooks a temporary folder of their own and fills both files once before the first
measured run (a read through each module, not counted), as on a controller that has run a playbook before;
``--cold-discovery`` empties it before every run instead, as a job in a fresh execution environment starts.
Each job checks that both modules did the same work (what the cluster holds afterwards, or the
same counts read); nothing is asserted about time. Needs the lab (``python -m lab.lab up``); it creates its own
nodes (``cmb-0000``...) and namespace and deletes them at the end. Current figures: docs/performance.md.

    python tools/bench_cluster_modules.py [--nodes 200] [--trials 2] [--jobs read,apply,taint,evict]
                                          [--json out/bench-cluster-modules.json] [--keep DIR] [--cold-discovery]
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import http.client
import json
import os
import re
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parents[1]
# the collection as `make venv` links it (.collections), the lab, the fleet bench, the bench's synthetic fleet
for _path in (ROOT / ".collections", ROOT, ROOT / "tools", ROOT / "tests" / "bench"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import bench_fleet  # noqa: E402  (tools/: the apiserver's write count, CPU readings, the DaemonSets' settle)

PREFIX = "cmb-"
NAMESPACE = "gpusplit-cmbench"
FIELD_MANAGER = "gpusplit"
MANAGED = "app.kubernetes.io/managed-by=gpusplit"
SPLIT_LABEL = "gpusplit.io/split"
# the workload pods of the read and evict jobs
WORK_LABEL = "gpusplit.io/cmbench"
TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
IMPLS = ("gpusplit", "kubernetes.core")
JOBS = ("read", "apply", "taint", "evict")
WRITE_METHODS = {"POST", "PUT", "PATCH", "DELETE"}
# headers of one connection, not of the request or answer relayed
HOP_HEADERS = {
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "content-length",
    "host",
    "date",
    "server",
}

# ---------------------------------------------------------------------------------------------------------
# The playbooks: one per job and module. Each ends with a line the bench reads: BENCH-RESULT <json>.

RESULT_TASK = """
    - name: Say what was done
      ansible.builtin.debug:
        msg: "BENCH-RESULT {{{{ {result} | to_json }}}}"
"""

PLAYBOOKS = {
    ("read", "gpusplit"): """
    - name: "bench: read the labelled nodes, the split DaemonSets and every pod in one step"
      gpusplit.k8s.cluster_read:
        kubeconfig: "{{ bench_kubeconfig }}"
        queries:
          nodes:
            api_version: v1
            kind: Node
            label_selectors: [gpusplit.io/split]
            fields: [metadata.name, metadata.labels, metadata.annotations, spec.taints, metadata.managedFields]
            field_manager: gpusplit
          daemonsets:
            api_version: apps/v1
            kind: DaemonSet
            label_selectors: [app.kubernetes.io/managed-by=gpusplit, app.kubernetes.io/name=gpusplit-device-plugin]
            fields: [metadata.name, metadata.annotations, spec.template.spec.containers]
          pods:
            api_version: v1
            kind: Pod
            fields: [metadata.namespace, metadata.name, metadata.uid, metadata.ownerReferences, status.phase]
      register: bench_out
"""
    + RESULT_TASK.format(result="{'executions': 1, 'counts': bench_out.counts}"),
    ("read", "kubernetes.core"): """
    - name: "bench: read the labelled nodes"
      kubernetes.core.k8s_info:
        kubeconfig: "{{ bench_kubeconfig }}"
        api_version: v1
        kind: Node
        label_selectors: [gpusplit.io/split]
      register: bench_nodes_read
    - name: "bench: read the split DaemonSets"
      kubernetes.core.k8s_info:
        kubeconfig: "{{ bench_kubeconfig }}"
        api_version: apps/v1
        kind: DaemonSet
        label_selectors: [app.kubernetes.io/managed-by=gpusplit, app.kubernetes.io/name=gpusplit-device-plugin]
      register: bench_daemonsets_read
    - name: "bench: read every pod"
      kubernetes.core.k8s_info:
        kubeconfig: "{{ bench_kubeconfig }}"
        api_version: v1
        kind: Pod
      register: bench_pods_read
"""
    + RESULT_TASK.format(
        result="{'executions': 3, 'counts': {'nodes': bench_nodes_read.resources | length,"
        " 'daemonsets': bench_daemonsets_read.resources | length, 'pods': bench_pods_read.resources | length}}"
    ),
    ("apply", "gpusplit"): """
    - name: "bench: server-side apply the split DaemonSets"
      gpusplit.k8s.cluster_apply:
        kubeconfig: "{{ bench_kubeconfig }}"
        field_manager: gpusplit
        objects: "{{ bench_objects }}"
      register: bench_out
"""
    + RESULT_TASK.format(
        result="{'executions': 1, 'changed_objects': (bench_out.created | length) + (bench_out.updated | length),"
        " 'module_writes': bench_out.api_writes}"
    ),
    ("apply", "kubernetes.core"): """
    - name: "bench: server-side apply the split DaemonSets"
      kubernetes.core.k8s:
        kubeconfig: "{{ bench_kubeconfig }}"
        state: present
        apply: true
        server_side_apply:
          field_manager: gpusplit
          force_conflicts: true
        definition: "{{ bench_objects }}"
      register: bench_out
"""
    + RESULT_TASK.format(
        result="{'executions': 1, 'changed_objects': bench_out.result.results | default([bench_out])"
        " | selectattr('changed') | list | length}"
    ),
    ("taint", "gpusplit"): """
    - name: "bench: taint every node in one step"
      gpusplit.k8s.node_taints:
        kubeconfig: "{{ bench_kubeconfig }}"
        nodes: "{{ bench_taint_nodes }}"
      register: bench_out
"""
    + RESULT_TASK.format(result="{'executions': 1, 'changed_objects': bench_out.nodes | length}"),
    ("taint", "kubernetes.core"): """
    - name: "bench: taint each node"
      kubernetes.core.k8s_taint:
        kubeconfig: "{{ bench_kubeconfig }}"
        name: "{{ item }}"
        state: present
        taints: ["{{ bench_taint_spec }}"]
      loop: "{{ bench_nodes }}"
      register: bench_out
"""
    + RESULT_TASK.format(
        result="{'executions': bench_out.results | length,"
        " 'changed_objects': bench_out.results | selectattr('changed') | list | length}"
    ),
    ("evict", "gpusplit"): """
    - name: "bench: evict the workload pods and wait until they are gone"
      gpusplit.k8s.pod_eviction:
        kubeconfig: "{{ bench_kubeconfig }}"
        pods: "{{ bench_pods }}"
        delay: 1
        wait_timeout: 300
      register: bench_out
"""
    + RESULT_TASK.format(
        result="{'executions': 1, 'changed_objects': bench_out.evicted | length,"
        " 'already_gone': bench_out.already_gone | length}"
    ),
    ("evict", "kubernetes.core"): """
    - name: "bench: drain each node of its workload pods and wait until they are gone"
      kubernetes.core.k8s_drain:
        kubeconfig: "{{ bench_kubeconfig }}"
        name: "{{ item }}"
        state: drain
        pod_selectors: ["gpusplit.io/cmbench=evict"]
        delete_options:
          force: true
          ignore_daemonsets: true
          wait_timeout: 300
          wait_sleep: 1
      loop: "{{ bench_nodes }}"
      register: bench_out
"""
    + RESULT_TASK.format(
        result="{'executions': bench_out.results | length,"
        " 'changed_objects': bench_out.results | selectattr('changed') | list | length}"
    ),
}


def playbook_text(job: str, impl: str) -> str:
    return (
        f'- name: "bench: {job} through {impl}"\n'
        "  hosts: localhost\n"
        "  gather_facts: false\n"
        "  tasks:" + PLAYBOOKS[(job, impl)]
    )


# ---------------------------------------------------------------------------------------------------------
# The counting proxy


def classify(method: str, target: str) -> str:
    """``read``, ``write`` or ``dry_run`` for a request line's method and target (path and query)."""
    if method not in WRITE_METHODS:
        return "read"
    query = urlsplit(target).query
    return "dry_run" if re.search(r"(^|&)dryRun=All(&|$)", query) else "write"


def summarize(requests: list[dict]) -> dict:
    """The requests of one run: how many of each class, the answers' bytes, and the writes by method and path
    kind (``PATCH nodes``, ``POST pods/eviction``...)."""
    out = {"requests": len(requests), "read": 0, "write": 0, "dry_run": 0, "bytes": 0, "writes_by_kind": {}}
    for req in requests:
        cls = classify(req["method"], req["target"])
        out[cls] += 1
        out["bytes"] += req["bytes"]
        if cls == "write":
            key = f"{req['method']} {resource_of(req['target'])}"
            out["writes_by_kind"][key] = out["writes_by_kind"].get(key, 0) + 1
    return out


def resource_of(target: str) -> str:
    """The resource (and subresource) a request path names: /api/v1/namespaces/x/pods/y/eviction -> pods/eviction."""
    parts = [p for p in urlsplit(target).path.split("/") if p]
    parts = parts[2:] if parts[:1] == ["api"] else parts[3:]  # /api/v1/..., /apis/<group>/<version>/...
    if len(parts) >= 2 and parts[0] == "namespaces" and len(parts) > 2:
        parts = parts[2:]
    resource = parts[0] if parts else ""
    return resource + (f"/{parts[2]}" if len(parts) > 2 else "")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address, proxy: CountingProxy, tls: ssl.SSLContext):
        self.proxy = proxy
        self.tls = tls
        super().__init__(address, _Handler)

    def handle_error(self, request, client_address):
        # a client that closed its connection (the module's process ended): counted, not printed
        self.proxy.errors += 1

    def get_request(self):
        sock, addr = super().get_request()
        # the handshake happens in the handler's thread (_Handler.setup), not in the accepting one
        return self.tls.wrap_socket(sock, server_side=True, do_handshake_on_connect=False), addr


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def setup(self):
        self.request.settimeout(300)
        self.request.do_handshake()
        super().setup()
        self.upstream = None

    def finish(self):
        with contextlib.suppress(OSError):
            super().finish()
        if self.upstream is not None:
            self.upstream.close()

    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        pass

    def _body(self) -> bytes | None:
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";", 1)[0].strip() or b"0", 16)
                if not size:
                    while self.rfile.readline().strip():  # trailers
                        pass
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else None

    def _relay(self):
        body = self._body()
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_HEADERS}
        for attempt in (1, 2):
            conn = self.upstream or self.server.proxy.connect()
            try:
                conn.request(self.command, self.path, body=body, headers=headers)
                answer = conn.getresponse()
                data = answer.read()
                self.upstream = conn
                break
            except (http.client.HTTPException, OSError):
                # an idle kept-alive connection the apiserver closed: once more on a new one
                conn.close()
                self.upstream = None
                if attempt == 2:
                    raise
        self.server.proxy.record(self.command, self.path, answer.status, len(data))
        self.send_response_only(answer.status, answer.reason)
        for key, value in answer.getheaders():
            if key.lower() not in HOP_HEADERS:
                self.send_header(key, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _relay


class CountingProxy:
    """A TLS proxy on the lab's address in front of its apiserver that records every request it relays.

    It serves with the apiserver's own certificate (issued for the lab's address), so a client of the
    kubeconfig it writes checks the server as it checks the apiserver; it relays each request with the
    credentials of the lab's kubeconfig, whole answers only (no watch)."""

    def __init__(self, kubeconfig: Path, pki: Path, host: str, workdir: Path):
        import yaml

        self.kubeconfig = yaml.safe_load(kubeconfig.read_text())
        context = _by_name(self.kubeconfig["contexts"], self.kubeconfig["current-context"])["context"]
        cluster = _by_name(self.kubeconfig["clusters"], context["cluster"])["cluster"]
        user = _by_name(self.kubeconfig["users"], context["user"])["user"]
        creds = workdir / "proxy-credentials"
        creds.mkdir(mode=0o700, parents=True, exist_ok=True)
        files = {}
        for name, data in (
            ("ca.crt", cluster["certificate-authority-data"]),
            ("client.crt", user["client-certificate-data"]),
            ("client.key", user["client-key-data"]),
        ):
            path = creds / name
            path.write_bytes(base64.b64decode(data))
            path.chmod(0o600)
            files[name] = path
        self.upstream = urlsplit(cluster["server"])
        self.client_tls = ssl.create_default_context(cafile=str(files["ca.crt"]))
        self.client_tls.load_cert_chain(str(files["client.crt"]), str(files["client.key"]))
        server_tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        server_tls.load_cert_chain(str(pki / "apiserver.crt"), str(pki / "apiserver.key"))
        self.server = _Server((host, 0), self, server_tls)
        self.url = f"https://{host}:{self.server.server_address[1]}"
        self._lock = threading.Lock()
        self._requests: list[dict] = []
        self.errors = 0
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self) -> CountingProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def connect(self) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection(
            self.upstream.hostname, self.upstream.port or 443, context=self.client_tls, timeout=300
        )

    def record(self, method: str, target: str, status: int, size: int) -> None:
        with self._lock:
            self._requests.append({"method": method, "target": target, "status": status, "bytes": size})

    def take(self) -> list[dict]:
        """The requests recorded since the last take."""
        with self._lock:
            taken, self._requests = self._requests, []
        return taken

    def write_kubeconfig(self, path: Path) -> Path:
        """The lab's kubeconfig with its cluster's server replaced by this proxy."""
        import yaml

        doc = json.loads(json.dumps(self.kubeconfig))
        context = _by_name(doc["contexts"], doc["current-context"])["context"]
        _by_name(doc["clusters"], context["cluster"])["cluster"]["server"] = self.url
        path.write_text(yaml.safe_dump(doc))
        path.chmod(0o600)
        return path


def _by_name(entries: list[dict], name: str) -> dict:
    return next(e for e in entries if e["name"] == name)


# ---------------------------------------------------------------------------------------------------------
# The cluster's state for each job, set up with the lab's client directly (not counted)


def node_name(i: int) -> str:
    return f"{PREFIX}{i:04d}"


def bench_nodes(n: int) -> list[str]:
    return [node_name(i) for i in range(n)]


def create_nodes(core, names: list[str]) -> None:
    from lab import nodes

    for name in names:
        nodes.ensure_node(core, name, None, labels={SPLIT_LABEL: "true"})


def delete_nodes(core) -> None:
    from kubernetes.client.rest import ApiException

    for node in core.list_node().items:
        if node.metadata.name.startswith(PREFIX):
            with contextlib.suppress(ApiException):
                core.delete_node(node.metadata.name)


def ensure_namespace(core, timeout: float = 180) -> None:
    """Create the bench's namespace, after an earlier run's has finished terminating."""
    from kubernetes.client.rest import ApiException

    deadline = time.monotonic() + timeout
    while True:
        try:
            phase = core.read_namespace(NAMESPACE).status.phase
        except ApiException as exc:
            if exc.status != 404:
                raise
            core.create_namespace({"metadata": {"name": NAMESPACE}})
            return
        if phase != "Terminating" or time.monotonic() > deadline:
            return
        time.sleep(2)


def delete_namespace(core) -> None:
    from kubernetes.client.rest import ApiException

    try:
        core.delete_namespace(NAMESPACE)
    except ApiException as exc:
        if exc.status != 404:
            raise


def split_daemonsets(names: list[str]) -> list[dict]:
    """One split device-plugin DaemonSet per node (6 of its 8 GPUs to Kubernetes), rendered by gpusplit."""
    from fleetgen import synthetic_fleet

    from ansible_collections.gpusplit.k8s.plugins.module_utils._split.planner import plan_fleet
    from ansible_collections.gpusplit.k8s.plugins.plugin_utils.split_render import render_daemonsets

    facts = [v["facts"] for v in synthetic_fleet(len(names)).values()]
    hosts = {
        name: {"facts": gpus, "mode": "device_plugin", "split": {"count": 6}}
        for name, gpus in zip(names, facts, strict=True)
    }
    return render_daemonsets(plan_fleet(hosts), {"namespace": NAMESPACE})


def delete_daemonsets(core) -> None:
    """Delete the bench's DaemonSets and wait until their pods are gone."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    apps = client.AppsV1Api(core.api_client)
    for ds in apps.list_namespaced_daemon_set(NAMESPACE, label_selector=MANAGED).items:
        with contextlib.suppress(ApiException):
            apps.delete_namespaced_daemon_set(ds.metadata.name, NAMESPACE)

    def left():
        return (
            apps.list_namespaced_daemon_set(NAMESPACE).items
            + core.list_namespaced_pod(NAMESPACE, label_selector=MANAGED).items
        )

    bench_fleet.wait_until_done(left, 180, interval=2)


def daemonset_count(core) -> int:
    from kubernetes import client

    return len(
        client.AppsV1Api(core.api_client).list_namespaced_daemon_set(NAMESPACE, label_selector=MANAGED).items
    )


def wait_settled(core) -> tuple[float, int]:
    """Wait until the controller-manager is done with the bench's DaemonSets (their pods created and running)."""
    from kubernetes import client

    apps = client.AppsV1Api(core.api_client)

    def left():
        answer = apps.list_namespaced_daemon_set(NAMESPACE, label_selector=MANAGED, _preload_content=False)
        return [ds for ds in json.loads(answer.data).get("items") or [] if not bench_fleet.settled(ds)]

    return bench_fleet.wait_until_done(left, 240, interval=1)


def create_work_pods(core, names: list[str]) -> list[dict]:
    """One workload pod on each node (bound to it, as the scheduler would); waits until they run. The pods as
    pod_eviction takes them: namespace, name, uid."""
    for name in names:
        core.create_namespaced_pod(
            NAMESPACE,
            {
                "metadata": {"name": f"work-{name}", "labels": {WORK_LABEL: "evict"}},
                "spec": {
                    "nodeName": name,
                    "containers": [{"name": "work", "image": "registry.k8s.io/pause:3.10"}],
                    "tolerations": [{"operator": "Exists"}],
                },
            },
        )

    def not_running():
        pods = core.list_namespaced_pod(NAMESPACE, label_selector=f"{WORK_LABEL}=evict").items
        return [p for p in pods if p.status.phase != "Running"] or ([] if len(pods) >= len(names) else [None])

    bench_fleet.wait_until_done(not_running, 180, interval=1)
    pods = core.list_namespaced_pod(NAMESPACE, label_selector=f"{WORK_LABEL}=evict").items
    return [{"namespace": NAMESPACE, "name": p.metadata.name, "uid": p.metadata.uid} for p in pods]


def work_pods_left(core) -> int:
    return len(core.list_namespaced_pod(NAMESPACE, label_selector=f"{WORK_LABEL}=evict").items)


def delete_work_pods(core) -> None:
    core.delete_collection_namespaced_pod(NAMESPACE, label_selector=f"{WORK_LABEL}=evict")
    bench_fleet.wait_until_done(
        lambda: core.list_namespaced_pod(NAMESPACE, label_selector=f"{WORK_LABEL}=evict").items,
        180,
        interval=1,
    )


def reset_nodes(core, names: list[str]) -> int:
    """Take the bench's taint off the nodes and make them schedulable again; how many were changed."""
    wanted, changed = set(names), 0
    for node in core.list_node().items:
        if node.metadata.name not in wanted:
            continue
        taints = [t.to_dict() for t in node.spec.taints or []]
        rest = [t for t in taints if (t["key"], t["effect"]) != (TAINT["key"], TAINT["effect"])]
        if rest != taints or node.spec.unschedulable:
            core.patch_node(node.metadata.name, {"spec": {"taints": rest or None, "unschedulable": None}})
            changed += 1
    return changed


def tainted_nodes(core, names: list[str]) -> int:
    wanted = set(names)
    return sum(
        1
        for node in core.list_node().items
        if node.metadata.name in wanted
        and any((t.key, t.value, t.effect) == tuple(TAINT.values()) for t in node.spec.taints or [])
    )


# ---------------------------------------------------------------------------------------------------------
# One run of a job's playbook


def parse_result(log: str) -> dict:
    """The BENCH-RESULT of a run's output and the play recap's counts."""
    out: dict = {}
    match = re.search(r'"msg": "BENCH-RESULT (.*)"\s*$', log, re.M)
    if match:
        out = json.loads(json.loads(f'"{match.group(1)}"'))
    recap = re.search(r"^localhost\s*:\s*(.*)$", log, re.M)
    if recap:
        out["recap"] = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", recap.group(1))}
    return out


class Bench:
    def __init__(self, workdir: Path, proxy: CountingProxy, core, cold_discovery: bool):
        self.workdir = workdir
        self.proxy = proxy
        self.core = core
        self.cold_discovery = cold_discovery
        self.kubeconfig = proxy.write_kubeconfig(workdir / "kubeconfig-proxy")
        self.tmp = workdir / "tmp"
        self.tmp.mkdir(exist_ok=True)
        self.rows: list[dict] = []
        for (job, impl), _ in PLAYBOOKS.items():
            (workdir / f"{job}-{impl}.yml").write_text(playbook_text(job, impl))

    def write_vars(self, job: str, values: dict) -> Path:
        path = self.workdir / f"{job}-vars.json"
        path.write_text(
            json.dumps({"bench_kubeconfig": str(self.kubeconfig), "bench_taint_spec": TAINT, **values})
        )
        return path

    def warm_up(self) -> None:
        """One read through each module, not recorded: both clients' discovery caches filled."""
        vars_file = self.write_vars("read", {})
        for impl in IMPLS:
            self.run("read", impl, 0, "warm-up", vars_file, record=False)

    def run(self, job: str, impl: str, trial: int, phase: str, vars_file: Path, record: bool = True) -> dict:
        if self.cold_discovery:
            for cached in self.tmp.glob("*rcp-*.json"):
                cached.unlink()
        env = {
            **os.environ,
            "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
            "ANSIBLE_NOCOLOR": "1",
            "ANSIBLE_STDOUT_CALLBACK": "default",
            "ANSIBLE_CALLBACK_RESULT_FORMAT": "json",
            "TMPDIR": str(self.tmp),
        }
        cmd = [
            str(Path(sys.executable).parent / "ansible-playbook"),
            "-i",
            "localhost,",
            "-c",
            "local",
            "-e",
            json.dumps({"ansible_python_interpreter": sys.executable}),
            "-e",
            f"@{vars_file}",
            str(self.workdir / f"{job}-{impl}.yml"),
        ]
        log = self.workdir / f"{job}-{impl}-{trial}-{phase}.log"
        procs = bench_fleet.lab_processes()
        lab_before = {name: bench_fleet.process_cpu(pid) for name, pid in procs.items()}
        load = os.getloadavg()
        writes_before = bench_fleet.apiserver_writes(self.core)
        self.proxy.take()
        cpu_before = bench_fleet.children_cpu()
        start = time.monotonic()
        with log.open("w") as handle:
            rc = subprocess.run(cmd, cwd=ROOT, env=env, stdout=handle, stderr=subprocess.STDOUT).returncode
        seconds = time.monotonic() - start
        cpu = bench_fleet.children_cpu() - cpu_before
        requests = self.proxy.take()
        writes_after = bench_fleet.apiserver_writes(self.core)
        lab_cpu = bench_fleet.lab_cpu_between(
            lab_before, {name: bench_fleet.process_cpu(pid) for name, pid in procs.items()}
        )
        result = parse_result(log.read_text())
        row = {
            "job": job,
            "impl": impl,
            "trial": trial,
            "run": phase,
            "rc": rc,
            "seconds": round(seconds, 2),
            "controller_cpu_s": round(cpu, 2),
            "executions": result.get("executions"),
            "changed": (result.get("recap") or {}).get("changed"),
            "changed_objects": result.get("changed_objects"),
            "counts": result.get("counts"),
            "proxy": summarize(requests),
            "apiserver_writes": bench_fleet.writes_between(writes_before, writes_after),
            "apiserver_cpu_s": lab_cpu.get("kube-apiserver"),
            "load": [round(x, 2) for x in load],
            "log": str(log),
        }
        if record:
            self.rows.append(row)
            print_row(row)
        return row


HEADER = (
    "| job | module | trial | run | wall s | controller CPU s | module executions | requests: reads / writes / "
    "dry runs | answered MiB | apiserver writes (metrics) | changed | objects changed | apiserver CPU s | load |"
)


def print_row(row: dict) -> None:
    p = row["proxy"]
    rc = "" if row["rc"] == 0 else f" (rc {row['rc']})"
    print(
        f"| {row['job']} | {row['impl']} | {row['trial']} | {row['run']}{rc} | {row['seconds']} | "
        f"{row['controller_cpu_s']} | {row['executions']} | {p['read']} / {p['write']} / {p['dry_run']} | "
        f"{p['bytes'] / 2**20:.1f} | {row['apiserver_writes']['writes']} | {row['changed']} | "
        f"{row['changed_objects']} | {row['apiserver_cpu_s']} | {row['load'][0]:.1f} |",
        flush=True,
    )


# ---------------------------------------------------------------------------------------------------------
# The jobs: each sets the cluster up, runs both modules alternating, checks that they did the same work


def job_read(bench: Bench, names: list[str], trials: int) -> list[str]:
    from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s import apply
    from lab import components

    core, problems = bench.core, []
    apply.run(apply.Cluster(str(components.KUBECONFIG)), split_daemonsets(names), field_manager=FIELD_MANAGER)
    wait_settled(core)
    create_work_pods(core, names)
    vars_file = bench.write_vars("read", {})
    try:
        seen = {}
        for trial in range(1, trials + 1):
            for impl in IMPLS:
                for phase in ("first", "rerun"):
                    row = bench.run("read", impl, trial, phase, vars_file)
                    seen.setdefault(impl, []).append(row["counts"])
        counts = [c for runs in seen.values() for c in runs]
        if any(c != counts[0] for c in counts):
            problems.append(f"read: the modules read different counts: {seen}")
    finally:
        delete_daemonsets(core)
        delete_work_pods(core)
    return problems


def job_apply(bench: Bench, names: list[str], trials: int) -> list[str]:
    core, problems = bench.core, []
    vars_file = bench.write_vars("apply", {"bench_objects": split_daemonsets(names)})
    try:
        for trial in range(1, trials + 1):
            for impl in IMPLS:
                delete_daemonsets(core)
                bench.run("apply", impl, trial, "first", vars_file)
                if daemonset_count(core) != len(names):
                    problems.append(
                        f"apply: {impl} left {daemonset_count(core)} DaemonSets, not {len(names)}"
                    )
                waited, unsettled = wait_settled(core)
                print(f"apply: the DaemonSets settled {waited} s after the first run ({unsettled} not yet)")
                bench.run("apply", impl, trial, "rerun", vars_file)
    finally:
        delete_daemonsets(core)
    return problems


def job_taint(bench: Bench, names: list[str], trials: int) -> list[str]:
    core, problems = bench.core, []
    vars_file = bench.write_vars(
        "taint",
        {"bench_nodes": names, "bench_taint_nodes": [{"name": name, "present": [TAINT]} for name in names]},
    )
    try:
        for trial in range(1, trials + 1):
            for impl in IMPLS:
                reset_nodes(core, names)
                bench.run("taint", impl, trial, "first", vars_file)
                if tainted_nodes(core, names) != len(names):
                    problems.append(
                        f"taint: {impl} tainted {tainted_nodes(core, names)} nodes, not {len(names)}"
                    )
                bench.run("taint", impl, trial, "rerun", vars_file)
    finally:
        reset_nodes(core, names)
    return problems


def job_evict(bench: Bench, names: list[str], trials: int) -> list[str]:
    core, problems = bench.core, []
    try:
        for trial in range(1, trials + 1):
            for impl in IMPLS:
                reset_nodes(core, names)
                pods = create_work_pods(core, names)
                vars_file = bench.write_vars("evict", {"bench_nodes": names, "bench_pods": pods})
                bench.run("evict", impl, trial, "first", vars_file)
                if work_pods_left(core):
                    problems.append(f"evict: {impl} left {work_pods_left(core)} workload pods")
                    delete_work_pods(core)
                bench.run("evict", impl, trial, "rerun", vars_file)
    finally:
        reset_nodes(core, names)
        delete_work_pods(core)
    return problems


JOB_RUNNERS = {"read": job_read, "apply": job_apply, "taint": job_taint, "evict": job_evict}


# ---------------------------------------------------------------------------------------------------------
# The summary: per job, module and run, the range over the trials


def span(values: list) -> str:
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    lo, hi = min(values), max(values)
    fmt = (lambda v: f"{v:g}") if all(isinstance(v, int) for v in values) else (lambda v: f"{v:.1f}")
    return fmt(lo) if fmt(lo) == fmt(hi) else f"{fmt(lo)} to {fmt(hi)}"


SUMMARY_HEADER = (
    "| job | module | module executions | wall s: first / re-run | controller CPU s: first / re-run | "
    "requests: first / re-run | writes on the re-run | load average |"
)


def _col(runs: list[dict], key) -> str:
    return span([key(r) for r in runs])


def _requests(runs: list[dict]) -> str:
    return (
        f"{_col(runs, lambda r: r['proxy']['requests'])} ({_col(runs, lambda r: r['proxy']['write'])} writes)"
    )


def summary(rows: list[dict]) -> list[str]:
    lines = [SUMMARY_HEADER, "|---" * SUMMARY_HEADER.count(" | ") + "|---|"]
    for job in JOBS:
        for impl in IMPLS:
            mine = [r for r in rows if r["job"] == job and r["impl"] == impl]
            if not mine:
                continue
            first = [r for r in mine if r["run"] == "first"]
            again = [r for r in mine if r["run"] == "rerun"]
            lines.append(
                f"| {job} | {impl} | {_col(mine, lambda r: r['executions'])} | "
                f"{_col(first, lambda r: r['seconds'])} / {_col(again, lambda r: r['seconds'])} | "
                f"{_col(first, lambda r: r['controller_cpu_s'])} / {_col(again, lambda r: r['controller_cpu_s'])} | "
                f"{_requests(first)} / {_requests(again)} | {_col(again, lambda r: r['proxy']['write'])} | "
                f"{_col(mine, lambda r: r['load'][0])} |"
            )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=200, help="kwok nodes the jobs work on (default 200)")
    parser.add_argument(
        "--trials", type=int, default=2, help="runs of each module per job, alternating (default 2)"
    )
    parser.add_argument(
        "--jobs", default=",".join(JOBS), help=f"comma-separated, of {', '.join(JOBS)} (default all)"
    )
    parser.add_argument("--json", help="also write every run's counts to this file")
    parser.add_argument("--keep", help="keep the playbooks, their variables and logs in this folder")
    parser.add_argument(
        "--cold-discovery",
        action="store_true",
        help="empty the clients' discovery caches before every run (default: filled once before the first)",
    )
    args = parser.parse_args(argv)
    jobs = [j.strip() for j in args.jobs.split(",") if j.strip()]
    if not jobs or any(j not in JOBS for j in jobs):
        parser.error(f"--jobs: choose from {', '.join(JOBS)}")
    if args.nodes < 1 or args.trials < 1:
        parser.error("--nodes and --trials: 1 or more")

    from lab import components, nodes

    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(143))
    workdir = (
        Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="gpusplit-bench-cluster-modules-"))
    )
    workdir.mkdir(parents=True, exist_ok=True)
    core = nodes.api()
    names = bench_nodes(args.nodes)
    proxy = CountingProxy(components.KUBECONFIG, components.PKI, components.HOST, workdir).start()
    load = os.getloadavg()
    print(
        f"bench-cluster-modules: {args.nodes} nodes, {args.trials} trial(s), jobs {', '.join(jobs)}, "
        f"{os.cpu_count()} CPUs, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    )
    print(HEADER)
    print("|---" * HEADER.count(" | ") + "|---|")
    problems: list[str] = []
    bench = Bench(workdir, proxy, core, args.cold_discovery)
    try:
        create_nodes(core, names)
        ensure_namespace(core)
        if not args.cold_discovery:
            bench.warm_up()
        for job in jobs:
            problems += JOB_RUNNERS[job](bench, names, args.trials)
    finally:
        delete_namespace(core)
        delete_nodes(core)
        proxy.stop()
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    print()
    for line in summary(bench.rows):
        print(line)
    for row in bench.rows:
        if row["run"] == "rerun" and row["proxy"]["writes_by_kind"]:
            print(
                f"{row['job']} {row['impl']} trial {row['trial']}, re-run writes: {row['proxy']['writes_by_kind']}"
            )
    if proxy.errors:
        print(f"proxy: {proxy.errors} connection(s) closed by a client before an answer or between requests")
    for problem in problems:
        print(f"PROBLEM: {problem}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(
            json.dumps({"load": load, "nodes": args.nodes, "rows": bench.rows}, indent=1)
        )
    return 0 if not problems and all(r["rc"] == 0 for r in bench.rows) else 1


if __name__ == "__main__":
    sys.exit(main())
