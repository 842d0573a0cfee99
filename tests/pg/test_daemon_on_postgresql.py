"""A real ``memwarden run`` on PostgreSQL (``[store] url``, here its environment override
``MEMWARDEN_STORE__URL``): it starts, takes a block over the HTTP API, reads it back,
finds it by search, takes an event that refutes it (the block's state changes), says
its backend in ``/v1/health``, stops, and a second daemon on the same database finds the
block as it was left. The scheduler's passes not yet ported to PostgreSQL fail their
ticks, logged, and the daemon keeps serving; the password is in no log line."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import httpx

from tests.support import daemon_env, eventually_blocking, memwarden_running

if TYPE_CHECKING:
    from tests.pgserver import PgServer

REMOTE = "edge-files"  # a sensor on another host: it reports over POST /v1/events


def _with_password(dsn: str, password: str) -> str:
    """``dsn`` with a password in it (the test server trusts loopback: any is accepted)."""
    scheme, rest = dsn.split("://", 1)
    user, at, host = rest.partition("@")
    return f"{scheme}://{user}:{password}{at}{host}"


def test_a_daemon_serves_and_keeps_its_memory_on_postgresql(
    pg_server: PgServer, tmp_path: Path
) -> None:
    password = "s3cret-hunter2"  # a test's; must appear in no log
    dsn = _with_password(pg_server.create_database(), password)
    home = tmp_path / "home"
    env = daemon_env(
        home,
        MEMWARDEN_STORE__URL=dsn,
        MEMWARDEN_SENSORS=json.dumps({REMOTE: {"remote": True, "kind": "fs"}}),
        MEMWARDEN_LOG_LEVEL="info",
        # Every pass ticks within the test: those not on PostgreSQL yet fail, logged.
        MEMWARDEN_SCHEDULER__DECAY_INTERVAL="1s",
        MEMWARDEN_SCHEDULER__SWEEP_INTERVAL="200ms",
    )
    with memwarden_running(home, env=env) as running:
        url, auth = running.url, running.auth
        added = httpx.post(
            f"{url}/v1/blocks",
            headers=auth,
            json={
                "title": "Where the app config lives",
                "content": "The app reads its settings from app.yaml on the edge host",
                "tags": ["pgwire"],
                "bindings": [{"sensor": REMOTE, "path": "app.yaml"}],
            },
            timeout=10,
        )
        assert added.status_code == 201, added.text
        block_id = added.json()["id"]

        got = httpx.get(f"{url}/v1/blocks/{block_id}", headers=auth, timeout=10)
        assert got.status_code == 200, got.text
        assert got.json()["content"].endswith("on the edge host")
        assert got.json()["state"] == "unverified"

        found = httpx.get(
            f"{url}/v1/search", params={"q": "settings edge"}, headers=auth, timeout=10
        )
        assert found.status_code == 200, found.text
        assert [h["block"]["id"] for h in found.json()["results"]] == [block_id]

        def refute(count: int) -> None:
            """``count`` refutations from the remote sensor, one after the other."""
            now = datetime.now(UTC).timestamp()
            answer = httpx.post(
                f"{url}/v1/events",
                headers=auth,
                json=[
                    {
                        "sensor": REMOTE,
                        "subject": "app.yaml",
                        "outcome": "refuted",
                        "observed_at": datetime.fromtimestamp(now - count + i, UTC).isoformat(),
                        "message": "app.yaml is gone",
                    }
                    for i in range(count)
                ],
                timeout=10,
            )
            assert answer.status_code == 200, answer.text
            assert answer.json()["accepted"] == count

        def state() -> str:
            got = httpx.get(f"{url}/v1/blocks/{block_id}", headers=auth, timeout=10)
            assert got.status_code == 200, got.text
            return str(got.json()["state"])

        refute(1)  # one failed check is a soft refutation (docs/RULES.md)
        assert state() == "stale"
        refute(2)  # three in a row: refuted
        assert state() == "refuted"

        health = httpx.get(f"{url}/v1/health", headers=auth, timeout=10)
        assert health.status_code == 200, health.text
        assert health.json()["store"] == {"backend": "postgresql"}
        assert health.json()["counts"]["by_state"] == {"refuted": 1}
        assert password not in health.text
        # A pass not on PostgreSQL yet is logged (once); the daemon serves on.
        eventually_blocking(
            lambda: "decay_cycle is not available on PostgreSQL yet" in running.log(),
            what="the decay pass's failed tick in the log",
            process=running.process,
        )
        log = running.log()
        assert "scheduler_pass_unavailable" in log
        # Said once per pass, not at every tick (the dispatch ticks every second).
        assert log.count("due_revalidations is not available on PostgreSQL yet") == 1
        assert httpx.get(f"{url}/healthz", timeout=10).status_code == 200
        assert running.alive()
    stopped = running.log()
    assert password not in stopped
    assert "daemon_stopped" in stopped

    with memwarden_running(home, env=env) as again:
        kept = httpx.get(f"{again.url}/v1/blocks/{block_id}", headers=again.auth, timeout=10)
        assert kept.status_code == 200, kept.text
        assert kept.json()["state"] == "refuted"
        assert kept.json()["title"] == "Where the app config lives"
    assert password not in again.log()


def test_a_bad_store_url_is_a_config_error_naming_the_field(tmp_path: Path) -> None:
    """The daemon refuses to start on a URL of another scheme, naming ``store.url``, and
    never prints the password."""
    home = tmp_path / "home"
    env = daemon_env(home, MEMWARDEN_STORE__URL="mysql://root:hunter2@db/x")
    memwarden = Path(sys.executable).parent / "memwarden"
    done = subprocess.run(
        [str(memwarden), "run"], env=env, capture_output=True, timeout=60, check=False
    )
    out = (done.stdout + done.stderr).decode(errors="replace")
    assert done.returncode != 0
    assert "store.url" in out
    assert "hunter2" not in out
