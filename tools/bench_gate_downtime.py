"""How long kube-apiserver's /readyz fails while feature_gates.yml rolls a gate out, against a bare restart.

On the running lab (its release: lab/versions.env KUBE_VERSIONS, ``make lab-up K8S=<version>``), each run:

1. the lab's static-pod manifests as they were when the bench started (no gate), all components healthy;
2. ``playbooks/feature_gates.yml`` turns ``GenericWorkload`` on (the same gate on every release; its
   runtime-config comes with it), while a probe asks kube-apiserver's /readyz every 50 ms (1 s timeout);
3. a bare restart of kube-apiserver with the manifest the rollout wrote: the manifest is moved out of the
   manifest folder, and back once the component has stopped (what an operator does to a kubeadm static pod),
   under the same probe.

Per run it records the seconds /readyz failed (from the first failed probe to the first answer of 200 after
it, every window added up), the part of it from the new process's start (the supervisor's ``started_at``) to
that answer, the playbook's wall time and the load average before the run. The bare restart's stop-to-start
gap includes the lab supervisor's tick (0.5 s) twice (it sees the manifest go and come back), the rollout's
once, so ``start->ready`` is the like-for-like figure. Nothing is asserted; this is not a test.

    python tools/bench_gate_downtime.py --runs 3 --json out/gate-downtime-1.36.3.json
    python tools/bench_gate_downtime.py --table out/gate-downtime-*.json    # the releases side by side

Uses the lab of GPUSPLIT_LAB_DIR / GPUSPLIT_LAB_HOST like the tests; puts its manifests back at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

GATES = {"GenericWorkload": True}
APISERVER = "kube-apiserver"


class Probe:
    """kube-apiserver's /readyz every ``interval`` seconds in a thread; the windows it failed."""

    def __init__(self, interval: float = 0.05):
        from lab import components as C
        from lab import lab as labctl

        self.url = f"https://{C.HOST}:{C.PORTS[APISERVER]}/readyz"
        self.ctx = labctl._ssl_context(client=True)
        self.probe = labctl.probe
        self.interval = interval
        self.samples: list[tuple[float, bool]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            at = time.time()
            ok, _detail = self.probe(self.url, self.ctx, timeout=1.0)
            self.samples.append((at, ok))
            time.sleep(max(0.0, self.interval - (time.time() - at)))

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def windows(self) -> list[tuple[float, float]]:
        """(first failed probe, first 200 after it) for every failure; an open one ends at the last probe."""
        out, start = [], None
        for at, ok in self.samples:
            if not ok and start is None:
                start = at
            elif ok and start is not None:
                out.append((start, at))
                start = None
        if start is not None:
            out.append((start, self.samples[-1][0]))
        return out


def unavailable(windows: list[tuple[float, float]], started_at: float | None) -> dict:
    """Seconds /readyz failed in all, and from the new process's start to the end of the window holding it."""
    total = sum(end - start for start, end in windows)
    from_start = None
    if started_at:
        for start, end in windows:
            if start - 1.0 <= started_at <= end:
                from_start = end - started_at
    return {
        "unavailable_s": round(total, 2),
        "start_to_ready_s": None if from_start is None else round(from_start, 2),
        "windows": len(windows),
    }


def started_at() -> float | None:
    from lab import lab as labctl

    return labctl.read_state().get(APISERVER, {}).get("started_at")


def healthy(timeout: float = 300) -> None:
    from lab import lab as labctl

    health = labctl.wait_healthy(timeout, quiet=True)
    if not (health and all(v["healthy"] for v in health.values())):
        raise SystemExit(f"the lab is not healthy: {labctl.report_unhealthy(health or {})}")


def put_back(originals: dict[str, bytes]) -> None:
    from lab import components as C

    for name, data in originals.items():
        if (C.MANIFESTS / name).read_bytes() != data:
            (C.MANIFESTS / name).write_bytes(data)
    healthy()
    time.sleep(5)  # kwok and the controllers settle after the restart


def rollout() -> dict:
    from lab import components as C

    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
        "ANSIBLE_NOCOLOR": "1",
        "PATH": ":".join(
            [
                *map(str, C.kubectl_dirs(C.lab_kube_version())),
                str(Path(sys.executable).parent),
                str(C.BIN),
                os.environ["PATH"],
            ]
        ),
    }
    argv = [
        str(Path(sys.executable).parent / "ansible-playbook"),
        "-i",
        "inventory/lab",
        "playbooks/feature_gates.yml",
    ]
    argv += ["-e", json.dumps({"gpusplit_feature_gates": GATES})]
    before = started_at()
    with Probe() as probe:
        began = time.monotonic()
        done = subprocess.run(
            argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900, check=False
        )
        wall = time.monotonic() - began
    if done.returncode != 0:
        raise SystemExit(f"feature_gates.yml failed:\n{(done.stdout + done.stderr)[-4000:]}")
    after = started_at()
    if after == before:
        raise SystemExit("feature_gates.yml did not restart kube-apiserver (were the gates already on?)")
    return {**unavailable(probe.windows(), after), "playbook_s": round(wall, 1)}


def bare_restart() -> dict:
    from lab import components as C
    from lab import lab as labctl

    manifest = C.MANIFESTS / f"{APISERVER}.yaml"
    aside = C.LAB / f"{APISERVER}.yaml.bench"  # never inside the manifest folder
    with Probe() as probe:
        shutil.move(manifest, aside)
        deadline = time.time() + 60
        while labctl.read_state().get(APISERVER, {}).get("running") and time.time() < deadline:
            time.sleep(0.05)
        shutil.move(aside, manifest)
        healthy()
        time.sleep(1)
    return unavailable(probe.windows(), started_at())


def measure(runs: int) -> dict:
    from lab import components as C

    originals = {p.name: p.read_bytes() for p in C.MANIFESTS.glob("*.yaml")}
    if any("GenericWorkload" in data.decode() for data in originals.values()):
        raise SystemExit("the lab's manifests already set GenericWorkload: start from a lab without gates")
    out = {
        "release": C.lab_kube_version(),
        "gates": GATES,
        "date": time.strftime("%Y-%m-%d"),
        "nproc": os.cpu_count(),
        "runs": [],
    }
    try:
        for i in range(runs):
            put_back(originals)
            load = os.getloadavg()[0]
            run = {"load1": round(load, 1), "rollout": rollout()}
            healthy()
            time.sleep(2)
            run["bare_restart"] = bare_restart()
            out["runs"].append(run)
            print(f"{out['release']} run {i + 1}: {json.dumps(run)}", flush=True)
    finally:
        put_back(originals)
    return out


def _median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _cell(values) -> str:
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    return f"{statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})"


def table(results: list[dict]) -> str:
    """A Markdown table: per release, the medians (min-max) of the runs."""
    lines = [
        "| Kubernetes | runs | load (1 min) | rollout: /readyz failing s | bare restart: /readyz failing s | ratio | rollout: start->ready s | bare: start->ready s | ratio | feature_gates.yml wall s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for res in sorted(results, key=lambda r: [int(x) for x in r["release"].split(".")]):
        runs = res["runs"]
        roll = [r["rollout"]["unavailable_s"] for r in runs]
        bare = [r["bare_restart"]["unavailable_s"] for r in runs]
        roll_sr = [r["rollout"]["start_to_ready_s"] for r in runs]
        bare_sr = [r["bare_restart"]["start_to_ready_s"] for r in runs]
        ratio = lambda a, b: f"{_median(a) / _median(b):.2f}" if _median(a) and _median(b) else "-"  # noqa: E731
        lines.append(
            f"| {res['release']} | {len(runs)} | {_cell([r['load1'] for r in runs])} | {_cell(roll)} | {_cell(bare)} | "
            f"{ratio(roll, bare)} | {_cell(roll_sr)} | {_cell(bare_sr)} | {ratio(roll_sr, bare_sr)} | "
            f"{_cell([r['rollout']['playbook_s'] for r in runs])} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="runs of each (default 3)")
    parser.add_argument("--json", type=Path, help="write the runs here")
    parser.add_argument(
        "--table", type=Path, nargs="+", help="print the table of these --json files, measure nothing"
    )
    args = parser.parse_args(argv)
    if args.table:
        print(table([json.loads(p.read_text()) for p in args.table]))
        return 0
    if args.runs < 1:
        parser.error("--runs: 1 or more")
    result = measure(args.runs)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1))
    print(table([result]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
