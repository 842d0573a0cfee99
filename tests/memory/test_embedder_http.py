"""The HTTP embedder (a local Ollama-style endpoint): allowed hosts, and hostile answers
(wrong dimension, NaN, a huge body, a slow server) refused with a clear error; through a
daemon, a hostile server stores nothing and the daemon keeps answering."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any, Self

import pytest
from tests.support import eventually, start_in_loop

from memwarden.daemon import Daemon, load_settings
from memwarden.embedders import load_embedder
from memwarden.embedders._http import HttpEmbedder
from memwarden.errors import ConfigError, EmbedderUnavailableError
from memwarden.memory import Store
from memwarden.plugins import Registry
from memwarden.plugins.testing import FakeClock

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

DIM = 8


class FakeOllama:
    """A local embedding server whose answer the test chooses (``mode``)."""

    def __init__(self) -> None:
        self.mode = "good"
        self.requests: list[dict[str, Any]] = []
        self.release = threading.Event()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fake.requests.append(body)
                texts = body.get("input") or [body.get("prompt", "")]
                vec = [float(i + 1) for i in range(DIM)]
                if fake.mode == "down":
                    self.send_error(503)
                    return
                if fake.mode == "slow":
                    fake.release.wait(30)
                    answer = b"{}"
                elif fake.mode == "huge":
                    answer = b'{"embeddings": [' + b"0," * 2_000_000 + b"0]}"
                else:
                    if fake.mode == "wrong_dim":
                        vec = vec[:-1]
                    elif fake.mode == "nan":
                        vec[3] = float("nan")
                    key = "embedding" if "prompt" in body else "embeddings"
                    value: Any = vec if "prompt" in body else [vec] * len(texts)
                    answer = json.dumps({key: value}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/api/embed"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Self:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def ollama() -> Iterator[FakeOllama]:
    with FakeOllama() as fake:
        yield fake


def _embedder(url: str, **options: Any) -> HttpEmbedder:
    return HttpEmbedder(url=url, model="nomic", dim=DIM, timeout=2.0, **options)


def test_a_good_answer_gives_one_vector_per_text(ollama: FakeOllama):
    emb = load_embedder("http", {"url": ollama.url, "model": "nomic", "dim": DIM})
    assert emb.model_id == f"http/nomic/{DIM}"
    assert emb.embed(["a", "b"]) == [[float(i + 1) for i in range(DIM)]] * 2
    assert ollama.requests[-1] == {"model": "nomic", "input": ["a", "b"]}
    single = _embedder(ollama.url.replace("/api/embed", "/api/embeddings"))
    assert single.embed(["a"]) == [[float(i + 1) for i in range(DIM)]]
    assert ollama.requests[-1] == {"model": "nomic", "prompt": "a"}


@pytest.mark.parametrize(
    ("mode", "message"),
    [
        ("wrong_dim", "7 dimensions, not dim = 8"),
        ("nan", "non-finite"),
        ("huge", "longer than max_answer_bytes"),
    ],
)
def test_hostile_answers_are_refused_naming_the_fault(ollama: FakeOllama, mode: str, message: str):
    ollama.mode = mode
    with pytest.raises(EmbedderUnavailableError, match=message):
        _embedder(ollama.url, max_answer_bytes=1 << 20).embed(["a"])


def test_a_slow_server_times_out(ollama: FakeOllama):
    ollama.mode = "slow"
    emb = HttpEmbedder(url=ollama.url, model="nomic", dim=DIM, timeout=0.2)
    with pytest.raises(EmbedderUnavailableError, match="Timeout"):
        emb.embed(["a"])


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"url": "http://example.com:11434/api/embed"}, "not in allowed_hosts"),
        ({"url": "http://127.0.0.1:11434/api/embed", "allowed_hosts": ["10.0.0.1:*"]}, "allowed"),
        ({"url": "file:///etc/passwd"}, "not an http"),
        ({"url": "http://127.0.0.1:1/x", "dim": 0}, "dim"),
        ({"url": "http://127.0.0.1:1/x", "model": ""}, "model"),
        ({"url": "http://127.0.0.1:1/x", "colour": "blue"}, r"search\.embedders\.http"),
    ],
)
def test_bad_options_are_config_errors(options: dict[str, Any], message: str):
    with pytest.raises(ConfigError, match=message):
        load_embedder("http", {"model": "nomic", "dim": DIM, **options})


async def test_a_hostile_server_stores_nothing_and_the_daemon_keeps_answering(
    tmp_path: Path, ollama: FakeOllama
):
    """Answers with NaN: no vector is stored, the block stays queued and is found by its
    words; once the server answers well, the queued block gets its vector."""
    ollama.mode = "nan"
    settings = load_settings(
        None,
        env={},
        home=tmp_path / "home",
        api={"port": 0},
        search={
            "embedder": "http",
            "embedders": {"http": {"url": ollama.url, "model": "nomic", "dim": DIM}},
        },
    )
    d = Daemon(settings, registry=Registry.from_classes({}))
    task = await start_in_loop(d)
    try:
        block = await d.add_block({"content": "The API timeout is 30 s"})
        vectors = d.store.vectors
        assert vectors is not None
        await eventually(lambda: len(ollama.requests) >= 2, what="the embedder was asked")
        assert len(vectors) == 0
        assert await vectors.pending() == 1
        hits = await d.store.search("API timeout", mode="hybrid")
        assert [h.id for h in hits] == [block.id]  # by its words; the query's NaN refused
        with sqlite3.connect(settings.db_path) as conn:
            assert conn.execute("SELECT count(*) FROM block_vectors").fetchone() == (0,)
        ollama.mode = "good"  # the task retries after its backoff (1-2 s, then 2-4 s)
        await eventually(lambda: len(vectors) == 1, what="embedded once the server is good")
        assert await vectors.pending() == 0
    finally:
        d.request_stop()
        await asyncio.wait_for(task, timeout=20)


async def test_a_failing_server_is_retried_with_backoff_not_per_write(
    tmp_path: Path, ollama: FakeOllama
):
    """A server answering 503: the embedding task asks once, then waits on the store's
    clock (between half and all of 2 s, then of 4 s, ...); writes meanwhile do not wake
    it; once the server answers, the next round embeds the queue and the count resets."""
    ollama.mode = "down"
    clock = FakeClock()
    async with Store(tmp_path / "b.db", clock=clock, embedder=_embedder(ollama.url)) as store:
        vectors = store.vectors
        assert vectors is not None
        await store.add({"content": "The API timeout is 30 s"})
        task = asyncio.create_task(vectors.run(poll_s=2.0), name="embedding")
        try:
            await eventually(lambda: clock.sleepers == 1, what="backing off after a 503")
            assert len(ollama.requests) == 1
            assert vectors.failures == 1
            for i in range(5):  # writes and wake-ups while it backs off: no new request
                await store.add({"content": f"another fact {i}"})
                vectors.notify()
            clock.advance(0.9)  # below the first wait (1-2 s)
            assert clock.sleepers == 1
            assert len(ollama.requests) == 1
            clock.advance(1.2)  # past it: one more request, then a longer wait (2-4 s)
            await eventually(lambda: vectors.failures == 2 and clock.sleepers == 1)
            assert len(ollama.requests) == 2
            clock.advance(1.9)
            assert clock.sleepers == 1
            assert len(ollama.requests) == 2
            ollama.mode = "good"
            clock.advance(2.2)
            await eventually(lambda: len(vectors) == 6, what="embedded once the server answers")
            assert vectors.failures == 0
            assert await vectors.pending() == 0
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
