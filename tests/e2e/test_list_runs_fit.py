"""A ListRuns page always fits the reply limit, over the real wire, on SQLite and PostgreSQL.

The finding: a tenant ran 300 runs, each with 32 metadata entries of about 490 bytes (just under
the limit); ``ListRuns{page_size: 500}`` failed with RESOURCE_EXHAUSTED "Sent message larger than
max (4895096 vs. 4194304)" and the server logged an ExecuteBatchError traceback. A page now ends
early with a ``next_page_token``: every run is listed exactly once across the pages, each reply
is within the limit, and nothing is logged at ERROR.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from agentrt.client import AsyncClient
from agentrt.proto.runtime.v1 import run_pb2, runtime_service_pb2, runtime_service_pb2_grpc
from agentrt.server.api._page_tokens import MAX_REPLY_BYTES
from agentrt.testing import RuntimeProcess, spawn_runtime
from tests.e2e.conftest import agent_toml

RUNS = 300
# 32 entries of 3 + 490 bytes: 15,776 of the 16,384 metadata bytes a run may have.
METADATA = {f"k{i:02d}": chr(ord("a") + i % 26) * 490 for i in range(32)}


@pytest.fixture
def runtime(tmp_path: Path, db_url: str) -> Iterator[RuntimeProcess]:
    config = tmp_path / "agentrt.toml"
    config.write_text(
        f'db_url = "{db_url}"\npoll_interval_s = 0.2\nlease_ttl_s = 3.0\ngrace_s = 0.5\n'
        + agent_toml("quick", steps=[{"text": "done"}], tools=[], budgets={"timeout_s": 60})
    )
    with spawn_runtime(["--config", str(config), "--listen", "127.0.0.1:0"], cwd=tmp_path) as process:
        yield process


async def start_runs(address: str) -> set[str]:
    gate = asyncio.Semaphore(16)

    async def one(client: AsyncClient, i: int) -> str:
        async with gate:
            run = await client.start_run("quick", f"run {i}", metadata=METADATA)
            return run.run_id

    async with AsyncClient(address, timeout=30) as client:
        return set(await asyncio.gather(*(one(client, i) for i in range(RUNS))))


def list_pages(address: str, request: runtime_service_pb2.ListRunsRequest) -> list[list[run_pb2.Run]]:
    """Every page of the listing; each reply is checked against the limit as it comes."""
    pages: list[list[run_pb2.Run]] = []
    with grpc.insecure_channel(address) as channel:
        stub = runtime_service_pb2_grpc.AgentRuntimeServiceStub(channel)
        while True:
            reply = stub.ListRuns(request, timeout=30)
            assert reply.ByteSize() <= MAX_REPLY_BYTES
            pages.append(list(reply.runs))
            if not reply.next_page_token:
                return pages
            assert len(pages) < RUNS, "the listing does not end"
            request = runtime_service_pb2.ListRunsRequest(
                page_size=request.page_size, page_token=reply.next_page_token, phases=request.phases
            )


def test_a_page_of_big_runs_ends_early_and_every_run_is_listed_once(runtime: RuntimeProcess) -> None:
    started = asyncio.run(start_runs(runtime.address))
    assert len(started) == RUNS

    # A filtered listing pages the same way: poll it (bounded) until every run has completed.
    completed = runtime_service_pb2.ListRunsRequest(page_size=500, phases=[run_pb2.RUN_PHASE_COMPLETED])
    deadline = time.monotonic() + 60
    while True:
        done = [run.run_id for page in list_pages(runtime.address, completed) for run in page]
        assert len(done) == len(set(done))
        if len(done) == RUNS or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert set(done) == started

    pages = list_pages(runtime.address, runtime_service_pb2.ListRunsRequest(page_size=500))

    assert len(pages) >= 2, "300 runs of 16 KB cannot fit in one reply of 4 MiB"
    assert all(pages), "no page is empty"
    listed = [run.run_id for page in pages for run in page]
    assert len(listed) == len(set(listed)) == RUNS
    assert set(listed) == started
    assert all(dict(run.metadata) == METADATA for page in pages for run in page)
    # Newest first across pages, as one listing.
    created = [(run.create_time.ToNanoseconds(), run.run_id) for page in pages for run in page]
    assert created == sorted(created, reverse=True)

    logged = runtime.stderr_text()
    assert " ERROR " not in logged and "Traceback" not in logged, logged[-3000:]
