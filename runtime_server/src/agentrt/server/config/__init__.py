"""Configuration: one TOML file (or AGENTRT_* variables), validated by pydantic at start.

Each module holds one section's models; ``load_settings`` reads and checks them all.
"""

from __future__ import annotations

from agentrt.server.config._cleanup import (
    CleanupConfig,
)
from agentrt.server.config._context import (
    CheckpointsConfig,
    ContextConfig,
)
from agentrt.server.config._http import HttpConfig
from agentrt.server.config._limits import (
    AdmissionConfig,
    FaultsConfig,
    MiB,
    ModelCacheConfig,
    PayloadsConfig,
    RetentionConfig,
    StreamsConfig,
    ToolLimitsConfig,
)
from agentrt.server.config._logging import LoggingConfig
from agentrt.server.config._metrics import MetricsConfig
from agentrt.server.config._redis import RedisConfig
from agentrt.server.config._security import (
    ROLES,
    ApproverScopeConfig,
    AuthConfig,
    EncryptionConfig,
    GrantsConfig,
    InlineAgentsConfig,
    JwtConfig,
    ModelProfileConfig,
    MtlsPrincipalConfig,
    Role,
    TlsConfig,
)
from agentrt.server.config._settings import (
    AgentConfig,
    ApprovalsConfig,
    BudgetsConfig,
    ConfigError,
    LimitsConfig,
    LoopsConfig,
    ModelConfig,
    OutputConfig,
    PriceConfig,
    Settings,
    ToolHostConfig,
    load_settings,
)
from agentrt.server.config._timeouts import (
    TimeoutsConfig,
)
from agentrt.server.config._tracing import (
    TracingConfig,
)
from agentrt.server.config._waits import (
    EscalationConfig,
    ReconcileConfig,
    wait_policy,
)

__all__ = [
    "ROLES",
    "AdmissionConfig",
    "AgentConfig",
    "ApprovalsConfig",
    "ApproverScopeConfig",
    "AuthConfig",
    "BudgetsConfig",
    "CheckpointsConfig",
    "CleanupConfig",
    "ConfigError",
    "ContextConfig",
    "EncryptionConfig",
    "EscalationConfig",
    "FaultsConfig",
    "GrantsConfig",
    "HttpConfig",
    "InlineAgentsConfig",
    "JwtConfig",
    "LimitsConfig",
    "LoggingConfig",
    "LoopsConfig",
    "MetricsConfig",
    "MiB",
    "ModelCacheConfig",
    "ModelConfig",
    "ModelProfileConfig",
    "MtlsPrincipalConfig",
    "OutputConfig",
    "PayloadsConfig",
    "PriceConfig",
    "ReconcileConfig",
    "RedisConfig",
    "RetentionConfig",
    "Role",
    "Settings",
    "StreamsConfig",
    "TimeoutsConfig",
    "TlsConfig",
    "ToolHostConfig",
    "ToolLimitsConfig",
    "TracingConfig",
    "load_settings",
    "wait_policy",
]
