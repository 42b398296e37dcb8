"""Test tools for payload suites: a tool that returns a result of a requested size.

Load with ``agentrt toolhost --plugin agentrt.plugins.blob_tools``; not an entry point, so production
hosts never serve it by accident.
"""

from __future__ import annotations

import hashlib
from typing import Any

import pydantic

from agentrt.toolhost import SideEffect, Tool, ToolContext, ToolHostConfig, hookimpl, tool

__all__ = ["BlobArgs", "agentrt_register_tools", "blob_make", "blob_text"]

_MAX_BYTES = 512 * 1024 * 1024


class BlobArgs(pydantic.BaseModel):
    """Arguments of blob.make."""

    model_config = pydantic.ConfigDict(extra="forbid")
    size_bytes: int = pydantic.Field(ge=0, le=_MAX_BYTES, description="Length of the returned text.")
    seed: str = pydantic.Field("", max_length=64, description="Varies the content.")


def blob_text(size_bytes: int, seed: str = "") -> str:
    """Deterministic ASCII text of exactly ``size_bytes`` bytes (hex of a hash chain)."""
    block = hashlib.sha256(seed.encode()).hexdigest() * 1024  # 64 KiB of hex digits
    whole, rest = divmod(size_bytes, len(block))
    return block * whole + block[:rest]


@tool(
    name="blob.make",
    description="Returns {'blob': text} where text has exactly size_bytes ASCII characters.",
    side_effect=SideEffect.READ_ONLY,
    idempotent=True,
    timeout=60.0,
)
async def blob_make(args: BlobArgs, ctx: ToolContext) -> dict[str, Any]:
    """The blob; its JSON result is ``size_bytes + 11`` bytes (``{"blob":"..."}``)."""
    return {"blob": blob_text(args.size_bytes, args.seed)}


@hookimpl
def agentrt_register_tools(config: ToolHostConfig) -> list[Tool]:
    """Register the payload-suite tools."""
    return [blob_make]
