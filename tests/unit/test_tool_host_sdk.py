"""Unit tests of the tool host SDK: @tool, ToolContext, errors, conversions, exports, hook docs."""

from __future__ import annotations

import asyncio
import inspect
import json
import threading
import time
from pathlib import Path
from typing import Any

import pydantic
import pytest

import agentrt.toolhost as tool_host
from agentrt.proto.toolhost.v1 import tool_pb2
from agentrt.toolhost import (
    CancellationSignal,
    ErrorCode,
    InvalidInput,
    PermanentError,
    SideEffect,
    Tool,
    ToolCancelled,
    ToolContext,
    ToolError,
    ToolHostConfig,
    TransientError,
    Unauthorized,
    canonical_json,
    hookspecs,
    tool,
)
from agentrt.toolhost._convert import (
    ERROR_CODES,
    OPERATION_STATUSES,
    SIDE_EFFECTS,
    failure_to_proto,
    tool_to_spec,
)
from agentrt.toolhost._ledger import OperationStatus
from agentrt.toolhost._outcome import Failure, Outcome
from agentrt.toolhost._server import CallMetadata, call_budget, parse_metadata
from agentrt.toolhost._status import InvalidRequest


class GreetArgs(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")

    name: str = pydantic.Field(min_length=1)
    times: int = pydantic.Field(default=1, ge=1, le=3)


class NoArgs(pydantic.BaseModel):
    pass


class GreetResult(pydantic.BaseModel):
    text: str


@tool(name="greet.sync", description="Greet.", side_effect=SideEffect.READ_ONLY)
def greet_sync(args: GreetArgs, ctx: ToolContext) -> dict[str, Any]:
    return {"text": " ".join([f"hi {args.name}"] * args.times), "thread": threading.get_ident()}


@tool(
    name="greet.async",
    description="Greet asynchronously.",
    side_effect=SideEffect.DESTRUCTIVE,
    idempotent=True,
    supports_query=False,
    concurrency_safe=True,
    requires_approval=True,
    timeout=2.5,
    version="3",
)
async def greet_async(args: GreetArgs, ctx: ToolContext) -> GreetResult:
    return GreetResult(text=f"hi {args.name}")


# --- @tool -> Tool -> ToolSpec ---------------------------------------------------------------


def test_decorator_builds_a_tool_with_spec_fields_and_defaults() -> None:
    assert isinstance(greet_sync, Tool)
    assert greet_sync.args_model is GreetArgs
    assert not greet_sync.is_async
    # supports_query unset: the host decides (true for read-only tools like this one).
    assert (greet_sync.idempotent, greet_sync.supports_query, greet_sync.concurrency_safe) == (
        False,
        None,
        False,
    )
    assert (greet_sync.requires_approval, greet_sync.timeout, greet_sync.version) == (False, 30.0, "1")
    assert greet_async.is_async
    assert greet_sync.rerun_after_crash  # read-only
    assert greet_async.rerun_after_crash  # idempotent


def test_tool_to_spec_carries_every_field_and_the_model_schema() -> None:
    spec = tool_to_spec(greet_async)
    assert spec.name == "greet.async"
    assert spec.version == "3"
    assert spec.description == "Greet asynchronously."
    assert spec.side_effect == tool_pb2.SIDE_EFFECT_DESTRUCTIVE
    assert (spec.idempotent, spec.supports_query, spec.concurrency_safe, spec.requires_approval) == (
        True,
        False,
        True,
        True,
    )
    assert spec.default_timeout.ToMilliseconds() == 2500
    schema = json.loads(spec.input_schema_json)
    assert schema == GreetArgs.model_json_schema()
    assert schema["required"] == ["name"]
    assert schema["additionalProperties"] is False


def test_decorator_rejects_a_function_without_a_model_annotation() -> None:
    with pytest.raises(TypeError, match="pydantic model"):

        @tool(name="bad.one", description="x", side_effect=SideEffect.READ_ONLY)
        def bad(args: dict[str, Any], ctx: ToolContext) -> None: ...


def test_decorator_rejects_a_wrong_signature() -> None:
    with pytest.raises(TypeError, match=r"must take \(args, ctx\)"):

        @tool(name="bad.two", description="x", side_effect=SideEffect.READ_ONLY)
        def bad(args: GreetArgs) -> None: ...


def test_decorator_reports_an_unresolvable_annotation() -> None:
    with pytest.raises(TypeError, match="cannot resolve"):

        @tool(name="bad.three", description="x", side_effect=SideEffect.READ_ONLY)
        def bad(args: NoSuchModel, ctx: ToolContext) -> None: ...  # type: ignore[name-defined]  # noqa: F821


def test_explicit_args_model_skips_annotation_lookup() -> None:
    @tool(name="local.model", description="x", side_effect=SideEffect.WRITE, args_model=GreetArgs)
    def local(args: Any, ctx: ToolContext) -> None: ...

    assert local.args_model is GreetArgs


@pytest.mark.parametrize("name", ["", "has space", ".leading", "trailing.", "a..b", "1abc"])
def test_bad_tool_names_are_rejected(name: str) -> None:
    with pytest.raises(ValueError, match="invalid tool name"):
        tool(name=name, description="x", side_effect=SideEffect.READ_ONLY)(greet_sync.fn)


@pytest.mark.parametrize("timeout", [0, -1, float("inf"), float("nan")])
def test_bad_timeouts_are_rejected(timeout: float) -> None:
    with pytest.raises(ValueError, match="timeout"):
        tool(name="t.x", description="x", side_effect=SideEffect.READ_ONLY, timeout=timeout)(greet_sync.fn)


def test_empty_version_is_rejected() -> None:
    with pytest.raises(ValueError, match="version"):
        tool(name="t.x", description="x", side_effect=SideEffect.READ_ONLY, version="")(greet_sync.fn)


# --- arguments -------------------------------------------------------------------------------


def test_parse_arguments_returns_the_model_and_the_raw_json() -> None:
    model, raw = greet_sync.parse_arguments('{"name": "ada", "times": 2}')
    assert model == GreetArgs(name="ada", times=2)
    assert raw == {"name": "ada", "times": 2}


def test_empty_arguments_mean_an_empty_object() -> None:
    @tool(name="no.args", description="x", side_effect=SideEffect.READ_ONLY)
    def no_args(args: NoArgs, ctx: ToolContext) -> None: ...

    assert no_args.parse_arguments("  ") == (NoArgs(), {})


@pytest.mark.parametrize("text", ["{not json", '{"name": NaN}', "[1,"])
def test_malformed_json_is_invalid_input(text: str) -> None:
    with pytest.raises(InvalidInput) as info:
        greet_sync.parse_arguments(text)
    assert info.value.code is ErrorCode.INVALID_INPUT
    assert [e["type"] for e in info.value.details["errors"]] == ["json_invalid"]


def test_schema_violations_are_listed() -> None:
    with pytest.raises(InvalidInput) as info:
        greet_sync.parse_arguments('{"times": 9, "extra": true}')
    errors = info.value.details["errors"]
    assert {(e["type"], tuple(e["loc"])) for e in errors} == {
        ("missing", ("name",)),
        ("less_than_equal", ("times",)),
        ("extra_forbidden", ("extra",)),
    }
    assert all(set(e) == {"type", "loc", "msg"} for e in errors)  # no input echoed back
    json.dumps(info.value.details)  # JSON-able, for details_json


def test_a_json_array_is_not_an_arguments_object() -> None:
    with pytest.raises(InvalidInput) as info:
        greet_sync.parse_arguments("[1, 2]")
    assert info.value.details["errors"][0]["type"] == "model_type"


# --- invoking and results --------------------------------------------------------------------


async def test_sync_tools_run_in_a_worker_thread_and_async_tools_on_the_loop() -> None:
    ctx = ToolContext(idempotency_key="k")
    result = await greet_sync.invoke(GreetArgs(name="ada"), ctx)
    assert result["text"] == "hi ada"
    assert result["thread"] != threading.get_ident()
    assert await greet_async.invoke(GreetArgs(name="bob"), ctx) == GreetResult(text="hi bob")


def test_results_serialise_to_json() -> None:
    assert json.loads(Tool.serialise_result(GreetResult(text="x"))) == {"text": "x"}
    assert json.loads(Tool.serialise_result({"a": [1, 2.5, None, "é"]})) == {"a": [1, 2.5, None, "é"]}
    assert Tool.serialise_result("s") == '"s"'
    assert Tool.serialise_result(None) == "null"


def test_an_unserialisable_result_is_permanent() -> None:
    with pytest.raises(PermanentError, match="not JSON serialisable"):
        Tool.serialise_result({"f": object()})


def test_canonical_json_sorts_keys_without_spaces_and_keeps_unicode() -> None:
    assert canonical_json({"b": 1, "a": {"d": [1, 2], "c": "é"}}) == '{"a":{"c":"é","d":[1,2]},"b":1}'


# --- ToolContext -----------------------------------------------------------------------------


def test_remaining_is_none_without_a_deadline() -> None:
    assert ToolContext(idempotency_key="k").remaining() is None


def test_remaining_counts_down_and_never_goes_negative() -> None:
    ctx = ToolContext(idempotency_key="k", deadline=time.monotonic() + 10)
    first = ctx.remaining()
    assert first is not None and 9 < first <= 10
    assert ToolContext(idempotency_key="k", deadline=time.monotonic() - 5).remaining() == 0.0


def test_context_is_frozen() -> None:
    ctx = ToolContext(idempotency_key="k")
    with pytest.raises(AttributeError):
        ctx.attempt = 2  # type: ignore[misc]


async def test_cancellation_set_from_another_thread_wakes_async_waiters() -> None:
    ctx = ToolContext(idempotency_key="k")
    waiters = [asyncio.create_task(ctx.wait_cancelled()) for _ in range(2)]
    await asyncio.sleep(0)  # let them register
    assert not ctx.is_cancelled()
    thread = threading.Thread(target=ctx.cancelled.set)
    thread.start()
    await asyncio.wait_for(asyncio.gather(*waiters), timeout=5)
    thread.join()
    assert ctx.is_cancelled()
    await ctx.wait_cancelled()  # already set: returns at once


async def test_sync_tools_see_cancellation_through_the_threading_event() -> None:
    signal = CancellationSignal()
    seen = await asyncio.gather(
        asyncio.to_thread(signal.threading_event.wait, 5.0),
        asyncio.to_thread(signal.set),
    )
    assert seen[0] is True
    assert signal.is_set()


# --- errors ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cls", "code"),
    [
        (InvalidInput, ErrorCode.INVALID_INPUT),
        (Unauthorized, ErrorCode.UNAUTHORIZED),
        (TransientError, ErrorCode.TRANSIENT),
        (PermanentError, ErrorCode.PERMANENT),
        (ToolCancelled, ErrorCode.CANCELLED),
        (ToolError, ErrorCode.PERMANENT),
    ],
)
def test_each_error_class_maps_to_its_code(cls: type[ToolError], code: ErrorCode) -> None:
    error = cls("msg", details={"k": 1})
    assert isinstance(error, ToolError)
    assert error.code is code
    failure = failure_to_proto(Failure.from_error(error))
    assert failure.code == ERROR_CODES[code]
    assert (failure.message, json.loads(failure.details_json)) == ("msg", {"k": 1})


def test_the_base_error_takes_an_explicit_code() -> None:
    assert ToolError("x", code=ErrorCode.TRANSIENT).code is ErrorCode.TRANSIENT
    assert PermanentError("x").code is ErrorCode.PERMANENT  # the class attribute is untouched


def test_unserialisable_details_do_not_hide_the_error() -> None:
    failure = Failure.from_error(PermanentError("boom", details={"o": object()}))
    assert failure.message == "boom"
    assert "object" in json.loads(failure.details_json)["details"]


def test_only_failures_that_did_nothing_are_retryable() -> None:
    # UNAUTHORIZED too: a run paused for a person sends the same call again once it is fixed.
    retryable = {ErrorCode.TRANSIENT, ErrorCode.CANCELLED, ErrorCode.UNAUTHORIZED}
    assert {c for c in ErrorCode if c.retryable} == retryable
    assert Outcome.error(ErrorCode.TRANSIENT, "t").retryable
    assert not Outcome.success("{}").retryable


def test_an_outcome_has_exactly_one_side() -> None:
    with pytest.raises(ValueError):
        Outcome()
    with pytest.raises(ValueError):
        Outcome(result_json="1", failure=Failure.of(ErrorCode.PERMANENT, "x"))


# --- conversions are exhaustive --------------------------------------------------------------


def test_error_codes_map_one_to_one_onto_the_proto_enum() -> None:
    assert set(ERROR_CODES) == set(ErrorCode)
    proto = set(tool_pb2.ToolErrorCode.values()) - {tool_pb2.TOOL_ERROR_CODE_UNSPECIFIED}
    assert set(ERROR_CODES.values()) == proto
    for code, value in ERROR_CODES.items():
        assert tool_pb2.ToolErrorCode.Name(value) == f"TOOL_ERROR_CODE_{code.value}"


def test_side_effects_map_one_to_one_onto_the_proto_enum() -> None:
    assert set(SIDE_EFFECTS) == set(SideEffect)
    assert set(SIDE_EFFECTS.values()) == set(tool_pb2.SideEffect.values()) - {
        tool_pb2.SIDE_EFFECT_UNSPECIFIED
    }
    for effect, value in SIDE_EFFECTS.items():
        assert tool_pb2.SideEffect.Name(value) == f"SIDE_EFFECT_{effect.value}"


def test_operation_statuses_map_one_to_one_onto_the_proto_enum() -> None:
    assert set(OPERATION_STATUSES) == set(OperationStatus)
    expected = set(tool_pb2.OperationStatus.values()) - {tool_pb2.OPERATION_STATUS_UNSPECIFIED}
    assert set(OPERATION_STATUSES.values()) == expected


# --- call metadata and budgets ---------------------------------------------------------------


def test_parse_metadata_reads_every_agentrt_key() -> None:
    meta = parse_metadata(
        [
            ("x-agentrt-idempotency-key", "key-1"),
            ("x-agentrt-run-id", "run-1"),
            ("x-agentrt-call-id", "call-1"),
            ("x-agentrt-attempt", "3"),
            ("x-agentrt-fencing-token", "7"),
            ("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
            ("other-bin", b"\x00"),
        ]
    )
    assert meta == CallMetadata(
        idempotency_key="key-1",
        run_id="run-1",
        call_id="call-1",
        attempt=3,
        fencing_token=7,
        traceparent="00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
    )


def test_parse_metadata_defaults() -> None:
    assert parse_metadata([("x-agentrt-idempotency-key", "k")]) == CallMetadata(idempotency_key="k")


@pytest.mark.parametrize("metadata", [None, [], [("x-agentrt-idempotency-key", "  ")]])
def test_a_missing_idempotency_key_is_invalid(metadata: list[tuple[str, str]] | None) -> None:
    with pytest.raises(InvalidRequest) as info:
        parse_metadata(metadata)
    assert info.value.reason == "MISSING_IDEMPOTENCY_KEY"
    assert info.value.violations[0][0] == "x-agentrt-idempotency-key"


@pytest.mark.parametrize(("key", "value"), [("x-agentrt-attempt", "two"), ("x-agentrt-fencing-token", "-1")])
def test_non_integer_attempt_or_token_is_invalid(key: str, value: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        parse_metadata([("x-agentrt-idempotency-key", "k"), (key, value)])
    assert (info.value.reason, info.value.violations[0][0]) == ("INVALID_METADATA", key)


@pytest.mark.parametrize(
    ("timeout", "remaining", "budget", "reply"),
    [
        (30.0, None, 30.0, None),  # no caller deadline: the tool's timeout
        (30.0, 2.0, 1.95, 1.975),  # the caller's deadline, less the reserve; answer half a reserve early
        (1.0, 5.0, 1.0, 4.975),  # the tool's timeout caps it
        (30.0, 0.1, 0.09, 0.095),  # the reserve never exceeds a tenth of what is left
        (30.0, 0.0, 0.0, 0.0),  # the deadline has passed: nothing to run with
    ],
)
def test_call_budget(timeout: float, remaining: float | None, budget: float, reply: float | None) -> None:
    got = call_budget(tool_timeout=timeout, time_remaining=remaining, reserve=0.05)
    assert got[0] == pytest.approx(budget)
    assert got[1] == (None if reply is None else pytest.approx(reply))


# --- public surface --------------------------------------------------------------------------


def _ruff_order(name: str) -> tuple[int, str]:
    # ruff RUF022 ("isort-style"): CONSTANTS, then Classes, then functions.
    kind = 0 if name.isupper() else 1 if name[0].isupper() else 2
    return kind, name


def test_all_is_sorted_unique_and_complete() -> None:
    names = tool_host.__all__
    assert names == sorted(names, key=_ruff_order)
    assert len(set(names)) == len(names)
    for name in names:
        assert getattr(tool_host, name) is not None
    public = {
        name
        for name, value in vars(tool_host).items()
        if not name.startswith("_") and not inspect.ismodule(value) and name != "annotations"
    }
    assert public == set(names)


def test_config_options_are_read_only() -> None:
    config = ToolHostConfig(data_dir=Path("d"), options={"a": "1"})
    with pytest.raises(TypeError):
        config.options["b"] = "2"  # type: ignore[index]


# --- hookspecs are the documented plugin contract --------------------------------------------


def _hookspecs() -> list[Any]:
    return [f for name, f in vars(hookspecs).items() if name.startswith("agentrt_") and callable(f)]


def test_every_hook_is_documented_with_its_parameters() -> None:
    specs = _hookspecs()
    assert {f.__name__ for f in specs} == {
        "agentrt_register_tools",
        "agentrt_preview_tool",
        "agentrt_query_operation",
    }
    for spec in specs:
        doc = inspect.getdoc(spec) or ""
        assert doc, spec.__name__
        for param in inspect.signature(spec).parameters:
            assert f":param {param}:" in doc, (spec.__name__, param)
        assert ":return:" in doc, spec.__name__


def test_preview_is_firstresult() -> None:
    # pluggy stores a spec's options under "<project name>_spec".
    opts = getattr(hookspecs.agentrt_preview_tool, f"{hookspecs.PROJECT_NAME}_spec")
    assert opts["firstresult"] is True
    assert "Stops at first non-None result" in (hookspecs.agentrt_preview_tool.__doc__ or "")
