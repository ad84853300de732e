# The API image: uvicorn serving create_app(); grades numeric and rows answers inline and queues
# judge and impl work for the workers through Redis.
#
# The build needs no network: Python packages come from the wheelhouse `make images` builds on
# the host (.build/wheels, `pip wheel`). BASE_IMAGE is any Debian-family image whose python3 is
# the host's minor version (the wheels are built for it) and has the venv module; `make images`
# passes a local one built from Debian's packages when the public image cannot be pulled.
ARG BASE_IMAGE=python:3.11-slim

FROM ${BASE_IMAGE} AS install
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1
# Dependencies first, keyed on pyproject.toml and the wheelhouse only: reused while the code changes.
COPY .build/wheels /wheels
COPY pyproject.toml docker/requirements.py /src/
RUN python3 -m venv /opt/venv \
 && python3 /src/requirements.py /src/pyproject.toml > /src/requirements.txt \
 && /opt/venv/bin/pip install -q --no-index --find-links /wheels -r /src/requirements.txt
COPY README.md /src/
COPY app /src/app
COPY worker /src/worker
RUN /opt/venv/bin/pip install -q --no-index --no-deps --no-build-isolation /src

# The runtime: the base and the virtual environment only (no wheelhouse, no build tools).
FROM ${BASE_IMAGE}
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PATH=/opt/venv/bin:$PATH
# uid 10001 owns the chapter cache, where the compose file mounts the book-cache volume (a volume
# mounted on a path the image lacks would be root-owned and unwritable).
RUN useradd --create-home --uid 10001 --user-group grader \
 && install -d -o 10001 -g 10001 /home/grader/.cache/scaling-grader/book
COPY --from=install /opt/venv /opt/venv
USER grader
WORKDIR /home/grader
ENV SCALING_GRADER_HOST=0.0.0.0 SCALING_GRADER_PORT=8000 \
    SCALING_GRADER_BOOK_CACHE=/home/grader/.cache/scaling-grader/book
EXPOSE 8000
# One process with a deadline of its own below Docker's timeout (docker/healthcheck.py): a check
# that hangs under load ends itself and leaves no orphan or zombie behind.
COPY docker/healthcheck.py /opt/healthcheck.py
HEALTHCHECK --interval=5s --timeout=5s --retries=3 CMD ["python", "/opt/healthcheck.py", "api"]
CMD ["scaling-grader", "serve", "--workers", "2"]
