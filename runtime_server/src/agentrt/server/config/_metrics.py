"""``[metrics]``: the Prometheus scrape endpoint and the cardinality caps of metric attributes.

Off by default. ``listen = "127.0.0.1:9464"`` (or ``--metrics-listen``) serves ``GET /metrics``;
a non-loopback address needs ``token_file``, a file holding the bearer token scrapers send.
OTLP export follows the standard ``OTEL_METRICS_EXPORTER`` / ``OTEL_EXPORTER_OTLP_*`` variables.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from agentrt.toolhost.telemetry import MetricsConfigError, check_listen

__all__ = ["MetricsConfig"]


class MetricsConfig(BaseModel):
    """Where metrics are served and how many distinct attribute values they may carry."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    listen: str = ""  # HOST:PORT of /metrics; "" serves none (port 0 picks a free one)
    token_file: str = ""  # the bearer token /metrics requires; needed off loopback
    # Distinct tenants and tools a metric attribute takes; later ones are counted as "other".
    max_tenants: int = Field(100, ge=1, le=10_000)
    max_tools: int = Field(200, ge=1, le=10_000)
    # Gauges read from the database (runs by phase, queue depth, needing attention) are cached
    # this long: a scrape never runs a query.
    gauge_refresh_s: float = Field(15.0, gt=0, le=3600)

    @field_validator("listen")
    @classmethod
    def _host_port(cls, value: str) -> str:
        if value:
            try:
                check_listen(value, token_file="checked with the model")
            except MetricsConfigError as exc:
                raise ValueError(str(exc)) from None
        return value

    @model_validator(mode="after")
    def _token_off_loopback(self) -> MetricsConfig:
        if self.listen:
            try:
                check_listen(self.listen, token_file=self.token_file)
            except MetricsConfigError as exc:
                raise ValueError(str(exc)) from None
        return self
