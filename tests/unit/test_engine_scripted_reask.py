"""The scripted provider under the real step loop: a step asked again gets the same decision.

A fault between the model's answer and its commit (``after_model_response``) is a ``run.fault``
that counts the step as spent, so the model is asked again with the next step number and the same
conversation. The scripted provider answers by the conversation: the run still makes the write it
was scripted to make, exactly once, instead of skipping to the next scripted answer. The engine
runs on the in-process fakes of ``agentrt.testing.engine``, the model through the real registry.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from agentrt.server.config import AgentConfig, ModelConfig
from agentrt.server.engine._adapters import RegistryModels
from agentrt.server.models import (
    ModelRegistry,
    ModelRequest,
    ModelResponse,
    ModelSpecData,
    get_model_plugin_manager,
)
from agentrt.server.tools import CallMetadata, ToolOutcome
from agentrt.testing.engine import EngineWorld

SCRIPT = {
    "steps": [
        {"tool_calls": [{"tool": "refund.issue", "arguments": {"order_id": "A100"}}]},
        {"text": "Refunded A100."},
    ]
}


class Recorded(RegistryModels):
    """The registry as the model port, keeping every request it was asked."""

    def __init__(self, registry: ModelRegistry) -> None:
        super().__init__(registry)
        self.requests: list[ModelRequest] = []

    async def complete(
        self, spec: ModelSpecData, request: ModelRequest, *, on_text_delta: Callable[[str], None]
    ) -> ModelResponse:
        self.requests.append(request)
        return await super().complete(spec, request, on_text_delta=on_text_delta)


async def test_a_fault_after_the_answer_asks_again_and_the_scripted_write_still_runs_once() -> None:
    refunds: list[str] = []

    async def refund(arguments_json: str, metadata: CallMetadata) -> ToolOutcome:
        refunds.append(json.loads(arguments_json)["order_id"])
        return ToolOutcome('{"refunded": true}', None)

    agent = AgentConfig(tools=["refund.issue"], model=ModelConfig(provider="scripted", options=SCRIPT))
    world = EngineWorld(agent=agent, faults="after_model_response@1=raise")
    world.tools.add("refund.issue", refund, side_effect="write")  # type: ignore[arg-type]
    registry = ModelRegistry(get_model_plugin_manager(entrypoints=False))
    models = Recorded(registry)
    world.models = models  # type: ignore[assignment]
    try:
        run_id = world.create_run("refund A100")
        await world.drive(run_id)
    finally:
        await registry.aclose()

    assert world.log.phase(run_id) == "COMPLETED"
    assert refunds == ["A100"]  # the write the script asked for ran, once
    (fault,) = world.log.payloads(run_id, "run.fault")
    assert fault["usage_spent"]["model_steps"] == 1  # the lost answer was counted as a step
    # The re-ask happened: step 1's conversation was asked twice, the second time as step 2.
    first, again, after = models.requests
    assert (first.step, again.step, after.step) == (1, 2, 3)
    assert again.messages == first.messages and len(after.messages) > len(first.messages)
    completed = world.log.payloads(run_id, "model.completed")
    assert [c["tool_calls"][0]["call_id"] for c in completed if c.get("tool_calls")] == ["call_1_0"]
    assert world.log.runs[run_id].output == "Refunded A100."
