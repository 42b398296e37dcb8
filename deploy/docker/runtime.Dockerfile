# syntax=docker/dockerfile:1
# The agentrt runtime server. Build from the repository root:
#   docker build -f deploy/docker/runtime.Dockerfile -t agentrt-runtime:0.1.0 .
# Stage 1 makes wheels of the workspace distributions and of every dependency; the final stage
# installs them from that directory alone (--no-index), so it needs neither a compiler nor the
# network, and holds no source tree.
ARG PYTHON_IMAGE=python:3.12-slim
# The version of the workspace distributions (every pyproject.toml says it).
ARG AGENTRT_VERSION=0.1.0

FROM ${PYTHON_IMAGE} AS builder
WORKDIR /src
COPY proto/ proto/
COPY tool_host/ tool_host/
COPY clients/ clients/
COPY runtime_server/ runtime_server/
# [uvloop]: the faster event loop `event_loop = "auto"` picks up (README, performance).
RUN pip wheel --no-cache-dir --wheel-dir /wheels ./proto ./tool_host ./clients './runtime_server[uvloop]'

FROM ${PYTHON_IMAGE} AS runtime
ARG AGENTRT_VERSION
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
# One uid for the runtime and tool host images, so secret files one writes the other can read.
RUN groupadd --system --gid 10001 agentrt \
    && useradd --system --uid 10001 --gid agentrt --home-dir /var/lib/agentrt --shell /usr/sbin/nologin agentrt \
    && mkdir -p /etc/agentrt /var/lib/agentrt \
    && chown agentrt:agentrt /var/lib/agentrt
# The wheels are bind-mounted from the builder, never copied into a layer.
RUN --mount=type=bind,from=builder,source=/wheels,target=/wheels \
    pip install --no-index --find-links /wheels "agentrt-server[uvloop]==${AGENTRT_VERSION}" "agentrt-client==${AGENTRT_VERSION}"
COPY deploy/config/runtime.toml /etc/agentrt/runtime.toml
USER 10001:10001
WORKDIR /var/lib/agentrt
VOLUME ["/var/lib/agentrt"]
# gRPC API (listen), Prometheus /metrics ([metrics] listen): deploy/config/runtime.toml.
EXPOSE 50051 9464
# gRPC health over TLS like any caller (a plaintext probe cannot reach a TLS port); the same
# command as the compose healthcheck and the Kubernetes probes.
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
    CMD ["agentrt", "health", "--target", "127.0.0.1:50051", "--ca", "/etc/agentrt/tls/ca.pem", "--server-name", "agentrt-runtime", "--timeout", "4"]
ENTRYPOINT ["agentrt", "serve", "--config", "/etc/agentrt/runtime.toml"]
