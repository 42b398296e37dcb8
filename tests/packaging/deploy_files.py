"""The deploy/ files as tests read them: paths, Dockerfile and unit parsers, rendered kustomizations.

Shared by tests/packaging/test_deploy.py (validation) and test_deploy_run.py (the deploy files,
run), and meant for any test that runs with the files deploy/ mounts (DESIGN R10.5): render a
config with :func:`mounted` and :data:`ETC`, as test_deploy_run.py does.
"""

from __future__ import annotations

import copy
import json
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from agentrt.server.config import Settings

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


def tool(name: str) -> str:
    found = shutil.which(name, path=str(BIN)) or shutil.which(name)
    assert found, f"{name} is not installed: make .venv/.installed (root pyproject dev extras)"
    return found


def port(address: str) -> int:
    return int(address.rpartition(":")[2])


def config_files(settings: Settings) -> list[str]:
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


def normalize(flags: list[str]) -> list[str]:
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


def dockerfile_instructions(path: Path) -> list[tuple[str, str]]:
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


def stage(path: Path, name: str) -> list[tuple[str, str]]:
    """The instructions of the stage ``FROM ... AS name``."""
    stage: list[tuple[str, str]] | None = None
    for instruction, args in dockerfile_instructions(path):
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


def only(stage: list[tuple[str, str]], instruction: str) -> str:
    found = [args for name, args in stage if name == instruction]
    assert len(found) == 1, f"{instruction}: {found}"
    return found[0]


def toolhost_flags_by_place() -> dict[str, list[str]]:
    dockerfile = json.loads(only(stage(DOCKERFILES[1], "toolhost"), "CMD"))
    compose = yaml.safe_load(COMPOSE.read_text())
    base = k8s_objects("base")
    (toolhost,) = [
        o for o in base if o["kind"] == "Deployment" and o["metadata"]["name"] == "agentrt-toolhost"
    ]
    toolhost_unit = unit(SYSTEMD / "agentrt-toolhost@.service")
    exec_start = shlex.split(toolhost_unit["Service"]["ExecStart"][0])
    assert exec_start[:2] == ["/opt/agentrt/bin/agentrt", "toolhost"]
    return {
        "toolhost.Dockerfile CMD": normalize(dockerfile),
        "compose toolhost-1": normalize(compose["services"]["toolhost-1"]["command"]),
        "compose toolhost-2": normalize(compose["services"]["toolhost-2"]["command"]),
        "k8s agentrt-toolhost": normalize(toolhost["spec"]["template"]["spec"]["containers"][0]["args"]),
        "systemd agentrt-toolhost@": normalize(exec_start[2:]),
    }


def canonical_toolhost_flags() -> list[str]:
    return normalize(json.loads(only(stage(DOCKERFILES[1], "toolhost"), "CMD")))


def healthcheck(stage: list[tuple[str, str]]) -> list[str]:
    """The exec-form command of a stage's HEALTHCHECK."""
    options, cmd, command = only(stage, "HEALTHCHECK").partition("CMD ")
    assert cmd and all(o.startswith("--") for o in options.split())
    health: list[str] = json.loads(command)
    assert health[:2] == ["agentrt", "health"]
    return health


def mounted(compose: dict[str, Any], service: str, secrets: Path, etc: Path) -> Path:
    """An /etc/agentrt tree for ``service``: each compose volume subpath mounted where compose does."""
    etc.mkdir(parents=True)
    for volume in compose["services"][service]["volumes"]:
        if volume.get("source") == "agentrt-secrets":
            assert volume["target"].startswith(ETC) and volume["read_only"] is True
            (etc / volume["target"].removeprefix(ETC)).symlink_to(secrets / volume["volume"]["subpath"])
    return etc


def kustomize(tree: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [tool("kubectl"), "kustomize", str(tree)], capture_output=True, text=True, timeout=120
    )


_RENDERED: dict[str, list[dict[str, Any]]] = {}


def k8s_objects(tree: str) -> list[dict[str, Any]]:
    if tree not in _RENDERED:
        done = kustomize(K8S / tree)
        assert done.returncode == 0, done.stderr
        _RENDERED[tree] = [d for d in yaml.safe_load_all(done.stdout) if d]
    return copy.deepcopy(_RENDERED[tree])


def find(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (found,) = [o for o in objects if o["kind"] == kind and o["metadata"]["name"].startswith(name)]
    return found


def containers(objects: list[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any], dict[str, Any]]]:
    for o in objects:
        if o["kind"] in ("Deployment", "Job"):
            pod = o["spec"]["template"]["spec"]
            for container in pod["containers"]:
                yield o["metadata"]["name"], pod, container


def probe_command(container: dict[str, Any], kind: str) -> list[str]:
    command: list[str] = container[kind]["exec"]["command"]
    return command


def unit(path: Path) -> dict[str, dict[str, list[str]]]:
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


def retarget(probe: list[str], address: str, etc: Path) -> list[str]:
    """A healthcheck command aimed at a test process: its address, the mounted files' place."""
    out = [a.replace(ETC, f"{etc}/") for a in probe]
    out[out.index("--target") + 1] = address
    return out


def make_secrets(root: Path) -> Path:
    """Run deploy/compose/init-secrets.sh into ``root`` (twice: the second run changes nothing)."""
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
