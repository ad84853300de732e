# The API image: uvicorn serving create_app(); grades numeric and rows answers inline and queues
# judge and impl work for the workers through Redis.
FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
RUN useradd --create-home --uid 10001 grader
WORKDIR /srv
COPY pyproject.toml README.md ./
COPY app ./app
COPY worker ./worker
RUN pip install .
USER grader
ENV SCALING_GRADER_HOST=0.0.0.0 SCALING_GRADER_PORT=8000 \
    SCALING_GRADER_BOOK_CACHE=/home/grader/.cache/scaling-grader/book
EXPOSE 8000
HEALTHCHECK --interval=10s --timeout=3s --retries=3 \
  CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=2)"
CMD ["scaling-grader", "serve", "--workers", "2"]
