#!/usr/bin/env bash
# Builds the CPU images from images/*/Dockerfile, unchanged, tagged exactly as
# conductor_core/cluster/images.py names them (so that nothing is ever pulled when they run).
#
#   bash scripts/images.sh            # conductor-base and conductor-serve (make images)
#   bash scripts/images.sh serve      # one of them
#   bash scripts/images.sh --push 127.0.0.1:5000 [base]   # then push (make images REGISTRY=...)
#   bash scripts/images.sh --push-only --push HOST:PORT   # push what is built, build nothing
#
# --push REGISTRY tags each built image REGISTRY/conductor-<kind>:<commit> (the git commit's short
# sha, with -dirty when the tree has changes), pushes it, and records the digest the registry
# returned in $STATE/pushed.json (printed too): `conductor pipeline compile --images
# .images/pushed.json` names the images by that digest (docs/pipelines.md, "Images in a registry").
#
# On a normal machine this is two `docker build`s: the Dockerfiles' FROM image comes from its
# registry and torch from PyTorch's CPU index. Where no container registry can be reached, it
# first makes the FROM image locally (debootstrap of the same Debian release + `docker import`,
# tagged with the name FROM uses, with this machine's CA certificates), and where PyTorch's
# index cannot be reached it serves the pinned CPU torch wheel (from pip's find-links) on a
# loopback index. It installs and starts the Docker engine where it can (root on Debian) and
# otherwise says what is missing (exit 3), as it does when the engine's disk has too little room for
# a build (exit 3 too). conductor-train (CUDA) is not built here: see images/README.md.
# Every step's output goes to $STATE/images-<kind>.log; the last lines are printed on failure.
# A rebuild removes what it left unreferenced (the builder stage, the image it replaced): without
# that, each rebuild kept about 2.6 GB on the engine's disk.
set -euo pipefail
cd "$(dirname "$0")/.."

KINDS=()
PUSH_REGISTRY=
BUILD=1
while [ $# -gt 0 ]; do
  case "$1" in
    --push) [ $# -ge 2 ] || { echo "images: --push needs a registry (host:port[/path])" >&2; exit 2; }
            PUSH_REGISTRY=$2; shift 2 ;;
    --push=*) PUSH_REGISTRY=${1#--push=}; shift ;;
    --push-only) BUILD=0; shift ;;
    -*) echo "images: unknown option $1" >&2; exit 2 ;;
    *) KINDS+=("$1"); shift ;;
  esac
done
[ ${#KINDS[@]} -eq 0 ] && KINDS=(base serve)
[ "$BUILD" = 0 ] && [ -z "$PUSH_REGISTRY" ] && { echo "images: --push-only needs --push REGISTRY" >&2; exit 2; }
STATE=${CONDUCTOR_IMAGES_STATE:-$PWD/.images}
mkdir -p "$STATE"
PY=python3
[ -x .venv/bin/python ] && PY=.venv/bin/python
say() { echo "images: $*" >&2; }
die() { say "error: $*"; exit 2; }
# Exit 3: no image can be built here (no engine: not root on Debian, or dockerd will not start; or
# too little disk); 2: a build failed.
cannot_build() { say "cannot build here: $*"; exit 3; }
no_engine() { cannot_build "no Docker engine: $*"; }

# ---- the engine ---------------------------------------------------------------------------
engine_up() { timeout 10 docker info >/dev/null 2>&1; }
if ! command -v docker >/dev/null 2>&1 || ! engine_up; then
  if [ "$(id -u)" != "0" ] || ! command -v apt-get >/dev/null 2>&1; then
    command -v docker >/dev/null 2>&1 \
      && no_engine "the engine is not running and this user cannot start it (start dockerd, or run as root on Debian)" \
      || no_engine "no docker command: install a Docker engine (Debian: apt-get install docker.io), or run this as root on Debian"
  fi
  if ! command -v dockerd >/dev/null 2>&1 || ! command -v debootstrap >/dev/null 2>&1; then
    say "installing the Docker engine (docker.io) and debootstrap"
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends docker.io debootstrap >/dev/null
  fi
  if ! engine_up; then
    say "starting dockerd (log: $STATE/dockerd.log)"
    setsid nohup /usr/sbin/dockerd --storage-driver overlay2 >"$STATE/dockerd.log" 2>&1 </dev/null &
    for _ in $(seq 60); do engine_up && break; sleep 1; done
    engine_up || no_engine "dockerd did not come up in 60 s; see $STATE/dockerd.log"
  fi
fi

# ---- what to build: names from the one module that holds them, FROM lines from the Dockerfiles
ref() { PYTHONPATH=. "$PY" -c "from conductor_core.cluster.images import image; print(image('$1'))"; }
from_image() { # the FROM image of a Dockerfile's stages, with its ARG defaults substituted
  PYTHONPATH=. "$PY" - "$1" <<'EOF'
import re, sys
text = open(sys.argv[1], encoding="utf-8").read()
args = dict(re.findall(r"^ARG (\w+)=(\S+)", text, re.M))
froms = {re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], f)
         for f in re.findall(r"^FROM (\S+)", text, re.M)}
froms -= set(re.findall(r"^FROM \S+ AS (\w+)", text, re.M))
print("\n".join(sorted(froms)))
EOF
}

registry_reachable() { timeout 20 docker pull "$1" >/dev/null 2>&1; }

make_local_base() { # $1: an image such as python:3.11.14-slim-bookworm
  local name=$1 release=${1##*-} rootfs mirror start=$(date +%s)
  rootfs=$(mktemp -d "$STATE/rootfs.XXXXXX")
  mirror=$(grep -hoE '^(URIs:|deb) +https?://[^ ]+/debian/?' /etc/apt/sources.list /etc/apt/sources.list.d/* 2>/dev/null \
             | awk '{print $2}' | head -1 || true)
  mirror=${mirror:-http://deb.debian.org/debian}
  say "no registry: making $name locally (debootstrap $release from $mirror, ~2 min)"
  debootstrap --variant=minbase \
    --include=python3,python3-venv,python-is-python3,ca-certificates,netbase,tzdata \
    "$release" "$rootfs" "$mirror" >>"$STATE/debootstrap.log" 2>&1 \
    || { tail -20 "$STATE/debootstrap.log" >&2; die "debootstrap failed"; }
  # This machine's CA certificates (HTTPS here may go through a proxy with its own CA).
  if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
    cp /usr/local/share/ca-certificates/*.crt "$rootfs/usr/local/share/ca-certificates/"
    chroot "$rootfs" update-ca-certificates >/dev/null 2>&1
  fi
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
  tar -C "$rootfs" --numeric-owner -cf - . | docker import \
    -c 'ENV LANG=C.UTF-8' \
    -c 'ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt' \
    -c 'ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt' \
    -c 'CMD ["python3"]' - "$name" >/dev/null
  rm -rf "$rootfs"
  say "made $name in $(( $(date +%s) - start )) s ($(docker image inspect -f '{{.Size}}' "$name" | awk '{printf "%.0f MB", $1/1e6}'))"
}

ensure_from() {
  local img
  for img in $(from_image "$1"); do
    docker image inspect "$img" >/dev/null 2>&1 && continue
    if registry_reachable "$img"; then say "pulled $img"; continue; fi
    command -v debootstrap >/dev/null 2>&1 || die "cannot pull $img and no debootstrap to make it locally"
    case "$img" in
      python:*-slim-*) make_local_base "$img" ;;
      *) die "cannot pull $img, and only the python:*-slim-* base can be made locally" ;;
    esac
  done
}

# ---- CPU torch: PyTorch's index, or the pinned wheel served on loopback --------------------
TORCH_ARGS=()
INDEX_PID=
stop_index() { [ -n "$INDEX_PID" ] && kill "$INDEX_PID" 2>/dev/null || true; }
trap stop_index EXIT
torch_index() {
  if timeout 15 "$PY" -c "import urllib.request as u; u.urlopen('https://download.pytorch.org/whl/cpu/torch/', timeout=10)" >/dev/null 2>&1; then
    return  # the Dockerfile's default index
  fi
  local pin dir port
  pin=$(PYTHONPATH=. "$PY" images/requirement.py local torch)
  dir="$STATE/torch-index"
  say "PyTorch's index is unreachable: serving $pin from pip's local wheels on 127.0.0.1"
  if [ ! -f "$dir/.$pin" ]; then
    rm -rf "$dir" && mkdir -p "$dir/wheels"
    "$PY" -m pip download -q --only-binary=:all: --dest "$dir/wheels" "$pin" >>"$STATE/torch-index.log" 2>&1 \
      || { tail -20 "$STATE/torch-index.log" >&2; die "pip could not find $pin locally"; }
    for whl in "$dir"/wheels/*.whl; do  # a PEP 503 layout: simple/<normalised name>/<file>
      name=$(basename "$whl" | cut -d- -f1 | tr 'A-Z_.' 'a-z--')
      mkdir -p "$dir/simple/$name" && ln -f "$whl" "$dir/simple/$name/"
    done
    touch "$dir/.$pin"
  fi
  port=$("$PY" -c "import socket; s=socket.socket(); s.bind(('127.0.0.1',0)); print(s.getsockname()[1])")
  "$PY" -m http.server --bind 127.0.0.1 --directory "$dir" "$port" >>"$STATE/torch-index.log" 2>&1 &
  INDEX_PID=$!
  for _ in $(seq 50); do
    "$PY" -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$port/simple/', timeout=1)" 2>/dev/null && break
    sleep 0.1
  done
  TORCH_ARGS=(--build-arg "TORCH_INDEX_URL=http://127.0.0.1:$port/simple")
}

# ---- disk: what a build needs, and what it leaves ------------------------------------------
# About what one build holds at its peak on the engine's disk: the builder stage, the image, and
# (base) the local FROM image and torch. Checked first, so a full disk is named, not met mid-build.
declare -A NEED_GB=([base]=6 [serve]=1)
free_gb() { df -Pk "$(docker info -f '{{.DockerRootDir}}' 2>/dev/null || echo /)" 2>/dev/null \
              | awk 'NR==2 {printf "%d", $4/1048576}'; }
dangling() { docker images -q --no-trunc --filter dangling=true | sort; }
# Removes the images that became unreferenced since $1 (a `dangling` listing): the builder stage
# and the image the new tag replaced. One still used by a container stays.
remove_new_dangling() {
  local ids
  ids=$(comm -13 <(echo "$1") <(dangling))
  [ -n "$ids" ] && echo "$ids" | xargs docker image rm >/dev/null 2>&1 || true
}

# ---- push: the tag and digest logic is conductor_core/cluster/images.py's -------------------
images_py() { PYTHONPATH=. "$PY" -m conductor_core.cluster.images "$@"; }
if [ -n "$PUSH_REGISTRY" ]; then
  COMMIT=$(images_py commit-tag .) || die "cannot tag by commit: this is not a git checkout"
fi
push() { # $1: a kind; tags its built image REGISTRY/conductor-<kind>:<commit>, pushes, records
  local kind=$1 source pushed out pinned start log="$STATE/push-$1.log"
  source=$(ref "$kind")
  pushed=$(PYTHONPATH=. "$PY" -c "from conductor_core.cluster.images import reference; print(reference('$kind', '$PUSH_REGISTRY', tag='$COMMIT'))") \
    || die "invalid registry $PUSH_REGISTRY"
  docker image inspect "$source" >/dev/null 2>&1 || die "$source is not built: run without --push-only"
  docker tag "$source" "$pushed"
  say "pushing $pushed (log: $log)"
  start=$(date +%s)
  if ! docker push "$pushed" >"$log" 2>&1; then
    tail -20 "$log" >&2
    die "pushing $pushed failed (a registry over plain HTTP other than 127.0.0.0/8 must be in the engine's insecure-registries)"
  fi
  pinned=$(images_py record "$STATE/pushed.json" "$kind" "$PUSH_REGISTRY" "$COMMIT" <"$log") \
    || die "no digest in the output of docker push; see $log"
  say "pushed $pushed in $(( $(date +%s) - start )) s: $pinned (recorded in $STATE/pushed.json)"
  echo "$pinned"
}

# ---- build --------------------------------------------------------------------------------
for kind in "${KINDS[@]}"; do
  [ -f "images/$kind/Dockerfile" ] || die "no images/$kind/Dockerfile"
  [ "$kind" = train ] && die "conductor-train is a CUDA image: build it on a machine with a registry (images/README.md)"
  if [ "$BUILD" = 0 ]; then push "$kind"; continue; fi
  target=$(ref "$kind")
  ensure_from "images/$kind/Dockerfile"
  args=()
  if [ "$kind" = base ]; then torch_index; args=("${TORCH_ARGS[@]}"); fi
  log="$STATE/images-$kind.log"
  need=${NEED_GB[$kind]:-2}
  free=$(free_gb)
  if [ -n "$free" ] && [ "$free" -lt "$need" ]; then
    cannot_build "only $free GB free on the engine's disk; building $target needs about $need GB"
  fi
  say "building $target (log: $log)"
  start=$(date +%s)
  before=$(dangling)
  # The classic builder: BuildKit would fetch the `# syntax=` frontend from a registry. The host
  # network, so that a loopback index is reachable from the build.
  if ! DOCKER_BUILDKIT=0 docker build --network host --force-rm -f "images/$kind/Dockerfile" \
      -t "$target" ${args[@]+"${args[@]}"} . >"$log" 2>&1; then
    remove_new_dangling "$before"
    tail -30 "$log" >&2
    die "building $target failed; full log: $log"
  fi
  remove_new_dangling "$before"
  size=$(docker image inspect -f '{{.Size}}' "$target" | awk '{printf "%.0f MB", $1/1e6}')
  say "built $target in $(( $(date +%s) - start )) s, $size"
  if [ -n "$PUSH_REGISTRY" ]; then push "$kind"; fi
done
