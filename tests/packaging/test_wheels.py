"""The built wheels: one ``agentrt`` namespace, and light distributions for plugin authors and callers.

A plugin author installs only the tool SDK (``agentrt-toolhost`` and the generated
``agentrt-proto`` it needs); a Python caller only ``agentrt-client``. Each is installed alone
into a fresh venv, shown to work against real processes, and shown to pull in nothing of the
server's.
"""

from __future__ import annotations

import subprocess
import zipfile
from pathlib import Path

import grpc
import pytest

from agentrt.proto.toolhost.v1.tool_host_service_pb2 import InvokeToolRequest, ListToolsRequest
from agentrt.proto.toolhost.v1.tool_host_service_pb2_grpc import ToolHostServiceStub
from agentrt.testing import spawn_runtime, spawn_tool_host

from .conftest import DISTRIBUTIONS, SERVER_ONLY, _pip, installed, make_venv

pytestmark = pytest.mark.packaging

PLUGIN = """
import pydantic

from agentrt.toolhost import SideEffect, Tool, ToolContext, ToolHostConfig, hookimpl, tool


class ShoutArgs(pydantic.BaseModel):
    text: str = pydantic.Field(max_length=100)


@tool(name="pkg.shout", description="Upper-cases text.", side_effect=SideEffect.READ_ONLY,
      idempotent=True, timeout=5.0)
def shout(args: ShoutArgs, ctx: ToolContext) -> dict[str, str]:
    return {"text": args.text.upper()}


@hookimpl
def agentrt_register_tools(config: ToolHostConfig) -> list[Tool]:
    return [shout]
"""

CLIENT_SCRIPT = """
import sys
from agentrt.client import Client, NotFoundError

with Client(sys.argv[1]) as client:
    client.list_runs()
    try:
        client.get_run("run-that-does-not-exist")
    except NotFoundError as exc:
        print("NOT_FOUND", exc.reason)
"""


def _top_levels(names: list[str]) -> set[str]:
    # dist-info is metadata; "../../bin/x" entries of pip show are console scripts.
    return {
        name.split("/")[0]
        for name in names
        if name and not name.split("/")[0].endswith(".dist-info") and not name.startswith("..")
    }


def test_every_wheel_installs_only_the_agentrt_namespace(wheels: Path) -> None:
    for wheel in sorted(wheels.glob("*.whl")):
        names = zipfile.ZipFile(wheel).namelist()
        assert _top_levels(names) == {"agentrt"}, wheel.name
        # A PEP 420 namespace: no distribution owns agentrt/__init__.py, so none overwrites another's.
        assert "agentrt/__init__.py" not in names, wheel.name
    proto = zipfile.ZipFile(next(wheels.glob("agentrt_proto-*.whl"))).namelist()
    assert {n for n in proto if n.endswith(".proto")} == {
        "agentrt/proto/runtime/v1/run.proto",
        "agentrt/proto/runtime/v1/runtime_service.proto",
        "agentrt/proto/toolhost/v1/tool.proto",
        "agentrt/proto/toolhost/v1/tool_host_service.proto",
    }


def test_the_tool_sdk_alone_serves_plugins_without_server_dependencies(
    wheels: Path, example_plugin_wheel: Path, tmp_path: Path
) -> None:
    python = make_venv(tmp_path / "sdk", wheels, "agentrt-toolhost")
    names = installed(python)
    assert {"agentrt-toolhost", "agentrt-proto", "grpcio", "protobuf", "pydantic", "pluggy"} <= names
    assert names & SERVER_ONLY == set()
    assert "agentrt-client" not in names
    shown = _pip(python, "show", "-f", "agentrt-toolhost", "agentrt-proto")
    files = [line.strip() for line in shown.splitlines() if line.startswith("  ")]
    assert _top_levels(files) == {"agentrt"}
    server = subprocess.run([str(python), "-c", "import agentrt.server"], capture_output=True, text=True)
    assert server.returncode != 0 and "No module named 'agentrt.server'" in server.stderr

    # Bare, with entry points on: the demo tools are opt-in (agentrt-demo), so nothing is served.
    assert _tools(tmp_path / "bare", python, entrypoints=True, says="serving no tools") == []
    # A plugin file written against the SDK.
    plugin = tmp_path / "shout_plugin.py"
    plugin.write_text(PLUGIN)
    served = _tools(tmp_path / "file", python, plugins=[str(plugin)], call=("pkg.shout", '{"text": "hi"}'))
    assert served == [("pkg.shout", '{"text":"HI"}')]
    # A third-party plugin distribution, found through the agentrt.tools entry-point group.
    _pip(python, "install", "--quiet", "--no-deps", str(example_plugin_wheel))
    served = _tools(tmp_path / "dist", python, entrypoints=True, call=("greeting.hello", '{"name": "Ada"}'))
    assert served == [("greeting.hello", '{"greeting":"Hello, Ada!"}')]
    # The test support a plugin author uses needs nothing beyond the SDK either.
    _pip(python, "install", "--quiet", "--find-links", str(wheels), "agentrt-testing")
    assert installed(python) - names == {"agentrt-testing", "acme-greeting"}
    support = "import agentrt.testing as t; print(t.FakeModelServer.__name__)"
    done = subprocess.run([str(python), "-c", support], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "FakeModelServer", done.stderr


def _tools(
    data_dir: Path,
    python: Path,
    *,
    plugins: list[str] | None = None,
    entrypoints: bool = False,
    says: str = "",
    call: tuple[str, str] | None = None,
) -> list[tuple[str, str]]:
    """(tool name, result of ``call`` or "") for each tool a host run by ``python`` serves."""
    with (
        spawn_tool_host(data_dir, plugins=plugins or [], entrypoints=entrypoints, python=python) as host,
        grpc.insecure_channel(host.address) as channel,
    ):
        stub = ToolHostServiceStub(channel)
        served = [t.name for t in stub.ListTools(ListToolsRequest(), timeout=10).tools]
        assert says in host.stderr_text()
        results = dict.fromkeys(served, "")
        if call is not None:
            reply = stub.InvokeTool(
                InvokeToolRequest(tool=call[0], arguments_json=call[1]),
                metadata=[("x-agentrt-idempotency-key", "k1")],
                timeout=10,
            )
            assert reply.WhichOneof("outcome") == "result_json", reply
            results[call[0]] = reply.result_json
        return sorted(results.items())


def test_the_client_alone_calls_a_real_runtime_without_server_dependencies(
    wheels: Path, tmp_path: Path
) -> None:
    python = make_venv(tmp_path / "client", wheels, "agentrt-client")
    names = installed(python)
    assert {"agentrt-client", "agentrt-proto", "grpcio", "protobuf"} <= names
    assert names & (SERVER_ONLY | {"agentrt-toolhost", "pydantic", "pluggy", "cryptography"}) == set()
    with spawn_runtime(["--demo", "--listen", "127.0.0.1:0"], cwd=tmp_path) as runtime:
        done = subprocess.run(
            [str(python), "-c", CLIENT_SCRIPT, runtime.address], capture_output=True, text=True, timeout=60
        )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "NOT_FOUND RUN_NOT_FOUND"
    # The agentrt command comes with the client; serving needs the server, and it says which.
    serve = subprocess.run(
        [str(python.parent / "agentrt"), "serve"], capture_output=True, text=True, timeout=60
    )
    assert serve.returncode == 2 and "pip install agentrt-server" in serve.stderr, serve.stderr
    pki = subprocess.run(
        [str(python.parent / "agentrt"), "auth", "dev-pki", str(tmp_path / "pki")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert pki.returncode == 2 and "pip install agentrt-toolhost" in pki.stderr, pki.stderr
    assert not (tmp_path / "pki").exists()


def test_the_workspace_lists_every_distribution() -> None:
    # A new top-level distribution must be built and checked here too.
    root = Path(__file__).resolve().parents[2]
    found = {p.parent.name for p in root.glob("*/pyproject.toml")}
    # Nested ones too: the MCP tool source sits under tool_host/ (example_distribution is a third party's).
    found |= {str(p.parent.relative_to(root)) for p in root.glob("tool_host/*/pyproject.toml")}
    assert found == set(DISTRIBUTIONS)
