"""The files of deploy/, read as what they are (nothing here can run a container): several
gateways each an instance of its own on one archive and one Redis, never beyond loopback without
a token, health checks on /healthz, a proxy in front of the API and the Telegram webhook, time
to hand sessions over on SIGTERM, settings that exist, and no secret in the repository."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml  # type: ignore[import-untyped]
from sqlalchemy.engine import make_url

from adapters.http.binding import is_loopback
from adapters.http.routes import ROUTES
from adapters.http.server import SHUTDOWN_TIMEOUT
from gateway.agents.claude_process import KILL_GRACE_SECONDS
from gateway.health import CHECK_TIMEOUT_SECONDS
from gateway.settings import Settings

ROOT = Path(__file__).parents[1]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "k8s"
SETTINGS = {f"AGENVOY_{name.upper()}" for name in Settings.model_fields}
# What a gateway may take to stop after SIGTERM: its HTTP server's shutdown, an agent process's
# kill grace, and room for the front-ends, the leases and the stores.
STOP_BUDGET = SHUTDOWN_TIMEOUT + KILL_GRACE_SECONDS + 10
INTERPOLATION = re.compile(r"\$\{(\w+)(?::?[-?][^}]*)?\}")
SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSWORD|API_KEY")
# Shapes of real credentials: a Telegram bot token, an OpenAI key, an issued API token, a
# Discord bot token.
CREDENTIAL = re.compile(
    r"\d{6,}:[\w-]{30,}|sk-[\w-]{20,}|agv_[\w-]{20,}|[\w-]{24,}\.[\w-]{6}\.[\w-]{27,}"
)


def resolved(value: str) -> str:
    """A compose value with each ${VAR...} written as <VAR>, so that it parses as a URL."""
    return INTERPOLATION.sub(lambda m: f"<{m.group(1)}>", value)


def seconds(value: str | int) -> float:
    """30, "30s", "1m30s", "500ms" → seconds."""
    if isinstance(value, int):
        return float(value)
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|s|m|h)", value)
    assert parts and "".join(n + u for n, u in parts) == value, value
    return sum(float(n) * units[u] for n, u in parts)


# -- docker compose --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    return loaded


def gateways(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        name: service
        for name, service in compose["services"].items()
        if service.get("build", {}).get("dockerfile") == "deploy/Dockerfile"
    }


def mounts(service: dict[str, Any]) -> dict[str, str]:
    """A service's volumes: where each is mounted → its source."""
    return {v.split(":")[1]: v.split(":")[0] for v in service.get("volumes", [])}


def test_compose_runs_two_gateways_each_an_instance_of_its_own(compose: dict[str, Any]) -> None:
    found = gateways(compose)
    assert len(found) >= 2
    services, volumes = compose["services"], compose["volumes"]
    ids, homes, databases, kvs = set(), set(), set(), set()
    for name, gateway in found.items():
        env = gateway["environment"]
        ids.add(env["AGENVOY_INSTANCE_ID"])
        home = mounts(gateway)[env["AGENVOY_HOME"]]
        assert home in volumes, name
        homes.add(home)
        database = make_url(resolved(env["AGENVOY_DATABASE_URL"]))
        assert database.get_backend_name() == "postgresql" and database.host in services
        databases.add(database.render_as_string(hide_password=False))
        kv = urlsplit(resolved(env["AGENVOY_KV_URL"]))
        assert kv.scheme == "redis" and kv.hostname in services
        kvs.add(kv.geturl())
        for store in (database.host, kv.hostname):
            assert gateway["depends_on"][store] == {"condition": "service_healthy"}
            assert "healthcheck" in services[store]
    # An id and a home each, one archive and one Redis for all.
    assert len(ids) == len(homes) == len(found) and "" not in ids
    assert len(databases) == len(kvs) == 1


def test_compose_gateways_beyond_loopback_require_a_token(compose: dict[str, Any]) -> None:
    for name, gateway in gateways(compose).items():
        env = gateway["environment"]
        assert not is_loopback(env["AGENVOY_HTTP_HOST"]), "the proxy must reach it"
        # Required at `docker compose up`, from deploy/.env: never a literal, never a default.
        assert re.fullmatch(r"\$\{AGENVOY_API_TOKEN:\?[^}]+\}", env["AGENVOY_API_TOKEN"]), name
        # Clients name the public host; the proxy's health checks name the gateway itself.
        allowed = env["AGENVOY_HTTP_ALLOWED_HOSTS"].split(",")
        assert "${PUBLIC_HOST}" in allowed and name in allowed


def test_compose_health_checks_and_shutdown(compose: dict[str, Any]) -> None:
    for name, gateway in gateways(compose).items():
        check = gateway["healthcheck"]
        command = " ".join(check["test"])
        port = gateway["environment"]["AGENVOY_HTTP_PORT"]
        assert f"127.0.0.1:{port}/healthz" in command, name
        assert seconds(check["timeout"]) > CHECK_TIMEOUT_SECONDS
        assert gateway.get("stop_signal", "SIGTERM") == "SIGTERM"
        assert seconds(gateway["stop_grace_period"]) >= STOP_BUDGET, name
    services = compose["services"]
    # Only the proxy is reachable from outside; the database and Redis not even by the proxy.
    assert [name for name, service in services.items() if "ports" in service] == ["proxy"]
    assert compose["networks"]["backend"]["internal"] is True
    for store in ("postgres", "redis"):
        assert services[store]["networks"] == ["backend"]


def test_compose_gives_each_gateway_its_discord_shards(compose: dict[str, Any]) -> None:
    found = gateways(compose).values()
    counts = {int(g["environment"]["AGENVOY_DISCORD_SHARD_COUNT"]) for g in found}
    assert len(counts) == 1
    shards = [Settings.id_set(g["environment"]["AGENVOY_DISCORD_SHARD_IDS"]) for g in found]
    assert sum(len(s) for s in shards) == len(frozenset().union(*shards))  # disjoint
    assert frozenset().union(*shards) == set(range(counts.pop()))


def caddy_lines(text: str) -> list[list[str]]:
    """The Caddyfile's lines as tokens, comments and blank lines left out."""
    stripped = (line.strip() for line in text.splitlines())
    return [line.split() for line in stripped if line and not line.startswith("#")]


def covered(path: str, patterns: list[str]) -> bool:
    return any(path.startswith(p[:-1]) if p.endswith("*") else path == p for p in patterns)


def test_the_proxy_routes_the_api_and_the_webhook_to_ready_gateways(
    compose: dict[str, Any],
) -> None:
    proxy = compose["services"]["proxy"]
    config = DEPLOY / mounts(proxy)["/etc/caddy/Caddyfile"]
    lines = caddy_lines(config.read_text())
    assert lines[0] == ["{$PUBLIC_HOST}", "{"]  # the name deploy/.env gives, with TLS
    assert proxy["environment"]["PUBLIC_HOST"].startswith("${PUBLIC_HOST:?")
    matchers = {line[0]: line[2:] for line in lines if line[0].startswith("@")}
    proxied = [line for line in lines if line[0] == "reverse_proxy"]
    assert len(proxied) == 1
    _, *upstreams, brace = proxied[0]
    handle = lines[lines.index(proxied[0]) - 1]
    assert handle[0] == "handle" and brace == "{"
    paths = matchers[handle[1]]

    found = gateways(compose)
    assert set(upstreams) == {
        f"{name}:{gw['environment']['AGENVOY_HTTP_PORT']}" for name, gw in found.items()
    }
    # Every route of the API but the operator's own, and the Telegram webhook's path.
    for route in ROUTES:
        assert covered(route.path, paths) == (route.path not in ("/healthz", "/metrics")), route
    for gateway in found.values():
        webhook = urlsplit(resolved(gateway["environment"]["AGENVOY_TELEGRAM_WEBHOOK_URL"]))
        assert webhook.scheme == "https" and webhook.hostname == "<public_host>"
        assert covered(webhook.path, paths)
    options = {line[0]: line[1:] for line in lines}
    assert options["health_uri"] == ["/healthz"]
    assert seconds(options["health_timeout"][0]) > CHECK_TIMEOUT_SECONDS
    assert options["flush_interval"] == ["-1"]  # event streams


# -- Kubernetes --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def k8s() -> dict[str, dict[str, Any]]:
    """Every object of deploy/k8s by kind (one of each)."""
    found: dict[str, dict[str, Any]] = {}
    for path in sorted(K8S.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            assert doc["kind"] not in found, f"two {doc['kind']}s"
            found[doc["kind"]] = doc | {"file": path.name}
    return found


def pod_of(k8s: dict[str, dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    spec = k8s["Deployment"]["spec"]["template"]["spec"]
    return spec, spec["containers"][0]


def test_kustomization_applies_everything_but_the_secret(k8s: dict[str, dict[str, Any]]) -> None:
    listed = set(k8s["Kustomization"]["resources"])
    wanted = {"Deployment", "Service", "ConfigMap", "PodDisruptionBudget"}
    assert listed == {k8s[kind]["file"] for kind in wanted}
    assert k8s["Secret"]["file"] == "secret.example.yaml"


def test_k8s_pods_are_instances_of_their_own(k8s: dict[str, dict[str, Any]]) -> None:
    deployment = k8s["Deployment"]
    assert deployment["spec"]["replicas"] >= 2
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    spec, container = pod_of(k8s)
    env = {e["name"]: e for e in container["env"]}
    instance = env["AGENVOY_INSTANCE_ID"]["valueFrom"]["fieldRef"]["fieldPath"]
    assert instance == "metadata.name"  # unique per pod
    home = env["AGENVOY_HOME"]["value"]
    volume = next(m["name"] for m in container["volumeMounts"] if m["mountPath"] == home)
    source = next(v for v in spec["volumes"] if v["name"] == volume)
    assert "emptyDir" in source or "persistentVolumeClaim" in source
    # Settings come from the ConfigMap and the Secret these files define.
    sources = {kind: ref["name"] for e in container["envFrom"] for kind, ref in e.items()}
    assert sources == {
        "configMapRef": k8s["ConfigMap"]["metadata"]["name"],
        "secretRef": k8s["Secret"]["metadata"]["name"],
    }
    assert not any(ref.get("optional") for e in container["envFrom"] for ref in e.values())


def test_k8s_pods_beyond_loopback_have_a_token(k8s: dict[str, dict[str, Any]]) -> None:
    config, secret = k8s["ConfigMap"]["data"], k8s["Secret"]["stringData"]
    assert not is_loopback(config["AGENVOY_HTTP_HOST"])
    assert "AGENVOY_API_TOKEN" in secret
    for name in ("AGENVOY_DATABASE_URL", "AGENVOY_KV_URL"):
        assert name in secret and name not in config  # their URLs hold passwords
    _, container = pod_of(k8s)
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports["http"] == int(config["AGENVOY_HTTP_PORT"])
    service = k8s["Service"]["spec"]
    assert service["ports"][0]["targetPort"] == "http"


def test_k8s_probes_grace_and_disruption_budget(k8s: dict[str, dict[str, Any]]) -> None:
    spec, container = pod_of(k8s)
    probes = {kind: container[kind] for kind in ("startupProbe", "readinessProbe", "livenessProbe")}
    for kind, probe in probes.items():
        assert probe["httpGet"] == {"path": "/healthz", "port": "http"}, kind
        assert probe["timeoutSeconds"] > CHECK_TIMEOUT_SECONDS, kind

    def patience(probe: dict[str, Any]) -> int:
        return int(probe["periodSeconds"] * probe["failureThreshold"])

    # A database outage takes pods out of the Service long before any is restarted.
    assert patience(probes["livenessProbe"]) >= 4 * patience(probes["readinessProbe"])
    pre_stop = container["lifecycle"]["preStop"]["exec"]["command"]
    assert pre_stop[0] == "sleep"
    assert spec["terminationGracePeriodSeconds"] >= int(pre_stop[1]) + STOP_BUDGET
    labels = k8s["Deployment"]["spec"]["template"]["metadata"]["labels"]
    budget = k8s["PodDisruptionBudget"]["spec"]
    assert budget["selector"]["matchLabels"].items() <= labels.items()
    assert 1 <= budget["minAvailable"] < k8s["Deployment"]["spec"]["replicas"]
    assert k8s["Service"]["spec"]["selector"].items() <= labels.items()


# -- the image and the systemd unit --------------------------------------------------------------


def dockerfile() -> list[tuple[str, str]]:
    """(instruction, arguments), continuation lines joined."""
    text = re.sub(r"\\\n\s*", " ", (DEPLOY / "Dockerfile").read_text())
    lines = [line.strip() for line in text.splitlines()]
    return [
        (line.split(None, 1)[0], line.split(None, 1)[1])
        for line in lines
        if line and line[0] != "#"
    ]


def test_the_image_runs_unprivileged_with_its_home_and_a_health_check(
    k8s: dict[str, dict[str, Any]],
) -> None:
    steps = dockerfile()
    found = {instruction: args for instruction, args in steps}
    env = dict(re.findall(r"(AGENVOY_\w+)=(\S+)", " ".join(a for i, a in steps if i == "ENV")))
    uid = found["USER"].split(":")[0]
    assert uid.isdigit() and uid != "0"
    assert int(uid) == pod_of(k8s)[0]["securityContext"]["runAsUser"]
    assert found["VOLUME"] == f'["{env["AGENVOY_HOME"]}"]'
    runs = " ".join(args for instruction, args in steps if instruction == "RUN")
    assert f"chown agenvoy:agenvoy {env['AGENVOY_HOME']}" in runs
    assert found["EXPOSE"] == env["AGENVOY_HTTP_PORT"]
    check = found["HEALTHCHECK"]
    assert "/healthz" in check
    timeout = re.search(r"--timeout=(\w+)", check)
    assert timeout is not None and seconds(timeout[1]) > CHECK_TIMEOUT_SECONDS
    assert found["CMD"] == '["agenvoy", "run"]'
    # Everything out of the build context but what the image is made of (no .env, no deploy/).
    lines = (DEPLOY / "Dockerfile.dockerignore").read_text().splitlines()
    ignore = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    assert ignore[0] == "**"
    allowed = {line[1:] for line in ignore if line.startswith("!")}
    assert allowed == {"pyproject.toml", "README.md", "gateway/", "adapters/"}


def systemd_unit() -> dict[str, list[tuple[str, str]]]:
    """Sections → (key, value) in order; a key may repeat, as systemd allows."""
    sections: dict[str, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] = []
    for raw in (DEPLOY / "agenvoy.service").read_text().splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            current = sections.setdefault(line.strip("[]"), [])
        else:
            key, _, value = line.partition("=")
            current.append((key.strip(), value.strip()))
    return sections


def test_the_systemd_unit_stops_gently_and_writes_only_its_home() -> None:
    service = systemd_unit()["Service"]
    one = dict(service)
    assert one["ExecStart"].endswith("/agenvoy run")
    assert one["User"] not in ("", "root")
    assert one["KillSignal"] == "SIGTERM" and one["KillMode"] == "mixed"
    assert seconds(one["TimeoutStopSec"] + "s") >= STOP_BUDGET
    env = dict(v.split("=", 1) for k, v in service if k == "Environment")
    assert env["AGENVOY_HOME"] == f"/var/lib/{one['StateDirectory']}"
    assert env["AGENVOY_HOME"] in one["ReadWritePaths"].split()
    assert one["ProtectSystem"] == "strict" and one["EnvironmentFile"]


# -- what every deploy file shares -------------------------------------------------------------


def deploy_files() -> list[Path]:
    return sorted(p for p in DEPLOY.rglob("*") if p.is_file())


def test_every_setting_named_in_deploy_exists() -> None:
    """A renamed or removed setting fails here rather than being silently ignored."""
    for path in deploy_files():
        named = set(re.findall(r"\bAGENVOY_[A-Z0-9_]+\b", path.read_text()))
        assert named <= SETTINGS, f"{path.relative_to(ROOT)}: {sorted(named - SETTINGS)}"
        assert "AGENVOY_CRASH_AT" not in named  # a test-only setting


def test_no_secret_is_committed(compose: dict[str, Any], k8s: dict[str, dict[str, Any]]) -> None:
    for path in deploy_files():
        assert not CREDENTIAL.search(path.read_text()), path
    example = dict(
        line.split("=", 1)
        for line in (DEPLOY / ".env.example").read_text().splitlines()
        if line and not line.startswith("#")
    )
    assert {"PUBLIC_HOST", "POSTGRES_PASSWORD", "REDIS_PASSWORD", "AGENVOY_API_TOKEN"} <= set(
        example
    )
    # Empty, so that compose refuses to start until each one is filled in.
    assert all(value == "" for name, value in example.items() if SECRET_NAME.search(name))
    for service in compose["services"].values():
        for name, value in service.get("environment", {}).items():
            if SECRET_NAME.search(name):
                assert INTERPOLATION.fullmatch(str(value)), name
    for name, value in k8s["Secret"]["stringData"].items():
        assert value == "" or "REPLACE_ME" in value, name
    for url in ("AGENVOY_DATABASE_URL", "AGENVOY_KV_URL"):
        value = compose["services"]["gateway-1"]["environment"][url]
        password = urlsplit(resolved(value)).password
        assert password is not None and password.startswith("<"), url


def test_the_real_secret_files_are_ignored_by_git() -> None:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    for path in ("deploy/.env", "deploy/k8s/secret.yaml"):
        ignored = subprocess.run(["git", "check-ignore", "-q", path], cwd=ROOT, check=False)
        assert ignored.returncode == 0, f"{path} is not in .gitignore"
