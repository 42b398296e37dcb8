#!/usr/bin/env sh
# Look at a runtime with grpcurl alone: its services, a run streamed as JSON, its health.
# Usage: sh inspect.sh HOST:PORT   (a runtime started with `agentrt serve --demo`)
set -eu
target="$1"
service=agentrt.runtime.v1.AgentRuntimeService

# The server reflects its services, so grpcurl needs no .proto files.
grpcurl -plaintext "$target" list

# RunAgent starts a run and streams its events, one JSON object each, until it ends or pauses
# (the demo agent refunds over its policy's limit: the stream ends with run_waiting for approval).
grpcurl -plaintext -d '{"agent_name": "refund-demo", "input": "What is the status of order A100?"}' \
    "$target" "$service/RunAgent"

grpcurl -plaintext "$target" grpc.health.v1.Health/Check
