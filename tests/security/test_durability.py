"""Issue 13 item 9: acknowledged means durable, stated per mode.

``[store] synchronous`` decides what an acknowledgement survives: ``normal`` a crash or
``kill -9`` of the daemon, ``full`` also a power loss. ``auto`` (the default) is ``full``
when the MQTT bridge is on: remote agents drop what the daemon acknowledged.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from memwarden.daemon._config import load_settings
from memwarden.errors import ConfigError
from memwarden.memory import FakeClock, Store

SYSTEMD = Path(__file__).resolve().parents[2] / "systemd"
PRAGMA_VALUE = {"normal": 1, "full": 2}


def _settings(tmp_path: Path, text: str):
    path = tmp_path / "memwarden.toml"
    path.write_text(text, encoding="utf-8")
    return load_settings(path, env={"MEMWARDEN_HOME": str(tmp_path / "home")})


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", "normal"),
        ('[mqtt]\nurl = "mqtt://127.0.0.1:1883"\n', "full"),
        ('[store]\nsynchronous = "normal"\n[mqtt]\nurl = "mqtt://127.0.0.1:1883"\n', "normal"),
        ('[store]\nsynchronous = "full"\n', "full"),
    ],
)
def test_auto_is_full_when_remote_agents_are_acknowledged(tmp_path, text, expected):
    settings = _settings(tmp_path, text)
    assert settings.store.synchronous_for(mqtt=settings.mqtt is not None) == expected


def test_an_unknown_mode_is_refused_naming_the_field(tmp_path):
    with pytest.raises(ConfigError) as info:
        _settings(tmp_path, '[store]\nsynchronous = "off"\n')
    (problem,) = info.value.problems
    assert problem.startswith("store.synchronous")
    assert "'auto', 'normal' or 'full'" in problem


def test_the_deployment_example_matches_the_promise(tmp_path):
    """systemd/memwarden.toml leaves the choice to auto (full with MQTT)."""
    settings = load_settings(SYSTEMD / "memwarden.toml", env={"STATE_DIRECTORY": str(tmp_path)})
    assert settings.store.synchronous == "auto"
    assert settings.store.synchronous_for(mqtt=True) == "full"


@pytest.mark.parametrize("mode", ["normal", "full"])
async def test_the_writer_connection_runs_the_mode(tmp_path, mode):
    """The mode reaches SQLite: the writer's PRAGMA synchronous, in WAL mode."""
    async with Store(tmp_path / "s.db", clock=FakeClock(), synchronous=mode) as store:
        conn = store.db._wconn  # the writer connection is what commits
        assert conn is not None
        async with conn.execute("PRAGMA synchronous") as cur:
            assert (await cur.fetchone()) == (PRAGMA_VALUE[mode],)
        async with conn.execute("PRAGMA journal_mode") as cur:
            assert (await cur.fetchone()) == ("wal",)
    with sqlite3.connect(tmp_path / "s.db") as plain:
        assert plain.execute("PRAGMA journal_mode").fetchone() == ("wal",)
