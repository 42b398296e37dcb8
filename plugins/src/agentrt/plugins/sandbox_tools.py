"""Test tools for cleanups (S002 §8): a sandbox a run creates and the runtime destroys at its end.

- ``sandbox.create`` (WRITE): creates a sandbox (a file ``<data_dir>/sandboxes/<id>``) and
  registers ``sandbox.destroy`` of it as the run's cleanup (``with_cleanup``).
- ``sandbox.destroy`` (WRITE, idempotent): removes it. While ``<data_dir>/sandboxes/DOWN``
  exists it fails TRANSIENT ("sandbox service down"), as a remote service in an outage would.

Count what is left with :func:`live_sandboxes`, and how many times a destroy's body ran with
:func:`count_destroys`; the tests own the host's data dir, so they can take the service down and
bring it back. Load with ``--plugin agentrt.plugins.sandbox_tools``;
not an entry point, so production hosts never serve it by accident.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pydantic

from agentrt.toolhost import (
    SideEffect,
    Tool,
    ToolContext,
    ToolHostConfig,
    TransientError,
    hookimpl,
    tool,
    with_cleanup,
)

__all__ = [
    "DOWN_FLAG",
    "SandboxArgs",
    "agentrt_register_tools",
    "count_destroys",
    "live_sandboxes",
    "sandbox_create",
    "sandbox_destroy",
]

SANDBOXES_DIR = "sandboxes"
DOWN_FLAG = "DOWN"
DESTROYS_FILE = "sandbox_destroys.log"  # one line per destroy body run: its idempotency key


class SandboxArgs(pydantic.BaseModel):
    """Arguments of sandbox.create."""

    model_config = pydantic.ConfigDict(extra="forbid")
    purpose: str = pydantic.Field("", max_length=200)


class DestroyArgs(pydantic.BaseModel):
    """Arguments of sandbox.destroy: the id sandbox.create gave (hex only: it names a file)."""

    model_config = pydantic.ConfigDict(extra="forbid")
    sandbox_id: str = pydantic.Field(pattern=r"^[0-9a-f]{16}$")


def _dir(ctx: ToolContext) -> Path:
    path = ctx.data_dir / SANDBOXES_DIR
    path.mkdir(parents=True, exist_ok=True)
    return path


def live_sandboxes(data_dir: Path | str) -> list[str]:
    """The sandboxes that exist under a host's ``data_dir``."""
    path = Path(data_dir) / SANDBOXES_DIR
    return sorted(p.name for p in path.iterdir() if p.name != DOWN_FLAG) if path.exists() else []


def count_destroys(data_dir: Path | str) -> int:
    """How many times a destroy's body ran under ``data_dir`` (a ledger replay runs none)."""
    path = Path(data_dir) / DESTROYS_FILE
    return len(path.read_text(encoding="utf-8").split()) if path.exists() else 0


@tool(
    name="sandbox.create",
    description="Create a sandbox to work in; it is destroyed when the run ends.",
    side_effect=SideEffect.WRITE,
    timeout=10.0,
)
def sandbox_create(args: SandboxArgs, ctx: ToolContext) -> dict[str, Any]:
    """Create the sandbox of this call (the same one again for a retry under the same key)."""
    sandbox_id = hashlib.sha256(ctx.idempotency_key.encode()).hexdigest()[:16]
    (_dir(ctx) / sandbox_id).write_text(args.purpose, encoding="utf-8")
    return with_cleanup(
        {"sandbox_id": sandbox_id}, tool="sandbox.destroy", arguments={"sandbox_id": sandbox_id}
    )


@tool(
    name="sandbox.destroy",
    description="Destroy a sandbox (the runtime calls it when the run that made it ends).",
    side_effect=SideEffect.WRITE,
    idempotent=True,
    timeout=5.0,
)
def sandbox_destroy(args: DestroyArgs, ctx: ToolContext) -> dict[str, Any]:
    """Remove the sandbox; one already gone is fine (idempotent)."""
    where = _dir(ctx)
    if (where / DOWN_FLAG).exists():
        raise TransientError("sandbox service down")
    existed = (where / args.sandbox_id).exists()
    (where / args.sandbox_id).unlink(missing_ok=True)
    with open(ctx.data_dir / DESTROYS_FILE, "a", encoding="utf-8") as log:
        log.write(ctx.idempotency_key + "\n")
    return {"destroyed": args.sandbox_id, "existed": existed}


@hookimpl
def agentrt_register_tools(config: ToolHostConfig) -> list[Tool]:
    """Register the sandbox tools."""
    return [sandbox_create, sandbox_destroy]
