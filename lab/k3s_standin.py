"""A stand-in for `systemctl restart k3s`: the lab's components restarted with flags from k3s config.

    python -m lab.k3s_standin restart --config-dir DIR [--timeout SECONDS]

k3s runs kube-apiserver, kube-scheduler and kube-controller-manager in its own process, with its
built-in flags plus the `<component>-arg` entries of /etc/rancher/k3s/config.yaml and
config.yaml.d/*.yaml. There is no k3s in the lab, so this reads a k3s configuration directory the
way k3s does and hands the resulting command lines to the lab supervisor through the lab's
static-pod manifests (the supervisor restarts a component whose command changed). The lab's own
flags (lab/components.py) play the part of k3s's built-in ones. Then it waits until the supervisor
runs every new command, as `systemctl restart` returns once the unit has started again; whether the
components are healthy is for the caller to find out.

How k3s reads its configuration (k3s-io/k3s, facts only):
* pkg/configfilearg: config.yaml first, then config.yaml.d files ending in .yaml or .yml in file
  name order (os.ReadDir); a key ending in "+" appends to the list the earlier files gave that key,
  a plain key replaces it.
* pkg/util/args.go GetArgs: each "<name>=<value>" entry (a leading "--" dropped, no "=" meaning
  "true") replaces the built-in value of that flag; "<name>+=<value>" appends to the built-in value,
  "<name>-=<value>" prepends; repeated names are all passed, in order; flags come out sorted by name.

Differences from k3s: a component whose command did not change keeps running (k3s restarts all of
them), and etcd and kwok are not touched.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import yaml

from lab import components as C
from lab import lab as labctl

ARG_KEYS = {
    "kube-apiserver": "kube-apiserver-arg",
    "kube-scheduler": "kube-scheduler-arg",
    "kube-controller-manager": "kube-controller-manager-arg",
}


def config_files(config_dir: Path) -> list[Path]:
    files = []
    main = config_dir / "config.yaml"
    if main.is_file():
        files.append(main)
    dropins = config_dir / "config.yaml.d"
    if dropins.is_dir():
        files += [
            p
            for p in sorted(dropins.iterdir(), key=lambda p: p.name)
            if p.is_file() and p.name.lower().endswith((".yaml", ".yml"))
        ]
    return files


def read_config(config_dir: Path) -> dict[str, list]:
    """Every key of the k3s configuration, as k3s merges the files."""
    values: dict[str, list] = {}
    for path in config_files(config_dir):
        data = yaml.safe_load(path.read_text()) or {}
        if not isinstance(data, dict):
            raise SystemExit(f"{path}: not a YAML map")
        for raw_key, value in data.items():
            key = str(raw_key)
            items = [str(v) for v in (value if isinstance(value, list) else [value])]
            if key.endswith("+"):
                key = key[:-1]
                values[key] = values.get(key, []) + items
            else:
                values[key] = items
    return values


def get_args(initial: dict[str, str], extra: list[str]) -> list[str]:
    """k3s GetArgs: built-in flags overridden or extended by the config's entries."""
    initial = dict(initial)
    multi: dict[str, list[str]] = {}
    for entry in extra:
        arg, sep, value = entry.removeprefix("--").partition("=")
        if not sep:
            value = "true"
        name = arg.rstrip("+-")
        start = [initial[name]] if name in initial else []
        earlier = multi.get(name, [])
        if arg.endswith("+"):
            multi[name] = start + earlier + [value]
        elif arg.endswith("-"):
            multi[name] = [value] + start + earlier
        else:
            multi[name] = earlier + [value]
        initial.pop(name, None)
    for name, value in initial.items():
        multi[name] = [value]
    return [f"--{name}={value}" for name in sorted(multi) for value in multi[name]]


def builtin_flags(component: str) -> dict[str, str]:
    command = C.static_pod_manifest(component)["spec"]["containers"][0]["command"][1:]
    flags = {}
    for token in command:
        name, _sep, value = token.removeprefix("--").partition("=")
        flags[name] = value
    return flags


def manifest_for(component: str, config: dict[str, list]) -> dict:
    doc = C.static_pod_manifest(component)
    args = get_args(builtin_flags(component), config.get(ARG_KEYS[component], []))
    doc["spec"]["containers"][0]["command"] = [component, *args]
    return doc


def write_manifest(path: Path, text: str) -> bool:
    """Replace ``path`` through a dot-file (the supervisor, like the kubelet, reads only the
    component's own file name); False when the text is already there."""
    if path.exists() and path.read_text() == text:
        return False
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    os.replace(tmp, path)
    return True


def restart(config_dir: Path, timeout: float) -> int:
    config = read_config(config_dir)
    wanted = {}
    for component in C.STATIC_COMPONENTS:
        doc = manifest_for(component, config)
        path = C.MANIFESTS / f"{component}.yaml"
        write_manifest(path, yaml.safe_dump(doc, sort_keys=False))
        wanted[component] = labctl.command_hash(C.command_from_manifest(path))
        print(f"{component}: {' '.join(doc['spec']['containers'][0]['command'])}")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = labctl.read_state()
        if all(state.get(c, {}).get("command_sha256") == h for c, h in wanted.items()):
            return 0
        time.sleep(0.5)
    late = [c for c, h in wanted.items() if labctl.read_state().get(c, {}).get("command_sha256") != h]
    print(
        f"k3s stand-in: the lab supervisor did not start {', '.join(late)} in {timeout:.0f}s", file=sys.stderr
    )
    return 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.k3s_standin")
    parser.add_argument("command", choices=["restart"])
    parser.add_argument("--config-dir", type=Path, required=True)
    parser.add_argument("--timeout", type=float, default=60.0)
    args = parser.parse_args(argv)
    if not labctl.supervisor_pid():
        print("k3s stand-in: the lab is not running (python -m lab.lab up)", file=sys.stderr)
        return 1
    return restart(args.config_dir, args.timeout)


if __name__ == "__main__":
    sys.exit(main())
