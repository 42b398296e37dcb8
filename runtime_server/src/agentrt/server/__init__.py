"""agentrt runtime server: run state machines, budgets, deadlines, store and event streams."""

from __future__ import annotations

import os as _os

# gRPC's C core (>= 1.65) logs INFO lines through absl unless GRPC_VERBOSITY is set, and reads it
# once, at `import grpc`: restore its documented ERROR default before anything imports grpc, so
# stderr stays ours (JSON lines under --log-format json). A GRPC_VERBOSITY of the user's wins.
_os.environ.setdefault("GRPC_VERBOSITY", "ERROR")

from agentrt.server._main import main
from agentrt.server.config import ConfigError, Settings, load_settings

__all__ = ["ConfigError", "Settings", "load_settings", "main"]
