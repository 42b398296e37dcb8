"""``python -m agentrt.client``: the ``agentrt`` command line."""

from __future__ import annotations

from agentrt.client.cli import main

raise SystemExit(main())
