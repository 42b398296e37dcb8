"""Which ended runs retention may prune, and when (DESIGN R8.4). Pure: the caller passes ``now`` in.

A run is prunable when it is in a terminal phase, not yet pruned, and its last update (the
moment it ended: a terminal run is never written again) lies at least its tenant's age
before now. A tenant's age is its ``per_tenant`` entry, else the default; None keeps forever.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from agentrt.server.core._phases import Phase

__all__ = ["RetentionPolicy"]


@dataclass(frozen=True, slots=True, kw_only=True)
class RetentionPolicy:
    """Ages after which ended runs are pruned.

    Attributes:
        ended_after_s: Default age in seconds; None keeps runs of tenants without an entry.
        per_tenant: Tenant -> age in seconds, overriding the default.
    """

    ended_after_s: float | None = None
    per_tenant: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        ages = [self.ended_after_s, *self.per_tenant.values()]
        bad = [a for a in ages if a is not None and not (math.isfinite(a) and a > 0)]
        if bad:
            raise ValueError(f"retention ages must be finite and > 0, not {bad}")

    @property
    def configured(self) -> bool:
        """True when some tenant's runs are ever pruned."""
        return self.ended_after_s is not None or bool(self.per_tenant)

    def age_s(self, tenant_id: str) -> float | None:
        """The age after which ``tenant_id``'s ended runs are pruned; None: kept forever."""
        return self.per_tenant.get(tenant_id, self.ended_after_s)

    def cutoff_ms(self, tenant_id: str, *, now_ms: int) -> int | None:
        """Runs of ``tenant_id`` that ended before this epoch-ms instant are prunable; None: none are."""
        return cutoff_ms(self.age_s(tenant_id), now_ms=now_ms)

    def default_cutoff_ms(self, *, now_ms: int) -> int | None:
        """The cutoff of every tenant without a ``per_tenant`` entry."""
        return cutoff_ms(self.ended_after_s, now_ms=now_ms)

    def prunable(
        self, *, tenant_id: str, phase: str, updated_ms: int, pruned_ms: int | None, now_ms: int
    ) -> bool:
        """Whether retention prunes this run now."""
        cut = self.cutoff_ms(tenant_id, now_ms=now_ms)
        return cut is not None and pruned_ms is None and Phase(phase).terminal and updated_ms <= cut


def cutoff_ms(age_s: float | None, *, now_ms: int) -> int | None:
    """``now_ms`` less ``age_s`` (rounded up to whole ms, so a run is never pruned early); None for None."""
    if age_s is None:
        return None
    return now_ms - math.ceil(age_s * 1000)
