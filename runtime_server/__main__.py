"""``python -m runtime_server``."""

from __future__ import annotations

import sys

from runtime_server._main import main

sys.exit(main())
