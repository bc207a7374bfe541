# syntax=docker/dockerfile:1
# ragpulse collector image: multi-stage, non-root, with a healthcheck.
#
#   docker build -t ragpulse .                          # the collector: cheap tier + Kafka + LLM judges
#   docker build -t ragpulse --build-arg EXTRAS=models .  # + local CPU models (torch: large)
#   (EXTRAS=collector,redis adds the judge cache shared across replicas)
#   docker run -p 4318:4318 -p 9464:9464 ragpulse        # = ragpulse serve --host 0.0.0.0
ARG PYTHON_VERSION=3.11

FROM python:${PYTHON_VERSION}-slim AS build
ARG EXTRAS="collector"
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/ragpulse
WORKDIR /src
# Metadata first, then the packages (pyproject maps these folders to ragpulse.*).
COPY pyproject.toml README.md ./
COPY ragpulse ragpulse
COPY collector collector
COPY evaluators evaluators
COPY exporters exporters
RUN /opt/ragpulse/bin/pip install ".${EXTRAS:+[$EXTRAS]}"

FROM python:${PYTHON_VERSION}-slim
RUN useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin ragpulse
COPY --from=build /opt/ragpulse /opt/ragpulse
# HF_HUB_OFFLINE: models come from the image or a mounted path, never a download.
ENV PATH=/opt/ragpulse/bin:$PATH PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 \
    RAGPULSE_CACHE_DIR=/tmp/ragpulse-cache
USER 10001:10001
WORKDIR /tmp
EXPOSE 4318 9464
# /metrics answers in every mode (the OTLP receiver does not run with source: kafka).
# Set RAGPULSE_METRICS_PORT when the metrics port is not 9464.
HEALTHCHECK --interval=15s --timeout=3s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/metrics' % os.environ.get('RAGPULSE_METRICS_PORT', '9464'), timeout=2)"]
ENTRYPOINT ["ragpulse"]
# Flags beat the config file; a container must listen beyond its own loopback.
CMD ["serve", "--host", "0.0.0.0"]
