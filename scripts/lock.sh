#!/usr/bin/env bash
# Regenerates the hashed lock files of the CPU images' Python layers (make lock):
#
#   images/base/requirements.lock    conductor-core[tasks], with PyTorch's CPU build of torch
#   images/serve/requirements.lock   conductor-core[serve,providers]
#
#   bash scripts/lock.sh             # both (make lock)
#   bash scripts/lock.sh serve       # one of them
#
# The Dockerfiles install a lock with `pip install --require-hashes --no-deps -r ...` and then the
# project itself with `pip install --no-deps .`, so an image gets exactly these versions and these
# files (a file whose sha256 is not in the lock is refused). Run this after changing a dependency
# in pyproject.toml (tests/unit/test_images.py fails, naming the package, until the locks satisfy
# pyproject.toml again), or to take newer releases: it resolves afresh, to the newest versions
# that pyproject.toml allows, then review the diff and commit the locks.
#
# How: uv (the version images/train/Dockerfile uses), installed by pip into a throwaway virtual
# environment under $TMPDIR and removed afterwards with its cache, runs
# `uv pip compile --generate-hashes` on pyproject.toml's extras, for the images' Python (the
# Dockerfiles' PYTHON_VERSION, major.minor) on Linux x86_64 with the glibc of their Debian release.
# The project itself is not in a lock. Every other package comes from PyPI (uv's default index;
# set UV_DEFAULT_INDEX for a mirror). torch is the pin of the `local` extra (images/requirement.py)
# with PyTorch's `+cpu` label, a wheel PyPI does not have: pip downloads it first, from
# $TORCH_INDEX_URL (PyTorch's CPU index, the base Dockerfile's default) when that answers, otherwise
# from pip's own configured sources (its find-links, e.g. a local wheel directory on a machine
# that cannot reach PyTorch's index), and uv reads it as a find-links directory; its hash is the
# sha256 of that file, the one PyTorch's index serves.
#
# On a normal machine (PyPI and https://download.pytorch.org reachable) `make lock` needs nothing
# else: python3 with pip and venv. It downloads torch's CPU wheel (~180 MB) once per run.
set -euo pipefail
cd "$(dirname "$0")/.."

KINDS=("$@")
[ ${#KINDS[@]} -eq 0 ] && KINDS=(base serve)
TORCH_INDEX_URL=${TORCH_INDEX_URL:-https://download.pytorch.org/whl/cpu}
PY=${PYTHON:-python3}
say() { echo "lock: $*" >&2; }
die() { say "error: $*"; exit 2; }

# The extras each image's lock resolves (the first line of the lock names them; the unit test
# checks them against what the image is for).
declare -A EXTRAS=([base]=tasks [serve]=serve,providers)

arg() { # ARG default of a Dockerfile: arg FILE NAME
  sed -nE "s/^ARG $2=(\S+)\s*$/\1/p" "$1" | head -1
}
PYTHON_VERSION=$(arg images/base/Dockerfile PYTHON_VERSION)
PYTHON_MINOR=$(echo "$PYTHON_VERSION" | cut -d. -f1-2)
DEBIAN_RELEASE=$(arg images/base/Dockerfile DEBIAN_RELEASE)
UV_VERSION=$(arg images/train/Dockerfile UV_VERSION)
[ -n "$PYTHON_MINOR" ] && [ -n "$UV_VERSION" ] || die "no PYTHON_VERSION / UV_VERSION ARG in images/*/Dockerfile"
# glibc of the images' Debian release: the newest manylinux wheels they can run.
case "$DEBIAN_RELEASE" in
  bookworm) GLIBC=2_36 ;;
  trixie) GLIBC=2_41 ;;
  *) die "unknown Debian release $DEBIAN_RELEASE: add its glibc to scripts/lock.sh" ;;
esac
PLATFORM=x86_64-manylinux_$GLIBC

WORK=$(mktemp -d "${TMPDIR:-/tmp}/conductor-lock.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
export UV_CACHE_DIR="$WORK/uv-cache"

say "installing uv $UV_VERSION into a throwaway venv ($WORK)"
"$PY" -m venv "$WORK/venv"
"$WORK/venv/bin/python" -m pip install -q --disable-pip-version-check "uv==$UV_VERSION" \
  >"$WORK/pip.log" 2>&1 || { tail -20 "$WORK/pip.log" >&2; die "could not install uv==$UV_VERSION"; }
UV="$WORK/venv/bin/uv"

# torch's CPU wheel, for the base lock only.
torch_wheel() {
  local pin from=()
  pin="$("$PY" images/requirement.py local torch)+cpu"
  case "$pin" in torch==*) ;; *) die "the local extra's torch is not an exact pin: $pin" ;; esac
  if timeout 15 "$PY" -c "import sys, urllib.request as u; u.urlopen(sys.argv[1].rstrip('/') + '/torch/', timeout=10)" \
      "$TORCH_INDEX_URL" >/dev/null 2>&1; then
    from=(--index-url "$TORCH_INDEX_URL")
    say "downloading $pin from $TORCH_INDEX_URL"
  else
    say "$TORCH_INDEX_URL is unreachable: taking $pin from pip's own sources (find-links)"
  fi
  # pip's --platform takes each tag the images can run (it does not expand manylinux_2_36 to the
  # older ones that torch's wheel carries).
  local minor platforms=()
  for minor in $(seq 17 "${GLIBC#2_}"); do platforms+=(--platform "manylinux_2_${minor}_x86_64"); done
  mkdir -p "$WORK/torch"
  "$PY" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
      --python-version "$PYTHON_MINOR" --implementation cp "${platforms[@]}" \
      ${from[@]+"${from[@]}"} --dest "$WORK/torch" "$pin" >"$WORK/torch.log" 2>&1 \
    || { tail -20 "$WORK/torch.log" >&2; die "pip could not download $pin"; }
  echo "$pin" >"$WORK/torch-cpu.txt"
}

for kind in "${KINDS[@]}"; do
  extras=${EXTRAS[$kind]:-}
  [ -n "$extras" ] || die "no lock for image kind '$kind' (locked: ${!EXTRAS[*]})"
  out="images/$kind/requirements.lock"
  args=()
  for extra in ${extras//,/ }; do args+=(--extra "$extra"); done
  if [ "$kind" = base ]; then
    [ -f "$WORK/torch-cpu.txt" ] || torch_wheel
    args+=(--find-links "$WORK/torch" --constraint "$WORK/torch-cpu.txt")
  fi
  say "resolving conductor-core[$extras] for Python $PYTHON_MINOR on $PLATFORM -> $out"
  {
    echo "# $out: conductor-core[$extras] for conductor-$kind (Python $PYTHON_MINOR, $PLATFORM)."
    echo "# Made by scripts/lock.sh (make lock) with uv $UV_VERSION; do not edit. The project itself is"
    echo "# not here: images/$kind/Dockerfile installs it with --no-deps after this file."
    "$UV" pip compile pyproject.toml ${args[@]+"${args[@]}"} \
      --generate-hashes --python-version "$PYTHON_MINOR" --python-platform "$PLATFORM" \
      --custom-compile-command "make lock" \
      | sed "s#-c $WORK/torch-cpu.txt#scripts/lock.sh (torch's CPU build)#"
  } >"$WORK/$kind.lock"
  mv "$WORK/$kind.lock" "$out"
  say "wrote $out: $(grep -cE '^[A-Za-z0-9]' "$out") packages"
done
