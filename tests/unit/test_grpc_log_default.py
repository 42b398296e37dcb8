"""gRPC's C core writes nothing of its own to stderr below ERROR unless the user asks for it.

Its INFO lines (e.g. ``chttp2_transport.cc ... Got goaway``) are not JSON, and broke the
runtime's and the tool host's JSON stderr under load. ``GRPC_TRACE=api`` makes the core log an
INFO line per API call, so a process that imports one of our packages and opens a channel shows
at once whether INFO lines get through.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

OPEN_A_CHANNEL = "import {package}, grpc; grpc.insecure_channel('127.0.0.1:1').close()"


def stderr_of(package: str, **env: str) -> str:
    environ = {k: v for k, v in os.environ.items() if k != "GRPC_VERBOSITY"} | {"GRPC_TRACE": "api", **env}
    done = subprocess.run(
        [sys.executable, "-c", OPEN_A_CHANNEL.format(package=package)],
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stderr


@pytest.mark.parametrize("package", ["agentrt.server", "agentrt.toolhost", "agentrt.client"])
def test_importing_our_package_first_keeps_grpcs_info_lines_off_stderr(package: str) -> None:
    assert stderr_of(package) == ""


def test_a_verbosity_the_user_set_wins() -> None:
    assert "grpc_channel_create" in stderr_of("agentrt.toolhost", GRPC_VERBOSITY="DEBUG")
