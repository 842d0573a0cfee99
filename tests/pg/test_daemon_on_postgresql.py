"""A real ``memwarden run`` on PostgreSQL (``[store] url``, here its environment override
``MEMWARDEN_STORE__URL``): it starts, takes a block over the HTTP API, reads it back,
finds it by search, takes an event that refutes it (the block's state changes), says
its backend in ``/v1/health``, stops, and a second daemon on the same database finds the
block as it was left; the password is in no log line. With the scheduler's passes all
ticking: the sweep marks an expired block stale and queues its check, decay,
heuristics, consolidation, compaction and the time series run without a failed tick, a
review is decided and a block erased through the HTTP API, and the embedding task fills
the vectors a search by meaning uses."""

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


def test_the_scheduler_reviews_and_erasure_run_on_postgresql(
    pg_server: PgServer, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    env = daemon_env(
        home,
        MEMWARDEN_STORE__URL=pg_server.create_database(),
        MEMWARDEN_SENSORS=json.dumps({REMOTE: {"remote": True, "kind": "fs"}}),
        MEMWARDEN_LOG_LEVEL="info",
        # Every pass ticks within the test.
        MEMWARDEN_SCHEDULER__SWEEP_INTERVAL="200ms",
        MEMWARDEN_SCHEDULER__DECAY_INTERVAL="1s",
        MEMWARDEN_SCHEDULER__HEURISTIC_INTERVAL="1s",
        MEMWARDEN_SCHEDULER__CONSOLIDATION_INTERVAL="1s",
        MEMWARDEN_SCHEDULER__COMPACTION_INTERVAL="1s",
        MEMWARDEN_SEARCH__EMBEDDER="stub",  # search by meaning, on PostgreSQL too
    )
    with memwarden_running(home, env=env) as running:
        url, auth = running.url, running.auth

        def add(body: dict[str, object]) -> str:
            added = httpx.post(f"{url}/v1/blocks", headers=auth, json=body, timeout=10)
            assert added.status_code == 201, added.text
            return str(added.json()["id"])

        def block(block_id: str) -> httpx.Response:
            return httpx.get(f"{url}/v1/blocks/{block_id}", headers=auth, timeout=10)

        # The sweep: a block whose window runs out goes stale, its binding's check queued
        # (and sent to the remote sensor by the dispatch).
        expiring = add(
            {
                "title": "The edge host's port",
                "content": "The edge host listens on port 8443",
                "validity_window": "1s",
                "bindings": [{"sensor": REMOTE, "path": "port.txt"}],
            }
        )
        eventually_blocking(
            lambda: block(expiring).json()["state"] == "stale",
            what="the sweep marking the expired block stale",
            process=running.process,
        )

        # A read says "stale" as soon as the window ran out (the state as of now); the
        # sweep's request follows at its next pass.
        def backlog() -> int:
            health = httpx.get(f"{url}/v1/health", headers=auth, timeout=10)
            assert health.status_code == 200, health.text
            return int(health.json()["counts"]["revalidation_backlog"])

        eventually_blocking(
            lambda: backlog() >= 1,
            what="the sweep queueing the expired block's check",
            process=running.process,
        )
        explained = httpx.get(f"{url}/v1/blocks/{expiring}/explain", headers=auth, timeout=10)
        assert explained.status_code == 200, explained.text

        # A review decided through the API: the item closes with who decided.
        doubtful = add({"title": "Deploy day", "content": "Deploys run on fridays"})
        asked = httpx.post(
            f"{url}/v1/blocks/{doubtful}/review",
            headers=auth,
            json={"reason": "is it still true?"},
            timeout=10,
        )
        assert asked.status_code == 200, asked.text
        listed = httpx.get(f"{url}/v1/reviews", headers=auth, timeout=10)
        assert listed.status_code == 200, listed.text
        [item] = [r for r in listed.json() if r["block_id"] == doubtful]
        decided = httpx.post(
            f"{url}/v1/reviews/{item['id']}/decision",
            headers=auth,
            json={"decision": "reject", "decided_by": "ana", "comment": "moved to mondays"},
            timeout=10,
        )
        assert decided.status_code == 200, decided.text
        assert decided.json()["review"]["status"] == "decided"
        assert decided.json()["review"]["decided_by"] == "ana"
        assert decided.json()["event"]["applied"] is True
        again = httpx.post(
            f"{url}/v1/reviews/{item['id']}/decision",
            headers=auth,
            json={"decision": "confirm", "decided_by": "bob"},
            timeout=10,
        )
        assert again.status_code in (409, 422), again.text  # decided already

        # `memwarden forget` through the API: the block is gone, a tombstone stays.
        secret = add({"title": "A secret", "content": "the vault code is 1234"})
        forgot = httpx.post(
            f"{url}/v1/forget",
            headers=auth,
            json={"ids": [secret], "reason": "asked to"},
            timeout=30,
        )
        assert forgot.status_code == 200, forgot.text
        assert forgot.json()["erased"] == [secret]
        assert any("PostgreSQL" in u for u in forgot.json()["unreachable"])
        assert block(secret).status_code == 404
        tombstones = httpx.get(f"{url}/v1/erasures", headers=auth, timeout=10)
        assert tombstones.status_code == 200, tombstones.text
        assert secret in tombstones.text

        # The embedding task filled the vectors: a search by meaning finds a block.
        def vectors() -> int:
            got = httpx.get(f"{url}/v1/health", headers=auth, timeout=10)
            return int(got.json()["search"]["vectors"])

        eventually_blocking(
            lambda: vectors() >= 2, what="the blocks embedded", process=running.process
        )
        near = httpx.get(
            f"{url}/v1/search",
            params={"q": "The edge host listens on port 8443", "mode": "vector"},
            headers=auth,
            timeout=10,
        )
        assert near.status_code == 200, near.text
        assert expiring in [h["block"]["id"] for h in near.json()["results"]]

        # Every periodic pass ran (their log lines), none failed a tick.
        for done in ("decay_cycle_done", "heuristic_cycle_done", "consolidation_done"):
            eventually_blocking(
                lambda done=done: done in running.log(),
                what=f"{done} in the log",
                process=running.process,
            )
        log = running.log()
        for bad in ("scheduler_tick_failed", "scheduler_pass_unavailable", "Traceback"):
            assert bad not in log
        assert "revalidations_not_requeued" not in log
        assert running.alive()


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
