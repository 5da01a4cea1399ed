"""No task loops a cluster module over the fleet's nodes.

A loop runs its items one after the other in one worker on the controller, each item a module execution
that loads the kubernetes client and reads the API again: about a second per item. Over the nodes of a
fleet that is minutes per run, changed or not (docs/dev/measurements.md). What reads or changes many nodes does it in one module execution
(cluster_read, cluster_apply, node_taints).

Every loop of a cluster module in the roles and playbooks is listed here with what it goes over, none of
them the nodes: a new loop fails this test until it is listed, so whoever adds one says why it does not
grow with the fleet.
"""

from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]

# (file, task name): what the loop goes over
ALLOWED = {
    ("roles/admission_guard/tasks/guard.yml", "Wait until the API server has type-checked the policies"): (
        "the guard's policies, a fixed few"
    ),
    (
        "roles/admission_guard/tasks/guard.yml",
        "Read the namespaces, nodes and workloads",
    ): "a fixed list of kinds",
    ("roles/gpu_split_cluster/tasks/cluster.yml", "Keep unmanaged device plugins off split nodes"): (
        "the device-plugin DaemonSets gpusplit does not own, cluster-wide ones"
    ),
    (
        "roles/control_plane_gates/tasks/preflight.yml",
        "List the objects of the APIs the absent gates serve",
    ): ("the kinds an absent gate serves (Workload, PodGroup), a fixed few, once for the play"),
    (
        "roles/gpu_unsplit/tasks/cluster_wide.yml",
        "Put back the ClusterPolicy fields gpusplit set (the values they had before it)",
    ): "the ClusterPolicies gpusplit set fields of: the operator reconciles one, once for the play",
    ("roles/gpu_unsplit/tasks/cluster.yml", "Read the Helm releases gpusplit installs (whole cluster)"): (
        "the two releases gpusplit installs (DRA driver, GPU Operator), once for the play"
    ),
    ("roles/gpu_unsplit/tasks/cluster_wide.yml", "Uninstall gpusplit's Helm releases"): (
        "the releases proven gpusplit's, at most the DRA driver's, once for the play"
    ),
}


def cluster_modules() -> set[str]:
    runtime = yaml.safe_load((ROOT / "meta" / "runtime.yml").read_text())
    return {f"gpusplit.k8s.{name}" for name in runtime["action_groups"]["cluster"]}


def is_cluster_module(action: str, ours: set[str]) -> bool:
    return action.startswith("kubernetes.core.") or action in ours


def looped_actions(path: Path):
    """(task name, action) of every task with a loop in a task file or playbook, blocks included."""
    found = []

    def walk(tasks):
        for task in tasks or []:
            if not isinstance(task, dict):
                continue
            for key in ("block", "rescue", "always", "tasks", "pre_tasks", "post_tasks", "handlers"):
                walk(task.get(key))
            if "loop" in task or any(k.startswith("with_") for k in task):
                for action in (k for k in task if "." in k and k != "loop_control"):
                    found.append((task.get("name"), action))

    walk(yaml.safe_load(path.read_text()))
    return found


def test_no_cluster_module_loops_over_the_fleet():
    ours = cluster_modules()
    files = sorted(ROOT.glob("roles/*/tasks/*.yml")) + sorted(ROOT.glob("playbooks/*.yml"))
    seen, unlisted = set(), []
    for path in files:
        rel = str(path.relative_to(ROOT))
        for name, action in looped_actions(path):
            if not is_cluster_module(action, ours):
                continue
            seen.add((rel, name))
            if (rel, name) not in ALLOWED:
                unlisted.append(f"{rel}: {name!r} loops {action}")
    assert unlisted == [], (
        "a cluster module in a loop runs once per item on the controller; read or change many objects in one "
        "module execution (cluster_read, cluster_apply, node_taints), or list the loop in ALLOWED with what it "
        "goes over: " + "; ".join(unlisted)
    )
    assert sorted(set(ALLOWED) - seen) == [], "ALLOWED lists loops that are gone"


def test_the_check_finds_a_loop_over_the_nodes(tmp_path):
    path = tmp_path / "tasks.yml"
    path.write_text(
        yaml.safe_dump(
            [
                {
                    "name": "Outer",
                    "block": [
                        {
                            "name": "Taint every node",
                            "kubernetes.core.k8s_taint": {"name": "{{ item }}"},
                            "loop": "{{ nodes }}",
                        },
                        {"name": "Read one", "gpusplit.k8s.cluster_read": {}, "with_items": [1]},
                        {"name": "Say", "ansible.builtin.debug": {}, "loop": [1]},
                    ],
                }
            ]
        )
    )
    ours = cluster_modules()
    assert [(name, action) for name, action in looped_actions(path) if is_cluster_module(action, ours)] == [
        ("Taint every node", "kubernetes.core.k8s_taint"),
        ("Read one", "gpusplit.k8s.cluster_read"),
    ]
