"""``python -m agentrt.toolhost``."""

from __future__ import annotations

from agentrt.toolhost._cli import main

raise SystemExit(main())
