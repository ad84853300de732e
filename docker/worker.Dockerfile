# The worker image: RQ worker for the impl and judge queues. Candidate code runs in one-shot
# `python -I` children under bubblewrap; the container itself is hardened in docker-compose.yml
# (non-root, read-only root, tmpfs for sandboxes, no capabilities, no-new-privileges, seccomp).
FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
RUN apt-get update \
 && apt-get install -y --no-install-recommends bubblewrap \
 && rm -rf /var/lib/apt/lists/*
RUN useradd --create-home --uid 10001 grader
WORKDIR /srv
COPY pyproject.toml README.md ./
COPY app ./app
COPY worker ./worker
RUN pip install '.[jax]'
USER grader
ENV SCALING_GRADER_BOOK_CACHE=/home/grader/.cache/scaling-grader/book TMPDIR=/tmp
HEALTHCHECK --interval=15s --timeout=5s --retries=3 \
  CMD python -c "import os, redis; redis.Redis.from_url(os.environ['SCALING_GRADER_REDIS_URL']).ping()"
CMD ["scaling-grader", "worker", "--queues", "impl,judge"]
