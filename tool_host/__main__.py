"""``python -m tool_host``."""

from __future__ import annotations

from tool_host._cli import main

raise SystemExit(main())
