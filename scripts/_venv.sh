# Sourced by scripts/dashboard and scripts/test: create or reuse the project's Python
# environments and install the pinned requirements when they changed since the last install.
#   ensure_venv requirements.txt [requirements-dev.txt]   .venv, the dashboard's and the tests'
#   ensure_serve_env                                      .venv-serve, from requirements-serve.txt
#   ensure_specforge_env                                  .venv-specforge, from requirements-specforge.txt
#   ensure_cluster_env                                    .venv-cluster, from requirements-cluster.txt

_specdeck_python() {
  local py="${SPECDECK_PYTHON:-}"
  if [ -z "$py" ]; then
    for cand in python3.11 python3; do
      if command -v "$cand" >/dev/null 2>&1; then py="$cand"; break; fi
    done
  fi
  [ -n "$py" ] || { echo "specdeck: Python 3.11 is required (python3.11 or python3 on PATH)" >&2; return 1; }
  echo "$py"
}

ensure_venv() {
  local py
  py=$(_specdeck_python) || return 1
  if [ ! -x .venv/bin/python ]; then
    echo "specdeck: creating .venv with $py" >&2
    "$py" -m venv .venv
  fi
  local stamp=.venv/.specdeck-requirements
  local want
  want=$(cat "$@" | sha256sum | cut -d' ' -f1)
  if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    echo "specdeck: installing requirements ($*)" >&2
    .venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip
    for req in "$@"; do
      .venv/bin/python -m pip install --quiet --disable-pip-version-check -r "$req"
    done
    echo "$want" > "$stamp"
  fi
}

# True when the environment at $1 holds exactly the pins of lock file $2: the same
# distributions (pip aside) at the same versions (a local label such as torch's "+cpu" aside).
serve_env_matches() {
  local dir=$1 lock=$2
  [ -x "$dir/bin/python" ] || return 1
  "$dir/bin/python" - "$lock" <<'PY' 2>/dev/null
import importlib.metadata as md
import re
import sys

def norm(name):
    return re.sub(r"[-_.]+", "-", name).lower()

want = {}
for line in open(sys.argv[1], encoding="utf-8"):
    line = line.split("#", 1)[0].strip()
    if line:
        name, _, version = line.partition("==")
        want[norm(name)] = version.strip()
have = {}
for dist in md.distributions():
    name = norm(dist.metadata["Name"] or "")
    if name and name != "pip":
        have[name] = dist.version.split("+", 1)[0]
sys.exit(0 if have == want else 1)
PY
}

# .venv-serve: SGLang and what its argument parser needs on a CPU machine, from the fully
# pinned requirements-serve.txt installed with --no-deps.  Reused while it holds exactly those
# pins (and its stamp names this file's content); an environment built elsewhere, without the
# stamp, is taken only when it holds exactly those pins; otherwise it is built anew.  A symlink
# in its place is read, never written through: a mismatch replaces the link, not its target.
ensure_serve_env() {
  local dir=.venv-serve lock=requirements-serve.txt
  local stamp="$dir/.specdeck-requirements"
  local want py
  want=$( (cat "$lock"; echo "--no-deps") | sha256sum | cut -d' ' -f1)
  if serve_env_matches "$dir" "$lock"; then
    if [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
      return 0
    fi
    if [ -L "$dir" ]; then
      echo "specdeck: using $dir -> $(readlink "$dir") (it holds exactly the pins of $lock)" >&2
      return 0
    fi
    echo "$want" > "$stamp"
    return 0
  fi
  py=$(_specdeck_python) || return 1
  echo "specdeck: building $dir from $lock (about 450 MB to download the first time)" >&2
  if [ -L "$dir" ]; then rm -f "$dir"; else rm -rf "$dir"; fi
  "$py" -m venv "$dir"
  "$dir/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps -r "$lock"
  if ! serve_env_matches "$dir" "$lock"; then
    echo "specdeck: $dir does not hold exactly the pins of $lock after the install" >&2
    return 1
  fi
  echo "$want" > "$stamp"
}

# A fully pinned environment $1 from lock file $2, installed with --no-deps; $3 says what it holds when it
# is built.  Reused while it holds exactly those pins; otherwise built anew.
_ensure_locked_env() {
  local dir=$1 lock=$2 what=$3
  local stamp="$dir/.specdeck-requirements"
  local want py
  want=$( (cat "$lock"; echo "--no-deps") | sha256sum | cut -d' ' -f1)
  if serve_env_matches "$dir" "$lock"; then
    [ "$(cat "$stamp" 2>/dev/null)" = "$want" ] || echo "$want" > "$stamp"
    return 0
  fi
  py=$(_specdeck_python) || return 1
  echo "specdeck: building $dir from $lock ($what)" >&2
  rm -rf "$dir"
  "$py" -m venv "$dir"
  # the setuptools some Pythons put in a new venv is not a pin of the lock file
  "$dir/bin/python" -m pip uninstall --quiet --disable-pip-version-check -y setuptools >/dev/null 2>&1 || true
  "$dir/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps -r "$lock"
  if ! serve_env_matches "$dir" "$lock"; then
    echo "specdeck: $dir does not hold exactly the pins of $lock after the install" >&2
    return 1
  fi
  echo "$want" > "$stamp"
}

# .venv-specforge: SpecForge's release and what its run-config loader (specforge.config) imports, from
# the fully pinned requirements-specforge.txt installed with --no-deps (specforge's own dependency list
# pulls torch and sglang).
ensure_specforge_env() {
  _ensure_locked_env .venv-specforge requirements-specforge.txt "SpecForge's config loader"
}

# .venv-cluster: Ray and sglang-router, from the fully pinned requirements-cluster.txt installed with
# --no-deps.  Specdeck runs their programs (`ray start`, the Ray job entrypoints' driver,
# `python -m sglang_router.launch_router`) from here; it never imports them.
ensure_cluster_env() {
  _ensure_locked_env .venv-cluster requirements-cluster.txt "Ray and sglang-router, about 130 MB to download"
}
