"""``python -m agentrt.server``."""

from __future__ import annotations

import sys

from agentrt.server._main import main

sys.exit(main())
