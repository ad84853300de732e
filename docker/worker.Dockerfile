# The worker image: RQ worker for the impl and judge queues. Candidate code runs in one-shot
# `python -I` children, each behind gVisor's kernel (the gvisor tier); the container itself is
# hardened in docker-compose.yml (read-only root, tmpfs for sandboxes, only the capabilities
# runsc needs, no-new-privileges). Without root it runs the bubblewrap tier instead.
#
# Built like docker/api.Dockerfile: no network, packages from the host's wheelhouse, BASE_IMAGE
# a Debian-family image with python3 (the host's minor version) and its venv module.
ARG BASE_IMAGE=python:3.11-slim

FROM ${BASE_IMAGE} AS install
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1
COPY .build/wheels /wheels
COPY pyproject.toml docker/requirements.py /src/
RUN python3 -m venv /opt/venv \
 && python3 /src/requirements.py /src/pyproject.toml jax > /src/requirements.txt \
 && /opt/venv/bin/pip install -q --no-index --find-links /wheels -r /src/requirements.txt
COPY README.md /src/
COPY app /src/app
COPY worker /src/worker
RUN /opt/venv/bin/pip install -q --no-index --no-deps --no-build-isolation /src

FROM ${BASE_IMAGE}
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PATH=/opt/venv/bin:$PATH
# runsc (gVisor) for the gvisor tier the compose file runs, and bubblewrap for hosts that run the
# worker without root. The local base built from Debian's packages has them already; otherwise
# they come from Debian's packages (the one step that needs the network). No compiler is
# installed: candidate code never builds anything.
RUN missing=""; command -v bwrap >/dev/null || missing="$missing bubblewrap"; \
    command -v runsc >/dev/null || missing="$missing runsc"; \
    [ -z "$missing" ] || (apt-get update && apt-get install -y --no-install-recommends $missing \
                          && rm -rf /var/lib/apt/lists/*)
RUN useradd --create-home --uid 10001 --user-group grader \
 && install -d -o 10001 -g 10001 /home/grader/.cache/scaling-grader/book
COPY --from=install /opt/venv /opt/venv
USER grader
WORKDIR /home/grader
ENV SCALING_GRADER_BOOK_CACHE=/home/grader/.cache/scaling-grader/book TMPDIR=/tmp
# Unhealthy when sandbox starts keep failing or the tasks near the pid limit (the sandbox's health
# file, app/sandbox/health.py), or Redis does not answer; one process with its own deadline. The
# check runs at the worker's low CPU weight beside saturating sandboxes: with 5 s it timed out
# on a loaded host (load average 50) and marked busy, working workers unhealthy.
COPY docker/healthcheck.py /opt/healthcheck.py
HEALTHCHECK --interval=30s --timeout=30s --retries=3 CMD ["python", "/opt/healthcheck.py", "worker"]
# No --queues: the worker serves every queued grading kind's queue (app/graders/kinds.py).
CMD ["scaling-grader", "worker"]
