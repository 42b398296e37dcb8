"""Runtime configuration: a TOML file, then ``AGENTRT_*`` environment overrides, validated by pydantic.

Env overrides address nested keys with ``__``: ``AGENTRT_DB_URL=...``,
``AGENTRT_LIMITS__MAX_INPUT_BYTES=1024``. Values that parse as JSON are taken as
JSON (numbers, booleans, lists), others as strings.
"""

from __future__ import annotations

import ipaddress
import json
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import jsonschema
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from agentrt.server.config._cleanup import CleanupConfig
from agentrt.server.config._context import CheckpointsConfig, ContextConfig
from agentrt.server.config._http import HttpConfig
from agentrt.server.config._limits import (
    AdmissionConfig,
    FaultsConfig,
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
    AuthConfig,
    EncryptionConfig,
    GrantsConfig,
    InlineAgentsConfig,
    ModelProfileConfig,
    TlsConfig,
)
from agentrt.server.config._timeouts import TimeoutsConfig
from agentrt.server.config._tracing import TracingConfig
from agentrt.server.config._waits import EscalationConfig, ReconcileConfig
from agentrt.server.core import Budgets, LoopPolicy, price_micros, usd_to_micros


class ConfigError(Exception):
    """The configuration cannot be used; the message says where and why."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelConfig(_Strict):
    """Which model an agent uses: a named server-side profile, or a provider given here."""

    provider: str = "scripted"
    name: str = ""
    options: dict[str, Any] = Field(default_factory=dict)
    profile: str = ""  # a [model_profiles.<name>]; its options come first, these on top
    context_tokens: int = Field(0, ge=0)  # the model's context limit; 0: the profile's (or none)


class BudgetsConfig(_Strict):
    """Budgets of an agent's runs (R6.1)."""

    max_model_steps: int = Field(20, ge=1)
    max_tool_calls: int = Field(50, ge=0)
    max_calls_per_tool: dict[str, int] = Field(default_factory=dict)
    timeout_s: float = Field(300.0, gt=0)
    max_input_tokens: int = Field(0, ge=0)
    max_output_tokens: int = Field(0, ge=0)
    max_cost_usd: float = Field(0.0, ge=0, allow_inf_nan=False)  # dollars; runs count micro-dollars
    max_handoffs: int = Field(0, ge=0)
    max_parallel_tool_calls: int = Field(1, ge=1)

    def to_budgets(self) -> Budgets:
        values = self.model_dump()
        values["max_cost_micros"] = usd_to_micros(values.pop("max_cost_usd"))  # exact, from the decimal text
        return Budgets(**values)


class LoopsConfig(_Strict):
    """Soft loop exits (R6.2); 0 turns a check off."""

    max_identical_calls: int = Field(3, ge=0)
    max_repeated_errors: int = Field(3, ge=0)
    max_steps_without_new_fact: int = Field(6, ge=0)
    max_flip_flops: int = Field(2, ge=0, le=8)  # answers A, B, A, B with no new fact: 2 swings

    def to_policy(self) -> LoopPolicy:
        return LoopPolicy(**self.model_dump())


class ApprovalsConfig(_Strict):
    """How an agent's calls wait for people (DESIGN §7)."""

    timeout_s: float = Field(86400.0, gt=0)  # an approval is executable this long
    on_expiry: Literal["reask", "fail"] = "reask"
    options: dict[str, Any] = Field(default_factory=dict)  # handed to approval policy hooks


class OutputConfig(_Strict):
    """What a final answer must satisfy before the run completes (R4.3)."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    schema_: dict[str, Any] | None = Field(None, alias="schema")  # JSON Schema the answer (JSON) must match
    on_failure: Literal["fail", "correct"] = "fail"  # "correct": one corrective model step first
    options: dict[str, Any] = Field(default_factory=dict)  # handed to guardrail/postcondition hooks

    @field_validator("schema_")
    @classmethod
    def _valid_schema(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None:
            try:
                jsonschema.Draft202012Validator.check_schema(value)
            except jsonschema.SchemaError as exc:
                raise ValueError(f"not a valid JSON Schema: {exc.message}") from None
        return value


class AgentConfig(_Strict):
    """An agent configured on the server."""

    instructions: str = ""
    model: ModelConfig = Field(default_factory=ModelConfig)
    tools: list[str] = Field(default_factory=list)
    budgets: BudgetsConfig = Field(default_factory=BudgetsConfig)
    loops: LoopsConfig = Field(default_factory=LoopsConfig)
    approvals: ApprovalsConfig = Field(default_factory=ApprovalsConfig)
    output: OutputConfig = Field(default_factory=OutputConfig)
    on_budget_exhausted: Literal["fail", "pause"] = "fail"  # "pause": a person may grant more (R6.1)
    # A tool's UNAUTHORIZED (R6.3): "fail" ends the run; "pause" waits for a person who fixes the
    # tool's authority, then the same call runs again (approvals.timeout_s bounds the wait).
    on_tool_unauthorized: Literal["fail", "pause"] = "fail"
    handoffs: list[str] = Field(default_factory=list)  # agents this one may hand the run to (R9.1)
    agent_tools: list[str] = Field(default_factory=list)  # agents this one may call as tools (child runs)
    context: ContextConfig = Field(default_factory=ContextConfig)  # fitting prompts to context_tokens


class ToolHostConfig(_Strict):
    """A tool host the runtime reaches: an address, a pool of them, or a local child process it spawns.

    ``address`` is ``HOST:PORT``, or ``dns:///NAME:PORT`` for a pool behind a name that resolves to
    many hosts (a headless Kubernetes Service); ``addresses`` lists a pool's ``IP:PORT`` members. A
    pool is one gRPC channel with ``round_robin`` load balancing and health checking: calls spread
    over the members that serve, and a member that stops serving gets no new calls.
    """

    name: str
    address: str = ""
    addresses: list[str] = Field(default_factory=list)
    spawn: bool = False
    plugins: list[str] = Field(default_factory=list)
    entrypoints: bool = True
    data_dir: str = ""
    # mTLS to a host at ``address``: the CA its certificate must chain to, and the runtime's
    # client certificate and key. Re-read when they change. A spawned host gets its own.
    ca_file: str = ""
    cert_file: str = ""
    key_file: str = ""
    server_name: str = ""  # the name to verify in the host's certificate, when not its address
    # Seconds between re-lists of the host's tools while it answers (it is also re-listed when its
    # channel connects again, and retried with a backoff while it does not answer).
    relist_s: float = Field(30.0, gt=0)

    @model_validator(mode="after")
    def _address_or_spawn(self) -> ToolHostConfig:
        if (bool(self.address) + bool(self.addresses) + self.spawn) != 1:
            raise ValueError("give exactly one of address, addresses or spawn = true")
        if self.address:
            _check_address(self.address)
        if self.addresses:
            _check_pool(self.addresses)
            if self.ca_file and not self.server_name:
                raise ValueError(
                    "addresses over TLS need server_name: the name every member's certificate carries"
                )
        if bool(self.cert_file) != bool(self.key_file):
            raise ValueError("give both cert_file and key_file, or neither")
        if (self.cert_file or self.server_name) and not self.ca_file:
            raise ValueError("cert_file and server_name need ca_file (TLS to the host)")
        if self.spawn and (self.ca_file or self.cert_file):
            raise ValueError("a spawned host gets its own TLS material; give ca_file only with address")
        return self

    @property
    def tls(self) -> bool:
        return bool(self.ca_file)

    @property
    def pooled(self) -> bool:
        """Several hosts behind one entry: round_robin over those that pass their health check."""
        return bool(self.addresses) or self.address.startswith(_DNS_SCHEME)

    @property
    def target(self) -> str:
        """The gRPC target: the address as given, or ``ipv4:``/``ipv6:`` and the members."""
        if not self.addresses:
            return self.address
        scheme = "ipv6" if self.addresses[0].startswith("[") else "ipv4"
        return f"{scheme}:{','.join(self.addresses)}"

    @property
    def host_names(self) -> list[str]:
        """The host part of every address (for the loopback check)."""
        return [_split_host(a)[0] for a in (self.addresses or [self.address]) if a]


_DNS_SCHEME = "dns:"


def _split_host(address: str) -> tuple[str, str]:
    """``HOST:PORT``, ``[V6]:PORT`` or ``dns:[//AUTHORITY]/HOST:PORT`` as (host, port)."""
    rest = address.removeprefix(_DNS_SCHEME)
    if rest != address:
        rest = rest.rpartition("/")[2] if "/" in rest else rest
    host, _, port = rest.rpartition(":")
    return host.strip("[]"), port


def _check_address(address: str) -> None:
    host, port = _split_host(address)
    if not host or not port.isdigit():
        raise ValueError(f"address {address!r} is not HOST:PORT or dns:///NAME:PORT")


def _check_pool(addresses: list[str]) -> None:
    families = set()
    for address in addresses:
        host, port = _split_host(address)
        try:
            ip = ipaddress.ip_address(host)
        except ValueError:
            raise ValueError(
                f"addresses: {address!r} is not IP:PORT; for a name that resolves to many hosts give "
                'address = "dns:///NAME:PORT"'
            ) from None
        if not port.isdigit() or (ip.version == 6) != address.startswith("["):
            raise ValueError(f"addresses: {address!r} is not IP:PORT ([V6]:PORT for IPv6)")
        families.add(ip.version)
    if len(families) > 1:
        raise ValueError("addresses: give IPv4 or IPv6 members, not both")
    if len(set(addresses)) != len(addresses):
        raise ValueError(f"addresses repeat: {addresses}")


class PriceConfig(_Strict):
    """What a model costs, in US dollars per million tokens (= micro-dollars per token)."""

    input_per_mtok: float = Field(ge=0, allow_inf_nan=False)
    output_per_mtok: float = Field(ge=0, allow_inf_nan=False)

    def cost_micros(self, input_tokens: int, output_tokens: int) -> int:
        """One call's cost in micro-dollars, exact and rounded up (core/_money.py)."""
        return price_micros(input_tokens, output_tokens, self.input_per_mtok, self.output_per_mtok)


class LimitsConfig(_Strict):
    """Input limits and the ceilings per-run budget overrides may not pass."""

    max_input_bytes: int = Field(64 * 1024, ge=1)
    max_metadata_entries: int = Field(32, ge=0)
    max_model_steps: int = Field(200, ge=1)
    max_tool_calls: int = Field(1000, ge=0)
    max_timeout_s: float = Field(86400.0, gt=0)
    max_metadata_bytes: int = Field(16 * 1024, ge=0)  # keys and values of one run's metadata together
    max_id_bytes: int = Field(128, ge=16, le=200)  # run ids, request keys, session ids, payload ids


class Settings(_Strict):
    """Everything the runtime server reads at start."""

    listen: str = "127.0.0.1:50051"
    # HOST:PORT of the HTTP/JSON + SSE face ([http]); "" serves none (port 0 picks a free one).
    http_listen: str = ""
    http: HttpConfig = Field(default_factory=HttpConfig)
    db_url: str = "sqlite:///.agentrt/agentrt.sqlite"
    # At start: "auto" upgrades the schema, "check" refuses one not at head (production: a
    # migration Job runs `agentrt migrate upgrade`), "off" leaves it alone.
    migrate: Literal["auto", "check", "off"] = "auto"
    sqlite_synchronous: Literal["FULL", "NORMAL", "OFF"] = "FULL"
    db_pool_size: int = Field(10, ge=1)
    worker_id: str = ""
    default_tenant: str = "default"
    lease_ttl_s: float = Field(15.0, gt=0)
    poll_interval_s: float = Field(1.0, gt=0)
    max_concurrent_runs: int = Field(512, ge=1)
    tool_timeout_s: float = Field(30.0, gt=0)
    # How long start waits for a tool host that lets its connection hang (one that refuses is not
    # waited for), and the deadline of each re-list; a call's connect: [timeouts] connect_s.
    connect_timeout_s: float = Field(10.0, gt=0)
    model_timeout_s: float = Field(120.0, gt=0)
    call_reserve_s: float = Field(0.2, ge=0)
    tool_attempts: int = Field(3, ge=1)
    query_timeout_s: float = Field(5.0, gt=0)
    model_attempts: int = Field(3, ge=1)
    retry_base_s: float = Field(0.2, gt=0)
    retry_cap_s: float = Field(5.0, gt=0)
    grace_s: float = Field(5.0, ge=0)  # SIGTERM: how long runs get to reach a commit and hand over
    # Then how long open RPCs get before they are cut (a follower resumes by seq on another replica).
    rpc_grace_s: float = Field(1.0, ge=0)
    data_dir: str = ".agentrt"
    tool_hosts: list[ToolHostConfig] = Field(default_factory=list)
    agents: dict[str, AgentConfig] = Field(default_factory=dict)
    prices: dict[str, PriceConfig] = Field(default_factory=dict)  # keyed by model name
    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    auth: AuthConfig = Field(default_factory=AuthConfig)
    tls: TlsConfig = Field(default_factory=TlsConfig)
    grants: GrantsConfig = Field(default_factory=GrantsConfig)
    encryption: EncryptionConfig = Field(default_factory=EncryptionConfig)
    model_profiles: dict[str, ModelProfileConfig] = Field(default_factory=dict)
    inline_agents: InlineAgentsConfig = Field(default_factory=InlineAgentsConfig)
    faults: FaultsConfig = Field(default_factory=FaultsConfig)
    payloads: PayloadsConfig = Field(default_factory=PayloadsConfig)
    admission: AdmissionConfig = Field(default_factory=AdmissionConfig)
    tool_limits: ToolLimitsConfig = Field(default_factory=ToolLimitsConfig)
    streams: StreamsConfig = Field(default_factory=StreamsConfig)
    model_cache: ModelCacheConfig = Field(default_factory=ModelCacheConfig)
    retention: RetentionConfig = Field(default_factory=RetentionConfig)
    checkpoints: CheckpointsConfig = Field(default_factory=CheckpointsConfig)
    reconcile: ReconcileConfig = Field(default_factory=ReconcileConfig)
    escalation: EscalationConfig = Field(default_factory=EscalationConfig)
    timeouts: TimeoutsConfig = Field(default_factory=TimeoutsConfig)
    cleanup: CleanupConfig = Field(default_factory=CleanupConfig)
    logging: LoggingConfig = Field(default_factory=LoggingConfig)
    tracing: TracingConfig = Field(default_factory=TracingConfig)
    metrics: MetricsConfig = Field(default_factory=MetricsConfig)
    redis: RedisConfig = Field(default_factory=RedisConfig)  # cross-replica fan-out; off by default
    reflection: bool | None = None  # None: on when listening on loopback only
    insecure: bool = False  # `--insecure`: allow a non-loopback listen without TLS and auth
    # "auto": uvloop when it is installed (agentrt-server[uvloop]), else asyncio; read at start only.
    event_loop: Literal["auto", "uvloop", "asyncio"] = "auto"

    @field_validator("listen")
    @classmethod
    def _host_port(cls, value: str) -> str:
        host, sep, port = value.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
            raise ValueError(f"{value!r} is not HOST:PORT")
        return value

    @field_validator("http_listen")
    @classmethod
    def _http_host_port(cls, value: str) -> str:
        return cls._host_port(value) if value else value

    @model_validator(mode="after")
    def _unique_hosts(self) -> Settings:
        names = [h.name for h in self.tool_hosts]
        if len(names) != len(set(names)):
            raise ValueError(f"tool host names repeat: {names}")
        for name, agent in self.agents.items():
            unknown = [a for a in (*agent.handoffs, *agent.agent_tools) if a not in self.agents]
            if unknown:
                raise ValueError(f"agent {name!r} names agents that are not configured: {unknown}")
            if agent.model.profile and agent.model.profile not in self.model_profiles:
                raise ValueError(f"agent {name!r} names an unknown model profile {agent.model.profile!r}")
        if self.auth.mtls and not self.tls.client_ca_file:
            raise ValueError("auth.mtls maps client certificates: it needs tls.client_ca_file (mTLS)")
        unknown = [a for a in self.inline_agents.agents if a not in self.agents]
        if unknown:
            raise ValueError(f"inline_agents.agents names agents that are not configured: {unknown}")
        return self


def _set_path(target: dict[str, Any], path: list[str], value: Any) -> None:
    for key in path[:-1]:
        node = target.setdefault(key, {})
        if not isinstance(node, dict):
            raise ConfigError(f"cannot override {'.'.join(path)}: {key} is not a table")
        target = node
    target[path[-1]] = value


def _env_value(raw: str) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def load_settings(
    path: str | Path | None = None,
    *,
    env: Mapping[str, str] | None = None,
    base: Mapping[str, Any] | None = None,
) -> Settings:
    """Read ``base`` (defaults), then the TOML file, then ``AGENTRT_*`` env overrides.

    Raises:
        ConfigError: unreadable file, bad TOML, or values that fail validation; the
            message names each offending key.
    """
    data: dict[str, Any] = json.loads(json.dumps(dict(base or {})))
    if path is not None:
        try:
            with open(path, "rb") as fh:
                data.update(tomllib.load(fh))
        except OSError as exc:
            raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from exc
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {path} is not valid TOML: {exc}") from exc
    for key, raw in sorted((os.environ if env is None else env).items()):
        if key.startswith("AGENTRT_") and key not in _CLIENT_ENV and not key.startswith(_TOOLHOST_ENV):
            _set_path(data, key.removeprefix("AGENTRT_").lower().split("__"), _env_value(raw))
    try:
        return Settings.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '(root)'}: {err['msg']}" for err in exc.errors()
        )
        raise ConfigError(f"invalid configuration: {problems}") from exc


# The tool host's own variables (--ledger-url, --event-loop defaults, its fault point): a host
# the runtime spawns inherits the runtime's environment, and one machine may run both.
_TOOLHOST_ENV = "AGENTRT_TOOLHOST_"
# Variables the client and test tooling read; not server settings.
_CLIENT_ENV = frozenset(
    {
        "AGENTRT_TARGET",
        # The client's connection settings (agentrt.client._credentials), not the server's.
        "AGENTRT_CA",
        "AGENTRT_CERT",
        "AGENTRT_KEY",
        "AGENTRT_TOKEN",
        "AGENTRT_TOKEN_FILE",
        "AGENTRT_SERVER_NAME",
        "AGENTRT_TLS",
        "AGENTRT_FAULT_POINT",
        "AGENTRT_TEST_PG",
        "AGENTRT_TEST_REDIS",
        "AGENTRT_BENCH_PG",
        # The fuzz tests' example count and seed (tests/fuzz, bench/fuzz_rpcs.py).
        "AGENTRT_FUZZ_EXAMPLES",
        "AGENTRT_FUZZ_SEED",
        # Read by both processes' log setup (the tool host has no config file); it beats [logging] format.
        "AGENTRT_LOG_FORMAT",
    }
)
