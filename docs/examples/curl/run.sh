#!/bin/sh
# Start a run over the HTTP face, get it, and follow its events (SSE) until it ends.
# BASE: where `agentrt serve --http-listen` listens; AGENT: a configured agent.
set -eu
BASE="${BASE:-http://127.0.0.1:8080}"
AGENT="${AGENT:-refund-demo}"
API="$BASE/agentrt.runtime.v1.AgentRuntimeService"

# --8<-- [start:start]
curl -sS -X POST "$API/StartRun" \
  -H 'content-type: application/json' \
  -d "{\"agentName\": \"$AGENT\", \"input\": \"where is order A100?\"}" > run.json
RUN_ID=$(sed -n 's/.*"runId": *"\([^"]*\)".*/\1/p' run.json)
# --8<-- [end:start]

# --8<-- [start:get]
curl -sS -X POST "$API/GetRun" \
  -H 'content-type: application/json' \
  -d "{\"runId\": \"$RUN_ID\"}"
# --8<-- [end:get]
echo

# --8<-- [start:follow]
curl -sS -N "$BASE/v1/runs/$RUN_ID/events"
# --8<-- [end:follow]
