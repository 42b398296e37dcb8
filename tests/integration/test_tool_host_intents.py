"""Business-intent dedup in the tool host (S004 §10.2): scopes, window, override, over real gRPC.

A tool host in-process on loopback, with test tools declaring an intent per scope. Calls carry
new idempotency keys, as a model asking again in a later step would.
"""

from __future__ import annotations

import asyncio
import collections
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import grpc.aio
import pydantic
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from agentrt.proto.toolhost.v1.tool_host_service_pb2 import InvokeToolRequest, InvokeToolResponse
from agentrt.proto.toolhost.v1.tool_host_service_pb2_grpc import ToolHostServiceStub
from agentrt.toolhost import (
    Intent,
    IntentScope,
    SideEffect,
    Tool,
    ToolContext,
    ToolHost,
    TransientError,
    get_plugin_manager,
    tool,
)
from agentrt.toolhost._intents import Duplicate, Intents, Pending, Proceed, intent_of
from agentrt.toolhost._ledger import Start
from agentrt.toolhost._ledger_backend import LedgerBackend
from agentrt.toolhost._outcome import Outcome
from agentrt.toolhost.security import GRANT_HEADER, GrantSigner, GrantVerifier, public_key_pem
from tests.unit._ledgers import BACKENDS, OpenLedger, ledger_factory

EFFECTS: collections.Counter[str] = collections.Counter()
GATE = asyncio.Event()
ENTERED = asyncio.Event()


class RefundArgs(pydantic.BaseModel):
    order_id: str | None = None
    amount: float = 1.0


def _refund(name: str, scope: IntentScope, *, window: float | None = None) -> Tool:
    async def refund(args: RefundArgs, ctx: ToolContext) -> dict[str, Any]:
        EFFECTS[name] += 1
        if args.amount < 0:
            raise TransientError("payments down")
        if args.amount == 99:
            ENTERED.set()
            await GATE.wait()
        return {"refund": EFFECTS[name], "key": ctx.idempotency_key}

    return tool(
        name=name,
        description="A refund.",
        side_effect=SideEffect.WRITE,
        intent=Intent(arguments=("order_id",), scope=scope, window=window),
        args_model=RefundArgs,
    )(refund)


TOOLS = [
    _refund("refund.run", IntentScope.RUN),
    _refund("refund.session", IntentScope.SESSION),
    _refund("refund.tenant", IntentScope.TENANT),
]


@pytest.fixture(scope="module")
def signing_key() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.generate()


@pytest.fixture
async def host(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[ToolHost]:
    EFFECTS.clear()
    GATE.clear()
    ENTERED.clear()
    verifier = None
    if getattr(request, "param", "") == "grants":
        key: Ed25519PrivateKey = request.getfixturevalue("signing_key")
        (tmp_path / "keys.pem").write_bytes(public_key_pem(key))
        verifier = GrantVerifier(keys_file=tmp_path / "keys.pem")
    started = ToolHost(
        tools={t.name: t for t in TOOLS},
        data_dir=tmp_path / "data",
        pm=get_plugin_manager(entrypoints=False),
        verifier=verifier,
    )
    await started.start("127.0.0.1:0")
    try:
        yield started
    finally:
        GATE.set()
        await started.stop(grace=1.0)


@pytest.fixture
async def stub(host: ToolHost) -> AsyncIterator[ToolHostServiceStub]:
    assert host.address
    async with grpc.aio.insecure_channel(host.address) as channel:
        yield ToolHostServiceStub(channel)


KEYS = iter(range(1_000_000))


async def call(
    stub: ToolHostServiceStub,
    tool_name: str,
    *,
    order: str | None = "A100",
    run: str = "run-1",
    session: str = "",
    amount: float = 1.0,
    override: bool = False,
    key: str | None = None,
    grant: str | None = None,
) -> InvokeToolResponse:
    arguments = json.dumps({"order_id": order, "amount": amount})
    metadata = [
        ("x-agentrt-idempotency-key", key or f"key-{next(KEYS)}"),
        ("x-agentrt-run-id", run),
        ("x-agentrt-call-id", "c"),
        ("x-agentrt-fencing-token", "1"),
    ]
    if session:
        metadata.append(("x-agentrt-session-id", session))
    if override:
        metadata.append(("x-agentrt-intent-override", "1"))
    if grant is not None:
        metadata.append((GRANT_HEADER, grant))
    response: InvokeToolResponse = await stub.InvokeTool(
        InvokeToolRequest(tool=tool_name, arguments_json=arguments), metadata=metadata, timeout=10
    )
    return response


async def test_a_repeat_of_the_intent_in_the_same_run_is_answered_with_the_first_result(
    host: ToolHost, stub: ToolHostServiceStub
) -> None:
    first = await call(stub, "refund.run")
    again = await call(stub, "refund.run")
    assert not first.deduplicated and again.deduplicated and not again.replayed
    assert again.result_json == first.result_json
    assert json.loads(first.result_json)["key"] == again.duplicate_of.idempotency_key
    assert (again.duplicate_of.run_id, again.duplicate_of.call_id) == ("run-1", "c")
    assert again.duplicate_of.first_time.seconds > 0 and len(again.duplicate_of.intent_key) == 64
    assert EFFECTS["refund.run"] == 1
    assert host.counters["duplicate_suppressed"] == 1 and host.counters["intent_duplicate"] == 1
    # Another run, another order, a call naming no order: each is its own intent.
    assert not (await call(stub, "refund.run", run="run-2")).deduplicated
    assert not (await call(stub, "refund.run", order="A101")).deduplicated
    assert not (await call(stub, "refund.run", order=None)).deduplicated
    assert not (await call(stub, "refund.run", order=None)).deduplicated
    # A call from no run has no run scope: its idempotency key is its only dedup.
    assert not (await call(stub, "refund.run", run="")).deduplicated
    assert not (await call(stub, "refund.run", run="")).deduplicated
    assert EFFECTS["refund.run"] == 7


async def test_a_retry_of_the_same_key_is_a_replay_not_a_duplicate(stub: ToolHostServiceStub) -> None:
    first = await call(stub, "refund.run", key="k-same")
    again = await call(stub, "refund.run", key="k-same")
    assert again.replayed and not again.deduplicated and again.result_json == first.result_json
    assert EFFECTS["refund.run"] == 1


async def test_a_key_the_ledger_knows_is_answered_by_the_ledger_first(stub: ToolHostServiceStub) -> None:
    first = await call(stub, "refund.run", key="k1")
    overridden = await call(stub, "refund.run", key="k2", override=True)  # the claim moves to k2
    again = await call(stub, "refund.run", key="k1")  # a retry of k1 replays k1, not k2
    assert again.replayed and not again.deduplicated and again.result_json == first.result_json
    assert again.result_json != overridden.result_json
    conflict = await call(stub, "refund.run", key="k1", amount=2.0)  # same key, other arguments
    assert conflict.error.message.startswith("the idempotency key was used before")
    assert EFFECTS["refund.run"] == 2


async def test_session_scope_spans_the_runs_of_a_session_and_falls_back_to_the_run(
    stub: ToolHostServiceStub,
) -> None:
    assert not (await call(stub, "refund.session", run="r1", session="s1")).deduplicated
    assert (await call(stub, "refund.session", run="r2", session="s1")).deduplicated
    assert not (await call(stub, "refund.session", run="r3", session="s2")).deduplicated
    # Without a session, the run is the scope.
    assert not (await call(stub, "refund.session", run="r4")).deduplicated
    assert (await call(stub, "refund.session", run="r4")).deduplicated
    assert not (await call(stub, "refund.session", run="r5")).deduplicated
    assert EFFECTS["refund.session"] == 4


async def test_tenant_scope_spans_runs_and_sessions(stub: ToolHostServiceStub) -> None:
    assert not (await call(stub, "refund.tenant", run="r1", session="s1")).deduplicated
    assert (await call(stub, "refund.tenant", run="r2", session="s2")).deduplicated
    assert EFFECTS["refund.tenant"] == 1


async def test_a_failed_first_call_did_not_fulfil_the_intent(stub: ToolHostServiceStub) -> None:
    failed = await call(stub, "refund.run", amount=-1)
    assert failed.HasField("error")
    assert not (await call(stub, "refund.run")).deduplicated
    assert (await call(stub, "refund.run")).deduplicated
    assert EFFECTS["refund.run"] == 2


async def test_an_override_runs_the_intent_again(host: ToolHost, stub: ToolHostServiceStub) -> None:
    await call(stub, "refund.run")
    overridden = await call(stub, "refund.run", override=True)
    assert not overridden.deduplicated and EFFECTS["refund.run"] == 2
    assert host.counters["intent_override"] == 1
    # The claim moved to the overriding call: a later repeat gets its result.
    again = await call(stub, "refund.run")
    assert again.deduplicated and again.result_json == overridden.result_json


async def test_a_repeat_while_the_first_call_runs_waits_for_it_then_gets_its_result(
    stub: ToolHostServiceStub,
) -> None:
    first = asyncio.ensure_future(call(stub, "refund.run", amount=99))
    async with asyncio.timeout(5):
        await ENTERED.wait()
    second = asyncio.ensure_future(call(stub, "refund.run", amount=99))
    await asyncio.sleep(0.1)  # the second is waiting on the first (nothing to poll for)
    assert not second.done()
    GATE.set()
    done_first, done_second = await asyncio.gather(first, second)
    assert done_second.deduplicated and done_second.result_json == done_first.result_json
    assert EFFECTS["refund.run"] == 1


@pytest.mark.parametrize("host", ["grants"], indirect=True)
async def test_with_grants_the_session_tenant_and_override_come_from_the_grant_alone(
    stub: ToolHostServiceStub, signing_key: Ed25519PrivateKey
) -> None:
    signer = GrantSigner(key=signing_key)
    arguments = json.dumps({"order_id": "A100", "amount": 1.0})

    def grant(key: str, run: str, *, tenant: str = "acme", session: str = "", override: bool = False) -> str:
        return signer.sign(
            tenant=tenant,
            run_id=run,
            call_id="c",
            idempotency_key=key,
            fencing_token=1,
            tool="refund.tenant",
            arguments_json=arguments,
            session_id=session,
            intent_override=override,
        )

    async def send(key: str, run: str, *, header_override: bool = False, **claims: Any) -> InvokeToolResponse:
        return await call(
            stub,
            "refund.tenant",
            run=run,
            key=key,
            override=header_override,
            grant=grant(key, run, **claims),
        )

    assert not (await send("g1", "r1")).deduplicated
    assert (await send("g2", "r2")).deduplicated  # same tenant
    assert not (await send("g3", "r3", tenant="other")).deduplicated  # tenants never meet
    assert (await send("g4", "r4", header_override=True)).deduplicated  # a header alone is not believed
    assert not (await send("g5", "r5", override=True)).deduplicated  # the grant's override is
    assert EFFECTS["refund.tenant"] == 3


# -- the claims themselves: windows and claims left by refused calls ---------------------------------


class Clock:
    def __init__(self) -> None:
        self.now_ns = 1_000_000_000_000

    def __call__(self) -> int:
        return self.now_ns


@pytest.fixture(params=BACKENDS)
def open_ledger(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[OpenLedger]:
    """Intent claims on both backends: a host's SQLite file, and the PostgreSQL ledger of a pool."""
    yield from ledger_factory(request, tmp_path)


@pytest.fixture
def ledger(open_ledger: OpenLedger) -> LedgerBackend:
    return open_ledger("life-1")


def run_call(ledger: LedgerBackend, intents: Intents, tool_: Tool, key: str, *, run: str = "r") -> object:
    """Claim, then (when it may run) record it done, as the servicer does."""
    intent = intent_of(tool_, {"order_id": "A100"}, run_id=run, session_id="")
    assert intent is not None
    decision = intents.claim(intent, tenant="", idempotency_key=key, override=False)
    if isinstance(decision, Proceed):
        started = ledger.begin(
            idempotency_key=key,
            tool=tool_.name,
            input_hash="h",
            run_id=run,
            call_id="c",
            rerun_after_crash=False,
        )
        assert isinstance(started, Start)
        ledger.finish(key, Outcome.success('{"ok": true}'))
    return decision


def test_a_window_bounds_how_long_a_repeat_is_a_duplicate(ledger: LedgerBackend) -> None:
    clock = Clock()
    intents = Intents(ledger, clock_ns=clock)
    windowed = _refund("refund.windowed", IntentScope.RUN, window=60.0)
    assert isinstance(run_call(ledger, intents, windowed, "k1"), Proceed)
    clock.now_ns += 59 * 10**9
    assert isinstance(run_call(ledger, intents, windowed, "k2"), Duplicate)
    clock.now_ns += 2 * 10**9
    assert isinstance(run_call(ledger, intents, windowed, "k3"), Proceed)  # the window passed
    assert isinstance(run_call(ledger, intents, windowed, "k4"), Duplicate)  # a new window from k3


def test_a_claim_without_a_ledger_entry_is_taken_over_by_its_own_host_life_at_once(
    ledger: LedgerBackend, open_ledger: OpenLedger
) -> None:
    clock = Clock()
    refund = TOOLS[0]
    intent = intent_of(refund, {"order_id": "A100"}, run_id="r", session_id="")
    assert intent is not None
    # A claim whose call was then refused (FENCED, say) before it recorded RUNNING.
    assert isinstance(
        Intents(ledger, clock_ns=clock).claim(intent, tenant="", idempotency_key="k1", override=False),
        Proceed,
    )
    assert isinstance(
        Intents(ledger, clock_ns=clock).claim(intent, tenant="", idempotency_key="k2", override=False),
        Proceed,
    )
    # Another host life's claim may be between its claim and its begin: pending, until stale.
    with open_ledger("life-2") as other:
        other_intents = Intents(other, clock_ns=clock, stale_claim_s=60)
        assert isinstance(
            other_intents.claim(intent, tenant="", idempotency_key="k3", override=False), Pending
        )
        clock.now_ns += 61 * 10**9
        assert isinstance(
            other_intents.claim(intent, tenant="", idempotency_key="k3", override=False), Proceed
        )


def test_an_intent_must_name_arguments_the_tool_has() -> None:
    with pytest.raises(ValueError, match="unknown arguments"):
        tool(
            name="bad.intent",
            description="x",
            side_effect=SideEffect.WRITE,
            intent=Intent(arguments=("customer",)),
            args_model=RefundArgs,
        )(TOOLS[0].fn)
    with pytest.raises(ValueError, match="window"):
        Intent(arguments=("order_id",), window=0)
    with pytest.raises(ValueError, match="not a string"):
        Intent(arguments="order_id")  # type: ignore[arg-type]
