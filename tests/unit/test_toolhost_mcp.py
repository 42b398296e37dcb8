"""The pure parts of agentrt.toolhost.mcp: config validation, effect mapping, hashing, results."""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Any

import pytest

from agentrt.toolhost import ErrorCode, InvalidInput, PermanentError, SideEffect, ToolError
from agentrt.toolhost._cli import main as toolhost_main
from agentrt.toolhost._cli import read_config_file
from agentrt.toolhost.mcp import (
    McpConfigError,
    McpTool,
    ToolDefinition,
    ToolGuard,
    backoff_s,
    contract_of,
    definition_hash,
    load_config,
    resolve_headers,
    result_value,
)

STDIO = {"command": "python", "args": ["-m", "srv"]}


def definition(name: str = "t", **annotations: Any) -> ToolDefinition:
    schema = {"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]}
    return ToolDefinition(name=name, description="d", input_schema=schema, annotations=annotations)


def server(**table: Any) -> Any:
    return load_config({"mcp_servers": {"s": {**STDIO, **table}}}).servers["s"]


# -- effect classes ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("annotations", "effect", "approval"),
    [
        ({"readOnlyHint": True}, SideEffect.READ_ONLY, False),
        ({"destructiveHint": False}, SideEffect.WRITE, False),
        ({}, SideEffect.DESTRUCTIVE, True),
        ({"destructiveHint": True}, SideEffect.DESTRUCTIVE, True),
        ({"readOnlyHint": False}, SideEffect.DESTRUCTIVE, True),
        ({"readOnlyHint": "yes"}, SideEffect.DESTRUCTIVE, True),  # not a boolean true: no relaxing
    ],
)
def test_annotations_only_make_a_tool_stricter(
    annotations: dict[str, Any], effect: SideEffect, approval: bool
) -> None:
    contract = contract_of(definition(**annotations), server())
    assert (contract.side_effect, contract.requires_approval) == (effect, approval)
    assert contract.idempotent is False


def test_idempotent_hint_and_overrides_per_server_then_per_tool() -> None:
    assert contract_of(definition(idempotentHint=True), server()).idempotent is True
    trusted = server(effect="write", tools={"t": {"effect": "read_only", "timeout_s": 5}})
    contract = contract_of(definition(), trusted)
    assert contract.side_effect is SideEffect.READ_ONLY and contract.timeout_s == 5
    assert contract_of(definition("other"), trusted).side_effect is SideEffect.WRITE
    strict = server(requires_approval=True, idempotent=False)
    contract = contract_of(definition(readOnlyHint=True, idempotentHint=True), strict)
    assert contract.requires_approval is True and contract.idempotent is False


# -- definition hash --------------------------------------------------------------------------------


def test_the_definition_hash_is_stable_and_covers_every_part() -> None:
    base = definition(readOnlyHint=True)
    reordered = ToolDefinition(
        name="t",
        description="d",
        input_schema=dict(reversed(list(base.input_schema.items()))),
        annotations={"readOnlyHint": True},
    )
    assert definition_hash(base) == definition_hash(reordered)
    assert len(definition_hash(base)) == 64
    for changed in (
        ToolDefinition(
            name="t", description="d2", input_schema=base.input_schema, annotations=base.annotations
        ),
        ToolDefinition(
            name="t", description="d", input_schema={"type": "object"}, annotations=base.annotations
        ),
        ToolDefinition(name="t", description="d", input_schema=base.input_schema, annotations={}),
        ToolDefinition(
            name="u", description="d", input_schema=base.input_schema, annotations=base.annotations
        ),
    ):
        assert definition_hash(changed) != definition_hash(base)


@pytest.mark.parametrize(
    ("listing", "why"),
    [
        ({"description": "x"}, "without a name"),
        ({"name": "t", "description": "x" * 9000}, "description over"),
        ({"name": "t", "inputSchema": "no"}, "inputSchema"),
        ({"name": "t", "inputSchema": {"description": "x" * 70000}}, "inputSchema"),
        ({"name": "t", "annotations": []}, "annotations"),
        ({"name": "t", "inputSchema": {"type": 5}}, "not a JSON Schema"),
    ],
)
def test_a_bad_tool_listing_is_refused(listing: dict[str, Any], why: str) -> None:
    with pytest.raises(ValueError, match=why):
        ToolDefinition.from_listing(listing)


# -- config -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("file", "why"),
    [
        ({"mcp_servers": []}, "must be a table"),
        ({"mcp_servers": {"bad id": STDIO}}, "server id"),
        ({"mcp_servers": {"s": {}}}, "exactly one of command"),
        ({"mcp_servers": {"s": {**STDIO, "url": "http://127.0.0.1:1/mcp"}}}, "exactly one of command"),
        ({"mcp_servers": {"s": {"command": " "}}}, "must not be empty"),
        ({"mcp_servers": {"s": {**STDIO, "headers": {"A": "b"}}}}, "headers are for a url"),
        ({"mcp_servers": {"s": {**STDIO, "colour": "red"}}}, "colour"),
        ({"mcp_servers": {"s": {**STDIO, "effect": "sometimes"}}}, "effect"),
        ({"mcp_servers": {"s": {**STDIO, "timeout_s": 0}}}, "timeout_s"),
        ({"mcp_servers": {"s": {"url": "http://evil.example/mcp"}}}, "not in mcp.allowed_urls"),
        ({"mcp_servers": {"s": {"url": "ftp://x/mcp"}}}, "not an http"),
        (
            {"mcp": {"allowed_urls": ["http://h"]}, "mcp_servers": {"s": {"url": "http://u:p@h/mcp"}}},
            "no credentials in the URL",
        ),
        (
            {
                "mcp": {"allowed_urls": ["http://h"]},
                "mcp_servers": {"s": {"url": "http://h/mcp", "headers": {"Authorization": "Bearer hunter2"}}},
            },
            "must be a reference",
        ),
        ({"mcp": {"allowed_urls": ["nope"]}}, "mcp.allowed_urls"),
        ({"mcp": {"allow": []}}, r"\[mcp\]"),
        ({"mcp_servers": {f"s{i}": STDIO for i in range(65)}}, "at most 64"),
    ],
)
def test_bad_config_is_a_clear_error(file: dict[str, Any], why: str) -> None:
    with pytest.raises(McpConfigError, match=why) as caught:
        load_config(file)
    assert "hunter2" not in str(caught.value)  # a secret's value is never repeated


def test_a_url_server_inside_the_allow_list_with_header_references() -> None:
    config = load_config(
        {
            "mcp": {"allowed_urls": ["https://mcp.example.com"]},
            "mcp_servers": {
                "gh": {
                    "url": "https://mcp.example.com/mcp",
                    "headers": {"Authorization": "env:GH", "X-Client": "a"},
                }
            },
        }
    )
    assert config.servers["gh"].transport == "http"
    assert load_config({}).servers == {}


def test_header_references_are_resolved_and_failures_never_show_a_value(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("Bearer from-file\n")
    headers = {"Authorization": f"file:{token}", "X-Key": "env:MY_KEY", "X-Client": "agentrt"}
    resolved = resolve_headers("s", headers, env={"MY_KEY": "k1"})
    assert resolved == {"Authorization": "Bearer from-file", "X-Key": "k1", "X-Client": "agentrt"}
    with pytest.raises(McpConfigError, match="MY_KEY is not set"):
        resolve_headers("s", {"X-Key": "env:MY_KEY"}, env={})
    with pytest.raises(McpConfigError, match="cannot read"):
        resolve_headers("s", {"X-Key": f"file:{tmp_path / 'missing'}"}, env={})


def test_the_host_config_file_is_checked_at_startup(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[mcp_servers\n")
    with pytest.raises(ValueError, match="not valid TOML"):
        read_config_file(bad)
    other = tmp_path / "other.toml"
    other.write_text("[servers]\n")
    with pytest.raises(ValueError, match="unknown key"):
        read_config_file(other)
    with pytest.raises(ValueError, match="cannot read"):
        read_config_file(tmp_path / "missing.toml")
    invalid = tmp_path / "invalid.toml"
    invalid.write_text('[mcp_servers.s]\ncommand = "x"\nurl = "http://h/mcp"\n')
    code = toolhost_main(["--config", str(invalid), "--no-entrypoints", "--data-dir", str(tmp_path / "d")])
    assert code == 2 and "exactly one of command" in capsys.readouterr().err


# -- results, arguments, guard, backoff -------------------------------------------------------------


def test_structured_content_is_preferred_then_text() -> None:
    text = {"type": "text", "text": '{"a": 1}'}
    assert result_value({"content": [text], "structuredContent": {"b": 2}}) == {"b": 2}
    assert result_value({"content": [text]}) == {"a": 1}
    assert result_value({"content": [{"type": "text", "text": "plain"}]}) == "plain"
    image = {"type": "image", "data": "AA==", "mimeType": "image/png"}
    assert result_value({"content": [image]}) == {"content": [image]}


def test_an_is_error_result_is_a_permanent_tool_error() -> None:
    with pytest.raises(PermanentError, match="no such repo") as caught:
        result_value({"isError": True, "content": [{"type": "text", "text": "no such repo"}]})
    assert caught.value.code is ErrorCode.PERMANENT
    with pytest.raises(PermanentError, match="over"):
        result_value({"structuredContent": {"x": "y" * (5 * 1024 * 1024)}})


def _tool() -> McpTool:
    async def fn(args: Any, ctx: Any) -> None:
        return None

    schema = definition().input_schema
    from agentrt.toolhost.mcp import McpArguments

    return McpTool(
        name="s.t",
        description="d",
        side_effect=SideEffect.READ_ONLY,
        fn=fn,
        args_model=McpArguments,
        mcp_schema=schema,
    )


def test_arguments_are_validated_against_the_mcp_input_schema() -> None:
    tool = _tool()
    args, raw = tool.parse_arguments('{"x": "a"}')
    assert raw == {"x": "a"} and args.value == {"x": "a"}  # type: ignore[attr-defined]
    assert tool.input_schema()["required"] == ["x"]
    for bad in ('{"x": 1}', "{}", "[1]", "{not json"):
        with pytest.raises(InvalidInput):
            tool.parse_arguments(bad)


def test_a_changed_or_unpinned_definition_is_refused_and_counted() -> None:
    counters: collections.Counter[str] = collections.Counter()
    config = load_config(
        {"mcp_servers": {"s": {**STDIO, "tools": {"pinned": {"approved_versions": ["abc"]}}}}}
    )
    guard = ToolGuard(server_id="s", config=config, counters=counters)
    first = [definition("t"), definition("pinned")]
    guard.on_listing(first)
    guard.check("t")
    with pytest.raises(ToolError) as caught:
        guard.check("pinned")
    assert (
        caught.value.code is ErrorCode.UNAUTHORIZED
        and caught.value.details["reason"] == "mcp_tool_not_approved"
    )
    changed = ToolDefinition(name="t", description="now exfiltrates", input_schema={}, annotations={})
    guard.on_listing([changed, definition("pinned")])
    with pytest.raises(ToolError) as caught:
        guard.check("t")
    assert caught.value.details["reason"] == "mcp_tool_changed"
    assert counters["mcp_tool_changed"] == 1 and counters["mcp_tool_unapproved"] == 1
    guard.on_listing(first)  # back to the approved definition
    guard.check("t")


def test_reconnects_back_off_exponentially_up_to_a_cap() -> None:
    delays = [backoff_s(n) for n in range(10)]
    assert delays[:3] == [0.2, 0.4, 0.8]
    assert delays == sorted(delays) and max(delays) == 10.0


def test_the_guide_config_is_valid() -> None:
    guide = Path(__file__).resolve().parents[2] / "docs" / "examples" / "mcp" / "host.toml"
    config = load_config(read_config_file(guide))
    assert set(config.servers) == {"notes", "github"}
    github = config.servers["github"]
    assert github.transport == "http" and github.headers["Authorization"].startswith("env:")
    tool = ToolDefinition(name="create_issue", description="", input_schema={}, annotations={})
    assert contract_of(tool, github).side_effect is SideEffect.WRITE


def test_an_input_schema_that_cannot_be_applied_is_a_permanent_error() -> None:
    async def fn(args: Any, ctx: Any) -> None:
        return None

    from agentrt.toolhost.mcp import McpArguments

    remote_ref = {"type": "object", "properties": {"x": {"$ref": "https://example.com/s.json"}}}
    tool = McpTool(
        name="s.t",
        description="d",
        side_effect=SideEffect.WRITE,
        fn=fn,
        args_model=McpArguments,
        mcp_schema=remote_ref,
    )
    with pytest.raises(PermanentError, match="cannot be applied"):
        tool.parse_arguments('{"x": 1}')
