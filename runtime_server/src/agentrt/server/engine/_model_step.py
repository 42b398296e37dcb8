"""The model side of a run's step: ask the provider, retry within the deadline, record the output.

A model step's output is persisted before anything acts on it (R5.2). A transient
failure (rate limit, overload, a stream that broke off) retries the whole step within
the run's deadline; a streamed attempt that failed has its live deltas marked superseded.

Before a step's ``step.started`` is committed, :meth:`ModelStep.fit_window` fits its prompt to
the model's context limit (``core/_context.py``) and records the decision on that event, so the
request is a function of the log: a retry, or a resume after a crash, sends the same messages.
``model.completed`` records what shaped the answer (sampling options, model, the provider's
response and request ids, latency).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
from collections.abc import Sequence
from functools import partial
from typing import Any

from agentrt.server.config import AgentConfig, ModelConfig
from agentrt.server.core import (
    ContextPolicy,
    ContextWindow,
    HistoryEntry,
    ModelCompleted,
    ModelTextDelta,
    PayloadRef,
    Phase,
    RetryScheduled,
    StepStarted,
    SummaryCompleted,
    ToolCallRequest,
    Usage,
    attempts,
    end_events,
    omitted_entries,
    plan_window,
    prompt_estimate,
    rfc3339,
    scaled_counter,
    step_deadline_s,
    usage_plus,
    windowed_history,
    with_summary,
)
from agentrt.server.engine._agents import BoundModel, bind_model
from agentrt.server.engine._control import AGENT_TOOL_PREFIX, HANDOFF_PREFIX, Cancelled
from agentrt.server.engine._payload_step import bound_model_text
from agentrt.server.engine._run import RunContext
from agentrt.server.engine._sizes import ModelOutputTooLarge
from agentrt.server.models import (
    Message,
    ModelAuthError,
    ModelError,
    ModelRequest,
    ModelResponse,
    ModelToolCall,
    ModelTransientError,
    ToolDef,
)
from agentrt.server.telemetry import decision, span_event, traced_chat

# Model options that shape sampling: a model step records those its request carried (S004 §12).
SAMPLING_OPTIONS = frozenset(
    {
        "temperature",
        "top_p",
        "top_k",
        "max_tokens",
        "max_completion_tokens",
        "seed",
        "stop",
        "presence_penalty",
        "frequency_penalty",
        "logit_bias",
        "n",
        "reasoning_effort",
    }
)


log = logging.getLogger("agentrt.engine")

SUMMARY_INSTRUCTIONS = (
    "You condense the earlier part of a conversation between a user, an assistant and tools, so "
    "that the assistant can go on with the task without it. Keep every fact, identifier, number, "
    "tool result and decision; leave out pleasantries and repetition. Answer with the summary "
    "alone, in at most {} bytes."
)


def _ignore(_text: str) -> None:
    """A summary is not streamed to followers: only the step's own answer is."""


def _transcript(entries: Sequence[HistoryEntry], clip_bytes: int, max_bytes: int) -> str:
    """The entries as plain text for the summariser, within ``max_bytes``.

    Each entry is cut to its share of the room (at most ``clip_bytes``), so every entry left out is
    represented, however large the largest results; what still overflows loses the oldest text.
    """
    share = max(64, min(clip_bytes, max_bytes // max(1, len(entries))))

    def cut(text: str) -> str:
        data = text.encode()
        return text if len(data) <= share else data[:share].decode(errors="ignore") + " [...]"

    lines: list[str] = []
    for entry in entries:
        calls = "".join(f" [calls {tool} {arguments}]" for _, tool, arguments in entry.tool_calls)
        lines.append(f"{entry.role}: {cut(entry.content + calls)}")
    text = "\n".join(lines)
    data = text.encode()
    return data[-max_bytes:].decode(errors="ignore") if len(data) > max_bytes else text


def _entry_json(entry: HistoryEntry) -> dict[str, Any]:
    return {
        "role": entry.role,
        "content": entry.content,
        "tool_call_id": entry.tool_call_id,
        "tool_calls": [{"call_id": c, "tool": t, "arguments_json": a} for c, t, a in entry.tool_calls],
    }


class ModelStep:
    """The model side of a run's steps."""

    def __init__(self, ctx: RunContext):
        self.ctx = ctx
        self._bound: tuple[ModelConfig, BoundModel] | None = None
        self._expected_s = 0.0  # the latest model call's time: a retry must leave room for another
        self._conversation = ctx.handle.session_id or ctx.run_id  # gen_ai.conversation.id of chat spans

    def _model(self) -> BoundModel:
        """The active agent's model through its profile, bound once per agent config.

        Raises:
            ModelConfigError: the agent's profile is no longer configured.
        """
        model = self.ctx.agent.config.model
        if self._bound is None or self._bound[0] is not model:  # first step, or a handoff
            bound = bind_model(model, self.ctx.settings.model_profiles)
            self._bound = (model, bound)
            self.ctx.hidden = bound.hidden  # kept out of a fault's message too
        return self._bound[1]

    def _request(self, timeout_s: float, bound: BoundModel) -> ModelRequest:
        config: AgentConfig = self.ctx.agent.config
        messages: list[Message] = []
        if config.instructions:
            messages.append(Message(role="system", content=config.instructions))
        state = self.ctx.state
        history = windowed_history(state.history, state.input_index, state.window)
        # Parallel calls finish in any order; the model sees their results in call order.
        order = {c: i for entry in history for i, (c, _, _) in enumerate(entry.tool_calls)}
        index = 0
        while index < len(history):
            entry = history[index]
            if entry.role == "assistant":
                calls = tuple(
                    ModelToolCall(call_id=c, tool=t, arguments_json=a) for c, t, a in entry.tool_calls
                )
                messages.append(Message(role="assistant", content=entry.content, tool_calls=calls))
            elif entry.role == "tool":
                end = index
                while end < len(history) and history[end].role == "tool":
                    end += 1
                for result in sorted(history[index:end], key=lambda e: order.get(e.tool_call_id, 0)):
                    messages.append(
                        Message(role="tool", content=result.content, tool_call_id=result.tool_call_id)
                    )
                index = end
                continue
            else:
                messages.append(Message(role="user", content=entry.content))
            index += 1
        return ModelRequest(
            run_id=self.ctx.run_id,
            step=self.ctx.state.usage.model_steps + 1,
            spec=bound.spec,
            messages=tuple(messages),
            tools=self._tool_defs(),
            timeout_s=timeout_s,
        )

    def _tool_defs(self) -> tuple[ToolDef, ...]:
        config: AgentConfig = self.ctx.agent.config
        tools = []
        for name in config.tools:
            spec = self.ctx.ports.tools.spec(name)
            if spec is not None:
                schema = json.loads(spec.input_schema_json or "{}")
                tools.append(ToolDef(name=name, description=spec.description, input_schema=schema))
        for peer in config.handoffs:
            tools.append(
                ToolDef(
                    name=f"{HANDOFF_PREFIX}{peer}",
                    description=f"Hand this conversation over to the {peer} agent, which continues it.",
                    input_schema={"type": "object", "properties": {"reason": {"type": "string"}}},
                )
            )
        for peer in config.agent_tools:
            about = self.ctx.agent.peers[peer].instructions[:300] if peer in self.ctx.agent.peers else ""
            tools.append(
                ToolDef(
                    name=f"{AGENT_TOOL_PREFIX}{peer}",
                    description=f"Ask the {peer} agent and get its final answer. {about}".strip(),
                    input_schema={
                        "type": "object",
                        "properties": {"input": {"type": "string"}},
                        "required": ["input"],
                    },
                )
            )
        return tuple(tools)

    def _tools_json(self) -> str:
        return json.dumps([[t.name, t.description, t.input_schema] for t in self._tool_defs()])

    def _prompt_estimate(self) -> int:
        """The byte estimate of the request this step sends (the provider's count calibrates it)."""
        state = self.ctx.state
        shown = windowed_history(state.history, state.input_index, state.window)
        return prompt_estimate([self.ctx.agent.config.instructions, self._tools_json()], shown)

    async def fit_window(self, step: int) -> None:
        """Fit the prompt of ``step`` to the model's context limit, recorded on its step.started.

        Only while that event is not committed: a step resumed after a crash, or retried, keeps the
        decision its log recorded (none when no limit applied), so its request is the same.
        """
        ctx = self.ctx
        started = next((e for e in ctx.commits.events if isinstance(e, StepStarted) and e.step == step), None)
        if started is None or started.context is not None:
            return
        try:
            bound = self._model()
        except ModelError:
            return  # run_step fails the run with the reason
        if not bound.context_tokens:
            return
        config: AgentConfig = ctx.agent.config
        policy = config.context.to_policy()
        state = ctx.state
        scale = state.token_scale_permille  # learned from the provider's count of an earlier request
        count = scaled_counter(scale)
        fixed = count(config.instructions) + count(self._tools_json())

        def plan(policy: ContextPolicy) -> ContextWindow:
            window = plan_window(
                state.history,
                input_index=state.input_index,
                fixed_tokens=fixed,
                limit_tokens=bound.context_tokens,
                policy=policy,
                count=count,
            )
            return dataclasses.replace(window, token_scale_permille=scale)

        window = plan(policy)
        if policy.strategy == "summarise" and (window.omitted_before_input or window.omitted_after_input):
            left_out = omitted_entries(state.history, state.input_index, window)
            if config.context.summariser == "model":
                summary = await self._summarise_with_model(step, left_out, bound, policy)
            else:
                summary = ctx.ports.policies.summarise(
                    agent_name=ctx.agent.name,
                    entries=[_entry_json(e) for e in left_out],
                    max_bytes=policy.summary_bytes,
                    options=config.context.options,
                )
            if summary is not None:
                window = with_summary(window, summary, policy=policy)
            else:  # no summariser: the recent turns alone, and the record says so
                window = plan(dataclasses.replace(policy, strategy="keep_recent"))
        ctx.record_window(started, window)

    async def _summarise_with_model(
        self, step: int, left_out: Sequence[HistoryEntry], bound: BoundModel, policy: ContextPolicy
    ) -> str | None:
        """The run's model summarises ``left_out`` in a call of its own (summary.completed).

        None when it cannot (an error, no time, a cancel): the step then keeps its recent turns.
        Its tokens and cost count in the run's usage; it is not a model step. A crash before the
        step's commit asks again, like any model call not yet recorded.
        """
        ctx, ports = self.ctx, self.ctx.ports
        plan = ctx.plan_call(ctx.settings.model_timeout_s)
        if not isinstance(plan, attempts.Send):
            return None
        timeout = plan.timeout_s
        budget_bytes = max(1024, (bound.context_tokens or 0) * 3 * 3 // 4)  # the window, in bytes
        request = ModelRequest(
            run_id=ctx.run_id,
            step=step,
            spec=bound.spec,
            messages=(
                Message(role="system", content=SUMMARY_INSTRUCTIONS.format(policy.summary_bytes)),
                Message(role="user", content=_transcript(left_out, policy.clip_bytes, budget_bytes)),
            ),
            tools=(),
            timeout_s=timeout,
            purpose="summary",
        )
        sent_s = ports.clock()
        try:
            complete = partial(ports.models.complete, bound.spec, request, on_text_delta=_ignore)
            chat = partial(traced_chat, conversation_id=self._conversation, secrets=bound.hidden)
            response = await ctx.io(partial(chat, request, complete))  # agentrt.purpose=summary
        except Cancelled:
            return None
        except ModelError as exc:
            log.warning(
                "run %s: the summary for step %s failed: %s", ctx.run_id, step, bound.redact(str(exc))
            )
            return None
        cost = self._cost(bound, response.input_tokens, response.output_tokens)
        spent = Usage(
            input_tokens=response.input_tokens, output_tokens=response.output_tokens, cost_micros=cost
        )
        ctx.commits.unrecorded = usage_plus(ctx.commits.unrecorded, spent)
        before = ctx.state.usage.totals()
        ctx.add(
            SummaryCompleted(
                step=step,
                text=response.text,
                entries=len(left_out),
                usage_before=before,
                usage_after=usage_plus(before, spent),
                model=f"{bound.spec.provider}/{bound.spec.name}",
                response_id=response.response_id[:200],
                request_id=response.request_id[:200],
                latency=f"{max(0.0, ports.clock() - sent_s):.3f}s",
            )
        )
        return response.text or None

    async def run_step(self, step: int) -> None:
        """Ask the model for ``step``, carrying out the core's verdict on each failed attempt."""
        ctx, ports = self.ctx, self.ctx.ports
        bound = self._bind()
        if bound is None:
            return
        # The step, retries and backoff included, must end by then ([timeouts] model_step_s).
        step_deadline = step_deadline_s(began_s=ports.clock(), step_s=ctx.settings.timeouts.model_step_s)
        attempt = 0
        while True:
            attempt += 1
            plan = ctx.plan_call(ctx.settings.model_timeout_s, step_deadline)
            if isinstance(plan, attempts.StepTimeout):
                self._step_timeout(bound.redact("the step's deadline left no time for another attempt"))
                return
            if isinstance(plan, attempts.Expire):
                ctx.add(*end_events(ctx.state, Phase.EXPIRED, "deadline_exceeded", retryable=True))
                return
            sink = self._delta_sink(step, attempt)
            began = ports.clock()
            request = self._request(plan.timeout_s, bound)
            complete = partial(ports.models.complete, bound.spec, request, on_text_delta=sink)
            try:
                chat = partial(traced_chat, conversation_id=self._conversation, secrets=bound.hidden)
                response = await ctx.io(partial(chat, request, complete))
                break
            except Cancelled:
                return
            except ModelError as exc:
                clock = attempts.AttemptClock(
                    began_s=began,
                    now_s=ports.clock(),
                    step_deadline_s=step_deadline,
                    run_deadline_s=ctx.deadline_s,
                    layer=plan.layer,
                    expected_s=self._expected_s,
                )
                if not await self._after_failure(
                    exc, step=step, attempt=attempt, clock=clock, sink=sink, bound=bound
                ):
                    return
        self._expected_s = latency_s = max(0.0, ports.clock() - began)
        await self._record(step, bound, response, latency_s)

    def _bind(self) -> BoundModel | None:
        """The step's model, or None when its profile cannot make a provider (the run ends failed)."""
        bound: BoundModel | None = None
        try:
            bound = self._model()
            self.ctx.ports.models.check(bound.spec)
        except ModelError as exc:
            message = bound.redact(str(exc)) if bound is not None else str(exc)
            self.ctx.add(
                *end_events(self.ctx.state, Phase.FAILED, f"model_error:{exc.reason}", message=message)
            )
            return None
        return bound

    async def _after_failure(
        self,
        exc: ModelError,
        *,
        step: int,
        attempt: int,
        clock: attempts.AttemptClock,
        sink: _DeltaSink,
        bound: BoundModel,
    ) -> bool:
        """Carry out the verdict on a failed attempt; True when the step is to be asked again."""
        ctx, ports = self.ctx, self.ctx.ports
        if sink.sent:
            # Clients drop what this attempt streamed; the step is retried (or ends) as a whole.
            self._publish_delta(ModelTextDelta(step=step, attempt=attempt, superseded=True))
        failure = model_failure(exc)
        model = {"provider": bound.spec.provider, "model": bound.spec.name}
        ports.counters.observe(
            "model_duration",
            clock.now_s - clock.began_s,
            error_class=failure.reason or failure.kind.value,
            **model,
        )
        if failure.timed_out:
            ports.counters.inc("timeout_count", **model)
            decision("timeout", "model step %s attempt %s timed out", step, attempt, layer=clock.layer)
        verdict = attempts.model_verdict(
            failure,
            attempt=attempt,
            clock=clock,
            retry=ctx.retry_policy(ctx.settings.model_attempts),
            rand=ports.rand(),
        )
        # Messages of provider errors enter events: a profile's endpoints and key sources must not.
        message = bound.redact(str(exc))
        match verdict:
            case attempts.Retry(delay_s=delay):
                ports.counters.inc("retry_count", **model)
                # The incomplete step is a fact of the log, like a tool call's retry.
                retry = RetryScheduled(
                    call_id="",
                    step=step,
                    attempt=attempt + 1,
                    delay=f"{delay:.3f}s",
                    reason=bound.redact(f"model {exc.reason}: {exc.message}")[:400],
                    due_time=rfc3339(ports.now_ms() + math.ceil(delay * 1000)),
                )
                ctx.add(retry)
                await ctx.flush()
                span_event("retry_scheduled", attempt=attempt + 1, delay_s=delay, reason=exc.reason)
                try:
                    await ctx.sleep(delay)
                except Cancelled:
                    return False
                return True
            case attempts.StepTimeout(exhausted=exhausted):
                if exhausted:
                    ports.counters.inc("retry_exhausted_count", **model)
                self._step_timeout(message)
            case attempts.Fail(reason=reason, retryable=retryable):
                if retryable:
                    ports.counters.inc("retry_exhausted_count", **model)
                ctx.add(*end_events(ctx.state, Phase.FAILED, reason, message=message, retryable=retryable))
        return False

    async def _record(self, step: int, bound: BoundModel, response: ModelResponse, latency_s: float) -> None:
        """Persist the model's output (R5.2): what it said, what it cost, what shaped it."""
        ctx, ports = self.ctx, self.ctx.ports
        cost = self._cost(bound, response.input_tokens, response.output_tokens)
        # Spent now, whatever happens next: a fault before the commit still counts it (run.fault).
        spent = Usage(
            model_steps=1,
            input_tokens=response.input_tokens,
            output_tokens=response.output_tokens,
            cost_micros=cost,
        )
        self.ctx.commits.unrecorded = usage_plus(self.ctx.commits.unrecorded, spent)
        ports.counters.model_call(bound.spec.provider, bound.spec.name, latency_s, spent)
        ports.faults.hit("after_model_response")
        usage = self.ctx.state.usage
        before = usage.totals()
        after = Usage(
            model_steps=usage.model_steps + 1,
            tool_calls=usage.tool_calls,
            input_tokens=usage.input_tokens + response.input_tokens,
            output_tokens=usage.output_tokens + response.output_tokens,
            cost_micros=usage.cost_micros + cost,
            handoffs=usage.handoffs,
        )
        calls = tuple(ToolCallRequest(c.call_id, c.tool, c.arguments_json) for c in response.tool_calls)
        try:
            text, text_ref = await bound_model_text(
                ctx, response.text, [c.arguments_json for c in response.tool_calls]
            )
        except ModelOutputTooLarge as exc:
            # The call was made and paid for: its usage is recorded, its output is not kept.
            refused = f"[refused: {exc.message}]"
            self.ctx.add(ModelCompleted(step=step, text=refused, usage_before=before, usage_after=after))
            self.ctx.add(
                *end_events(self.ctx.state, Phase.FAILED, "model_output_too_large", message=exc.message)
            )
            return
        completed = ModelCompleted(
            step=step,
            text=text,
            tool_calls=calls,
            usage_before=before,
            usage_after=after,
            text_ref=PayloadRef.from_json(text_ref) if text_ref is not None else None,
            sampling={k: v for k, v in bound.spec.options.items() if k in SAMPLING_OPTIONS} or None,
            model=f"{bound.spec.provider}/{bound.spec.name}",
            response_id=response.response_id[:200],
            request_id=response.request_id[:200],
            latency=f"{latency_s:.3f}s",
            # Only a model with a context limit has windows to calibrate: no cost for the others.
            prompt_estimate_tokens=self._prompt_estimate() if bound.context_tokens else 0,
        )
        self.ctx.add(completed)

    def _cost(self, bound: BoundModel, input_tokens: int, output_tokens: int) -> int:
        # Models without a price entry cost 0: the cost budget only binds priced models.
        price = self.ctx.settings.prices.get(bound.spec.name)
        return price.cost_micros(input_tokens, output_tokens) if price is not None else 0

    def _step_timeout(self, message: str) -> None:
        """The step layer fired: the run ends failed with ``step_timeout`` (retryable, like an outage)."""
        limit = self.ctx.settings.timeouts.model_step_s
        message = f"the model step with its retries did not finish within model_step_s={limit:g}s: {message}"
        decision("step_timeout", "%s", message)
        self.ctx.add(
            *end_events(self.ctx.state, Phase.FAILED, "step_timeout", message=message, retryable=True)
        )

    def _delta_sink(self, step: int, attempt: int) -> _DeltaSink:
        return _DeltaSink(self, step, attempt)

    def _publish_delta(self, delta: ModelTextDelta) -> None:
        """Live only (R8.1: deltas are best-effort and never persisted one by one)."""
        self.ctx.publish_live(delta)


def model_failure(exc: ModelError) -> attempts.ModelFailure:
    """A provider's error as the core's typed facts: its class, stable reason and retry-after."""
    if isinstance(exc, ModelTransientError):
        return attempts.ModelFailure(
            kind=attempts.ModelFailureKind.TRANSIENT,
            reason=exc.reason,
            retry_after_s=exc.retry_after_s,
            timed_out=exc.timed_out,
            connect_failed=exc.connect_failed,
        )
    kind = (
        attempts.ModelFailureKind.AUTH
        if isinstance(exc, ModelAuthError)
        else attempts.ModelFailureKind.PERMANENT
    )
    return attempts.ModelFailure(kind=kind, reason=exc.reason, retry_after_s=exc.retry_after_s)


class _DeltaSink:
    """Forwards one model attempt's text fragments to stream readers, and remembers if it did."""

    def __init__(self, owner: ModelStep, step: int, attempt: int):
        self.owner = owner
        self.step = step
        self.attempt = attempt
        self.sent = False

    def __call__(self, text: str) -> None:
        self.sent = True
        self.owner._publish_delta(ModelTextDelta(step=self.step, attempt=self.attempt, text=text))
