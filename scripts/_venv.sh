# Sourced by scripts/dashboard and scripts/test: create or reuse .venv and
# install the pinned requirements when they changed since the last install.
# Usage: ensure_venv requirements.txt [requirements-dev.txt]
ensure_venv() {
  local py="${SPECDECK_PYTHON:-}"
  if [ -z "$py" ]; then
    for cand in python3.11 python3; do
      if command -v "$cand" >/dev/null 2>&1; then py="$cand"; break; fi
    done
  fi
  [ -n "$py" ] || { echo "specdeck: Python 3.11 is required (python3.11 or python3 on PATH)" >&2; return 1; }
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
