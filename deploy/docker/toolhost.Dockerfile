# syntax=docker/dockerfile:1
# The agentrt tool host base image: plugin teams extend it, no ONBUILD magic.
#   docker build -f deploy/docker/toolhost.Dockerfile --target toolhost -t agentrt-toolhost:0.1.0 .
#
#   # A team's Dockerfile:
#   FROM agentrt-toolhost:0.1.0
#   USER 0:0
#   RUN pip install --no-cache-dir acme-greeting==1.2.0   # its "agentrt.tools" entry point registers it
#   USER 10001:10001
#
# The host loads every installed "agentrt.tools" entry point, so installing a plugin is the whole
# step; the flags (TLS, grant keys, ledger) stay those of deploy/compose and deploy/k8s. The
# `demo` target below is that pattern applied to the demo tools of plugins/.
ARG PYTHON_IMAGE=python:3.12-slim
ARG AGENTRT_VERSION=0.1.0

FROM ${PYTHON_IMAGE} AS builder
WORKDIR /src
COPY proto/ proto/
COPY tool_host/ tool_host/
COPY clients/ clients/
COPY plugins/ plugins/
# [uvloop]: the faster event loop `--event-loop auto` picks up (README, performance).
RUN pip wheel --no-cache-dir --wheel-dir /wheels ./proto './tool_host[otel,postgres,uvloop]' ./clients \
    && pip wheel --no-cache-dir --no-deps --wheel-dir /plugin-wheels ./plugins

FROM ${PYTHON_IMAGE} AS toolhost
ARG AGENTRT_VERSION
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN groupadd --system --gid 10001 agentrt \
    && useradd --system --uid 10001 --gid agentrt --home-dir /var/lib/agentrt-toolhost --shell /usr/sbin/nologin agentrt \
    && mkdir -p /etc/agentrt /var/lib/agentrt-toolhost \
    && chown agentrt:agentrt /var/lib/agentrt-toolhost
# agentrt-client brings the `agentrt` command (`agentrt toolhost`, `agentrt health`).
RUN --mount=type=bind,from=builder,source=/wheels,target=/wheels \
    pip install --no-index --find-links /wheels "agentrt-toolhost[otel,postgres,uvloop]==${AGENTRT_VERSION}" "agentrt-client==${AGENTRT_VERSION}"
USER 10001:10001
WORKDIR /var/lib/agentrt-toolhost
# The ledger and plugin data (--data-dir).
VOLUME ["/var/lib/agentrt-toolhost"]
# gRPC (--listen), Prometheus /metrics (--metrics-listen).
EXPOSE 50061 9465
# mTLS: the host accepts only clients with a certificate of its CA, so the probe presents one
# (probe.pem); the same command as the compose healthcheck and the Kubernetes probes.
HEALTHCHECK --interval=10s --timeout=5s --start-period=20s --retries=3 \
    CMD ["agentrt", "health", "--target", "127.0.0.1:50061", "--ca", "/etc/agentrt/tls/ca.pem", "--cert", "/etc/agentrt/tls/probe.pem", "--key", "/etc/agentrt/tls/probe.key", "--server-name", "agentrt-toolhost", "--timeout", "4"]
ENTRYPOINT ["agentrt", "toolhost"]
# The flags of a secured host; deploy/compose and deploy/k8s pass the same ones.
CMD ["--listen", "0.0.0.0:50061", "--data-dir", "/var/lib/agentrt-toolhost", \
     "--tls-cert", "/etc/agentrt/tls/server.pem", "--tls-key", "/etc/agentrt/tls/server.key", \
     "--client-ca", "/etc/agentrt/tls/ca.pem", "--grant-keys", "/etc/agentrt/grants/grant.pub", \
     "--encryption-key-file", "/etc/agentrt/encryption/keys.json", \
     "--metrics-listen", "0.0.0.0:9465", "--metrics-token-file", "/etc/agentrt/metrics/token", \
     "--log-format", "json"]

# The demo tools (orders.lookup, refund.issue) on the base image: what a plugin team's image is.
FROM toolhost AS demo
ARG AGENTRT_VERSION
USER 0:0
RUN --mount=type=bind,from=builder,source=/plugin-wheels,target=/plugin-wheels \
    pip install --no-index --find-links /plugin-wheels "agentrt-demo==${AGENTRT_VERSION}"
USER 10001:10001
