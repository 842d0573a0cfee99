"""``memwarden demo``: a guided tour on a throw-away workspace.

It builds a workspace (a config file, a tiny pytest project, a local HTTP endpoint),
starts a daemon on it, stores facts bound to each, then changes the world and shows
facts being refuted, going stale, revalidated and confirmed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from memwarden.client import AsyncClient
from memwarden.daemon import Daemon, load_settings

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable

    from memwarden.memory.policy import CoverageDict

__all__ = ["SETTINGS", "build_workspace", "run_demo"]

RETRY_OK = "def retry_count() -> int:\n    return 3\n"
RETRY_BROKEN = "def retry_count() -> int:\n    return 2  # someone changed it\n"
TEST = "from retry import retry_count\n\n\ndef test_retry():\n    assert retry_count() == 3\n"


@dataclass
class _World:
    """The local HTTP endpoint: answers ``/version`` from a value the demo changes."""

    version: str = "1.2"
    port: int = 0
    server: asyncio.Server | None = field(default=None, repr=False)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):
            await reader.readuntil(b"\r\n\r\n")
            body = json.dumps({"version": self.version}).encode()
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                + f"content-length: {len(body)}\r\nconnection: close\r\n\r\n".encode()
                + body
            )
            await writer.drain()
        writer.close()

    @contextlib.asynccontextmanager
    async def serve(self) -> AsyncIterator[None]:
        self.server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        try:
            yield
        finally:
            self.server.close()
            await self.server.wait_closed()


class _Tour:
    def __init__(self, say: Callable[[str], None], pause: Callable[[], None]) -> None:
        self.say = say
        self.pause = pause

    def step(self, title: str) -> None:
        self.pause()
        self.say(f"\n== {title}")


async def _state_of(daemon: Daemon, block_id: str) -> str:
    return str((await daemon.store.get(block_id)).state.value)


async def _until(daemon: Daemon, block_id: str, states: set[str], timeout_s: float = 30.0) -> str:
    """Wait (polling with a deadline) until the block reaches one of ``states``."""
    deadline = time.monotonic() + timeout_s
    while True:
        state = await _state_of(daemon, block_id)
        if state in states or time.monotonic() > deadline:
            return state
        await asyncio.sleep(0.05)


async def _show(daemon: Daemon, tour: _Tour, facts: dict[str, str]) -> None:
    for name, block_id in facts.items():
        block = await daemon.store.get(block_id)
        v = block.validation
        by = f" by {v.validated_by}" if v.validated_by else ""
        reasons = (
            f" ({', '.join(r.value for r in block.stale_reasons)})" if block.stale_reasons else ""
        )
        tour.say(f"  {name:<9} {block.state.value:<10}{reasons:<20} r={v.reliability:.2f}{by}")


# More of the workspace's settings, as a project keeps them: what binding suggestions find
# (docs/SUGGESTIONS.md) when an agent states a fact without saying where it is written.
SETTINGS: dict[str, str] = {
    "config/db.toml": '[database]\nhost = "db.internal"\npool_size = 10\n',
    "config/cache.yaml": "cache:\n  ttl_s: 600\n  backend: redis\n",
    "config/worker.json": json.dumps({"worker": {"memory_limit": "512Mi", "concurrency": 4}}),
    "package.json": json.dumps({"name": "shop-web", "version": "2.4.1", "private": True}),
}


def build_workspace(root: Path) -> dict[str, Path]:
    """The demo's workspace under ``root``: ``config/app.yaml`` (the API timeout, 30 s), more
    settings (:data:`SETTINGS`), a tiny pytest project and the daemon's state dir; the paths
    of the config file, the project and the state dir."""
    config = root / "config" / "app.yaml"
    config.parent.mkdir(parents=True)
    config.write_text("http:\n  timeout: 30\n")
    for rel, text in SETTINGS.items():
        (root / rel).write_text(text)
    project = root / "project"
    project.mkdir()
    (project / "retry.py").write_text(RETRY_OK)
    (project / "test_retry.py").write_text(TEST)
    return {"config": config, "project": project, "state": root / "state"}


async def _tour(root: Path, tour: _Tour) -> int:
    paths = build_workspace(root)
    world = _World()
    async with world.serve():
        settings = load_settings(
            None,
            env={},
            home=paths["state"],
            log_level="error",
            api={"port": 0},
            scheduler={"sweep_interval": "1s", "dispatch_interval": "1s"},
            sensors={
                "fs": {
                    "roots": [str(root)],
                    "debounce_ms": 50,
                    "index": True,  # binding suggestions (docs/SUGGESTIONS.md)
                    "ignore": [".git", "__pycache__", "state"],
                },
                "tests": {
                    "kind": "code_test",
                    "project_root": str(paths["project"]),
                    "command": [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
                    "source_dirs": ["."],
                    "timeout_s": 60,
                    "revalidate_timeout": "90s",
                },
                "api": {
                    "kind": "http",
                    "allowed_hosts": [f"http://127.0.0.1:{world.port}"],
                    "interval": "1h",
                },
                "review": {},
            },
        )
        daemon = Daemon(settings)
        task = asyncio.create_task(daemon.run(), name="demo.daemon")
        ready = asyncio.create_task(daemon.ready())
        await asyncio.wait({task, ready}, return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            task.result()
        try:
            return await _story(daemon, tour, paths, world)
        finally:
            daemon.request_stop()
            await task


async def _story(daemon: Daemon, tour: _Tour, paths: dict[str, Path], world: _World) -> int:
    tour.step("A workspace with a config file, a tiny pytest project and an HTTP endpoint")
    tour.say(f"  workspace {paths['config'].parent.parent}")
    where = daemon.api.bound_url() if daemon.api else "-"
    tour.say(f"  daemon    {where} (for the demo's length: it stops when the demo ends)")

    tour.step("Four facts an agent remembers, each bound to something that can check it")
    adds = {
        "timeout": {
            "title": "API timeout",
            "content": "The API timeout is 30 s",
            "bindings": [
                {"sensor": "fs", "path": "config/app.yaml", "key": "/http/timeout", "equals": 30}
            ],
        },
        "retries": {
            "title": "retry logic",
            "content": "The retry logic retries 3 times",
            "info_type": "dynamic",
            "bindings": [{"sensor": "tests", "test": "test_retry.py::test_retry"}],
        },
        "version": {
            "title": "service version",
            "content": "The service reports version 1.2",
            "bindings": [
                {
                    "sensor": "api",
                    "url": f"http://127.0.0.1:{world.port}/version",
                    "key": "/version",
                    "equals": "1.2",
                }
            ],
        },
        "storage": {
            "title": "storage decision",
            "content": "We chose SQLite for storage",
            "info_type": "static",
            "bindings": [{"sensor": "review"}],
        },
    }
    facts = {name: (await daemon.add_block(body, actor="demo")).id for name, body in adds.items()}
    await _show(daemon, tour, facts)

    tour.step("Each sensor checks its fact")
    for name in ("timeout", "retries", "version"):
        await daemon.revalidate(facts[name], wait_s=60)
    await _show(daemon, tour, facts)

    await _bind_by_itself(daemon, tour, paths["state"])

    tour.step("The world changes: the timeout becomes 45 s, the code breaks, the API moves on")
    paths["config"].write_text("http:\n  timeout: 45\n")
    (paths["project"] / "retry.py").write_text(RETRY_BROKEN)
    world.version = "1.3"
    await _until(daemon, facts["timeout"], {"refuted", "stale"})
    await _until(daemon, facts["retries"], {"refuted"}, timeout_s=60)
    await daemon.revalidate(facts["version"], wait_s=30)
    await _show(daemon, tour, facts)
    tour.say("  the file watcher refuted the timeout at once; the test run refuted the retries;")
    tour.say("  the API answered 1.3: one refutation is soft, so that fact went stale first")

    tour.step("What an agent gets when it asks: stale and refuted facts say so")
    answer = await daemon.search("timeout retry version", limit=10, include_refuted=True)
    for hit in answer["results"]:
        block = hit["block"]
        tour.say(f"  {block['title']:<17} score={hit['score']:.3g} {'; '.join(hit['warnings'])}")

    tour.step("The world is put right: sensors confirm the facts again")
    paths["config"].write_text("http:\n  timeout: 30\n")
    (paths["project"] / "retry.py").write_text(RETRY_OK)
    world.version = "1.2"
    await _until(daemon, facts["timeout"], {"fresh"})
    await _until(daemon, facts["retries"], {"fresh"}, timeout_s=60)
    await daemon.revalidate(facts["version"], wait_s=30)
    await _show(daemon, tour, facts)

    tour.step("A person settles what no machine can check")
    items = await daemon.store.list_reviews(status="pending")
    if not items:
        await daemon.store.request_review(facts["storage"], reason="a design decision")
        items = await daemon.store.list_reviews(status="pending")
    # No link here: this daemon stops when the demo ends, and a link to it would dangle.
    tour.say(f"  {len(items)} fact(s) wait for review: people see them on the review page")
    tour.say("  of a running daemon (`memwarden review --open` prints a sign-in link to it)")

    health = await daemon.health()
    tour.say(f"\nhealth {health.get('score', '?')}/100 · {health['counts']['by_state']}")
    final = {name: await _state_of(daemon, block_id) for name, block_id in facts.items()}
    ok = all(final[n] == "fresh" for n in ("timeout", "retries", "version"))
    tour.say("demo finished: " + ("every checked fact is fresh again" if ok else f"{final}"))
    return 0 if ok else 1


def _coverage_line(coverage: CoverageDict) -> str:
    share = "-" if coverage["share"] is None else f"{coverage['share']:.0%}"
    return f"  coverage {share}: {coverage['checkable']} of {coverage['live']} facts can be checked"


async def _bind_by_itself(daemon: Daemon, tour: _Tour, home: Path) -> None:
    """Facts stated as agents state them, with no binding: coverage falls; bind=auto and
    an accepted proposal bring it back (docs/SUGGESTIONS.md)."""
    tour.step("Facts stated without a binding: memwarden finds one itself")
    sensor = daemon.runners["fs"].sensor
    deadline = time.monotonic() + 30.0
    while getattr(getattr(sensor, "index", None), "builds", 0) == 0:  # the value index
        if time.monotonic() > deadline:
            tour.say("  (the fs value index is not built: skipping this step)")
            return
        await asyncio.sleep(0.05)
    tour.say(_coverage_line(await daemon.coverage()))
    async with AsyncClient(home=home) as client:
        plain = await client.add_with_bind({"content": "The database host is db.internal"}, "none")
        tour.say('  added "The database host is db.internal" with no binding: it can only decay')
        tour.say(_coverage_line(await daemon.coverage()))
        added = await client.add_with_bind({"content": "The worker memory limit is 512Mi"}, "auto")
        found = added["bind"]
        chosen = found["chosen"] if found else None
        tour.say('  added "The worker memory limit is 512Mi" with bind=auto:')
        if chosen is not None:
            tour.say(f"    bound to {json.dumps(chosen['binding'])}")
        tour.say(f"    {found['why'] if found else 'nothing was looked for'}")
        tour.say(_coverage_line(await daemon.coverage()))
    await daemon.propose_once()  # what the hourly pass does for facts stored unbound
    proposals = await daemon.store.list_proposals(block_id=plain["block"].id)
    best = next((p for p in proposals if p.kind == "binding"), None)
    if best is not None:
        tour.say(f"  the proposal pass suggests for the unbound one: {json.dumps(best.proposal)}")
        tour.say(f"    why: {best.why}")
        await daemon.decide_proposal(best.id, accept=True, actor="demo")
        tour.say("  accepted (as a person would on the review page)")
    tour.say(_coverage_line(await daemon.coverage()))


def run_demo(*, unattended: bool, keep: bool = False, say: Callable[[str], None] = print) -> int:
    """Run the tour; returns the exit code."""

    def pause() -> None:
        if not unattended:
            with contextlib.suppress(EOFError):
                input("(press Enter) ")

    tour = _Tour(say, pause)
    if keep:
        root = Path(tempfile.mkdtemp(prefix="memwarden-demo-"))
        say(f"keeping the workspace in {root}")
        return asyncio.run(_tour(root, tour))
    with tempfile.TemporaryDirectory(prefix="memwarden-demo-") as tmp:
        return asyncio.run(_tour(Path(tmp), tour))
