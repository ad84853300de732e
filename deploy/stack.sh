#!/usr/bin/env bash
# The single-host stack (docker-compose.yml):
#   deploy/stack.sh engine   Docker Engine and compose: installed from Debian's packages when
#                            missing (as root); dockerd started in the background when not running
#   deploy/stack.sh up       images (deploy/images.sh), a tenants file with a test tenant, the
#                            stack started and waited for; prints the URL and `API key: <key>`
#   deploy/stack.sh down     containers, networks and volumes removed
#   deploy/stack.sh scale N  start or remove workers until N run (the stack must be up)
#   deploy/stack.sh workers N  N workers only, for a worker host (REDIS_URL names the API host's Redis)
#   deploy/stack.sh test     up with tests/stack/compose.test.yml (fake judge, short heartbeats),
#                            the end-to-end tests in tests/stack, then down
#   deploy/stack.sh reload-tenants  restart the API if its tenants file changed since it started
#                            (up does this by itself when it finds the stack running)
# Variables: PORT (8000), WORKERS (2), WORKER_JOBS (jobs per worker; default: the cores / WORKERS),
# BOOK_MIRROR (an offline book mirror: a directory with the pinned commit's chapters; then up waits
# until the book and exam splits load from it), TENANTS_FILE (your own; default: one written with a
# test tenant), STACK_NAME (compose project, scaling-grader), EXTRA_COMPOSE
# (more compose files, space-separated), KEEP_STACK=1
# (test: leave the stack running), PYTEST (test: the pytest to run).
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD=.build
STATE=$BUILD/stack
export PORT=${PORT:-8000}
export COMPOSE_PROJECT_NAME=${STACK_NAME:-scaling-grader}
WORKERS=${WORKERS:-2}
# The WORKERS workers share this host's cores: each runs as many jobs at once as its share (at
# least one), not one per core of the whole host each (docs/deployment.md, "Sizing workers").
export WORKER_JOBS=${WORKER_JOBS:-$(( ($(nproc) + WORKERS - 1) / WORKERS ))}
COMPOSE_FILES=(-f docker-compose.yml)
for extra in ${EXTRA_COMPOSE:-}; do COMPOSE_FILES+=(-f "$extra"); done  # e.g. deploy/compose.redis-published.yml
TEST_OVERLAY=tests/stack/compose.test.yml

log() { echo "stack: $*" >&2; }

engine() {
  local missing=()
  command -v docker >/dev/null || missing+=(docker.io)
  command -v dockerd >/dev/null || missing+=(docker.io)
  if ! docker compose version >/dev/null 2>&1 && ! command -v docker-compose >/dev/null; then
    missing+=(docker-compose)
  fi
  if [ ${#missing[@]} -gt 0 ]; then
    [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null \
      || { log "missing: ${missing[*]} (install them, or run as root on Debian)"; exit 1; }
    log "installing ${missing[*]} from Debian's packages"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
  if docker info >/dev/null 2>&1; then return; fi
  [ "$(id -u)" = 0 ] || { log "the Docker daemon is not running and only root can start it here"; exit 1; }
  # No init system to ask: dockerd runs in the background, its log beside the other Docker files.
  log "starting dockerd (log: /var/log/dockerd.log)"
  nohup dockerd >>/var/log/dockerd.log 2>&1 </dev/null &
  for _ in $(seq 60); do
    docker info >/dev/null 2>&1 && return
    sleep 1
  done
  log "dockerd did not start; see /var/log/dockerd.log"
  exit 1
}

compose_v2() { docker compose version >/dev/null 2>&1; }

compose() {
  if compose_v2; then
    docker compose "${COMPOSE_FILES[@]}" "$@"
  else
    docker-compose "${COMPOSE_FILES[@]}" "$@"
  fi
}

worker_containers() {
  docker ps -a --filter "label=com.docker.compose.project=$COMPOSE_PROJECT_NAME" \
    --filter "label=com.docker.compose.service=worker" --format '{{.Names}}' | sort
}

scale_workers() {  # scale_workers N: start or remove worker containers until N run
  local want=$1
  if compose_v2; then
    compose up -d --no-build --no-recreate --scale "worker=$want" worker >&2
    return
  fi
  # Compose v1 cannot express systempaths=unconfined: workers are started with `docker run` from
  # the compose file's own worker settings (deploy/worker_run.py says why).
  local n have config
  config=$(compose config)
  for n in $(seq "$want"); do
    have=$(docker ps -aq --filter "name=^${COMPOSE_PROJECT_NAME}_worker_${n}\$")
    [ -n "$have" ] && continue
    mapfile -t args < <(/usr/bin/python3 deploy/worker_run.py "$COMPOSE_PROJECT_NAME" "$n" <<<"$config")
    docker run "${args[@]}" >/dev/null
  done
  # Scale-down stops (SIGTERM, then the container's stop timeout, its stop_grace_period) so that
  # each worker finishes the jobs it holds; only then is the container removed.
  local stopping=()
  for name in $(worker_containers); do
    [ "${name##*_}" -gt "$want" ] && stopping+=("$name")
  done
  if [ ${#stopping[@]} -gt 0 ]; then
    docker stop "${stopping[@]}" >/dev/null
    docker rm "${stopping[@]}" >/dev/null
  fi
  return 0
}

load_images() {
  set -a
  # shellcheck disable=SC1091
  . "$BUILD/images.env"
  set +a
}

tenants() {
  # A tenants file with one test tenant; its key is kept (0600) so a re-run prints the same one.
  mkdir -p "$STATE"
  if [ -n "${TENANTS_FILE:-}" ] && [ "$TENANTS_FILE" != "$PWD/$STATE/tenants.toml" ]; then
    [ -r "$TENANTS_FILE" ] || { log "TENANTS_FILE $TENANTS_FILE cannot be read"; exit 1; }
    TENANTS_FILE=$(cd "$(dirname "$TENANTS_FILE")" && pwd -P)/$(basename "$TENANTS_FILE")
    export TENANTS_FILE
    return
  fi
  if [ ! -s "$STATE/api-key" ]; then
    (umask 077 && python3 -c 'import secrets; print("sg_" + secrets.token_urlsafe(32))' >"$STATE/api-key")
  fi
  local digest judge_urls
  # the tenant may name the judges the deployment allows (a JSON list is a TOML array too)
  judge_urls=${JUDGE_ALLOWED_BASE_URLS:-'["http://judge:8000/v1"]'}
  digest=$(python3 -c 'import hashlib, sys; print(hashlib.sha256(sys.stdin.read().strip().encode()).hexdigest())' \
    <"$STATE/api-key")
  cat >"$STATE/tenants.toml" <<TOML
# Written by deploy/stack.sh: the test tenant of a local stack.
[[tenant]]
name = "test"
key_sha256 = ["$digest"]
rate_per_second = ${TENANT_RATE:-200}
burst = ${TENANT_BURST:-400}
max_in_flight = ${TENANT_MAX_IN_FLIGHT:-512}
operator = true  # the local stack's one user: it also reads /metrics and the workers
judge_base_urls = $judge_urls
TOML
  if [ "${STACK_TEST:-0}" = 1 ]; then
    # The tests' second tenant: a burst of 3 and a slow refill, to meet the rate limit (429).
    [ -s "$STATE/limited-key" ] \
      || (umask 077 && python3 -c 'import secrets; print("sg_" + secrets.token_urlsafe(32))' >"$STATE/limited-key")
    cat >>"$STATE/tenants.toml" <<TOML
[[tenant]]
name = "limited"
key_sha256 = ["$(python3 -c 'import hashlib, sys; print(hashlib.sha256(sys.stdin.read().strip().encode()).hexdigest())' <"$STATE/limited-key")"]
rate_per_second = 0.05
burst = 3
TOML
  fi
  chmod 0644 "$STATE/tenants.toml"  # digests only; the api container's uid must read it
  export TENANTS_FILE=$PWD/$STATE/tenants.toml OWN_TENANTS=1
}

book_mirror() {
  # BOOK_MIRROR given: mounted read-only and named to the service (an env file, so that without
  # a mirror the setting stays unset and the chapters are downloaded instead).
  mkdir -p "$STATE/no-mirror"
  if [ -n "${BOOK_MIRROR:-}" ] && [ "$BOOK_MIRROR" != "$PWD/$STATE/no-mirror" ]; then
    [ -d "$BOOK_MIRROR" ] || { log "BOOK_MIRROR $BOOK_MIRROR is not a directory"; exit 1; }
    BOOK_MIRROR=$(cd "$BOOK_MIRROR" && pwd -P)
    echo "SCALING_GRADER_BOOK_MIRROR=/srv/book-mirror" >"$STATE/book.env"
    export BOOK_MIRROR BOOK_ENV=$STATE/book.env WANT_BOOK=1
  else
    export BOOK_MIRROR=$PWD/$STATE/no-mirror
    unset BOOK_ENV
  fi
}

case_secret() {
  # The deployment's case secret, generated once and kept (0600) beside the API key, so that it
  # does not live only in Redis (a Redis that lost its data would otherwise draw a new one, and the
  # same completion other hidden cases). CASE_SECRET given: used as is. "case_secret keep" (a
  # worker-only host) never generates one: copy the API host's file or set CASE_SECRET.
  if [ -n "${CASE_SECRET:-}" ]; then export CASE_SECRET; return; fi
  mkdir -p "$STATE"
  if [ ! -s "$STATE/case-secret" ]; then
    if [ "${1:-}" = keep ]; then
      log "no CASE_SECRET and no $STATE/case-secret: the workers share the one stored in Redis"
      return
    fi
    (umask 077 && python3 -c 'import secrets; print(secrets.token_hex(32))' >"$STATE/case-secret")
  fi
  CASE_SECRET=$(cat "$STATE/case-secret")
  export CASE_SECRET
}

tenants_digest() { sha256sum "$TENANTS_FILE" | cut -d' ' -f1; }

reload_tenants() {
  # The API reads its tenants file at start: a changed file (keys added or revoked) takes effect
  # only after a restart, which this does when the file differs from the one it started with.
  local now before
  now=$(tenants_digest)
  before=$(cat "$STATE/tenants.started" 2>/dev/null || true)
  if [ -n "$before" ] && [ "$now" != "$before" ] && [ -n "$(compose ps -q api 2>/dev/null)" ]; then
    log "the tenants file changed: restarting the API"
    compose restart api >&2
  fi
  echo "$now" >"$STATE/tenants.started"
}

book_ready() {
  # Ready for the book and exam splits: a task of each is served (the chapters load and verify).
  python3 - "http://127.0.0.1:$PORT" "$(cat "$STATE/api-key" 2>/dev/null)" "${READY_TIMEOUT:-300}" <<'PY'
import sys, time, urllib.error, urllib.request
base, key, timeout = sys.argv[1], sys.argv[2], float(sys.argv[3])
deadline, last = time.monotonic() + timeout, {}
while time.monotonic() < deadline:
    for split in ("book", "exam"):
        req = urllib.request.Request(f"{base}/v1/tasks?split={split}&n=1", headers={"Authorization": f"Bearer {key}"})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                last[split] = r.status
        except urllib.error.HTTPError as exc:
            last[split] = f"{exc.code} {exc.read()[:200].decode(errors='replace')}"
        except (urllib.error.URLError, OSError) as exc:
            last[split] = str(exc)
    if all(v == 200 for v in last.values()):
        print("stack: the book and exam splits load from the mirror", file=sys.stderr)
        sys.exit(0)
    time.sleep(2)
sys.exit(f"stack: not ready for the book and exam splits: {last}")
PY
}

wait_ready() {
  # Ready: /readyz answers 200 and lists WORKERS live workers, each with its sandbox tier (a worker
  # lists one record per lane, jobs it runs at once; its first lane stands for the worker).
  # (the workers are listed to the operator only: the test tenant's key is one)
  local url="http://127.0.0.1:$PORT/readyz"
  python3 - "$url" "$WORKERS" "${READY_TIMEOUT:-300}" "$STATE/api-key" <<'PY'
import json, os, sys, time, urllib.error, urllib.request
url, want, timeout = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
try:
    key = open(sys.argv[4]).read().strip()
except OSError:  # a tenants file of your own: set STACK_READY_KEY to an operator key of it
    key = ""
key = os.environ.get("STACK_READY_KEY", key)
deadline, last = time.monotonic() + timeout, "no answer"
while time.monotonic() < deadline:
    try:
        request = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"} if key else {})
        with urllib.request.urlopen(request, timeout=5) as r:
            body = json.load(r)
        workers = [w for w in body.get("workers", []) if w.get("lane", 1) == 1]
        if len(workers) >= want and all(w.get("sandbox_tier") for w in workers):
            for w in workers:
                print(f"stack: worker {w['name']} on {w['hostname']}: sandbox tier {w['sandbox_tier']}"
                      f" (minimum {w['min_tier']})", file=sys.stderr)
            sys.exit(0)
        last = f"{len(workers)} of {want} workers live"
    except (urllib.error.URLError, OSError, ValueError) as exc:
        last = str(exc)
    time.sleep(1)
sys.exit(f"stack: not ready after {timeout:.0f} s ({last}); see the container logs")
PY
}

up() {
  engine
  deploy/images.sh
  load_images
  tenants
  book_mirror
  case_secret
  log "starting $COMPOSE_PROJECT_NAME with $WORKERS workers"
  if compose_v2; then
    compose up -d --no-build --remove-orphans --scale "worker=$WORKERS" >&2
  else
    # shellcheck disable=SC2046  # one service name per word; naming a profiled service (the optional
    # rq-dashboard) would start it, so it is left out here as compose v2 leaves it out by itself
    compose up -d --no-build $(compose config --services | grep -vx -e worker -e rq-dashboard) >&2
    # started afresh, so they run with the current images and settings
    local old
    old=$(worker_containers)
    [ -z "$old" ] || docker rm -f $old >/dev/null
    scale_workers "$WORKERS"
  fi
  reload_tenants
  wait_ready || { compose ps >&2; compose logs --tail 30 >&2; exit 1; }
  if [ "${WANT_BOOK:-0}" = 1 ] && [ "${OWN_TENANTS:-0}" = 1 ]; then
    book_ready || exit 1
  else
    log "no BOOK_MIRROR: the book and exam splits download the pinned chapters on first use (offline: they fail)"
  fi
  echo "URL: http://127.0.0.1:$PORT"
  echo "API key: $(cat "$STATE/api-key")"
}

down() {
  engine
  [ -f "$BUILD/images.env" ] && load_images
  export TENANTS_FILE=${TENANTS_FILE:-$PWD/$STATE/tenants.toml} BOOK_MIRROR=${BOOK_MIRROR:-$PWD/$STATE/no-mirror}
  # With the test overlay too, so its services go as well.
  COMPOSE_FILES+=(-f "$TEST_OVERLAY")
  # Workers started with `docker run` carry the project's labels: removed first, whatever state a
  # failed test left them in (paused, cut from the network), since a network that still has a
  # container on it makes `compose down` fail, and under `set -e` that ended this function (the
  # EXIT trap of `test` included) with the whole stack left running.
  local left status=0
  # (a failed listing too: under `set -e` and pipefail it would end this function right here)
  left=$(worker_containers) || status=$?
  [ -z "$left" ] || docker rm -f $left >/dev/null || status=$?
  compose down --volumes --remove-orphans --timeout 5 >&2 || status=$?
  return $status
}

run_tests() {
  COMPOSE_FILES+=(-f "$TEST_OVERLAY")
  # The offline book mirror, when the checkout has one, serves the judge's source passages.
  if [ -n "${SCALING_GRADER_BOOK_MIRROR:-}" ] && [ -d "$SCALING_GRADER_BOOK_MIRROR" ]; then
    BOOK_MIRROR=$(cd "$SCALING_GRADER_BOOK_MIRROR" && pwd -P)
    export BOOK_MIRROR STACK_BOOK_MIRROR=1
  fi
  export STACK_TEST=1
  # A stack (and its volumes: Redis's AOF holds rate buckets and queues) left by an earlier run
  # that could not clean up would make the tests start from its state, not a fresh one.
  down 2>/dev/null || true
  [ "${KEEP_STACK:-0}" = 1 ] || trap 'down' EXIT
  local started=$SECONDS
  up >"$STATE.up.log" || { cat "$STATE.up.log"; exit 1; }
  log "stack up in $((SECONDS - started)) s"
  STACK_URL="http://127.0.0.1:$PORT" STACK_API_KEY=$(cat "$STATE/api-key") STACK_WORKERS=$WORKERS \
    STACK_COMPOSE="$(compose_command)" \
    "${PYTEST:-pytest}" -q -p no:cacheprovider tests/stack
}

compose_command() {
  # The compose invocation the tests use for faults (kill, restart, scale), as one line.
  if docker compose version >/dev/null 2>&1; then echo "docker compose ${COMPOSE_FILES[*]}"
  else echo "docker-compose ${COMPOSE_FILES[*]}"; fi
}

case "${1:-}" in
  engine) engine ;;
  up) up ;;
  down) down ;;
  test) mkdir -p "$STATE" && run_tests ;;
  reload-tenants)
    load_images
    export TENANTS_FILE=${TENANTS_FILE:-$PWD/$STATE/tenants.toml} BOOK_MIRROR=${BOOK_MIRROR:-$PWD/$STATE/no-mirror}
    case_secret
    reload_tenants ;;
  workers)  # workers N: a worker-only host; REDIS_URL names the Redis of the API host
    [ -n "${REDIS_URL:-}" ] || { log "set REDIS_URL=redis://:PASSWORD@API_HOST:6379/0"; exit 2; }
    engine
    deploy/images.sh
    load_images
    export TENANTS_FILE=/dev/null BOOK_MIRROR=${BOOK_MIRROR:-$PWD/$STATE/no-mirror}
    case_secret keep
    if compose_v2; then
      compose up -d --no-build --no-deps --scale "worker=$2" worker >&2
    else
      docker network inspect "${COMPOSE_PROJECT_NAME}_default" >/dev/null 2>&1 \
        || docker network create "${COMPOSE_PROJECT_NAME}_default" >/dev/null
      scale_workers "$2"
    fi
    log "$(worker_containers | wc -l) workers started; check their sandbox tier with: docker logs NAME" ;;
  scale)  # scale N: used by the tests (scaling on the fly); loads the same settings as up
    load_images
    [ "${STACK_TEST:-0}" = 1 ] && COMPOSE_FILES+=(-f "$TEST_OVERLAY")
    export TENANTS_FILE=$PWD/$STATE/tenants.toml BOOK_MIRROR=${BOOK_MIRROR:-$PWD/$STATE/no-mirror}
    case_secret
    scale_workers "$2" ;;
  *) echo "usage: $0 engine|up|down|test|scale N|workers N|reload-tenants" >&2; exit 2 ;;
esac
