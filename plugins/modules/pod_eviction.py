#!/usr/bin/python
# Copyright: gpusplit contributors
# Apache-2.0

DOCUMENTATION = r"""
module: pod_eviction
short_description: Evict exactly the pods named through the Eviction API, or none when a PodDisruptionBudget blocks one
version_added: "0.1.0"
description:
  - Evicts the pods named in O(pods) through the C(policy/v1) Eviction API, so that their
    PodDisruptionBudgets are honoured, and waits until they are gone. It is what the policy
    C(evict) of a re-split does with the pods that hold a GPU leaving the Kubernetes share.
  - First a server-side dry run (C(dryRun=All)) of the eviction of every pod. The apiserver checks
    the pod's PodDisruptionBudget in a dry run as in a real eviction. When one eviction is refused
    (HTTP 429 because of a budget, or any other error) nothing is evicted and the module fails
    naming each blocked pod, the PodDisruptionBudgets in its namespace whose selector matches its
    labels (their C(maxUnavailable) or C(minAvailable) and C(status.disruptionsAllowed)) and the
    apiserver's message.
  - Otherwise each pod is evicted, with its uid as a precondition, then the module waits until
    every evicted pod is gone (deleted, or replaced by a pod of the same name and another uid).
    Each dry run checks one pod alone, so pods under one budget that allows fewer disruptions
    than there are such pods pass it; the module warns, and retries a real eviction answered with
    429 every O(delay) seconds until O(wait_timeout), as C(kubectl drain) does.
  - A pod that is not there (or whose name now belongs to another uid) is already gone, not an
    error. A pod already being deleted is not evicted again, but waited for.
  - In check mode only the dry runs are made; nothing is evicted.
notes:
  - "Measured against C(kubernetes.core.k8s_drain) in a loop over the nodes (the pods chosen by label; it also
    cordons each node) on the lab, one pod on each of 200 nodes (2026-12-05, 2 cores shared,
    C(tools/bench_cluster_modules.py), two runs each): 5.9 to 6.0 s of controller CPU against 244 to 282 s, 801
    requests (200 of them dry runs) against 1000, 200 writes against 400; an unchanged re-run 200 requests against
    400, 2.7 s against 303 to 316 s, no write from either. See docs/performance.md."
options:
  pods:
    description:
      - The pods to evict, each a mapping with C(namespace), C(name) and optionally C(uid) (then
        only the pod with that uid is evicted; a pod of that name with another uid counts as gone).
      - Other keys (an owner, a node, the GPUs of a plan's entry) are ignored. The same pod named
        twice is evicted once.
    type: list
    elements: dict
    required: true
  wait_timeout:
    description:
      - Seconds, from the first real eviction, to wait until every evicted pod is gone (and for
        evictions a PodDisruptionBudget holds back for now). V(0) fails at once when a pod is
        still there.
    type: int
    default: 300
  delay:
    description:
      - Seconds between two reads of the pods while waiting (and between two tries of an eviction answered with 429).
      - Above V(0) and at most V(86400); V(wait_timeout) from V(0) to V(86400). Refused before any request otherwise
        (nan, inf or 1e300 too).
    type: float
    default: 2
extends_documentation_fragment:
  - gpusplit.k8s.cluster_auth
  - gpusplit.k8s.attributes.check_mode_no_diff
author:
  - gpusplit team (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Evict the pods that hold a GPU leaving the Kubernetes share
  gpusplit.k8s.pod_eviction:
    kubeconfig: "{{ gpusplit_kubeconfig }}"
    pods:
      - namespace: team-a
        name: trainer-0
        uid: 5b0c3f1e-9d6a-4c51-8f0e-2a7d8f1c9b10
    wait_timeout: 600
  delegate_to: localhost
  run_once: true

- name: What would be evicted (dry runs only)
  gpusplit.k8s.pod_eviction:
    pods: "{{ holders }}"
  check_mode: true
  register: would
"""

RETURN = r"""
evicted:
  description: The pods evicted (and gone by the end), each C(namespace), C(name), C(uid) and C(node).
  returned: always
  type: list
  elements: dict
would_evict:
  description: The pods whose dry-run eviction the apiserver accepted (what check mode would evict).
  returned: always
  type: list
  elements: dict
already_gone:
  description: The pods named that were not there (or replaced by another uid), each with C(why).
  returned: always
  type: list
  elements: dict
terminating:
  description: The pods that were already being deleted, or whose namespace is (the apiserver refuses their eviction); not evicted, but waited for.
  returned: always
  type: list
  elements: dict
blocked:
  description:
    - When the module fails because an eviction is refused, each blocked pod with the apiserver's
      C(status), C(reason) and C(message), and C(pdbs), the PodDisruptionBudgets that select it
      (C(name), C(namespace), C(max_unavailable), C(min_available), C(disruptions_allowed),
      C(current_healthy), C(desired_healthy), C(expected_pods), C(processed)). Empty otherwise.
  returned: always
  type: list
  elements: dict
waited_seconds:
  description: Seconds from the first real eviction until every evicted pod was gone (0 in check mode).
  returned: always
  type: int
"""

import time
import traceback

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError, fail_on_refusal
from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.client import (
    API_ERRORS,
    CLUSTER_ARGS,
    error_text,
    require_kubernetes,
)
from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.eviction import (
    DEFAULT_DELAY,
    DEFAULT_WAIT_TIMEOUT,
    PodApi,
    checked_request,
    new_result,
    run,
)

TITLE = "pod eviction"


def main():
    module = AnsibleModule(
        argument_spec={
            "pods": {"type": "list", "elements": "dict", "required": True},
            "wait_timeout": {"type": "int", "default": DEFAULT_WAIT_TIMEOUT},
            "delay": {"type": "float", "default": DEFAULT_DELAY},
            **CLUSTER_ARGS,
        },
        supports_check_mode=True,
    )
    require_kubernetes(module)
    p = module.params
    result = new_result()
    with fail_on_refusal(module, TITLE, **result):  # bad input: refused before any request
        request = checked_request(p["pods"], p["wait_timeout"], p["delay"])
    if request["pods"]:
        try:
            run(
                PodApi(p["kubeconfig"], p["context"]),
                request,
                module.check_mode,
                result,
                time.monotonic,
                time.sleep,
            )
        except GpusplitError as exc:  # blocked, timed out, or no usable kubeconfig: with what happened so far
            for warning in result.pop("warnings"):
                module.warn(warning)
            with fail_on_refusal(module, **result):  # its first message says what happened
                raise exc
        except API_ERRORS as exc:  # the server's own message; a bug in the logic is not one of these
            result.pop("warnings")
            module.fail_json(
                msg=f"{TITLE}: the API request failed: {error_text(exc)}",
                exception=traceback.format_exc(),
                **result,
            )
        except Exception as exc:  # a bug: still say which pods were already evicted
            result.pop("warnings", None)
            done = ", ".join(f"{e['namespace']}/{e['name']}" for e in result["evicted"]) or "none"
            module.fail_json(
                msg=f"{TITLE}: stopped by an unexpected error, a bug ({exc}; the traceback is in the result's "
                f"exception); evicted before that: {done}",
                exception=traceback.format_exc(),
                **result,
            )
    for warning in result.pop("warnings"):
        module.warn(warning)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
