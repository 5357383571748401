"""The deployment files parse, wire only settings notifier reads, and carry what they must.

No container engine runs here; deploy/check-image runs the image's commands for real.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

import notifier

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"


def settings_notifier_reads() -> set[str]:
    package = Path(notifier.__file__).parent
    return {
        name
        for source in package.rglob("*.py")
        for name in re.findall(r'"(NOTIFIER_[A-Z_]+)"', source.read_text())
    }


def compose() -> dict[str, Any]:
    loaded = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    assert isinstance(loaded, dict)
    return loaded


def manifests() -> list[dict[str, Any]]:
    return [
        doc
        for path in sorted((DEPLOY / "k8s").glob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text())
        if doc
    ]


def of_kind(kind: str, component: str | None = None) -> list[dict[str, Any]]:
    return [
        m
        for m in manifests()
        if m["kind"] == kind
        and (
            component is None
            or m["metadata"]["labels"].get("app.kubernetes.io/component") == component
        )
    ]


def test_compose_runs_the_whole_stack() -> None:
    services = compose()["services"]
    assert set(services) == {"postgres", "migrate", "api", "worker", "jaeger", "mailpit"}
    [migrate] = services["migrate"]["command"]
    assert migrate.startswith("notifier migrate &&") and "--key-from-env CLIENT_API_KEY" in migrate
    assert services["worker"]["deploy"]["replicas"] == 2
    assert services["api"]["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    assert {"16686:16686", "4317:4317", "4318:4318"} <= set(services["jaeger"]["ports"])
    assert "8025:8025" in services["mailpit"]["ports"]


@pytest.mark.parametrize("service", ["migrate", "api", "worker"])
def test_compose_services_set_only_settings_notifier_reads(service: str) -> None:
    env = compose()["services"][service]["environment"]
    unknown = {k for k in env if k.startswith("NOTIFIER_")} - settings_notifier_reads()
    assert not unknown
    # CLIENT_API_KEY is read by the migrate command line (`--key-from-env`), not as a setting.
    assert all(k.startswith(("NOTIFIER_", "OTEL_")) or k == "CLIENT_API_KEY" for k in env)
    assert env["NOTIFIER_SMTP_HOST"] == "mailpit"
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"].startswith("http://jaeger:4318")


def test_kubernetes_settings_are_ones_notifier_reads() -> None:
    keys: set[str] = set()
    for m in of_kind("ConfigMap") + of_kind("Secret"):
        keys |= set(m.get("data", {})) | set(m.get("stringData", {}))
    # Read by the migration Job's command line, not as settings.
    job_only = {"MIGRATE_DATABASE_URL", "CLIENT_API_KEY"}
    unknown = {k for k in keys if not k.startswith("OTEL_")} - settings_notifier_reads() - job_only
    assert not unknown
    assert {"NOTIFIER_DATABASE_URL", "NOTIFIER_TOKEN_SECRET"} <= keys
    [job] = of_kind("Job")
    [container] = job["spec"]["template"]["spec"]["containers"]
    command = " ".join(container["args"])
    assert all(name in command for name in job_only)


def test_compose_publishes_the_internal_api_on_loopback_only() -> None:
    ports = compose()["services"]["api"]["ports"]
    assert ports == ["127.0.0.1:8000:8000", "8001:8001"]


def test_kubernetes_exposes_the_public_pages_through_a_service_of_their_own() -> None:
    services = {s["metadata"]["name"]: s for s in of_kind("Service")}
    assert services["notifier-public"]["spec"]["ports"][0]["targetPort"] == "public"
    assert services["notifier-api"]["spec"]["ports"][0]["targetPort"] == "http"


def test_the_migration_job_grants_the_runtime_role_and_registers_the_client_key() -> None:
    [job] = of_kind("Job")
    [container] = job["spec"]["template"]["spec"]["containers"]
    command = " ".join(container["args"])
    assert "notifier grants notifier_runtime" in command
    assert "notifier keys create app" in command


def test_api_deployment_probes_readiness_and_liveness() -> None:
    [api] = of_kind("Deployment", "api")
    [container] = api["spec"]["template"]["spec"]["containers"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["resources"]["requests"]
    for service in of_kind("Service", "api"):
        assert service["spec"]["selector"] == api["spec"]["selector"]["matchLabels"]


def test_worker_grace_period_outlasts_its_shutdown_grace_and_data_timeout() -> None:
    [config] = of_kind("ConfigMap")
    grace = float(config["data"]["NOTIFIER_SHUTDOWN_GRACE"])
    data_timeout = float(config["data"]["NOTIFIER_SMTP_DATA_TIMEOUT"])
    [worker] = of_kind("Deployment", "worker")
    assert (
        worker["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] > grace + data_timeout
    )
    [container] = worker["spec"]["template"]["spec"]["containers"]
    assert container["resources"]["requests"]


def test_workers_have_a_disruption_budget() -> None:
    [budget] = of_kind("PodDisruptionBudget", "worker")
    [worker] = of_kind("Deployment", "worker")
    assert budget["spec"]["selector"]["matchLabels"] == worker["spec"]["selector"]["matchLabels"]
    assert budget["spec"]["minAvailable"] >= 1


def test_migrations_run_as_a_job() -> None:
    [job] = of_kind("Job", "migrate")
    [container] = job["spec"]["template"]["spec"]["containers"]
    [command] = container["args"]
    assert command.startswith('NOTIFIER_DATABASE_URL="$MIGRATE_DATABASE_URL" notifier migrate &&')


def test_every_pod_runs_as_non_root() -> None:
    for m in of_kind("Deployment") + of_kind("Job"):
        assert m["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"] is True


def test_dockerfile_is_multi_stage_non_root_with_notifier_as_entrypoint() -> None:
    text = (DEPLOY / "Dockerfile").read_text()
    stages = re.findall(r"^FROM\s+(\S+)", text, re.MULTILINE)
    assert len(stages) == 2
    final = text.split("\nFROM ", 2)[2]
    assert 'ENTRYPOINT ["notifier"]' in final
    assert re.search(r"^USER\s+\d+", final, re.MULTILINE)
    assert not re.search(r"apt-get|gcc|build-essential", final)


def test_check_image_runs_the_dockerfiles_own_commands() -> None:
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    script = (DEPLOY / "check-image").read_text()
    assert "pip wheel --no-cache-dir --no-deps --wheel-dir /wheels ." in dockerfile
    assert "wheel --quiet --no-cache-dir --no-deps --wheel-dir" in script
    assert "pip install --no-cache-dir /wheels/*.whl" in dockerfile
