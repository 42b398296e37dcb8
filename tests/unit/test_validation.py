"""The pure validators of the API edge: ids, enums, budgets, metadata, JSON, page tokens, request hashes."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import pytest
from google.protobuf import duration_pb2

from agentrt.proto.runtime.v1 import run_pb2, runtime_service_pb2
from agentrt.server.api._page_tokens import MAX_PAGE_TOKEN_CHARS, PageTokens
from agentrt.server.api._request_keys import request_hash
from agentrt.server.api._validate import (
    MAX_AGENT_NAMES,
    MAX_BUDGET_COUNT,
    MAX_COST_MICROS,
    MAX_INSTRUCTIONS_BYTES,
    MAX_TOKENS,
    _check_options,
    check_budgets,
    check_enum,
    check_id,
    check_json,
    check_metadata,
    check_start,
    check_text,
    quote,
)
from agentrt.server.config import LimitsConfig, Settings
from agentrt.server.core import InvalidRequest, PayloadTooLarge
from agentrt.server.engine._request_keys import same_request
from agentrt.server.models import ModelConfigError
from agentrt.server.models._http import MAX_API_KEY_BYTES, read_api_key
from agentrt.server.store import RunRecord
from agentrt.toolhost import MAX_JSON_DEPTH, JsonBoundsError, loads_bounded
from agentrt.toolhost._validate import bad_key, json_depth

LIMITS = LimitsConfig(max_metadata_bytes=100, max_metadata_entries=4, max_id_bytes=32)
OVER_TIMEOUT = int(LIMITS.max_timeout_s) + 1


def _field(exc: pytest.ExceptionInfo[InvalidRequest]) -> str:
    return exc.value.field


# -- ids and text -------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["a", "run-1", "0123abcdef", "k:v/x@y+z=~", "!" * 32])
def test_ids_of_visible_ascii_within_the_limit_pass(value: str) -> None:
    assert check_id(value, "run_id", max_bytes=32) == value


@pytest.mark.parametrize("value", ["x" * 33, "a b", "tab\there", "nl\n", "caf\u00e9", "\x00", "\u202e"])
def test_ids_out_of_bounds_are_refused_without_echo(value: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        check_id(value, "run_id", max_bytes=32)
    assert _field(caught) == "run_id"
    assert value not in caught.value.message or len(value) <= 1
    assert caught.value.metadata == {"field": "run_id"}


def test_a_required_id_must_be_present_and_an_optional_one_may_be_empty() -> None:
    with pytest.raises(InvalidRequest, match="run_id is required"):
        check_id("", "run_id", max_bytes=32)
    assert check_id("", "session_id", max_bytes=32, required=False) == ""


def test_a_multibyte_id_is_measured_in_bytes() -> None:
    with pytest.raises(InvalidRequest):
        check_id("\u00e9" * 20, "run_id", max_bytes=32)


def test_text_is_bounded_in_bytes_and_quote_is_short() -> None:
    assert check_text("ok", "reason", max_bytes=10) == "ok"
    with pytest.raises(PayloadTooLarge):
        check_text("\u00e9" * 6, "reason", max_bytes=10)
    assert len(quote("z" * 10_000)) < 60


# -- enums --------------------------------------------------------------------------------------------


def test_enums_must_be_known_and_set() -> None:
    decision = run_pb2.APPROVAL_DECISION_APPROVE
    assert check_enum(decision, "decision", run_pb2.ApprovalDecision) == decision
    for bad in (99, -1, 2**31 - 1):
        with pytest.raises(InvalidRequest) as caught:
            check_enum(bad, "decision", run_pb2.ApprovalDecision)
        assert caught.value.reason == "UNKNOWN_ENUM"
    with pytest.raises(InvalidRequest, match="decision is required"):
        check_enum(0, "decision", run_pb2.ApprovalDecision)
    assert check_enum(0, "session_policy", runtime_service_pb2.SessionPolicy, allow_unspecified=True) == 0


# -- budgets ------------------------------------------------------------------------------------------


# Each bound, at its value and one past it: the value passes, one past is refused naming the field.
BOUNDS = [
    ("max_model_steps", lambda n: run_pb2.Budgets(max_model_steps=n), MAX_BUDGET_COUNT),
    ("max_tool_calls", lambda n: run_pb2.Budgets(max_tool_calls=n), MAX_BUDGET_COUNT),
    ("max_handoffs", lambda n: run_pb2.Budgets(max_handoffs=n), MAX_BUDGET_COUNT),
    ("max_parallel_tool_calls", lambda n: run_pb2.Budgets(max_parallel_tool_calls=n), MAX_BUDGET_COUNT),
    ("max_input_tokens", lambda n: run_pb2.Budgets(max_input_tokens=n), MAX_TOKENS),
    ("max_output_tokens", lambda n: run_pb2.Budgets(max_output_tokens=n), MAX_TOKENS),
    ("max_cost_micros", lambda n: run_pb2.Budgets(max_cost_micros=n), MAX_COST_MICROS),
    (
        "max_calls_per_tool[refund.issue]",
        lambda n: run_pb2.Budgets(max_calls_per_tool={"orders.lookup": 0, "refund.issue": n}),
        MAX_BUDGET_COUNT,
    ),
    (
        "timeout",
        lambda n: run_pb2.Budgets(timeout=duration_pb2.Duration(seconds=n)),
        int(LIMITS.max_timeout_s),
    ),
]


@pytest.mark.parametrize(("field", "budgets", "bound"), BOUNDS, ids=[b[0] for b in BOUNDS])
def test_each_budget_passes_at_its_bound_and_is_refused_past_it(
    field: str, budgets: Callable[[int], run_pb2.Budgets], bound: int
) -> None:
    check_budgets(budgets(bound), "budgets", limits=LIMITS)  # at the bound: accepted

    with pytest.raises(InvalidRequest) as caught:
        check_budgets(budgets(bound + 1), "budgets", limits=LIMITS)

    assert (caught.value.field, caught.value.reason) == (f"budgets.{field}", "BUDGET_OUT_OF_RANGE")


def test_ordinary_budgets_pass_together_and_one_bad_entry_fails_them() -> None:
    ordinary = run_pb2.Budgets(
        max_model_steps=5,
        max_cost_micros=2_500_000,
        max_calls_per_tool={"orders.lookup": 0, "refund.issue": 2},
        timeout=duration_pb2.Duration(seconds=30, nanos=500),
        max_input_tokens=MAX_TOKENS,
    )
    check_budgets(ordinary, "budgets", limits=LIMITS)
    spoiled = run_pb2.Budgets()
    spoiled.CopyFrom(ordinary)
    spoiled.max_calls_per_tool["refund.issue"] = -1

    with pytest.raises(InvalidRequest) as caught:
        check_budgets(spoiled, "budgets", limits=LIMITS)

    assert caught.value.field == "budgets.max_calls_per_tool[refund.issue]"


@pytest.mark.parametrize(
    ("budgets", "field"),
    [
        (run_pb2.Budgets(max_cost_micros=-1), "budgets.max_cost_micros"),
        (run_pb2.Budgets(max_cost_micros=MAX_COST_MICROS + 1), "budgets.max_cost_micros"),
        (run_pb2.Budgets(max_cost_micros=2**63 - 1), "budgets.max_cost_micros"),
        (run_pb2.Budgets(max_calls_per_tool={"t": -1}), "budgets.max_calls_per_tool[t]"),
        (run_pb2.Budgets(max_calls_per_tool={"": 1}), "budgets.max_calls_per_tool"),
        (run_pb2.Budgets(max_model_steps=-1), "budgets.max_model_steps"),
        (run_pb2.Budgets(max_output_tokens=MAX_TOKENS + 1), "budgets.max_output_tokens"),
        (run_pb2.Budgets(timeout=duration_pb2.Duration(seconds=-1)), "budgets.timeout"),
        (run_pb2.Budgets(timeout=duration_pb2.Duration(seconds=0, nanos=-1)), "budgets.timeout"),
        (run_pb2.Budgets(timeout=duration_pb2.Duration(seconds=1, nanos=10**9)), "budgets.timeout"),
        (run_pb2.Budgets(timeout=duration_pb2.Duration(seconds=OVER_TIMEOUT)), "budgets.timeout"),
    ],
)
def test_budgets_out_of_range_name_the_field(budgets: run_pb2.Budgets, field: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        check_budgets(budgets, "budgets", limits=LIMITS)
    assert _field(caught) == field


def test_start_checks_the_inline_agents_budgets_too() -> None:
    request = runtime_service_pb2.StartRunRequest(
        input="x", agent=run_pb2.AgentSpec(budgets=run_pb2.Budgets(max_cost_micros=-1))
    )
    with pytest.raises(InvalidRequest) as caught:
        check_start(request, limits=LIMITS)
    assert _field(caught) == "agent.budgets.max_cost_micros"


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"temperature": math.nan}, "agent.model.options"),
        ({"a": [1, {"b": -math.inf}]}, "agent.model.options"),
        ({"x": "y" * 70_000}, "agent.model.options"),
    ],
)
def test_inline_model_options_are_finite_and_bounded(options: dict[str, object], field: str) -> None:
    spec = run_pb2.AgentSpec()
    spec.model.options.update(options)
    with pytest.raises(InvalidRequest) as caught:
        check_start(runtime_service_pb2.StartRunRequest(input="x", agent=spec), limits=LIMITS)
    assert _field(caught) == field


def test_inline_model_options_nested_too_deep_are_refused() -> None:
    # A request this deep does not even decode (protobuf's own depth limit, INVALID_ARGUMENT at the
    # edge); the options check holds on its own for messages built in process.
    spec = run_pb2.AgentSpec()
    value: object = 1
    for _ in range(MAX_JSON_DEPTH + 1):
        value = [value]
    spec.model.options.update({"deep": value})
    with pytest.raises(InvalidRequest, match="deeper"):
        _check_options(spec.model.options, "agent.model.options")


def test_inline_instructions_and_name_lists_are_bounded() -> None:
    for spec, field in [
        (run_pb2.AgentSpec(instructions="i" * (MAX_INSTRUCTIONS_BYTES + 1)), "agent.instructions"),
        (run_pb2.AgentSpec(instructions="nul\x00"), "agent.instructions"),
        (run_pb2.AgentSpec(tools=["t"] * (MAX_AGENT_NAMES + 1)), "agent.tools"),
        (run_pb2.AgentSpec(name="a b"), "agent.name"),
    ]:
        with pytest.raises(InvalidRequest) as caught:
            check_start(runtime_service_pb2.StartRunRequest(input="x", agent=spec), limits=LIMITS)
        assert _field(caught) == field


# -- metadata -----------------------------------------------------------------------------------------


def test_metadata_is_bounded_in_entries_bytes_and_key_shape() -> None:
    check_metadata({"a": "b" * 90}, "metadata", limits=LIMITS)
    with pytest.raises(PayloadTooLarge):
        check_metadata({"a": "b" * 100}, "metadata", limits=LIMITS)
    with pytest.raises(PayloadTooLarge):
        check_metadata({"a": "\u00e9" * 50}, "metadata", limits=LIMITS)  # 100 bytes, 50 characters
    with pytest.raises(InvalidRequest, match="at most 4"):
        check_metadata({str(i): "" for i in range(5)}, "metadata", limits=LIMITS)
    for key in ("", "a b", "k" * 300):
        with pytest.raises(InvalidRequest):
            check_metadata({key: "v"}, "metadata", limits=LIMITS)


# -- JSON ---------------------------------------------------------------------------------------------


def test_bounded_json_refuses_depth_size_and_constants() -> None:
    assert loads_bounded('{"a": [1, {"b": null}]}') == {"a": [1, {"b": None}]}
    ok = "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH
    assert json_depth(loads_bounded(ok), limit=MAX_JSON_DEPTH) == MAX_JSON_DEPTH
    for text, match in [
        ("[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1), "deeper"),
        ("[" * 200_000 + "]" * 200_000, "deeper|larger"),
        ("[" * 50_000, "deeper|not valid"),
        ("NaN", "not JSON"),
        ('{"a": -Infinity}', "not JSON"),
        ("{", "not valid JSON"),
    ]:
        with pytest.raises(JsonBoundsError, match=match):
            loads_bounded(text)
    with pytest.raises(JsonBoundsError, match="larger than 10 bytes"):
        loads_bounded('"' + "x" * 20 + '"', max_bytes=10)
    with pytest.raises(InvalidRequest) as caught:
        check_json("[" * 100 + "]" * 100, "result_json", max_bytes=1000)
    assert _field(caught) == "result_json"
    check_json("", "result_json", max_bytes=10)


def test_bad_key_says_why() -> None:
    assert bad_key("abc") is None
    assert bad_key("") is None
    assert bad_key("a" * 300) == "longer than 256 bytes"
    assert bad_key("a b") is not None


# -- page tokens --------------------------------------------------------------------------------------


def test_page_tokens_open_only_in_their_scope_and_refuse_any_change() -> None:
    tokens = PageTokens(key=b"k" * 32)
    token = tokens.seal("cursor-1", scope=["acme", "COMPLETED"])
    assert tokens.open(token, scope=["acme", "COMPLETED"]) == "cursor-1"
    bad = [
        token[:-1] + ("A" if token[-1] != "A" else "B"),
        ("Z" if token[0] != "Z" else "Y") + token[1:],
        token[:-1] + chr(ord(token[-1]) ^ 1),  # may decode to the same bytes: refused all the same
        token.replace(".", ""),
        token + "." + token,
        "x" * (MAX_PAGE_TOKEN_CHARS + 1),
        "\u00e9.\u00e9",
        ".",
    ]
    for forged in bad:
        with pytest.raises(InvalidRequest) as caught:
            tokens.open(forged, scope=["acme", "COMPLETED"])
        assert caught.value.reason == "INVALID_PAGE_TOKEN"
        assert forged not in caught.value.message
    for scope in (["globex", "COMPLETED"], ["acme"], ["acme", "FAILED"]):
        with pytest.raises(InvalidRequest):
            tokens.open(token, scope=scope)
    with pytest.raises(InvalidRequest):
        PageTokens(key=b"j" * 32).open(token, scope=["acme", "COMPLETED"])


def test_page_token_keys_derive_from_configuration_alike_on_every_replica(tmp_path: Path) -> None:
    key_file = tmp_path / "keys.json"
    key_file.write_text('{"active": "k1", "keys": {"k1": "' + "A" * 43 + '="}}')
    one = Settings(db_url="sqlite:///x.db", encryption={"key_file": str(key_file)})
    token = PageTokens.for_settings(one).seal("c", scope=["t"])
    same = Settings(db_url="sqlite:///x.db", encryption={"key_file": str(key_file)})
    assert PageTokens.for_settings(same).open(token, scope=["t"]) == "c"
    key_file.write_text('{"active": "k2", "keys": {"k2": "' + "B" * 43 + '="}}')
    with pytest.raises(InvalidRequest):
        PageTokens.for_settings(same).open(token, scope=["t"])
    with pytest.raises(InvalidRequest):
        PageTokens.for_settings(Settings(db_url="sqlite:///y.db")).open(token, scope=["t"])


# -- request keys -------------------------------------------------------------------------------------


def _request(**fields: object) -> runtime_service_pb2.StartRunRequest:
    base: dict[str, object] = {"agent_name": "a", "input": "hi", "request_key": "k"}
    return runtime_service_pb2.StartRunRequest(**{**base, **fields})  # type: ignore[arg-type]


def test_request_hash_is_equal_for_equal_requests_and_differs_otherwise() -> None:
    first = request_hash(_request(metadata={"a": "1", "b": "2"}))
    assert first == request_hash(_request(metadata={"b": "2", "a": "1"}))
    assert first == request_hash(_request(metadata={"a": "1", "b": "2"}, session_policy=2))
    run_agent = runtime_service_pb2.RunAgentRequest(
        agent_name="a", input="hi", request_key="k", metadata={"a": "1", "b": "2"}
    )
    assert first == request_hash(run_agent)
    others = [
        _request(metadata={"a": "1"}),
        _request(input="hi!", metadata={"a": "1", "b": "2"}),
        _request(agent_name="b", metadata={"a": "1", "b": "2"}),
        _request(session_id="s", metadata={"a": "1", "b": "2"}),
        _request(budgets=run_pb2.Budgets(max_model_steps=2), metadata={"a": "1", "b": "2"}),
        _request(agent_name="", agent=run_pb2.AgentSpec(name="a"), metadata={"a": "1", "b": "2"}),
    ]
    assert len({first, *(request_hash(r) for r in others)}) == len(others) + 1


def _record(request_hash: str | None) -> RunRecord:
    values: dict[str, object] = {name: None for name in RunRecord.__dataclass_fields__}
    values.update(run_id="r1", request_hash=request_hash)
    return RunRecord(**values)  # type: ignore[arg-type]


def test_same_request_refuses_another_hash_and_accepts_legacy_rows() -> None:
    assert same_request(_record("h1"), "k", "h1").run_id == "r1"
    assert same_request(_record(None), "k", "h2").run_id == "r1"  # stored before hashes existed
    assert same_request(_record("h1"), "k", "").run_id == "r1"  # an internal start (child run)
    with pytest.raises(Exception) as caught:
        same_request(_record("h1"), "k", "h2")
    assert getattr(caught.value, "reason", "") == "REQUEST_KEY_REUSED"


# -- api key files ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"\xff\xfe\x00binary\x89PNG", "invalid_api_key"),
        (b"k" * (MAX_API_KEY_BYTES + 1), "invalid_api_key"),
        (b"sk-\x01\x02", "invalid_api_key"),
        (b"  \n", "missing_api_key"),
    ],
)
def test_a_bad_api_key_file_is_a_model_config_error(tmp_path: Path, content: bytes, reason: str) -> None:
    path = tmp_path / "key"
    path.write_bytes(content)
    with pytest.raises(ModelConfigError) as caught:
        read_api_key({}, "UNUSED", str(path))
    assert caught.value.reason == reason
    assert "PNG" not in str(caught.value) and "kkkk" not in str(caught.value)


def test_a_good_api_key_file_reads(tmp_path: Path) -> None:
    path = tmp_path / "key"
    path.write_bytes(b"sk-test-123\n")
    assert read_api_key({}, "UNUSED", str(path)) == "sk-test-123"
