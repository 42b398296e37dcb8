"""The HTTP face (http_listen) through a real runtime process, with plain httpx: Connect JSON
calls, the SSE event route cut and resumed by Last-Event-ID, refusals equal to gRPC's, CORS."""

from __future__ import annotations

import base64
import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentrt.client import Client, RPCError
from agentrt.testing import RuntimeProcess, ToolHostProcess, spawn_runtime
from tests.e2e.test_approvals import config, refunds

SERVICE = "/agentrt.runtime.v1.AgentRuntimeService/"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture
def http_runtime(
    tmp_path: Path, tool_host: ToolHostProcess, sqlite_url: str
) -> Iterator[tuple[RuntimeProcess, str]]:
    path = config(tmp_path, sqlite_url, tool_host)
    text = path.read_text().replace(
        "poll_interval_s = 0.1\n",
        'poll_interval_s = 0.1\n[http]\ncors_origins = ["https://console.example.com"]\n'
        "sse_heartbeat_s = 0.2\n",
    )
    path.write_text(text)
    port = _free_port()
    args = ["--config", str(path), "--listen", "127.0.0.1:0", "--http-listen", f"127.0.0.1:{port}"]
    with spawn_runtime(args, cwd=tmp_path) as runtime:
        yield runtime, f"http://127.0.0.1:{port}"


def call(http: httpx.Client, method: str, body: dict[str, Any], **headers: str) -> httpx.Response:
    return http.post(SERVICE + method, json=body, headers={"content-type": "application/json", **headers})


def sse(
    http: httpx.Client, run_id: str, *, stop_after: int | None = None, **headers: str
) -> list[dict[str, Any]]:
    """The events of the SSE route, in order; with ``stop_after``, the stream is cut after that many."""
    events: list[dict[str, Any]] = []
    current: dict[str, Any] = {}
    with http.stream("GET", f"/v1/runs/{run_id}/events", headers=headers, timeout=60) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"] == "text/event-stream"
        for line in response.iter_lines():
            if line.startswith(":"):
                continue
            if line == "":
                if current:
                    events.append(current)
                    current = {}
                    if events[-1].get("event") == "end" or (
                        stop_after is not None and len(events) >= stop_after
                    ):
                        return events
                continue
            field, _, value = line.partition(": ")
            current[field] = value
    return events


def test_a_run_with_an_approval_over_http_json_and_sse_resumed_by_last_event_id(
    http_runtime: tuple[RuntimeProcess, str], tool_host: ToolHostProcess
) -> None:
    _, base = http_runtime
    with httpx.Client(base_url=base, timeout=30) as http:
        started = call(http, "StartRun", {"agentName": "refunder", "input": "refund A100 please"})
        assert started.status_code == 200, started.text
        run_id = started.json()["run"]["runId"]
        # Follow until the approval is asked, cutting the stream once mid-run and resuming it.
        first = sse(http, run_id, stop_after=2)
        assert first and all("id" in e for e in first), http_runtime[0].stderr_text()[-3000:]
        seen = [int(e["id"]) for e in first]
        approval: dict[str, Any] | None = None
        while approval is None:
            more = sse(http, run_id, stop_after=1, **{"last-event-id": str(seen[-1])})
            data = json.loads(more[0]["data"])
            seen.append(int(more[0]["id"]))
            approval = data.get("approvalRequested")
        run = call(http, "GetRun", {"runId": run_id}).json()["run"]
        assert run["phase"] == "RUN_PHASE_WAITING_APPROVAL"
        answer = call(
            http,
            "ResolveApproval",
            {
                "runId": run_id,
                "approvalId": approval["approvalId"],
                "decision": "APPROVAL_DECISION_APPROVE",
                "argsHash": approval["argsHash"],
                "expectedRevision": run["revision"],
            },
        )
        assert answer.status_code == 200, answer.text
        rest = sse(http, run_id, **{"last-event-id": str(seen[-1])})
        assert rest[-1]["event"] == "end"
        seen += [int(e["id"]) for e in rest if "id" in e]
        assert seen == list(range(1, len(seen) + 1)), seen  # every event once, no gap
        last = json.loads(rest[-2]["data"])
        assert "runEnded" in last, last
        assert call(http, "GetRun", {"runId": run_id}).json()["run"]["phase"] == "RUN_PHASE_COMPLETED"
    assert refunds(tool_host) == 1


def _http_details(response: httpx.Response) -> tuple[str, list[tuple[str, bytes]]]:
    body = response.json()
    details = [
        (d["type"], base64.b64decode(d["value"] + "=" * (-len(d["value"]) % 4)))
        for d in body.get("details", [])
    ]
    return body["code"], details


def _grpc_details(exc: RPCError) -> tuple[str, list[tuple[str, bytes]]]:
    status = exc.grpc_status
    assert status is not None
    code = exc.status.name.lower()
    return code, [(d.type_url.removeprefix("type.googleapis.com/"), d.value) for d in status.details]


def test_refusals_over_http_equal_those_over_grpc(http_runtime: tuple[RuntimeProcess, str]) -> None:
    runtime, base = http_runtime
    with httpx.Client(base_url=base, timeout=30) as http, Client(runtime.address) as client:
        # Unknown run (another tenant's answers the same): NOT_FOUND with the same details.
        over_http = call(http, "GetRun", {"runId": "no-such-run"})
        assert over_http.status_code == 404
        with pytest.raises(RPCError) as over_grpc:
            client.get_run("no-such-run")
        assert _http_details(over_http) == _grpc_details(over_grpc.value)
        # Invalid input: INVALID_ARGUMENT with BadRequest, as over gRPC.
        over_http = call(http, "StartRun", {"agentName": "refunder", "input": "  "})
        assert over_http.status_code == 400
        with pytest.raises(RPCError) as over_grpc:
            client.start_run("refunder", "  ")
        assert _http_details(over_http) == _grpc_details(over_grpc.value)
        # The SSE route refuses the same way before any event.
        events = http.get("/v1/runs/no-such-run/events")
        assert events.status_code == 404
        assert _http_details(events) == _http_details(call(http, "GetRun", {"runId": "no-such-run"}))


def test_bad_requests_get_clear_errors_and_change_nothing(http_runtime: tuple[RuntimeProcess, str]) -> None:
    _, base = http_runtime
    with httpx.Client(base_url=base, timeout=30) as http:
        malformed = http.post(
            SERVICE + "StartRun", content=b"{not json", headers={"content-type": "application/json"}
        )
        assert malformed.status_code == 400 and malformed.json()["code"] == "invalid_argument"
        unknown_field = call(http, "StartRun", {"agentName": "refunder", "input": "x", "inptu": "typo"})
        assert unknown_field.status_code == 400
        huge = http.post(
            SERVICE + "StartRun",
            content=b'{"agentName":"refunder","input":"' + b"x" * (5 * 1024 * 1024) + b'"}',
            headers={"content-type": "application/json"},
        )
        assert huge.status_code == 429 and huge.json()["code"] == "resource_exhausted", huge.text
        assert http.get("/nowhere").status_code == 404
        assert http.post("/v1/runs/x/events").status_code == 405
        assert http.get(SERVICE + "NoSuchMethod").status_code == 404
        assert http.get(SERVICE + "StartRun").status_code == 405
        listed = call(http, "ListRuns", {}).json()
        assert listed.get("runs", []) == []  # nothing was started
        bad_after = http.get("/v1/runs/x/events?after=-1")
        assert bad_after.status_code in (400, 404)


def test_cors_preflight_is_answered_for_listed_origins_only(http_runtime: tuple[RuntimeProcess, str]) -> None:
    _, base = http_runtime
    with httpx.Client(base_url=base, timeout=30) as http:
        asked = {"access-control-request-method": "POST", "access-control-request-headers": "content-type"}
        allowed = http.options(
            SERVICE + "StartRun", headers={"origin": "https://console.example.com", **asked}
        )
        assert allowed.status_code == 204
        assert allowed.headers["access-control-allow-origin"] == "https://console.example.com"
        assert "POST" in allowed.headers["access-control-allow-methods"]
        refused = http.options(SERVICE + "StartRun", headers={"origin": "https://evil.example", **asked})
        assert refused.status_code == 403 and "access-control-allow-origin" not in refused.headers
        plain = call(http, "ListRuns", {}, origin="https://evil.example")
        assert "access-control-allow-origin" not in plain.headers
        listed = call(http, "ListRuns", {}, origin="https://console.example.com")
        assert listed.headers["access-control-allow-origin"] == "https://console.example.com"


@pytest.fixture
def auth_runtime(
    tmp_path: Path, tool_host: ToolHostProcess, sqlite_url: str
) -> Iterator[tuple[RuntimeProcess, str]]:
    from tests.security.conftest import write_tokens

    tokens = write_tokens(tmp_path / "tokens.toml")
    path = config(tmp_path, sqlite_url, tool_host)
    path.write_text(path.read_text() + f'[auth]\ntokens_file = "{tmp_path / "tokens.toml"}"\n')
    port = _free_port()
    args = ["--config", str(path), "--listen", "127.0.0.1:0", "--http-listen", f"127.0.0.1:{port}"]
    with spawn_runtime(args, cwd=tmp_path) as runtime:
        runtime.tokens = tokens  # type: ignore[attr-defined]
        yield runtime, f"http://127.0.0.1:{port}"


def test_anonymous_wrong_role_and_wrong_tenant_refusals_equal_grpc(
    auth_runtime: tuple[RuntimeProcess, str],
) -> None:
    runtime, base = auth_runtime
    tokens: dict[str, str] = runtime.tokens  # type: ignore[attr-defined]
    with httpx.Client(base_url=base, timeout=30) as http:
        with Client(runtime.address, token=tokens["alice"]) as alice:
            run_id = alice.start_run("refunder", "refund A100 please").run_id
        cases = [
            ("anonymous", None, "GetRun", {"runId": run_id}, 401),
            ("wrong role", "bob", "StartRun", {"agentName": "refunder", "input": "x"}, 403),
            ("wrong tenant", "carol", "GetRun", {"runId": run_id}, 404),
        ]
        for label, who, method, body, status in cases:
            headers = {"authorization": f"Bearer {tokens[who]}"} if who else {}
            over_http = call(http, method, body, **headers)
            assert over_http.status_code == status, (label, over_http.text)
            with (
                Client(runtime.address, token=tokens[who] if who else None) as client,
                pytest.raises(RPCError) as e,
            ):
                if method == "GetRun":
                    client.get_run(run_id)
                else:
                    client.start_run("refunder", "x")
            assert _http_details(over_http) == _grpc_details(e.value), label
            if method == "GetRun":  # the SSE route refuses alike, before any event
                events = http.get(f"/v1/runs/{run_id}/events", headers=headers)
                assert events.status_code == status and _http_details(events) == _http_details(over_http)
        # A token in the query string is refused unless [http] sse_query_token allows it.
        query = http.get(f"/v1/runs/{run_id}/events", params={"access_token": tokens["alice"]})
        assert query.status_code == 401 and tokens["alice"] not in query.text
        assert query.json()["code"] == "unauthenticated"
        # An SSE resume position that is not a seq is refused for a caller who may read the run.
        alice_headers = {"authorization": f"Bearer {tokens['alice']}"}
        bad = http.get(f"/v1/runs/{run_id}/events", headers={**alice_headers, "last-event-id": "x1"})
        assert bad.status_code == 400 and bad.json()["code"] == "invalid_argument"
    assert tokens["alice"] not in runtime.stderr_text()


def test_the_curl_example_runs_as_written(
    tmp_path: Path, tool_host: ToolHostProcess, sqlite_url: str
) -> None:
    import subprocess

    from tests.e2e.conftest import agent_toml

    steps = [
        {"text": "looking", "tool_calls": [{"tool": "orders.lookup", "arguments": {"order_id": "A100"}}]},
        {"text": "Order A100 shipped."},
    ]
    path = tmp_path / "curl.toml"
    path.write_text(
        f'db_url = "{sqlite_url}"\npoll_interval_s = 0.1\n'
        f'[[tool_hosts]]\nname = "local"\naddress = "{tool_host.address}"\n'
        + agent_toml("looker", steps=steps, tools=["orders.lookup"], budgets={"timeout_s": 60})
    )
    port = _free_port()
    args = ["--config", str(path), "--listen", "127.0.0.1:0", "--http-listen", f"127.0.0.1:{port}"]
    script = Path(__file__).resolve().parents[2] / "docs" / "examples" / "curl" / "run.sh"
    with spawn_runtime(args, cwd=tmp_path):
        done = subprocess.run(
            ["sh", str(script)],
            cwd=tmp_path,
            env={"PATH": "/usr/bin:/bin", "BASE": f"http://127.0.0.1:{port}", "AGENT": "looker"},
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 0, done.stderr
    assert '"runId"' in done.stdout and "id: 1\ndata: " in done.stdout
    assert "runEnded" in done.stdout and done.stdout.rstrip().endswith("event: end\ndata: {}")


def _envelopes(data: bytes) -> list[tuple[int, bytes]]:
    out = []
    while data:
        flags, size = data[0], int.from_bytes(data[1:5], "big")
        out.append((flags, data[5 : 5 + size]))
        data = data[5 + size :]
    return out


def test_binary_unary_and_a_connect_server_stream(http_runtime: tuple[RuntimeProcess, str]) -> None:
    from agentrt.proto.runtime.v1 import runtime_service_pb2 as pb

    _, base = http_runtime
    with httpx.Client(base_url=base, timeout=60) as http:
        request = pb.StartRunRequest(agent_name="refunder", input="refund A100 please")
        started = http.post(
            SERVICE + "StartRun",
            content=request.SerializeToString(),
            headers={"content-type": "application/proto"},
        )
        assert started.status_code == 200 and started.headers["content-type"] == "application/proto"
        run_id = pb.StartRunResponse.FromString(started.content).run.run_id
        # A Connect server stream (JSON envelopes) without follow: the stored events, then the end.
        body = json.dumps({"runId": run_id, "follow": False}).encode()
        streamed = http.post(
            SERVICE + "StreamRunEvents",
            content=b"\x00" + len(body).to_bytes(4, "big") + body,
            headers={"content-type": "application/connect+json"},
        )
        assert streamed.status_code == 200, streamed.text
        frames = _envelopes(streamed.content)
        assert frames[-1] == (2, b"{}")  # end of stream, no error
        seqs = [int(json.loads(frame)["event"]["seq"]) for _, frame in frames[:-1]]
        assert seqs and seqs == list(range(1, len(seqs) + 1))


def test_an_idle_sse_stream_gets_keepalives_and_sigterm_ends_it(
    http_runtime: tuple[RuntimeProcess, str],
) -> None:
    runtime, base = http_runtime
    with httpx.Client(base_url=base, timeout=60) as http:
        run_id = call(http, "StartRun", {"agentName": "refunder", "input": "refund A100 please"}).json()[
            "run"
        ]["runId"]
        lines: list[str] = []
        with http.stream("GET", f"/v1/runs/{run_id}/events") as response:
            lines_iter = response.iter_lines()
            for line in lines_iter:  # the run pauses for approval: then only keepalives come
                lines.append(line)
                if line == ": keepalive":
                    break
            assert any('"approvalRequested"' in line for line in lines), lines
            assert runtime.stop() == 0, runtime.stderr_text()[-2000:]  # drains: the open stream ends
            rest = list(lines_iter)
        assert all(not line.startswith("data:") for line in rest)


def test_a_query_token_follows_a_run_when_the_config_allows_it(
    tmp_path: Path, tool_host: ToolHostProcess, sqlite_url: str
) -> None:
    from tests.security.conftest import write_tokens

    tokens = write_tokens(tmp_path / "tokens.toml")
    path = config(tmp_path, sqlite_url, tool_host)
    path.write_text(
        path.read_text().replace(
            "poll_interval_s = 0.1\n", "poll_interval_s = 0.1\n[http]\nsse_query_token = true\n"
        )
        + f'[auth]\ntokens_file = "{tmp_path / "tokens.toml"}"\n'
    )
    port = _free_port()
    args = ["--config", str(path), "--listen", "127.0.0.1:0", "--http-listen", f"127.0.0.1:{port}"]
    with (
        spawn_runtime(args, cwd=tmp_path) as runtime,
        httpx.Client(base_url=f"http://127.0.0.1:{port}") as http,
    ):
        with Client(runtime.address, token=tokens["alice"]) as alice:
            run_id = alice.start_run("refunder", "refund A100 please").run_id
        with http.stream(
            "GET", f"/v1/runs/{run_id}/events", params={"access_token": tokens["alice"]}
        ) as response:
            assert response.status_code == 200
            assert next(line for line in response.iter_lines() if line) == "id: 1"
        # Another tenant's token in the query answers like a missing run; two credentials are refused.
        other = http.get(f"/v1/runs/{run_id}/events", params={"access_token": tokens["carol"]})
        assert other.status_code == 404
        both = http.get(
            f"/v1/runs/{run_id}/events",
            params={"access_token": tokens["alice"]},
            headers={"authorization": f"Bearer {tokens['alice']}"},
        )
        assert both.status_code == 401 and both.json()["code"] == "unauthenticated"
        assert tokens["alice"] not in runtime.stderr_text()


def test_the_readme_shows_the_commands_of_the_tested_script() -> None:
    root = Path(__file__).resolve().parents[2]
    script = (root / "docs" / "examples" / "curl" / "run.sh").read_text()
    section = (root / "README.md").read_text().split("## Without gRPC: curl and EventSource", 1)[1]
    block = section.split("```sh\n", 1)[1].split("```", 1)[0]
    commands = [line for line in block.splitlines() if line.startswith(("curl", "  -", "RUN_ID"))]
    assert len(commands) >= 5
    for line in commands:  # the README's lines are the script's, but for the README's comments
        assert line.split("   #", 1)[0].rstrip() in script.replace(
            '"$BASE/v1', '"http://127.0.0.1:8080/v1'
        ), line
