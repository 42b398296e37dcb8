"""``python -m clients``: the ``agentrt`` command line."""

from __future__ import annotations

from clients.cli import main

raise SystemExit(main())
