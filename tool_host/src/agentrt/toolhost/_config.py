"""Configuration handed to plugins when they register their tools."""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Mapping
from pathlib import Path

from agentrt.toolhost._context import DEFAULT_DATA_DIR

__all__ = ["ToolHostConfig"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class ToolHostConfig:
    """Read-only host configuration passed to ``agentrt_register_tools``.

    Attributes:
        data_dir: Directory of the host's ledger; plugins keep their files here too.
        options: Free-form plugin options from repeated ``--set KEY=VALUE``.
    """

    data_dir: Path = DEFAULT_DATA_DIR
    options: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        # A read-only view, so one plugin cannot change what the next one sees.
        object.__setattr__(self, "options", types.MappingProxyType(dict(self.options)))
