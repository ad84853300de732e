# rq-dashboard for the optional `dashboard` compose profile: RQ's own web view of the queues,
# workers and jobs. Unlike the service's images it installs from PyPI at build time, so it needs
# a registry to build (it is optional; the status page at / covers the same ground offline).
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}
# 0.9.0 imports six without declaring it
RUN python3 -m pip install --no-cache-dir "rq-dashboard==0.9.0" six
USER 10001:10001
