"""The router's per-tenant cap (tools/_router.py ``invoke``): a real tool host process, the runtime's
router in this process, over loopback gRPC. A tenant past its cap of a tool fails TRANSIENT, never
sent, while another tenant's call of the same tool goes through.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentrt.server.core import ToolErrorCode
from agentrt.server.tools import CallMetadata, ToolRouter, ToolSlots
from agentrt.testing import ToolHostProcess, spawn_tool_host

TOOL = "sleep.wait"


@pytest.fixture
def demo_host(tmp_path: Path) -> Iterator[ToolHostProcess]:
    with spawn_tool_host(tmp_path / "toolhost", plugins=["agentrt.plugins.demo_tools"]) as host:
        yield host


def meta(tenant: str) -> CallMetadata:
    return CallMetadata(
        idempotency_key=uuid.uuid4().hex,
        run_id="r1",
        call_id=uuid.uuid4().hex,
        attempt=1,
        fencing_token=1,
        tenant_id=tenant,
    )


async def test_a_tenant_past_its_cap_is_not_sent_while_another_tenant_is(demo_host: ToolHostProcess) -> None:
    router = ToolRouter(slots=ToolSlots(per_tenant={TOOL: 1}))
    try:
        await router.add_host("demo", demo_host.address)
        long = asyncio.create_task(
            router.invoke(TOOL, json.dumps({"seconds": 30}), metadata=meta("acme"), timeout_s=60)
        )
        async with asyncio.timeout(20):
            while True:  # a bounded poll: the slot is taken inside the router, with no event
                if router.slots.tenant_busy(TOOL, "acme") == 1:
                    break
                await asyncio.sleep(0.01)
        refused = await router.invoke(TOOL, json.dumps({"seconds": 0}), metadata=meta("acme"), timeout_s=0.3)
        assert refused.error is not None and refused.error.code is ToolErrorCode.TRANSIENT
        assert refused.never_sent and "for this tenant" in refused.error.message
        other = await router.invoke(TOOL, json.dumps({"seconds": 0}), metadata=meta("globex"), timeout_s=20)
        assert other.error is None, other.error
        assert not long.done()
        long.cancel()  # the cancel reaches the held slots too
        with pytest.raises(asyncio.CancelledError):
            await long
        assert router.slots.tenants_tracked() == 0
        again = await router.invoke(TOOL, json.dumps({"seconds": 0}), metadata=meta("acme"), timeout_s=20)
        assert again.error is None, again.error
    finally:
        await router.close()
