"""Configuration handed to plugins when they register their tools."""

from __future__ import annotations

import collections
import dataclasses
import types
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agentrt.toolhost._context import DEFAULT_DATA_DIR

__all__ = ["ToolHostConfig"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class ToolHostConfig:
    """Read-only host configuration passed to ``agentrt_register_tools``.

    Attributes:
        data_dir: Directory of the host's ledger; plugins keep their files here too.
        options: Free-form plugin options from repeated ``--set KEY=VALUE``.
        file: The parsed ``--config`` TOML file (e.g. its ``[mcp_servers.<id>]`` tables), or empty.
        counters: The host's event counters (served as ``agentrt.toolhost.events``); a plugin
            adds its own fixed event names, never a run, call or tenant id.
    """

    data_dir: Path = DEFAULT_DATA_DIR
    options: Mapping[str, str] = dataclasses.field(default_factory=dict)
    file: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    counters: collections.Counter[str] = dataclasses.field(
        default_factory=collections.Counter, compare=False, repr=False
    )

    def __post_init__(self) -> None:
        # A read-only view, so one plugin cannot change what the next one sees.
        object.__setattr__(self, "options", types.MappingProxyType(dict(self.options)))
        object.__setattr__(self, "file", types.MappingProxyType(dict(self.file)))
