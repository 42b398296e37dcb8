"""Assembles and runs the runtime server process: store, engine, tool hosts, gRPC, health, reflection."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Callable

import grpc
import pluggy
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from sqlalchemy.exc import SQLAlchemyError

from agentrt.proto.runtime.v1 import runtime_service_pb2
from agentrt.server.api._fanout import Fanout, build_bus, check_redis
from agentrt.server.api._http_app import HttpApp
from agentrt.server.api._http_call import GuardedCall
from agentrt.server.api._http_server import HttpServer, check_http_auth
from agentrt.server.api._interceptor import AuthInterceptor
from agentrt.server.api._servicer import RuntimeServicer
from agentrt.server.api._tool_hosts import ToolHostSet
from agentrt.server.api._wire import add_runtime_service
from agentrt.server.auth import Authentication, build_authentication, local_principal
from agentrt.server.config import ConfigError, ModelConfig, Settings
from agentrt.server.engine import Engine, bind_model, ledger_keep_bound_s, sensitive_option
from agentrt.server.events import RedisEventBus
from agentrt.server.models import ModelConfigError, ModelRegistry, ModelSpecData, get_model_plugin_manager
from agentrt.server.store import SchemaNotCurrent, Store, describe_database_error, load_cipher
from agentrt.server.telemetry import GaugeCounts, RuntimeMetrics, setup_tracing, shutdown_tracing
from agentrt.server.tools import ToolRouter, ToolSlots
from agentrt.toolhost import LedgerRetention
from agentrt.toolhost.security import GrantSigner, ReloadingServerCredentials, TlsFileError, is_loopback_host
from agentrt.toolhost.tracing import TraceContextInterceptor, TracingError

log = logging.getLogger("agentrt.server")
SERVICE_NAME = runtime_service_pb2.DESCRIPTOR.services_by_name["AgentRuntimeService"].full_name
READY_PREFIX = "agentrt-runtime listening on "
METRICS_PREFIX = "agentrt-runtime metrics on "  # printed before READY_PREFIX when /metrics is served
HTTP_PREFIX = "agentrt-runtime http on "  # printed before READY_PREFIX when http_listen is set
MAX_MESSAGE_BYTES = 4 * 1024 * 1024


class RuntimeServer:
    """One runtime process's parts, started and stopped in order."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self.metrics: RuntimeMetrics | None = None
        self.metrics_address = ""
        self.bus = build_bus(settings)
        self.fanout: Fanout | None = None  # the Redis fan-out, with [redis]
        limits = settings.tool_limits
        self.tools = ToolRouter(
            slots=ToolSlots(
                limits=limits.max_concurrent_calls,
                default=limits.default_max_concurrent_calls,
                per_tenant=limits.max_concurrent_calls_per_tenant,
                default_per_tenant=limits.default_max_concurrent_calls_per_tenant,
            ),
            max_result_bytes=settings.payloads.max_tool_result_bytes,
            connect_s=settings.timeouts.connect_s,
        )
        self.hosts: ToolHostSet | None = None
        self.store: Store | None = None
        self.models: ModelRegistry | None = None
        self.engine: Engine | None = None
        self.server: grpc.aio.Server | None = None
        self.health = health.aio.HealthServicer()  # type: ignore[attr-defined]
        self.address = ""
        self.http: HttpServer | None = None
        self.http_address = ""

    async def start(self) -> str:
        """Start everything; returns the address the gRPC server listens on.

        Raises:
            ConfigError: a tool host's TLS files cannot be used, a spawned host does not start, an
                agent names a tool no host serves while every host answered, or the listen address
                cannot be bound. A host that does not answer is no error: its tools are pending.
        """
        settings = self.settings
        # Everything that can reject the configuration runs before the database is touched.
        authentication = _authentication(settings)
        if settings.http_listen:
            _authentication(settings.model_copy(update={"listen": settings.http_listen}))  # same rules
            check_http_auth(settings)
        credentials = _server_credentials(settings)
        self.models = ModelRegistry(
            get_model_plugin_manager(),
            max_providers=settings.model_cache.max_providers,
            connect_s=settings.timeouts.connect_s,
        )
        _check_models(settings, self.models)
        self.metrics = RuntimeMetrics.build(settings.metrics)
        self.metrics_address = self.metrics.start_endpoint()
        self.tools.signer = _grant_signer(settings)
        redis_password = check_redis(settings.redis) if settings.redis.enabled else None
        self.tools.counters = self.metrics.counters
        self.hosts = ToolHostSet(router=self.tools, settings=settings, ledger_keep_s=_ledger_keep_s(settings))
        await self.hosts.start()
        try:
            cipher = load_cipher(settings.encryption.key_file)
        except ValueError as exc:  # names the file, never key bytes
            raise ConfigError(str(exc)) from exc
        try:
            self.store = await Store.open(
                settings.db_url,
                migrate=settings.migrate,
                sqlite_synchronous=settings.sqlite_synchronous,
                pool_size=settings.db_pool_size,
                cipher=cipher,
            )
        except SchemaNotCurrent as exc:
            raise ConfigError(f'migrate = "check": {exc}') from None
        except SQLAlchemyError as exc:  # unreachable or unusable at start: one line, no password
            raise ConfigError(describe_database_error(exc, settings.db_url)) from None
        self.engine = Engine(
            store=self.store,
            bus=self.bus,
            models=self.models,
            tools=self.tools,
            settings=settings,
            counters=self.metrics.counters,
        )
        if isinstance(self.bus, RedisEventBus):
            self.fanout = await Fanout.start(
                settings.redis,
                password=redis_password,
                bus=self.bus,
                engine=self.engine,
                counters=self.metrics.counters,
                tools=self.tools,
            )
            self.metrics.redis_up = lambda: self.fanout.up if self.fanout is not None else None
        # Tracing first: the RPC's span (under the caller's traceparent) covers its authentication.
        interceptors = (
            TraceContextInterceptor(tracer_name="agentrt.runtime"),
            AuthInterceptor(authentication),
        )
        self.server = grpc.aio.server(
            interceptors=list(interceptors),
            options=[
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ],
        )
        servicer = RuntimeServicer(engine=self.engine, settings=settings)
        add_runtime_service(servicer, self.server)
        if settings.http_listen:  # the same servicer behind the same interceptors (api/_http_call)
            app = HttpApp(
                calls=GuardedCall(servicer=servicer, interceptors=interceptors),
                config=settings.http,
                max_message_bytes=MAX_MESSAGE_BYTES,
            )
            self.http = HttpServer(app=app, settings=settings)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        if _reflection_on(settings):
            reflection.enable_server_reflection(
                (SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME), self.server
            )
        try:
            if credentials is None:
                port = self.server.add_insecure_port(settings.listen)
            else:
                port = self.server.add_secure_port(settings.listen, credentials.credentials)
        except RuntimeError as exc:
            raise ConfigError(f"cannot listen on {settings.listen}: {exc}") from exc
        await self.server.start()
        if self.http is not None:
            self.http_address = await self.http.start()
        await self.engine.start()
        if self.fanout is not None:
            self.fanout.serve_wakes(self.engine)
        self._watch_gauges(self.metrics, self.engine, self.store)
        await self.health.set(SERVICE_NAME, health_pb2.HealthCheckResponse.SERVING)
        await self.health.set("", health_pb2.HealthCheckResponse.SERVING)
        self.address = f"{settings.listen.rpartition(':')[0]}:{port}"
        return self.address

    async def stop(self) -> None:
        """Drain: NOT_SERVING, hand the runs over at their next commit, then end RPCs, then close.

        RPCs are answered during the runs' drain (GetRun, follows; a StartRun is persisted and left
        unowned for another replica), then get ``rpc_grace_s`` before they are cut.
        """
        with contextlib.suppress(Exception):
            await self.health.enter_graceful_shutdown()
        if self.engine is not None:
            await self.engine.stop(grace_s=self.settings.grace_s)
        stops = [self.server.stop(self.settings.rpc_grace_s)] if self.server is not None else []
        if self.http is not None:
            stops.append(self.http.stop())
        await asyncio.gather(*stops)  # both faces get the same rpc_grace_s, at once
        if self.fanout is not None:  # after the RPCs: their followers hear the runs' next owners
            await self.fanout.close()
        await self.tools.close()
        if self.hosts is not None:
            await self.hosts.stop()
        if self.models is not None:
            await self.models.aclose()
        if self.metrics is not None:
            await self.metrics.stop()  # after the drain: the last export holds the final counts
        if self.store is not None:
            await self.store.close()

    def _watch_gauges(self, metrics: RuntimeMetrics, engine: Engine, store: Store) -> None:
        async def read_counts() -> GaugeCounts:
            by_phase, queued, attention = await store.gauge_counts(engine.now_ms())
            return GaugeCounts(by_phase=by_phase, queue_depth=queued, needing_attention=attention)

        metrics.watch(read_counts=read_counts, live=lambda: (engine.owned_runs(), self.bus.follower_count()))


def _check_models(settings: Settings, models: ModelRegistry) -> None:
    """Every agent's model (and a profile inline agents use as is) can be created; no profile lets
    callers pick an endpoint or key.

    Raises:
        ConfigError: an unusable model, an agent with a profile that also sets provider or name,
            or a profile whose ``inline_options`` lists an endpoint, key source or header option.
    """
    for name, profile in settings.model_profiles.items():
        sensitive = sorted(k for k in profile.inline_options if sensitive_option(k))
        if sensitive:
            raise ConfigError(
                f"model profile {name!r}: inline_options may not list {sensitive}: endpoints, key "
                "sources and headers stay in server config"
            )
        if not settings.inline_agents.enabled or profile.inline_options:
            continue  # completed by the options of the agents that name it, checked below or per request
        try:  # inline agents use exactly these options
            spec = ModelSpecData(provider=profile.provider, name=profile.name, options=profile.options)
            models.provider(spec)
        except ModelConfigError as exc:
            raise ConfigError(f"model profile {name!r} is unusable: {exc}") from exc
    for name, agent in settings.agents.items():
        model = agent.model
        # (Settings are re-validated from a dump after CLI overrides: compare with the defaults.)
        if model.profile and (model.name or model.provider != ModelConfig().provider):
            raise ConfigError(
                f"agent {name!r}: model.profile gives the provider and model name; remove model.provider "
                "and model.name (options stay, on top of the profile's)"
            )
        try:
            models.provider(bind_model(model, settings.model_profiles).spec)
        except ModelConfigError as exc:
            raise ConfigError(f"agent {name!r} has an unusable model: {exc}") from exc


def _ledger_keep_s(settings: Settings) -> float | None:
    """The ``--ledger-keep-s`` spawned hosts need: None when their default already covers the bound.

    A late retry must still find its key in the host's ledger (README, retention).
    """
    bound = ledger_keep_bound_s(settings)
    if bound <= LedgerRetention().keep_s:
        return None
    if any(not host.spawn for host in settings.tool_hosts):
        log.warning(
            "runs may retry a tool call up to %.0f s after it started: tool hosts at an address must "
            "keep their ledger that long (--ledger-keep-s %.0f)",
            bound,
            bound,
        )
    return bound


def _loopback(settings: Settings) -> bool:
    return is_loopback_host(settings.listen.rpartition(":")[0])


def _reflection_on(settings: Settings) -> bool:
    return settings.reflection if settings.reflection is not None else _loopback(settings)


def _authentication(settings: Settings) -> Authentication:
    """Who may call. Secure by default: off loopback, TLS and an authenticator are required.

    Raises:
        ConfigError: a non-loopback listen without TLS and authentication (and no ``--insecure``),
            or an authentication file that cannot be used.
    """
    loopback = _loopback(settings)
    secured = settings.tls.enabled and settings.auth.configured
    if not loopback and not secured:
        if not settings.insecure:
            raise ConfigError(
                f"refusing to listen on {settings.listen} without TLS and authentication: configure "
                "[tls] and [auth], listen on loopback, or pass --insecure"
            )
        missing = [
            name for name, on in (("TLS", settings.tls.enabled), ("auth", settings.auth.configured)) if not on
        ]
        log.warning(
            "INSECURE (--insecure): serving %s without %s; anyone who reaches this port can act on runs",
            settings.listen,
            " and ".join(missing),
        )
    local = None if settings.auth.configured else local_principal(settings.default_tenant)
    try:
        return build_authentication(settings.auth, local=local)
    except (ValueError, ImportError, pluggy.PluginValidationError) as exc:
        raise ConfigError(f"auth: {exc}") from exc


def _server_credentials(settings: Settings) -> ReloadingServerCredentials | None:
    if not settings.tls.enabled:
        return None
    try:
        return ReloadingServerCredentials(
            cert_file=settings.tls.cert_file,
            key_file=settings.tls.key_file,
            client_ca_file=settings.tls.client_ca_file,
        )
    except TlsFileError as exc:
        raise ConfigError(f"tls: {exc}") from exc


def _grant_signer(settings: Settings) -> GrantSigner | None:
    """The signer of call grants for hosts at an address: the configured key file, else a key made now.

    Raises:
        ConfigError: the signing key file cannot be read or is not an Ed25519 private key.
    """
    grants = settings.grants
    if not grants.enabled:
        log.warning(
            "call grants are off (grants.enabled = false): tool hosts at an address get none, so only "
            "those without grant keys obey (spawned hosts still get grants of their own)"
        )
        return None
    if not grants.signing_key_file:
        if any(not host.spawn for host in settings.tool_hosts):
            log.info(
                "call grants are signed with a key made at start; tool hosts at an address that verify "
                "grants need grants.signing_key_file and its public key"
            )
        return GrantSigner(key=Ed25519PrivateKey.generate(), ttl_s=grants.ttl_s)
    try:
        return GrantSigner(key_file=grants.signing_key_file, ttl_s=grants.ttl_s)
    except OSError as exc:
        raise ConfigError(
            f"grants: cannot read signing_key_file {grants.signing_key_file}: {exc.strerror}"
        ) from exc
    except ValueError as exc:
        raise ConfigError(f"grants: signing_key_file {grants.signing_key_file}: {exc}") from exc


async def serve(
    settings: Settings,
    *,
    announce: Callable[[str], None] = print,
    reload_settings: Callable[[], Settings] | None = None,
) -> None:
    """Run until SIGTERM or SIGINT; on SIGHUP, reload the tool hosts from ``reload_settings()``.

    ``reload_settings`` reads the configuration again (file, environment, flags); a
    :class:`ConfigError` it raises keeps the tool hosts as they are, and is logged.
    """
    try:
        provider = setup_tracing(settings.tracing)  # off unless an exporter is configured
    except TracingError as exc:
        raise ConfigError(f"tracing: {exc}") from exc
    server = RuntimeServer(settings)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    reloads: asyncio.Task[None] | None = None
    try:
        address = await server.start()
        if reload_settings is not None:
            reloads = _reload_on_sighup(server, reload_settings)
        if server.metrics_address:
            announce(f"{METRICS_PREFIX}{server.metrics_address}")
        if server.http_address:
            announce(f"{HTTP_PREFIX}{server.http_address}")
        announce(f"{READY_PREFIX}{address}")
        await stop.wait()
    finally:
        if reloads is not None:
            reloads.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reloads
        await server.stop()
        shutdown_tracing(provider)  # SIGTERM: the spans of the drained runs are exported first


def _reload_on_sighup(server: RuntimeServer, reload_settings: Callable[[], Settings]) -> asyncio.Task[None]:
    """One reload at a time, in order: a SIGHUP during a reload runs another after it."""
    wanted = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, wanted.set)

    async def reload_loop() -> None:
        while True:
            await wanted.wait()
            wanted.clear()
            log.info("SIGHUP: reading the configuration again")
            try:
                settings = reload_settings()
            except ConfigError as exc:
                log.error("config reload (SIGHUP) refused, the tool hosts stay as they were: %s", exc)
                continue
            try:
                if server.hosts is not None:
                    await server.hosts.reload(settings)
            except Exception:  # the next SIGHUP still gets its reload
                log.exception("config reload (SIGHUP) failed")

    return asyncio.get_running_loop().create_task(reload_loop(), name="sighup-reload")
