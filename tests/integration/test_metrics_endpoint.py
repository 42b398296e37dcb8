"""The runtime process's /metrics: a bearer token when configured (never logged), and an address
it cannot bind is a clear start-up error (exit 2) that leaves nothing running."""

from __future__ import annotations

import socket
import urllib.error
from pathlib import Path

import pytest

from agentrt.testing import RuntimeProcess, scrape_metrics

TOKEN = "metrics-bearer-token-for-the-test"


def test_a_token_protected_endpoint_answers_only_with_the_token(tmp_path: Path, sqlite_url: str) -> None:
    token_file = tmp_path / "metrics-token"
    token_file.write_text(TOKEN + "\n")
    config = tmp_path / "agentrt.toml"
    config.write_text(f'db_url = "{sqlite_url}"\n[metrics]\ntoken_file = "{token_file}"\n')
    runtime = RuntimeProcess(["--config", str(config), "--listen", "127.0.0.1:0"], cwd=tmp_path)
    try:
        runtime.wait_ready(60)
        for token in ("", "not-it"):
            with pytest.raises(urllib.error.HTTPError) as refused:
                scrape_metrics(runtime.metrics_address, token=token)
            refused.value.close()
            assert refused.value.code == 401
        assert "agentrt_runs_started_total" in runtime.metrics(token=TOKEN).names()
        runtime.stop()
        assert TOKEN not in runtime.stderr_text()
    finally:
        runtime.close()


def test_an_address_in_use_stops_the_start_with_exit_2(tmp_path: Path, sqlite_url: str) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        runtime = RuntimeProcess(
            ["--db-url", sqlite_url, "--listen", "127.0.0.1:0", "--metrics-listen", f"127.0.0.1:{port}"],
            cwd=tmp_path,
        )
        try:
            assert runtime.wait_exit(60) == 2
            assert f"cannot serve metrics on 127.0.0.1:{port}" in runtime.stderr_text()
            assert not runtime.address
        finally:
            runtime.close()
