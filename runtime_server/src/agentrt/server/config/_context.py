"""Settings of checkpoints (R5.1) and of agents' context windows (issue 11).

Each group is one section of the config file: ``[checkpoints]`` for the server, and
``[agents.<name>.context]`` per agent. The model's context limit itself is ``context_tokens``
on a model profile or on the agent's ``model``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from agentrt.server.core import ContextPolicy

__all__ = ["CheckpointsConfig", "ContextConfig"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CheckpointsConfig(_Strict):
    """How often a run's folded state is checkpointed, so a resume replays only the log's tail."""

    every_events: int = Field(200, ge=0)  # a checkpoint each time the log passes a multiple; 0: never


class ContextConfig(_Strict):
    """How an agent's prompt is fitted to its model's context limit (``core/_context.py``)."""

    strategy: Literal["keep_recent", "clip_tool_results", "summarise"] = "keep_recent"
    keep_turns: int = Field(2, ge=1)  # the latest steps are kept whole
    clip_bytes: int = Field(2048, ge=64)  # an older tool result is cut to this (clip_tool_results)
    result_share: float = Field(0.25, gt=0, le=1)  # one tool result fills at most this of the window
    summary_bytes: int = Field(2000, ge=64)  # room for the summariser's text (summarise)
    # Who summarises (summarise): the agentrt_summarise hook, or the run's own model in a call
    # of its own (recorded as summary.completed, counted in usage, not as a model step).
    summariser: Literal["hook", "model"] = "hook"
    options: dict[str, Any] = Field(default_factory=dict)  # handed to the agentrt_summarise hook

    def to_policy(self) -> ContextPolicy:
        return ContextPolicy(
            strategy=self.strategy,
            keep_turns=self.keep_turns,
            clip_bytes=self.clip_bytes,
            result_share=self.result_share,
            summary_bytes=self.summary_bytes,
        )
