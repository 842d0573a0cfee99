"""``[store] url``: a SQLite or PostgreSQL store named by URL, checked when the settings
load (a bad one names ``store.url``, never showing its password); the path keys keep
working, and the environment overrides the file as for every setting."""

from __future__ import annotations

from pathlib import Path

import pytest

from memwarden.daemon import load_settings
from memwarden.errors import ConfigError


def test_the_default_is_the_sqlite_file_in_home(tmp_path: Path) -> None:
    s = load_settings(None, env={}, home=tmp_path)
    assert s.database == tmp_path / "memwarden.db"
    assert s.db_path == tmp_path / "memwarden.db"
    assert not s.store.postgresql


def test_the_path_key_keeps_working(tmp_path: Path) -> None:
    s = load_settings(None, env={}, home=tmp_path, store={"path": tmp_path / "x.db"})
    assert s.database == tmp_path / "x.db"


def test_a_sqlite_url_is_that_file(tmp_path: Path) -> None:
    s = load_settings(None, env={}, home=tmp_path, store={"url": f"sqlite://{tmp_path}/y.db"})
    assert s.database == tmp_path / "y.db"
    assert s.db_path == tmp_path / "y.db"


def test_a_postgresql_url_from_the_file_and_the_environment(tmp_path: Path) -> None:
    config = tmp_path / "memwarden.toml"
    config.write_text('[store]\nurl = "postgresql://mw:pw@db.example:5432/memory"\n')
    s = load_settings(config, env={}, home=tmp_path)
    assert s.database == "postgresql://mw:pw@db.example:5432/memory"
    assert s.store.postgresql
    assert "pw" not in repr(s.store)  # the password stays out of reprs (and logs)
    env = {"MEMWARDEN_STORE__URL": "postgres://other@h/db"}
    assert load_settings(config, env=env, home=tmp_path).database == "postgres://other@h/db"


@pytest.mark.parametrize(
    "url",
    [
        "mysql://root:hunter2@db/x",
        "postgresql://u:hunter2@h/db#x",
        "sqlite://u:hunter2@host/a.db",
        "postgresql://u:hunter2@h/\x01db",
        "",
    ],
)
def test_a_bad_url_names_the_field_and_hides_the_password(tmp_path: Path, url: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_settings(None, env={}, home=tmp_path, store={"url": url})
    problems = " ".join(err.value.problems)
    assert problems.startswith("store.url:")
    assert "hunter2" not in problems
    assert "hunter2" not in str(err.value)


def test_path_and_url_together_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        load_settings(
            None, env={}, home=tmp_path, store={"path": "a.db", "url": "postgresql://h/db"}
        )
    assert "not both" in " ".join(err.value.problems)
