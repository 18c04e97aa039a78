"""The README's cluster section, followed as written, against the real PostgreSQL: the same
processes the compose file runs (the one-shot migration, the API, two workers, here on `interp`),
a distributed job shared by both workers through one Optuna study per bucket, and the bundle an
engine gets. Its winners must be published exactly once, and each worker must have finished trials
in each study it worked on.

How the README and this test stay in sync: the test reads the fenced block between the
`cluster-commands` markers of README.md and runs every line of it in order, through bash, with only
the substitutions in CLUSTER_VALUES (what is the cluster's own: the two secrets, host names and port,
and the arch, since CI has no gfx950). A line ending in `&` is a long-running process; any other line
must exit 0. The job status line is repeated until the job ends (the README says "until").
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any, Iterator

import pytest
from sqlalchemy import select
from sqlalchemy.engine import make_url

from db.models import Job, JobParticipant, KernelConfig, TrialResult
from db.session import Database
from tests.db.fixtures import _pg_connect
from tests.service.procs import REPO, free_port

README = REPO / "README.md"
BEGIN, END = "<!-- cluster-commands: begin", "<!-- cluster-commands: end -->"


def readme_block() -> list[str]:
    text = README.read_text()
    assert BEGIN in text and END in text, "README.md lost its cluster-commands markers"
    section = text[text.index(BEGIN):text.index(END)]
    m = re.search(r"```bash\n(.*?)```", section, re.S)
    assert m, "no bash block between the cluster-commands markers"
    return [ln.strip() for ln in m.group(1).splitlines() if ln.strip() and not ln.strip().startswith("#")]


@pytest.fixture
def pg_url(pg_database: str) -> Iterator[str]:
    """A fresh schema of the session's PostgreSQL database, dropped after the test."""
    schema = f"t_{uuid.uuid4().hex[:12]}"
    conn = _pg_connect(make_url(pg_database).database)
    conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield make_url(pg_database).update_query_dict({"options": f"-csearch_path={schema}"}).render_as_string(
            hide_password=False)
    finally:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        conn.close()


class Cluster:
    """Runs the README's lines: exports into an environment, `&` lines as processes, others to exit 0."""

    def __init__(self, env: dict[str, str], subst: list[tuple[str, str]], secrets: dict[str, str], logs: Path) -> None:
        self.env, self.subst, self.secrets, self.logs = env, subst, secrets, logs
        self.procs: list[tuple[str, subprocess.Popen[bytes]]] = []
        self.ran: list[str] = []

    def line(self, raw: str) -> str:
        for old, new in self.subst:
            raw = raw.replace(old, new)
        return raw

    def export(self, line: str) -> None:
        name, _, value = line[len("export "):].partition("=")
        value = value.split("#")[0].strip()
        # The cluster's secrets are ours; any other export is taken as written.
        self.env[name] = self.secrets.get(name, value)

    def run(self, line: str, timeout: float = 120) -> str:
        self.ran.append(line)
        r = subprocess.run(["bash", "-c", line], env=self.env, cwd=self.logs, capture_output=True, text=True, timeout=timeout)
        assert r.returncode == 0, f"{line!r} exited {r.returncode}:\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
        return r.stdout

    def start(self, line: str) -> None:
        self.ran.append(line)
        cmd = line[:-1].strip()
        log = open(self.logs / f"proc{len(self.procs)}.log", "wb")
        p = subprocess.Popen(["bash", "-c", f"exec {cmd}"], env=self.env, cwd=self.logs, stdout=log,
                             stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append((cmd, p))

    def log_text(self) -> str:
        return "\n".join(f"== {cmd}\n" + (self.logs / f"proc{i}.log").read_text()[-3000:]
                         for i, (cmd, _) in enumerate(self.procs))

    def stop(self) -> list[int | None]:
        for _, p in self.procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        rcs = []
        for _, p in self.procs:
            try:
                rcs.append(p.wait(20))
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                rcs.append(p.wait(5))
        return rcs


def wait_healthy(c: Cluster, url: str) -> None:
    import httpx

    end = time.monotonic() + 60
    while time.monotonic() < end:
        for cmd, p in c.procs:
            assert p.poll() is None, f"{cmd} exited {p.returncode}:\n{c.log_text()}"
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"the API did not come up:\n{c.log_text()}")


def test_readme_cluster_section_runs_a_distributed_job_on_two_workers(pg_url: str, tmp_path: Path) -> None:
    lines = readme_block()
    port = free_port()
    api = f"127.0.0.1:{port}"
    token = f"tok-{uuid.uuid4().hex}"
    # The cluster's own values (see the module docstring); nothing else in the block is changed.
    subst = [("--host 0.0.0.0 --port 8000", f"--host 127.0.0.1 --port {port}"), ("api.internal:8000", api),
             ("gfx950", "interp")]
    secrets = {"KVTUNE_DATABASE_URL": pg_url, "KVTUNE_API_TOKEN": token}
    env = {k: v for k, v in os.environ.items() if not k.startswith("KVTUNE_") or k == "KVTUNE_CACHE_DIR"}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"  # the venv's `kvtune`
    env["PYTHONPATH"] = f"{REPO}{os.pathsep}{env.get('PYTHONPATH', '')}"
    c = Cluster(env, subst, secrets, tmp_path)

    exported = [ln for ln in lines if ln.startswith("export ")]
    assert {ln.split("=")[0][len("export "):] for ln in exported} >= set(secrets), "the README must export both secrets"
    job: dict[str, Any] | None = None
    bundle: dict[str, Any] | None = None
    t0 = time.monotonic()
    try:
        for raw in lines:
            line = c.line(raw)
            if line.startswith("export "):
                c.export(line)
            elif line.endswith("&"):
                c.start(line)
                if " serve " in line:
                    wait_healthy(c, f"http://{api}")
            elif "/v1/tune" in line:
                job = json.loads(c.run(line))
                assert job["status"] == "queued" and job["distributed"] is True and job["id"] == 1
            elif re.search(r"/v1/jobs/\d+$", line):
                # A bound on liveness, not a speed check: the job takes ~27 s alone here, but its two
                # participants run interpreter trials beside the rest of the suite on a 2-core CI
                # machine, and one share once ran past 150 s.
                end = time.monotonic() + 360
                while True:
                    j = json.loads(c.run(line))
                    if j["status"] in ("succeeded", "failed", "cancelled") or time.monotonic() > end:
                        break
                    time.sleep(0.5)
                if j["status"] != "succeeded":  # with every process's log tail (an assert's repr cuts it)
                    pytest.fail(f"job {j['id']} is {j['status']}, not succeeded\n{c.log_text()}")
                job = j
            elif "/v1/configs" in line:
                bundle = json.loads(c.run(line))
            else:
                c.run(line)
    finally:
        rcs = c.stop()
    logs = c.log_text()
    assert [cmd.split()[1] for cmd, _ in c.procs] == ["serve", "worker", "worker"]
    # SIGTERM: the workers exit cleanly; uvicorn shuts down gracefully, then re-raises the signal.
    assert rcs[0] in (0, -signal.SIGTERM) and rcs[1:] == [0, 0], (rcs, logs)
    assert job is not None and bundle is not None
    assert "database is locked" not in logs and "Traceback" not in logs, logs

    # The job: one attempt, budget exactly met (8 trials x 2 buckets over both workers).
    assert (job["attempt"], job["progress"]["trials_done"]) == (1, 16), job
    # GET /v1/jobs/{id} lists the distributed job's workers of this attempt.
    assert sorted((p["slot"], p["status"]) for p in job["participants"]) in ([(0, "done"), (1, "published")],
                                                                            [(0, "published"), (1, "done")]), job
    db = Database(pg_url)
    try:
        trials = db.run(lambda s: s.execute(select(TrialResult.bucket, TrialResult.number, TrialResult.worker)
                                            .where(TrialResult.job_id == 1)).all(), write=False)
        parts = db.run(lambda s: s.execute(select(JobParticipant.owner, JobParticipant.status, JobParticipant.slot,
                                                  JobParticipant.attempt)).all(), write=False)
        cfgs = db.run(lambda s: s.execute(select(KernelConfig.bucket, KernelConfig.job_id, KernelConfig.active,
                                                 KernelConfig.params, KernelConfig.time_us)).all(), write=False)
        row = db.run(lambda s: s.execute(select(Job.status, Job.distributed)).one(), write=False)
        storage = db.optuna_storage_url()
    finally:
        db.dispose()
    assert tuple(row) == ("succeeded", True)
    assert Counter(t.bucket for t in trials) == {"N1-4": 8, "N5-16": 8}
    # Two participants of attempt 1, one per worker process; exactly one published.
    assert sorted(p.slot for p in parts) == [0, 1] and {p.attempt for p in parts} == {1}
    assert sorted(p.status for p in parts) == ["done", "published"], parts
    owners = {p.owner for p in parts}
    assert {t.worker for t in trials} == owners, "both workers must have measured trials"
    # Published once: one config per bucket, from this job, active.
    assert sorted((cf.bucket, cf.job_id, cf.active) for cf in cfgs) == [("N1-4", 1, True), ("N5-16", 1, True)]

    # The studies: every recorded trial is a finished trial of its bucket's shared study, and both
    # workers' trials are in it.
    import optuna

    from tuner.search import RECORD_ATTR, study_name
    from catalog.core import Bucket
    from catalog.keys import make_key

    key = make_key("pack", "interp", 16, 512, 128, None)
    per_worker: Counter[str] = Counter()
    for name, bucket in (("N1-4", Bucket("N", 1, 4)), ("N5-16", Bucket("N", 5, 16))):
        study = optuna.load_study(study_name=study_name(key, bucket, 1), storage=storage)  # job 1: its own study
        finished = {t.number for t in study.get_trials(deepcopy=False)
                    if t.state.is_finished() and RECORD_ATTR in t.user_attrs}
        mine = {t.number: t.worker for t in trials if t.bucket == name}
        assert set(mine) <= finished, (name, sorted(mine), sorted(finished))
        per_worker.update(mine.values())
        # The published winner is the study's fastest verified trial.
        ok = [t for t in study.get_trials(deepcopy=False) if t.state == optuna.trial.TrialState.COMPLETE]
        best = min(ok, key=lambda t: (t.value, t.number))
        cfg = next(cf for cf in cfgs if cf.bucket == name)
        assert cfg.time_us == best.value and cfg.params == best.user_attrs[RECORD_ATTR]["config"]
    assert set(per_worker) == owners and min(per_worker.values()) >= 1, per_worker

    # The engine's view (the README's last line).
    pack = bundle["kernels"]["pack"]
    tuned = {e["name"]: e for e in pack["buckets"] if not e["default"]}
    assert set(tuned) == {"N1-4", "N5-16"}
    assert all(e["provenance"]["job_id"] == 1 for e in tuned.values())
