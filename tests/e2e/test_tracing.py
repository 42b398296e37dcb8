"""One OpenTelemetry trace from the caller to the plugin (issue 17, Build 1).

A client with its own traceparent, a runtime and a tool host (separate processes, configured by
``OTEL_*`` variables alone) export to a real OTLP receiver (``agentrt.testing.otlp``). The spans
form one tree: client → StartRun or RunAgent → invoke_agent → step → execute_tool →
the host's InvokeTool → the plugin's own span; the ``chat`` span carries the GenAI usage and
response id, and the model HTTP request carried the chat span's traceparent. A runtime killed
with SIGKILL and replaced goes on in the same trace, under the run's stored root context.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import propagate, trace
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from agentrt.client import Client, event_type
from agentrt.proto.runtime.v1 import run_pb2
from agentrt.testing import FakeModelServer, FakeResponse, RecordedRequest, ToolHostProcess, spawn_tool_host
from agentrt.testing.otlp import OtlpReceiver, Span
from tests.fault.conftest import API_KEY, FakeOpenAI, runtime_env, start_runtime

ECHO_THEN_DONE = {1: {"tool": "traced.echo", "arguments": {"text": "hello"}}, 2: {"text": "Echoed."}}
NAP_THEN_ECHO = {
    1: {"tool": "sleep.wait", "arguments": {"seconds": 2.0}},
    2: {"tool": "traced.echo", "arguments": {"text": "after"}},
    3: {"text": "Done."},
}


def otel_env(endpoint: str, service: str) -> dict[str, str]:
    return {
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
        "OTEL_SERVICE_NAME": service,
        "OTEL_BSP_SCHEDULE_DELAY": "100",  # spans leave within 0.1 s: a SIGKILL loses little
    }


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver.running() as running:
        yield running


@pytest.fixture
def traced_host(
    tmp_path: Path, receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch
) -> Iterator[ToolHostProcess]:
    for key, value in otel_env(receiver.grpc_endpoint, "toolhost").items():
        monkeypatch.setenv(key, value)  # spawn_tool_host passes this process's environment on
    plugins = ["agentrt.plugins.traced_tools", "agentrt.plugins.demo_tools"]
    with spawn_tool_host(tmp_path / "toolhost", plugins=plugins) as host:
        yield host


class TracedModel:
    """The fake OpenAI server, remembering the traceparent of each request."""

    def __init__(self, script: dict[int, dict[str, Any]]):
        self.fake = FakeOpenAI(script)
        self.traceparents: list[str] = []

    def __call__(self, request: RecordedRequest) -> FakeResponse:
        assert request.headers.get("authorization") == f"Bearer {API_KEY}"
        self.traceparents.append(request.headers.get("traceparent", ""))
        return FakeResponse.json_body(self.fake.answer(request.json()))


def client_tracer(receiver: OtlpReceiver) -> tuple[trace.Tracer, TracerProvider]:
    """The caller's own tracing: a provider of its own (not the global one), exporting at once."""
    provider = TracerProvider(resource=Resource.create({"service.name": "caller"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=receiver.grpc_endpoint)))
    return provider.get_tracer("caller"), provider


def start_traced_run(address: str, tracer: trace.Tracer, text: str, rpc: str = "StartRun") -> tuple[str, Any]:
    """Start the run inside the caller's span, its traceparent on the RPC; returns (run id, span).

    ``rpc="RunAgent"`` starts it with RunAgent and reads the stream to its end inside the span.
    """
    with tracer.start_as_current_span("caller request", kind=trace.SpanKind.CLIENT) as span:
        carrier: dict[str, str] = {}
        propagate.inject(carrier)
        with Client(address, metadata=[("traceparent", carrier["traceparent"])]) as client:
            if rpc == "RunAgent":
                with client.run_agent("traced", text, timeout=60) as stream:
                    run_id = next(stream).run_id
                    for _ in stream:
                        pass
            else:
                run_id = client.start_run("traced", text).run_id
    return run_id, span.get_span_context()


def follow(address: str, run_id: str, timeout: float = 60.0) -> list[Any]:
    with Client(address) as client:
        return [e for e in client.stream_events(run_id, follow=True, timeout=timeout) if e.seq]


def one(spans: list[Span], **where: Any) -> Span:
    found = [s for s in spans if all(getattr(s, k) == v for k, v in where.items())]
    assert len(found) == 1, (where, [(s.service_name, s.name) for s in spans])
    return found[0]


def child_of(spans: list[Span], parent: Span, name: str) -> Span:
    found = [s for s in spans if s.parent_span_id == parent.span_id and s.name == name]
    assert len(found) == 1, (name, parent.name, [(s.name, s.parent_span_id) for s in spans])
    assert found[0].trace_id == parent.trace_id
    return found[0]


def traced_env(tmp_path: Path, receiver: OtlpReceiver, host: ToolHostProcess, model_url: str, **extra: Any):
    env = runtime_env(
        db_url=f"sqlite:///{tmp_path / 'agentrt.sqlite'}",
        tool_host=host.address,
        model_url=model_url,
        tools=("traced.echo", "sleep.wait"),
    )
    agents = json.loads(env["AGENTRT_AGENTS"])
    env["AGENTRT_AGENTS"] = json.dumps({"traced": agents["refund"]})
    env.update(otel_env(receiver.grpc_endpoint, "runtime"))
    env.update(extra)
    return env


@pytest.mark.parametrize("rpc", ["StartRun", "RunAgent"])
def test_one_trace_runs_from_the_caller_through_the_runtime_and_the_host_to_the_plugin(
    tmp_path: Path, receiver: OtlpReceiver, traced_host: ToolHostProcess, rpc: str
) -> None:
    model = TracedModel(ECHO_THEN_DONE)
    tracer, provider = client_tracer(receiver)
    with FakeModelServer(default=model) as server:
        runtime = start_runtime(tmp_path, traced_env(tmp_path, receiver, traced_host, f"{server.url}/v1"))
        try:
            run_id, caller = start_traced_run(runtime.address, tracer, "Echo hello", rpc)
            events = follow(runtime.address, run_id)
            assert events[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED
            trace_id = format(caller.trace_id, "032x")
            with Client(runtime.address) as client:
                assert client.get_run(run_id).trace_id == trace_id  # GetRun shows the trace
            assert events[0].run_started.trace_id == trace_id  # and so does run.started
            assert runtime.stop() == 0  # SIGTERM: the runtime flushes its spans before it exits
        finally:
            runtime.close()
        provider.shutdown()
        spans = receiver.wait_for_spans(
            lambda got: (
                any(s.name == "traced.echo work" for s in got)
                and sum(s.name.startswith("chat ") for s in got) >= 2
                and any(s.name.startswith("invoke_agent") for s in got)
            ),
            timeout=20,
        )
    spans = [s for s in spans if s.trace_id == trace_id]
    client_span = one(spans, name="caller request", service_name="caller")
    assert client_span.parent_span_id == ""
    server = child_of(spans, client_span, f"agentrt.runtime.v1.AgentRuntimeService/{rpc}")
    assert (server.kind, server.service_name) == ("SERVER", "runtime")
    agent = child_of(spans, server, "invoke_agent traced")
    assert agent.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert agent.attributes["gen_ai.agent.name"] == "traced"
    assert agent.attributes["agentrt.run_id"] == run_id
    steps = [s for s in spans if s.parent_span_id == agent.span_id and s.name.startswith("agentrt.step")]
    assert [s.name for s in steps].count("agentrt.step model") == 2
    tool_step = one(steps, name="agentrt.step tool")
    execute = child_of(spans, tool_step, "execute_tool traced.echo")
    assert execute.attributes["gen_ai.tool.name"] == "traced.echo"
    assert execute.attributes["gen_ai.tool.call.id"] == "call_1"
    assert "gen_ai.tool.call.arguments" not in execute.attributes  # contents are opt-in
    host_rpc = child_of(spans, execute, "agentrt.toolhost.v1.ToolHostService/InvokeTool")
    assert (host_rpc.kind, host_rpc.service_name) == ("SERVER", "toolhost")
    assert host_rpc.attributes["gen_ai.tool.name"] == "traced.echo"  # the host's call span
    plugin = child_of(spans, host_rpc, "traced.echo work")
    assert plugin.attributes["traced.text"] == "hello"
    # Each model attempt: a chat span under its step, with the GenAI usage and response.
    chats = [s for s in spans if s.name == "chat gpt-test"]
    assert len(chats) == 2 and {c.parent_span_id for c in chats} <= {s.span_id for s in steps}
    first = min(chats, key=lambda c: c.attributes["gen_ai.usage.input_tokens"])
    assert first.kind == "CLIENT"
    assert first.attributes["gen_ai.operation.name"] == "chat"
    assert first.attributes["gen_ai.provider.name"] == "openai"
    assert first.attributes["gen_ai.request.model"] == "gpt-test"
    assert first.attributes["gen_ai.response.id"] == "chatcmpl-1"
    assert first.attributes["gen_ai.response.finish_reasons"] == ["tool_calls"]
    assert (
        first.attributes["gen_ai.usage.input_tokens"],
        first.attributes["gen_ai.usage.output_tokens"],
    ) == (
        10,
        5,
    )
    assert "gen_ai.input.messages" not in first.attributes
    # The model's HTTP requests carried the chat spans' context.
    sent = sorted(t.rpartition("-")[0] for t in model.traceparents)  # flags aside (sampled, random)
    assert sent == sorted(f"00-{trace_id}-{c.span_id}" for c in chats)


def test_a_run_resumed_after_a_sigkill_goes_on_in_the_same_trace(
    tmp_path: Path, receiver: OtlpReceiver, traced_host: ToolHostProcess
) -> None:
    model = TracedModel(NAP_THEN_ECHO)
    tracer, provider = client_tracer(receiver)
    with FakeModelServer(default=model) as server:
        url = f"{server.url}/v1"
        first = start_runtime(
            tmp_path,
            traced_env(
                tmp_path, receiver, traced_host, url, OTEL_RESOURCE_ATTRIBUTES="agentrt.replica=first"
            ),
        )
        try:
            run_id, caller = start_traced_run(first.address, tracer, "Nap, then echo")
            with Client(first.address) as client:
                for event in client.stream_events(run_id, follow=True, timeout=30):
                    if event_type(event) == "tool.started":
                        break
            # The run's root (the StartRun span) and the first chat were exported before the crash:
            # the tree is checked against them. What had not been exported yet is lost with it.
            receiver.wait_for_spans(
                lambda got: (
                    {"agentrt.runtime.v1.AgentRuntimeService/StartRun", "chat gpt-test"}
                    <= {s.name for s in got}
                ),
                timeout=10,
            )
            first.kill()  # SIGKILL mid-call
        finally:
            first.close()
        provider.shutdown()
        second = start_runtime(
            tmp_path,
            traced_env(
                tmp_path, receiver, traced_host, url, OTEL_RESOURCE_ATTRIBUTES="agentrt.replica=second"
            ),
        )
        try:
            events = follow(second.address, run_id)
            assert events[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED
            assert second.stop() == 0
        finally:
            second.close()
        trace_id = format(caller.trace_id, "032x")
        spans = receiver.wait_for_spans(
            lambda got: (
                any(s.name == "traced.echo work" for s in got)
                and any(s.name == "caller request" for s in got)
            ),
            timeout=20,
        )
    # What the second runtime did for the run (its RPC spans serve other, untraced callers).
    resumed = [s for s in spans if s.resource.get("agentrt.replica") == "second" and s.kind != "SERVER"]
    assert resumed, "the second runtime exported nothing"
    assert {s.trace_id for s in resumed} == {trace_id}  # every new span is in the caller's trace
    rpc = one(spans, name="agentrt.runtime.v1.AgentRuntimeService/StartRun")
    agent = one(resumed, name="invoke_agent traced")
    # Under the run's stored root context (the StartRun span), not a new root or a stray parent.
    assert agent.parent_span_id == rpc.span_id
    assert agent.attributes["agentrt.resumed"] is True
    echo = one(spans, name="traced.echo work")
    assert echo.trace_id == trace_id
    execute = one(resumed, name="execute_tool traced.echo")
    assert execute.parent_span_id in {s.span_id for s in resumed if s.parent_span_id == agent.span_id}
    # The spans the killed owner exported before the kill are in the same trace too.
    before = [s for s in spans if s.resource.get("agentrt.replica") == "first" and s.kind != "SERVER"]
    assert before and {s.trace_id for s in before} == {trace_id}


def test_untraced_processes_still_pass_the_callers_trace_on_and_start_none_of_their_own(
    tmp_path: Path, receiver: OtlpReceiver
) -> None:
    model = TracedModel(ECHO_THEN_DONE)
    tracer, provider = client_tracer(receiver)
    plugins = ["agentrt.plugins.traced_tools", "agentrt.plugins.demo_tools"]
    with (
        spawn_tool_host(tmp_path / "toolhost", plugins=plugins) as host,
        FakeModelServer(default=model) as server,
    ):
        env = traced_env(tmp_path, receiver, host, f"{server.url}/v1")
        env = {k: v for k, v in env.items() if not k.startswith("OTEL_")}  # tracing off: the default
        runtime = start_runtime(tmp_path, env)
        try:
            run_id, caller = start_traced_run(runtime.address, tracer, "Echo hello")
            events = follow(runtime.address, run_id)
            with Client(runtime.address) as client:
                untraced = client.start_run("traced", "Echo hello").run_id
                assert client.get_run(run_id).trace_id == format(caller.trace_id, "032x")
            quiet = follow(runtime.address, untraced)
            with Client(runtime.address) as client:
                assert client.get_run(untraced).trace_id == ""
            assert runtime.stop() == 0
        finally:
            runtime.close()
        provider.shutdown()
    trace_id = format(caller.trace_id, "032x")
    assert events[0].run_started.trace_id == trace_id
    assert not quiet[0].run_started.trace_id
    # The plugin ran in the caller's trace (its span a no-op, its context the caller's span).
    (result,) = [json.loads(e.tool_completed.result_json) for e in events if e.HasField("tool_completed")]
    assert (result["trace_id"], result["span_id"]) == (trace_id, format(caller.span_id, "016x"))
    (untraced_result,) = [
        json.loads(e.tool_completed.result_json) for e in quiet if e.HasField("tool_completed")
    ]
    assert untraced_result["trace_id"] == "0" * 32  # no trace was made up for an untraced caller
    # The model requests of the traced run carried the caller's context; the untraced run's none.
    assert [t.split("-")[1] for t in model.traceparents if t] == [trace_id, trace_id]
    assert model.traceparents.count("") == 2
    # Neither process exported anything: only the caller's own span reached the receiver.
    assert {s.service_name for s in receiver.spans} == {"caller"}


def test_sigterm_exports_what_both_processes_still_hold(
    tmp_path: Path, receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Spans would leave only after 10 minutes (or 512 of them): SIGTERM's flush alone sends them.
    hold = {"OTEL_BSP_SCHEDULE_DELAY": "600000"}
    for key, value in (otel_env(receiver.grpc_endpoint, "toolhost") | hold).items():
        monkeypatch.setenv(key, value)
    model = TracedModel(ECHO_THEN_DONE)
    plugins = ["agentrt.plugins.traced_tools", "agentrt.plugins.demo_tools"]
    with (
        spawn_tool_host(tmp_path / "toolhost", plugins=plugins) as host,
        FakeModelServer(default=model) as server,
    ):
        runtime = start_runtime(tmp_path, traced_env(tmp_path, receiver, host, f"{server.url}/v1", **hold))
        try:
            with Client(runtime.address) as client:
                run_id = client.start_run("traced", "Echo hello").run_id
            assert follow(runtime.address, run_id)[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED
            assert receiver.spans == []  # all still held in both processes
            assert runtime.stop() == 0
        finally:
            runtime.close()
        spans = receiver.wait_for_spans(
            lambda got: any(s.name == "invoke_agent traced" for s in got), timeout=10
        )
        assert {s.service_name for s in spans} == {"runtime"}
        assert host.stop() == 0
        spans = receiver.wait_for_spans(
            lambda got: any(s.name == "traced.echo work" for s in got), timeout=10
        )
    execute = one(spans, name="execute_tool traced.echo")
    host_rpc = child_of(spans, execute, "agentrt.toolhost.v1.ToolHostService/InvokeTool")
    child_of(spans, host_rpc, "traced.echo work")
