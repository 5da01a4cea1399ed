#!/usr/bin/env bash
# Print the path of a Python that can build a virtual environment, trying the versions given in
# order (e.g. `tools/find_python.sh 3.13 3.12`: the first that works wins). Each candidate is run,
# not trusted by name: pyenv's shims exist for versions that pyenv's global setting does not
# select, and fail when run. Candidates for 3.X: python3.X on PATH (every match), then pyenv's
# installs ($(pyenv root)/versions/3.X*/bin/python3.X, newest first; ~/.pyenv or $PYENV_ROOT
# when the pyenv command itself is not on PATH). A candidate counts when it reports version 3.X
# and imports ensurepip and venv (Debian and Ubuntu ship them separately, as python3.X-venv).
# Exit status 1, with what was tried and what to install, when none works.
set -uo pipefail

[ $# -gt 0 ] || set -- 3.13 3.12

pyenv_roots() {
  local root
  if command -v pyenv >/dev/null 2>&1; then
    root=$(pyenv root 2>/dev/null) && [ -n "$root" ] && echo "$root"
  fi
  [ -n "${PYENV_ROOT:-}" ] && echo "$PYENV_ROOT"
  echo "$HOME/.pyenv"
}

candidates() { # 3.X
  local name="python$1" root dir
  type -ap "$name" 2>/dev/null
  while read -r root; do
    for dir in $(ls -d "$root"/versions/"$1".* "$root"/versions/"$1" 2>/dev/null | sort -rV); do
      [ -x "$dir/bin/$name" ] && echo "$dir/bin/$name"
    done
  done < <(pyenv_roots | awk '!seen[$0]++')
}

tried=()
for want in "$@"; do
  while read -r candidate; do
    [ -n "$candidate" ] || continue
    got=$("$candidate" -c 'import sys, ensurepip, venv; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)
    if [ "$got" = "$want" ]; then
      echo "$candidate"
      exit 0
    fi
    tried+=("$candidate (${got:+Python $got}${got:-does not run or lacks ensurepip/venv})")
  done < <(candidates "$want" | awk '!seen[$0]++')
done

{
  echo "no usable Python $* found (it must run and import ensurepip and venv)."
  [ ${#tried[@]} -gt 0 ] && printf '  tried: %s\n' "${tried[@]}"
  echo "Install Python $* with its venv module: e.g. 'pyenv install $1' (https://github.com/pyenv/pyenv),"
  echo "or a distribution that ships it (Debian 13: python3.13 python3.13-venv; Ubuntu 24.04: python3.12"
  echo "python3.12-venv; Debian 12's apt has only python3.11). Or name one: make PY=/path/to/python3.12 ..."
} >&2
exit 1
