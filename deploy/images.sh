#!/usr/bin/env bash
# Build the stack's images with no container registry needed:
#   * base images: the public ones (python:3.11-slim, redis:7) when present or pullable; otherwise
#     local ones imported from a Debian root file system (debootstrap --variant=minbase with
#     python3, python3-venv, bubblewrap, runsc and redis-server), built once and kept;
#   * a wheelhouse of every Python package, built on the host with `pip wheel` (rebuilt when
#     pyproject.toml changes), so nothing inside a build reaches the network;
#   * the api and worker images, with Docker's layer cache (only changed layers rebuild).
# Writes the chosen image names to .build/images.env for deploy/stack.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD=.build
PY=${PY:-python3}
PYTHON_BASE=${PYTHON_BASE:-python:3.11-slim}
REDIS_BASE=${REDIS_BASE:-redis:7}
LOCAL_PYTHON_BASE=scaling-grader/python-base:bookworm
LOCAL_REDIS_BASE=scaling-grader/redis-base:bookworm
API_IMAGE=${API_IMAGE:-scaling-grader/api:local}
WORKER_IMAGE=${WORKER_IMAGE:-scaling-grader/worker:local}
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
BASE_PYTHON_VERSION=3.11  # python3 of Debian bookworm and of python:3.11-slim
export DOCKER_BUILDKIT=0  # the classic builder ships with every engine; BuildKit may not

log() { echo "images: $*" >&2; }
have_image() { docker image inspect "$1" >/dev/null 2>&1; }
pullable() { have_image "$1" || timeout 60 docker pull -q "$1" >/dev/null 2>&1; }

debian_rootfs_tar() {
  # One minimal Debian root file system serves both local bases (built once, ~2-3 minutes).
  local tar=$BUILD/debian-bookworm-rootfs.tar dir=$BUILD/rootfs
  [ -s "$tar" ] && return
  if ! command -v debootstrap >/dev/null; then
    [ "$(id -u)" = 0 ] || { log "debootstrap is missing (install it, or run as root)"; exit 1; }
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
  fi
  log "building a Debian bookworm root file system with debootstrap"
  rm -rf "$dir"
  debootstrap --variant=minbase --include=python3,python3-venv,bubblewrap,runsc,redis-server,ca-certificates \
    bookworm "$dir" "$DEBIAN_MIRROR" >"$BUILD/debootstrap.log" 2>&1 \
    || { log "debootstrap failed, see $BUILD/debootstrap.log"; exit 1; }
  rm -rf "$dir"/var/cache/apt/archives/*.deb "$dir"/var/lib/apt/lists/* \
         "$dir"/usr/share/doc/* "$dir"/usr/share/man/* "$dir"/usr/share/locale/*
  # Redis keeps its AOF under /data, owned by Debian's redis user (named volumes copy this owner).
  local redis_ids
  redis_ids=$(awk -F: '$1 == "redis" {print $3 ":" $4}' "$dir/etc/passwd")
  install -d -m 0750 "$dir/data" && chown "$redis_ids" "$dir/data"
  tar -C "$dir" --numeric-owner -cf "$tar.part" . && mv "$tar.part" "$tar"
  rm -rf "$dir"
}

python_base() {
  if pullable "$PYTHON_BASE"; then echo "$PYTHON_BASE"; return; fi
  if ! have_image "$LOCAL_PYTHON_BASE"; then
    log "$PYTHON_BASE is not available: importing $LOCAL_PYTHON_BASE from Debian's packages"
    debian_rootfs_tar
    docker import --change 'ENV LANG=C.UTF-8' --change 'CMD ["python3"]' \
      "$BUILD/debian-bookworm-rootfs.tar" "$LOCAL_PYTHON_BASE" >/dev/null
  fi
  echo "$LOCAL_PYTHON_BASE"
}

redis_base() {
  if pullable "$REDIS_BASE"; then echo "$REDIS_BASE"; return; fi
  if ! have_image "$LOCAL_REDIS_BASE"; then
    log "$REDIS_BASE is not available: importing $LOCAL_REDIS_BASE from Debian's packages"
    debian_rootfs_tar
    docker import --change 'USER redis' --change 'WORKDIR /data' --change 'EXPOSE 6379' \
      --change 'CMD ["redis-server", "--protected-mode", "no"]' \
      "$BUILD/debian-bookworm-rootfs.tar" "$LOCAL_REDIS_BASE" >/dev/null
  fi
  echo "$LOCAL_REDIS_BASE"
}

wheelhouse() {
  local dir=$BUILD/wheels
  if [ -f "$dir/.built" ] && [ "$dir/.built" -nt pyproject.toml ] && [ "$dir/.built" -nt "$0" ]; then return; fi
  local version
  version=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  if [ "$version" != "$BASE_PYTHON_VERSION" ]; then
    log "the wheelhouse is built with the host's $PY ($version), but the base images run Python $BASE_PYTHON_VERSION;"
    log "set PY to a Python $BASE_PYTHON_VERSION interpreter"
    exit 1
  fi
  log "building the wheelhouse in $dir"
  rm -rf "$dir" && mkdir -p "$dir"
  # async-timeout: redis needs it below Python 3.11.3 (Debian bookworm has 3.11.2); markers are
  # evaluated against the host's interpreter, so it is added by name.
  # shellcheck disable=SC2046  # one requirement per word
  "$PY" -m pip wheel -q --disable-pip-version-check -w "$dir" $("$PY" docker/requirements.py pyproject.toml jax) \
    'async-timeout>=4.0.3' \
    2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
  touch "$dir/.built"
}

build() {  # build IMAGE DOCKERFILE BASE
  log "building $1"
  docker build -q --force-rm -f "$2" --build-arg "BASE_IMAGE=$3" -t "$1" . >/dev/null \
    2> >(grep -v -e "legacy builder is deprecated" -e "BuildKit is currently disabled" -e "environment-variable" \
         -e '^$' >&2)
}

mkdir -p "$BUILD"
base=$(python_base)
redis=$(redis_base)
wheelhouse
build "$API_IMAGE" docker/api.Dockerfile "$base"
build "$WORKER_IMAGE" docker/worker.Dockerfile "$base"
cat >"$BUILD/images.env" <<ENV
BASE_IMAGE=$base
REDIS_IMAGE=$redis
API_IMAGE=$API_IMAGE
WORKER_IMAGE=$WORKER_IMAGE
ENV
docker image ls --format '{{.Repository}}:{{.Tag}} {{.Size}}' | grep -F -e "$API_IMAGE" -e "$WORKER_IMAGE" -e "$redis" \
  | sed 's/^/images: /' >&2
