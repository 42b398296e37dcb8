"""Token estimates and their calibration by a provider's own count. Pure.

The provider's count of a prompt is known only after the request (the usage it reports), so a
request is planned with an estimate: one token per three UTF-8 bytes (tokenizers average about
four for English, fewer for other scripts), scaled once the run has a provider count of an
earlier request (see ``core/_context.py``).
"""

from __future__ import annotations

import math
from collections.abc import Callable

__all__ = ["TokenCounter", "estimate_tokens", "scaled_counter", "token_scale_permille"]

TokenCounter = Callable[[str], int]


def estimate_tokens(text: str) -> int:
    """A conservative token estimate: one token per three UTF-8 bytes (tokenizers average ~4)."""
    return math.ceil(len(text.encode()) / 3)


_SCALE_MARGIN = 1.1  # the provider's count of the previous request, plus a tenth
# Thousandths. Down to 0.75: tokenizers average ~4 bytes a token on English, so an estimate of 3
# is at most that much too high; a count lower still is likelier a proxy's than the model's. Up to
# 4: scripts that cost more than a token per 3 bytes (CJK, some code) are caught up with.
_MIN_SCALE, _MAX_SCALE = 750, 4000
_MIN_CALIBRATION_TOKENS = 64  # smaller requests are mostly per-message overhead


def token_scale_permille(*, provider_tokens: int, estimated_tokens: int) -> int:
    """The scale (thousandths) of the byte estimate a provider's count of a request implies; 0: none.

    Args:
        provider_tokens: Prompt tokens the provider counted for the request (its usage).
        estimated_tokens: What :func:`estimate_tokens` made of the same request.
    """
    if provider_tokens <= 0 or estimated_tokens < _MIN_CALIBRATION_TOKENS:
        return 0
    scale = math.ceil(1000 * _SCALE_MARGIN * provider_tokens / estimated_tokens)
    return min(_MAX_SCALE, max(_MIN_SCALE, scale))


def scaled_counter(permille: int) -> TokenCounter:
    """:func:`estimate_tokens` scaled by ``permille`` thousandths (the estimate itself for 0)."""
    if not permille:
        return estimate_tokens
    return lambda text: math.ceil(estimate_tokens(text) * permille / 1000)
