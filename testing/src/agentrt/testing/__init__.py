"""Test support for agentrt and its plugin authors (distribution ``agentrt-testing``).

Nothing in the product imports this package (a test walks the production modules' imports).

- :func:`spawn_tool_host` / :func:`start_tool_host`: a real tool host process (optionally with
  another venv's interpreter) serving the given plugins; :class:`ToolHostProcess`.
- :func:`call_tool` / :meth:`ToolHostProcess.call_tool`: one call to a real host's tool as a run
  sends it (arguments, idempotency key), answered as a :class:`ToolReply`.
- :func:`spawn_runtime`: a real runtime process (needs ``agentrt-server``); :class:`RuntimeProcess`,
  whose ``counters()`` and ``metrics()`` scrape its ``/metrics`` over HTTP.
- :func:`scrape_metrics` / :class:`MetricSamples`: one scrape of a ``/metrics`` endpoint, parsed.
- :mod:`agentrt.testing.engine` (needs ``agentrt-server``): in-process fakes of the engine's
  ports (an in-memory run log with the store's fencing, fake tools with a ledger, a scripted
  model, a manual clock) and :class:`~agentrt.testing.engine.EngineWorld`, which drives runs
  through the real step loop, crashes them and hands them to a new owner, without a process.
- :mod:`agentrt.testing.otlp`: :class:`~agentrt.testing.otlp.OtlpReceiver`, a real OTLP receiver
  (the collector's TraceService and MetricsService over gRPC, and OTLP/HTTP) keeping what it got.
- :mod:`agentrt.testing.redis_server`: :class:`~agentrt.testing.redis_server.RedisServer`, a
  ``redis-server`` of the test's own on a free port (ACL users, TLS), to kill and restart.
- :class:`FakeModelServer`: an OpenAI- and Anthropic-compatible HTTP server speaking the real wire
  protocol from queued answers, and :class:`Exchange`, recorded exchanges loaded from JSON.

Fault injection (``[faults]`` in the runtime's configuration, the tool host's ``--set fault.*``)
is the documented test facility of the processes themselves; see the README.

The fake model server and recorded exchanges, for tests of the HTTP model providers:

:class:`FakeModelServer` is a real HTTP/1.1 server on ``127.0.0.1:<free port>`` (threads, so that
sync tests and other processes can use it as well as asyncio tests). It answers each request with
the next queued :class:`FakeResponse` and records what it received. A response is written in
pieces at exact byte offsets (``chunks``), can stop at an offset until the test sets its ``gate``
(to prove a fragment reached the client before the answer finished), and can drop the connection
at an offset (a clean close or a reset)::

    with FakeModelServer() as server:
        first = FakeResponse.event_stream(
            sse_event({"choices": [{"index": 0, "delta": {"content": "Hel"}}]}),
            sse_event({"choices": [{"index": 0, "delta": {"content": "lo"}, "finish_reason": "stop"}]}),
            sse_event("[DONE]"),
            pause_after=1,
        )
        server.enqueue(first)
        options = {"base_url": server.url + "/v1", "api_key_env": "MY_TEST_KEY"}
        ...  # start the call; once the "Hel" delta arrived, first.gate.set()
        assert server.requests[0].json()["stream"] is True

``wait_for_requests(n, timeout)`` blocks until ``n`` requests arrived; stopping the server ends
paused and hanging answers and idle keep-alive connections.

An :class:`Exchange` is a recorded exchange loaded from JSON: the request a provider should send
and the exact answer (status, headers, body bytes, piece boundaries) the server gives::

    {"description": "...",
     "request": {"method": "POST", "path": "/v1/messages",
                 "headers": {"anthropic-version": "2023-06-01"},   # must be present, equal
                 "json": {...}},                                   # the whole body, equal
     "response": {"status": 200, "headers": {"content-type": "text/event-stream"},
                  "body": ["event: ping\\ndata: {...}\\n\\n", ...],  # or one string, or "body_json"
                  "chunks": [17, 230],                              # byte offsets of the pieces
                  "drop_at": null, "drop": "close"}}
"""

from __future__ import annotations

from agentrt.testing._exchanges import Exchange, ExpectedRequest
from agentrt.testing._metrics import MetricSamples, scrape_metrics
from agentrt.testing._model_server import FakeModelServer, FakeResponse, RecordedRequest, sse_event
from agentrt.testing._runtime import RuntimeProcess, spawn_runtime
from agentrt.testing._tool_calls import ToolReply, call_tool
from agentrt.testing._tool_host import ToolHostProcess, spawn_tool_host, start_tool_host

__all__ = [
    "Exchange",
    "ExpectedRequest",
    "FakeModelServer",
    "FakeResponse",
    "MetricSamples",
    "RecordedRequest",
    "RuntimeProcess",
    "ToolHostProcess",
    "ToolReply",
    "call_tool",
    "scrape_metrics",
    "spawn_runtime",
    "spawn_tool_host",
    "sse_event",
    "start_tool_host",
]
