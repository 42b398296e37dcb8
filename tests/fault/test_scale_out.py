"""The scale-out e2e test of issue 18 (DESIGN R10.1, R10.5), on real processes and PostgreSQL.

A redis-server of the test's own, 3 runtime replicas and 2 tool hosts of one pool
(``addresses = [a, b]``) sharing a PostgreSQL ledger schema. The replicas run with the lease,
poll, drain, pool size, migrate and ``[redis]`` values of deploy/config/runtime.toml, loaded with
the server's own loader (its TLS, auth and tool host tables are left out: everything listens on
loopback, insecure, as the fault suite does), on a schema that ``agentrt migrate upgrade
--config deploy/config/runtime.toml`` (the deploy migration Job's command) set up first, since
``migrate = "check"`` refuses an empty one.

RUNS scripted runs, each making WRITES calls of ``pool.charge`` (whose own store counts raw
executions), are started in batches spread over the replicas, while a seeded chaos loop kills
replicas with SIGKILL (each replaced at once, as a Deployment does), kills one tool host
(restarted on its port), kills and restarts redis-server, and drains one replica with SIGTERM.

Shown: every run COMPLETED with a gapless log and every write executed exactly once; a follower
on a replica that does not own a run sees its model text deltas; a cancel asked of a non-owner
lands quickly; takeover bounds after SIGKILL (lease_ttl_s + 1 s) and SIGTERM (1 s). Figures are
printed (``pytest -s``); ``SCALE_OUT_SEED=N`` replays a chaos schedule.
"""

from __future__ import annotations

import json
import os
import random
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis

from agentrt.client import Client, RPCError, event_type
from agentrt.proto.runtime.v1 import run_pb2
from agentrt.server.config import Settings, load_settings
from agentrt.testing import (
    Exchange,
    FakeModelServer,
    FakeResponse,
    RecordedRequest,
    RuntimeProcess,
    ToolHostProcess,
    start_tool_host,
)
from agentrt.testing.redis_server import RedisServer
from tests.fault._pool_plugin import charge_counts
from tests.fault.conftest import FakeOpenAI, runtime_env
from tests.fault.test_redis_replicas import Follower, deltas, persisted
from tests.packaging.deploy_files import RUNTIME_TOML

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

RUNS = 500  # the target; see the module docstring
WRITES = 3  # pool.charge calls per run, one per step
KILLS = 3  # SIGKILLs of a replica
REPLICAS = 3
CANCELS = 6
FEEDERS = 4  # starts in flight at once
SEED = int(os.environ.get("SCALE_OUT_SEED") or random.SystemRandom().randrange(1 << 32))

PLUGIN = str(Path(__file__).with_name("_pool_plugin.py"))
FIXTURES = Path(__file__).parent.parent / "fixtures" / "models"
AGENTRT = str(Path(sys.executable).with_name("agentrt"))
# The values the replicas take from the deploy config; the rest is the fault suite's loopback setup.
DEPLOY_KEYS = ("lease_ttl_s", "poll_interval_s", "grace_s", "db_pool_size", "migrate")
LEDGER_OWNER_TTL_S = 2.0  # a killed host's writes read as running this long, then get settled
WRITE_HOLD_S = 0.1  # each write stays in flight this long after its effect: kills land mid-write

WRITE_SCRIPT: dict[int, dict[str, Any]] = {
    **{
        step: {"tool": "pool.charge", "arguments": {"order_id": f"A{step}", "amount": 10.0 * step}}
        for step in range(1, WRITES + 1)
    },
    WRITES + 1: {"text": "Charged every order."},
}
NAP_SCRIPT: dict[int, dict[str, Any]] = {
    1: {"tool": "sleep.wait", "arguments": {"seconds": 60.0}},
    2: {"text": "woke"},
}
NOT_ENDED = (
    run_pb2.RUN_PHASE_QUEUED,
    run_pb2.RUN_PHASE_MODEL_STEP,
    run_pb2.RUN_PHASE_TOOL_STEP,
    run_pb2.RUN_PHASE_WAITING_APPROVAL,
    run_pb2.RUN_PHASE_RETRY_WAIT,
    run_pb2.RUN_PHASE_CANCEL_REQUESTED,
    run_pb2.RUN_PHASE_UNKNOWN_OUTCOME,
    run_pb2.RUN_PHASE_CLEANING_UP,
)


def deployed() -> tuple[Settings, dict[str, Any]]:
    """The deploy config as the server loads it, and its keys the replicas run with."""
    settings = load_settings(RUNTIME_TOML, env={})
    return settings, {key: getattr(settings, key) for key in DEPLOY_KEYS}


def migrate_as_the_deploy_job_does(pg_url: str) -> None:
    """The migration step, as the deploy Job runs it: the deploy config, the database from the env."""
    settings, _ = deployed()
    assert settings.migrate == "check" and settings.redis.url  # what the deploy config runs with
    job_env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTRT_")}
    job_env["AGENTRT_DB_URL"] = pg_url
    check = [AGENTRT, "migrate", "check", "--config", str(RUNTIME_TOML)]
    assert subprocess.run(check, env=job_env, capture_output=True, timeout=120).returncode == 1  # empty
    upgrade = [AGENTRT, "migrate", "upgrade", "--config", str(RUNTIME_TOML)]
    migrated = subprocess.run(upgrade, env=job_env, capture_output=True, text=True, timeout=120)
    assert migrated.returncode == 0, migrated.stderr


def replica_env(
    pg_url: str,
    *,
    pool: Pool,
    model_url: str,
    redis_table: dict[str, Any],
    deploy: dict[str, Any],
    agents_table: dict[str, Any] | None = None,
) -> Callable[[str], dict[str, str]]:
    """A replica's environment by its worker id: the deploy values, the pool, Redis, the agents."""

    def env_for(worker_id: str) -> dict[str, str]:
        env = runtime_env(
            db_url=pg_url,
            tool_host=pool.addresses[0],
            model_url=model_url,
            worker_id=worker_id,
            redis=redis_table,
            **deploy,
        )
        env["AGENTRT_TOOL_HOSTS"] = json.dumps([{"name": "pool", "addresses": pool.addresses}])
        env["AGENTRT_AGENTS"] = json.dumps(agents_table or agents(model_url))
        return env

    return env_for


class Models:
    """One fake OpenAI server for the three agents, told apart by their model's name."""

    def __init__(self) -> None:
        self.writer = FakeOpenAI(WRITE_SCRIPT)
        self.napper = FakeOpenAI(NAP_SCRIPT)
        # A streamed answer, held before its first byte until the test lets it go.
        self.stream = Exchange.load(FIXTURES / "openai_stream_text.json").response.with_pause(0)

    def respond(self, request: RecordedRequest) -> FakeResponse:
        body = request.json()
        if body["model"] == "gpt-stream":
            return self.stream
        fake = self.napper if body["model"] == "gpt-nap" else self.writer
        return FakeResponse.json_body(fake.answer(body))


def agents(model_url: str) -> dict[str, Any]:
    def agent(model: str, tools: list[str]) -> dict[str, Any]:
        return {
            "instructions": "Charge the orders.",
            "tools": tools,
            "model": {
                "provider": "openai",
                "name": model,
                "options": {"base_url": model_url, "api_key_env": "FAKE_KEY"},
            },
            "budgets": {"max_model_steps": 8, "timeout_s": 300},
        }

    return {
        "writer": agent("gpt-write", ["pool.charge"]),
        "napper": agent("gpt-nap", ["sleep.wait"]),
        "streamer": agent("gpt-stream", []),
    }


class Pool:
    """Two tool hosts of one pool: one PostgreSQL ledger schema, one plugin store."""

    def __init__(self, tmp_path: Path, ledger_url: str) -> None:
        self.tmp_path = tmp_path
        self.store = tmp_path / "charges.sqlite"
        self.args = [
            *("--set", f"store={self.store}", "--set", f"release={tmp_path / 'never'}"),
            *("--set", f"hold_s={WRITE_HOLD_S}"),
            *("--ledger-url", ledger_url, "--ledger-schema", f"t_{uuid.uuid4().hex[:12]}"),
            *("--ledger-owner-ttl-s", str(LEDGER_OWNER_TTL_S)),
        ]
        self.hosts: list[ToolHostProcess] = []
        self.retired: list[ToolHostProcess] = []

    def _start(self, index: int, listen: str) -> ToolHostProcess:
        return start_tool_host(
            self.tmp_path / f"host-{index}",
            plugins=[PLUGIN, "agentrt.plugins.demo_tools"],
            extra_args=[*self.args, "--set", f"member=m{index}"],
            listen=listen,
        )

    def start(self) -> None:
        self.hosts = [self._start(i, "127.0.0.1:0") for i in range(2)]

    @property
    def addresses(self) -> list[str]:
        return [h.address for h in self.hosts]

    def kill_and_restart(self, index: int) -> float:
        """SIGKILL member ``index``, start it again on its address; seconds it was away."""
        host = self.hosts[index]
        host.kill()
        killed_at = time.monotonic()
        host.wait()
        self.retired.append(host)
        self.hosts[index] = self._start(index, host.address)
        return time.monotonic() - killed_at

    def drain_and_restart(self, index: int) -> tuple[float, float]:
        """SIGTERM member ``index`` (it drains), start it again on its address once it exited 0;
        seconds to its exit, and until the new process listened."""
        host = self.hosts[index]
        host.terminate()
        sigterm_at = time.monotonic()
        code = host.wait(timeout=30)
        exited_s = time.monotonic() - sigterm_at
        assert code == 0, f"tool host {index} exited {code}"
        self.retired.append(host)
        self.hosts[index] = self._start(index, host.address)
        return exited_s, time.monotonic() - sigterm_at

    def close(self) -> None:
        for host in self.hosts:
            host.terminate()
        for host in [*self.hosts, *self.retired]:
            host.stop()


@dataclass
class Replica:
    name: str  # its worker_id, what GetRun shows as lease_owner
    slot: int
    process: RuntimeProcess

    @property
    def address(self) -> str:
        return self.process.address


class Replicas:
    """The live replicas (ready, not being killed or drained), safe to read from any thread."""

    def __init__(self, tmp_path: Path, env_for: Callable[[str], dict[str, str]]) -> None:
        self.tmp_path = tmp_path
        self.env_for = env_for
        self._live: list[Replica] = []
        self._all: list[Replica] = []
        self._generation: Counter[int] = Counter()
        self._lock = threading.Lock()

    def spawn(self, slot: int) -> Replica:
        """A new process for ``slot`` (a new pod: a new worker id), not waited for."""
        self._generation[slot] += 1
        name = f"r{slot}.{self._generation[slot]}"
        process = RuntimeProcess(["--listen", "127.0.0.1:0"], cwd=self.tmp_path, env=self.env_for(name))
        replica = Replica(name, slot, process)
        self._all.append(replica)
        return replica

    def join(self, replica: Replica) -> None:
        replica.process.wait_ready(90)
        with self._lock:
            self._live.append(replica)

    def leave(self, replica: Replica) -> None:
        with self._lock:
            self._live.remove(replica)

    def live(self) -> list[Replica]:
        with self._lock:
            return sorted(self._live, key=lambda r: r.slot)

    def other_than(self, name: str) -> Replica:
        return next(r for r in self.live() if r.name != name)

    def close(self) -> None:
        for replica in self._all:
            if replica.process.process.poll() is None:
                replica.process.process.send_signal(signal.SIGTERM)
        for replica in self._all:
            replica.process.close()


def in_flight(client: Client) -> dict[str, Any]:
    """Every run not ended yet, by id (ListRuns pages of 500)."""
    runs: dict[str, Any] = {}
    token = ""
    while True:
        page = client.list_runs(page_size=500, page_token=token, phases=NOT_ENDED)
        runs.update((r.run_id, r) for r in page.runs)
        token = page.next_page_token
        if not token:
            return runs


def poll(check: Callable[[], bool], what: str, within_s: float, every_s: float = 0.05) -> float:
    """Seconds until ``check()`` held; fails after ``within_s``."""
    began = time.monotonic()
    while not check():
        assert time.monotonic() - began < within_s, f"{what} (after {within_s:g} s)"
        time.sleep(every_s)
    return time.monotonic() - began


class Feeder:
    """Starts the runs round-robin over the live replicas, FEEDERS at a time, as far as the chaos
    loop allows.

    Each start carries a request key, so one whose replica died mid-call is sent again to the
    next replica and attaches to the run if it was created.
    """

    def __init__(self, replicas: Replicas, *, agent: str = "writer", runs: int = RUNS) -> None:
        self.replicas = replicas
        self.agent = agent
        self.runs = runs
        self.run_ids: list[str] = []
        self.started_on: Counter[str] = Counter()
        self.retried = 0
        self.errors: list[BaseException] = []
        self._next_job = 0
        self._allowed = 0
        self._halted = False
        self._cond = threading.Condition()
        self._threads = [threading.Thread(target=self._feed, daemon=True) for _ in range(FEEDERS)]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def allow(self, runs: int) -> None:
        with self._cond:
            self._allowed = runs
            self._cond.notify_all()

    def halt(self) -> None:
        """Start no more runs (the test is over, or failed)."""
        with self._cond:
            self._halted = True
            self._cond.notify_all()

    def started(self) -> list[str]:
        with self._cond:
            return list(self.run_ids)

    def _take_job(self) -> int | None:
        with self._cond:
            self._cond.wait_for(
                lambda: self._next_job < self._allowed or self._next_job >= self.runs or self._halted
            )
            if self._halted or self._next_job >= self.runs:
                return None
            self._next_job += 1
            return self._next_job - 1

    def _feed(self) -> None:
        clients: dict[str, Client] = {}
        try:
            while (job := self._take_job()) is not None:
                run_id, name = self._start(job, clients)
                with self._cond:
                    self.run_ids.append(run_id)
                    self.started_on[name] += 1
        except BaseException as exc:
            self.errors.append(exc)
        finally:
            for client in clients.values():
                client.close()

    def _start(self, job: int, clients: dict[str, Client]) -> tuple[str, str]:
        deadline = time.monotonic() + 60
        attempt = 0
        while True:
            live = self.replicas.live()
            replica = live[(job + attempt) % len(live)]
            client = clients.get(replica.name)
            if client is None:
                client = clients[replica.name] = Client(replica.address, timeout=10)
            try:
                run = client.start_run(self.agent, f"charge job {job}", request_key=f"job-{job}")
            except RPCError:
                assert time.monotonic() < deadline, f"job {job}: no replica took it"
                attempt += 1
                with self._cond:
                    self.retried += 1
                continue
            return str(run.run_id), replica.name

    def result(self) -> list[str]:
        for thread in self._threads:
            thread.join(180)
        assert not any(t.is_alive() for t in self._threads) and not self.errors, self.errors
        return self.run_ids


def ended_count(client: Client, run_ids: list[str]) -> int:
    going = in_flight(client)
    return sum(1 for run_id in run_ids if run_id not in going)


def owned_by(client: Client, name: str) -> set[str]:
    return {run_id for run_id, run in in_flight(client).items() if run.lease_owner == name}


def takeover_s(
    address: str, victim: str, owned: set[str], since: float, within_s: float, every_s: float
) -> float:
    """Seconds from ``since`` until each of ``owned`` was seen held by another replica (or ended)."""
    pending, last = set(owned), since
    deadline = time.monotonic() + within_s
    with Client(address, timeout=10) as client:
        while pending:
            going = in_flight(client)
            seen_at = time.time()
            for run_id in list(pending):
                run = going.get(run_id)
                if run is None or run.lease_owner not in ("", victim):
                    pending.discard(run_id)
                    last = seen_at
            assert time.monotonic() < deadline, f"not taken from {victim}: {sorted(pending)}"
            time.sleep(every_s)
    return last - since


def redis_up(replica: Replica) -> float:
    return replica.process.metrics().value("agentrt_redis_up")


@dataclass
class Figures:
    kill_takeovers: list[tuple[str, int, float]]  # (victim, its runs then, seconds)
    sigterm: tuple[str, int, float, float] | None = None  # (victim, runs, takeover s, exit s)
    host_away_s: float = 0.0
    redis_down_seen_s: float = 0.0
    redis_back_s: float = 0.0


def chaos(
    rng: random.Random,
    replicas: Replicas,
    pool: Pool,
    redis_server: RedisServer,
    feeder: Feeder,
    settings: Settings,
) -> Figures:
    """Each action in a seeded order, once a seeded number of writes more took effect (mid-batch:
    a batch's runs go in step, so counting ended runs would act after most of the batch)."""
    actions = ["kill -9 replica"] * KILLS + ["kill -9 tool host", "kill redis-server", "SIGTERM replica"]
    rng.shuffle(actions)
    batch = RUNS // (len(actions) + 1)
    figures = Figures(kill_takeovers=[])
    began = time.monotonic()
    for i, action in enumerate(actions):
        victim = rng.choice(replicas.live())
        if action == "SIGTERM replica":
            # A rolling update's surge: the new replica serves before the old one drains.
            heir = replicas.spawn(victim.slot)
            replicas.join(heir)
        writes_before = sum(charge_counts(pool.store).values())
        feeder.allow((i + 1) * batch)
        more = rng.randint(batch // 4, batch * WRITES // 2)
        poll(
            lambda n=writes_before + more: sum(charge_counts(pool.store).values()) >= n,
            f"{action}: {more} more writes never happened",
            within_s=120,
        )
        if action.endswith("replica"):
            with Client(replicas.other_than(victim.name).address, timeout=10) as client:
                poll(lambda c=client, v=victim: bool(owned_by(c, v.name)), f"{victim.name} owns no run", 30)
        target = victim.name if action.endswith("replica") else ""
        print(f"chaos {time.monotonic() - began:6.1f} s: {action} {target}")
        if action == "kill -9 replica":
            replicas.leave(victim)
            asker = replicas.other_than(victim.name)
            with Client(asker.address, timeout=10) as client:
                owned = owned_by(client, victim.name)
            assert owned, f"{victim.name} owns no run any more"
            victim.process.kill()
            killed_at = time.time()
            heir = replicas.spawn(victim.slot)
            took = takeover_s(
                asker.address,
                victim.name,
                owned,
                killed_at,
                within_s=settings.lease_ttl_s + 30,
                every_s=0.1,
            )
            replicas.join(heir)
            figures.kill_takeovers.append((victim.name, len(owned), took))
        elif action == "SIGTERM replica":
            replicas.leave(victim)
            asker = replicas.other_than(victim.name)
            with Client(asker.address, timeout=10) as client:
                owned = owned_by(client, victim.name)
            assert owned, f"{victim.name} owns no run any more"
            victim.process.process.send_signal(signal.SIGTERM)
            sigterm_at = time.time()
            took = takeover_s(asker.address, victim.name, owned, sigterm_at, within_s=20, every_s=0.02)
            code = victim.process.wait_exit(settings.grace_s + settings.rpc_grace_s + 15)
            exit_s = time.time() - sigterm_at
            assert code == 0, victim.process.stderr_text()[-3000:]
            figures.sigterm = (victim.name, len(owned), took, exit_s)
        elif action == "kill -9 tool host":
            figures.host_away_s = pool.kill_and_restart(rng.randrange(2))
        else:
            redis_server.kill()
            figures.redis_down_seen_s = poll(
                lambda: all(redis_up(r) == 0 for r in replicas.live()), "Redis down not seen", 20, 0.1
            )
            redis_server.start()
            figures.redis_back_s = poll(
                lambda: all(redis_up(r) == 1 for r in replicas.live()), "the fan-out never came back", 30, 0.1
            )
    feeder.allow(RUNS)
    return figures


def cross_replica_cancels(replicas: Replicas) -> list[float]:
    """Naps started over the replicas, each cancelled on a replica that does not own it: seconds
    from the CancelRun to the owner's run.cancelled."""
    live = replicas.live()
    naps: list[str] = []
    for i in range(CANCELS):
        with Client(live[i % len(live)].address, timeout=10) as client:
            naps.append(client.start_run("napper", f"nap {i}").run_id)
    latencies: list[float] = []
    for run_id in naps:
        with Client(live[0].address, timeout=10) as client:
            for event in client.stream_events(run_id, follow=True, timeout=60):
                if event_type(event) == "tool.started":
                    break
            owner = client.get_run(run_id).lease_owner
        with Client(replicas.other_than(owner).address, timeout=10) as client:
            asked_at = time.time()
            client.cancel_run(run_id, reason="asked elsewhere")
            events = [e for e in client.stream_events(run_id, follow=True, timeout=60) if e.seq]
        assert events[-1].run_ended.phase == run_pb2.RUN_PHASE_CANCELLED, [event_type(e) for e in events]
        cancelled = next(e for e in events if event_type(e) == "run.cancelled")
        latencies.append(cancelled.time.ToMilliseconds() / 1000 - asked_at)
    return latencies


def deltas_on_a_non_owner(
    replicas: Replicas, models: Models, server: RedisServer, prefix: str
) -> tuple[list[Any], list[Any]]:
    """A streamed answer followed on its owner and on another replica: both streams."""
    owner, other = replicas.live()[:2]
    with Client(owner.address, timeout=10) as client:
        run_id = client.start_run("streamer", "Where is A100?").run_id
    assert models.stream.paused.wait(30), "the streamed model call never came"
    with Client(other.address, timeout=10) as client:
        assert client.get_run(run_id).lease_owner == owner.name
    listening = redis.Redis(host="127.0.0.1", port=server.port).pubsub(ignore_subscribe_messages=True)
    spy = redis.Redis(host="127.0.0.1", port=server.port)
    try:
        listening.subscribe(f"{prefix}interest")
        followers = [Follower(owner.address, run_id), Follower(other.address, run_id)]
        for follower in followers:
            follower.start()
        channel = f"{prefix}run:{run_id}"
        poll(lambda: int(spy.pubsub_numsub(channel)[0][1]) == 2, "followers never subscribed", 20)
        # Both announced they listen, so the owner publishes the deltas rather than keeping them local.
        announced: set[str] = set()
        deadline = time.monotonic() + 20
        while len(announced) < 2:
            assert time.monotonic() < deadline, f"announcements: {announced}"
            message = listening.get_message(timeout=1)
            if message is not None and json.loads(message["data"])["n"] == run_id:
                announced.add(json.loads(message["data"])["o"])
    finally:
        listening.close()
        spy.close()
    models.stream.gate.set()
    on_owner, on_other = (f.result() for f in followers)
    return on_owner, on_other


@pytest.mark.timeout(600)
def test_runs_under_replica_tool_host_and_redis_kills_all_complete_with_every_write_once(
    tmp_path: Path, pg_url: str, pg_database: str, redis_server_binary: None
) -> None:
    began = time.monotonic()
    rng = random.Random(SEED)
    print(f"\nscale-out: seed {SEED} (SCALE_OUT_SEED={SEED} replays it), {RUNS} runs of {WRITES} writes")
    settings, deploy_values = deployed()
    migrate_as_the_deploy_job_does(pg_url)
    models = Models()
    pool = Pool(tmp_path, pg_database)
    redis_server = RedisServer(tmp_path / "redis")
    prefix = settings.redis.key_prefix
    with FakeModelServer(default=models.respond) as model_server, redis_server:
        model_url = f"{model_server.url}/v1"
        pool.start()
        redis_table = {**settings.redis.model_dump(exclude_defaults=True), "url": redis_server.url}

        replicas = Replicas(
            tmp_path,
            replica_env(
                pg_url, pool=pool, model_url=model_url, redis_table=redis_table, deploy=deploy_values
            ),
        )
        feeder = Feeder(replicas)
        try:
            for replica in [replicas.spawn(slot) for slot in range(REPLICAS)]:
                replicas.join(replica)
            print(
                f"scale-out: {REPLICAS} replicas and 2 tool hosts up after {time.monotonic() - began:.1f} s"
            )
            feeder.start()
            figures = chaos(rng, replicas, pool, redis_server, feeder, settings)
            run_ids = feeder.result()
            latencies = cross_replica_cancels(replicas)
            on_owner, on_other = deltas_on_a_non_owner(replicas, models, redis_server, prefix)
            reader = replicas.live()[0]
            with Client(reader.address, timeout=10) as client:
                poll(
                    lambda: ended_count(client, run_ids) == len(run_ids),
                    "runs still going",
                    within_s=240,
                    every_s=0.2,
                )
                logs = {run_id: list(client.stream_events(run_id, timeout=30)) for run_id in run_ids}
        finally:
            feeder.halt()
            replicas.close()
            pool.close()
    elapsed = time.monotonic() - began

    # Figures first, so a failing run still shows them.
    print(
        f"scale-out: runs started per replica {dict(feeder.started_on)}, starts sent again {feeder.retried}"
    )
    ttl = settings.lease_ttl_s
    for victim, owned, took in figures.kill_takeovers:
        print(
            f"kill -9 of {victim} (owning {owned} runs): taken over after {took:.2f} s (lease TTL {ttl:g} s)"
        )
    assert figures.sigterm is not None
    victim, owned, sigterm_took, exit_s = figures.sigterm
    print(
        f"SIGTERM of {victim} (owning {owned} runs): taken over after {sigterm_took * 1000:.0f} ms "
        f"(poll {settings.poll_interval_s:g} s); exit 0 after {exit_s:.2f} s"
    )
    print(f"kill -9 of a tool host: restarted on its port {figures.host_away_s:.2f} s later")
    print(
        f"kill of redis-server: every replica fell back within {figures.redis_down_seen_s:.2f} s; "
        f"fan-out back {figures.redis_back_s:.2f} s after the restart"
    )
    median = statistics.median(latencies)
    print(
        f"cross-replica cancel, median of {len(latencies)}: {median * 1000:.0f} ms "
        f"({', '.join(f'{s * 1000:.0f}' for s in latencies)} ms)"
    )
    print(
        f"deltas: the owner's follower saw {len(deltas(on_owner))}, "
        f"the other replica's {len(deltas(on_other))}"
    )
    print(f"scale-out: {len(run_ids)} runs in {elapsed:.0f} s")

    phases = {run_id: events[-1].run_ended for run_id, events in logs.items()}
    others = {
        r: (run_pb2.RunPhase.Name(e.phase), e.reason)
        for r, e in phases.items()
        if e.phase != run_pb2.RUN_PHASE_COMPLETED
    }
    assert len(run_ids) == len(set(run_ids)) == RUNS
    assert not others, others
    keys: set[str] = set()
    for run_id, events in logs.items():
        stored = [e.seq for e in events if e.seq]
        assert stored == list(range(1, len(stored) + 1)), run_id  # no gap, no duplicate
        keys |= {
            e.tool_started.idempotency_key
            for e in events
            if e.HasField("tool_started") and e.tool_started.tool == "pool.charge"
        }
    counts = charge_counts(pool.store)
    print(f"writes: {len(keys)} keys, {sum(counts.values())} raw executions in the plugin's store")
    assert {k: n for k, n in counts.items() if n != 1} == {}  # 0 duplicate effects
    assert counts.keys() == keys and len(keys) == RUNS * WRITES  # each write of each run, once

    assert deltas(on_other) and deltas(on_other) == deltas(on_owner)
    assert persisted(on_other) == persisted(on_owner)
    assert median < 0.2, latencies
    for victim, _, took in figures.kill_takeovers:
        assert took <= ttl + 1.0, (victim, took)
    assert sigterm_took < 1.0, sigterm_took
