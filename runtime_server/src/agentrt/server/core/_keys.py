"""Stable identities: canonical JSON, argument hashes, idempotency keys (R5.4, R7.1)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from agentrt.server.core._json import loads_bounded


def canonical_json(value: Any) -> str:
    """JSON with sorted keys and no insignificant whitespace: equal values give equal text."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def args_hash(arguments_json: str) -> str:
    """sha256 of the canonical form of a JSON arguments text.

    Raises:
        JsonBoundsError: the text is not JSON or exceeds the default bounds.
    """
    return hashlib.sha256(canonical_json(loads_bounded(arguments_json)).encode()).hexdigest()


def idempotency_key(run_id: str, step: int, call_index: int) -> str:
    """hash(run_id, step, call index): stable across retries and recoveries of the same call."""
    return hashlib.sha256(f"{run_id}:{step}:{call_index}".encode()).hexdigest()[:40]
