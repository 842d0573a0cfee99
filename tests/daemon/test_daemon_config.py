"""Configuration: file > defaults, env over file, every problem reported with its path."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from memwarden.cli import app
from memwarden.daemon import load_settings
from memwarden.errors import ConfigError

ONLY_EXAMPLE = {"MEMWARDEN_PLUGINS": "envvar"}  # the installed example plugin, nothing else


@pytest.fixture
def cli(isolated_logging):
    """``cli(*args, env=...)``: run ``memwarden`` in-process; returns the click Result."""
    runner = CliRunner()
    return lambda *args, env=None: runner.invoke(app, list(args), env=env or ONLY_EXAMPLE)


def test_config_check_prints_every_problem(cli, config_file):
    """`config check` lists each problem as `path: message` and exits 1."""
    path = config_file(
        """
        bogus = 1
        [api]
        port = "http"
        [bus]
        queue_per_source = 0
        [scheduler]
        sweep_interval = "5 minutes"
        """
    )
    result = cli("config", "check", str(path))
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert "bogus: unknown setting" in lines
    assert (
        "api.port: Input should be a valid integer, unable to parse string as an integer" in lines
    )
    assert "bus.queue_per_source: Input should be greater than or equal to 1" in lines
    assert any(
        line.startswith("scheduler.sweep_interval: '5 minutes' is not a duration (use 30s")
        for line in lines
    )
    assert "Traceback" not in result.output


def test_config_check_checks_each_sensors_own_options(cli, config_file):
    """A sensor's table is checked by its plugin's Config model, and unknown kinds are named."""
    path = config_file(
        """
        [sensors.envvar]
        intervall_s = 5
        reliability = 2
        [sensors.mystery]
        """
    )
    result = cli("config", "check", str(path))
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert "sensors.envvar.intervall_s: unknown setting" in lines
    assert "sensors.envvar.reliability: Input should be less than or equal to 1" in lines
    assert lines[-1].startswith(
        "sensors.mystery.kind: no sensor plugin named 'mystery' (known: envvar)"
    )


def test_config_check_accepts_a_valid_file(cli, config_file):
    """A valid file exits 0 and says how many sensors it configures."""
    path = config_file(
        """
        log_level = "debug"
        [sensors.envvar]
        allow = ["APP_*"]
        startup = "error"
        revalidate_timeout = "5s"
        [sensors.envvar.restart]
        backoff_max = "30s"
        """
    )
    result = cli("config", "check", str(path))
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == f"{path}: ok (1 sensor(s))"


def test_config_check_missing_or_broken_file(cli, tmp_path, config_file):
    """A missing file and a file that is not TOML are reported, not raised."""
    result = cli("config", "check", str(tmp_path / "nope.toml"))
    assert result.exit_code == 1
    assert "no such configuration file" in result.stdout
    result = cli("config", "check", str(config_file("[api\n")))
    assert result.exit_code == 1
    assert "not valid TOML" in result.stdout


def test_run_with_a_bad_file_exits_78_with_the_problems(cli, config_file):
    """`memwarden run` with a bad file prints the problems and exits EX_CONFIG (78)."""
    result = cli("run", "--config", str(config_file("[bus]\nbatch_max = -1\n")))
    assert result.exit_code == 78
    assert "bus.batch_max: Input should be greater than or equal to 1" in result.stderr


def test_environment_overrides_the_file(config_file, tmp_path):
    """MEMWARDEN_API__PORT (nested with __) wins over the file; the file over the defaults."""
    path = config_file("[api]\nport = 7000\nhost = '127.0.0.2'\n")
    settings = load_settings(
        path, env={"MEMWARDEN_API__PORT": "9999", "MEMWARDEN_HOME": str(tmp_path)}
    )
    assert settings.api.port == 9999
    assert settings.api.host == "127.0.0.2"
    assert settings.home == tmp_path
    assert load_settings(path, env={}, api={"port": 1234}).api.port == 1234  # arguments win


def test_environment_values_are_validated(config_file):
    """A bad value from the environment is reported with its path like one from the file."""
    with pytest.raises(ConfigError) as err:
        load_settings(None, env={"MEMWARDEN_API__PORT": "99999"})
    assert err.value.problems == ["api.port: Input should be less than or equal to 65535"]


def test_no_file_at_all_works(tmp_path):
    """Without a file the defaults apply; home follows XDG_STATE_HOME."""
    settings = load_settings(None, env={"XDG_STATE_HOME": str(tmp_path)})
    assert settings.home == tmp_path / "memwarden"
    assert settings.db_path == tmp_path / "memwarden" / "memwarden.db"
    assert settings.sensors == {}
    assert settings.api.host == "127.0.0.1"  # loopback by default


def test_plugin_allowlist_comes_from_the_environment():
    """MEMWARDEN_PLUGINS is a comma-separated allowlist of plugins to load."""
    settings = load_settings(None, env={"MEMWARDEN_PLUGINS": "fs, envvar,"})
    assert settings.plugin_allowlist == ["fs", "envvar"]
    assert load_settings(None, env={}).plugin_allowlist is None


def test_sensor_names_are_checked():
    """A sensor table name that could not be a sensor id is refused with the rule."""
    with pytest.raises(ConfigError) as err:
        load_settings(None, env={}, sensors={"My Sensor": {}})
    assert "sensor name 'My Sensor' must match" in err.value.problems[0]


def test_sensor_settings_split_options_from_supervision():
    """Supervision keys are the daemon's; every other key goes to the sensor's Config."""
    settings = load_settings(
        None,
        env={},
        sensors={"x": {"startup": "ignore", "restart": {"crash_loop_restarts": 2}, "path": "/srv"}},
    )
    x = settings.sensors["x"]
    assert x.options == {"path": "/srv"}
    assert x.restart.crash_loop_restarts == 2
    assert x.revalidate_timeout is None  # the rules' revalidation_timeout applies
    # nothing names a state directory (no MEMWARDEN_HOME, STATE_DIRECTORY or XDG_STATE_HOME
    # in env={}): the default is ~/.local/state/memwarden of the user running it
    assert settings.home == Path.home() / ".local" / "state" / "memwarden"


class _WatchedEnviron(dict[str, str]):
    """os.environ stand-in that records every write."""

    def __init__(self, data: dict[str, str]) -> None:
        super().__init__(data)
        self.writes: list[str] = []

    def __setitem__(self, key: str, value: str) -> None:
        self.writes.append(f"set {key}")
        super().__setitem__(key, value)

    def __delitem__(self, key: str) -> None:
        self.writes.append(f"del {key}")
        super().__delitem__(key)

    def clear(self) -> None:
        self.writes.append("clear")
        super().clear()

    def update(self, *args: object, **kwargs: str) -> None:
        self.writes.append("update")
        super().update(*args, **kwargs)  # type: ignore[arg-type]

    def pop(self, key: str, *default: str) -> str:  # type: ignore[override]
        self.writes.append(f"pop {key}")
        return super().pop(key, *default)


def test_load_settings_never_writes_the_process_environment(config_file, tmp_path, monkeypatch):
    """With env= given, the process environment is neither read for MEMWARDEN_ values nor
    written (other threads may read it meanwhile): during and after the load it is the same."""
    process = _WatchedEnviron(
        {"MEMWARDEN_API__PORT": "1111", "XDG_STATE_HOME": str(tmp_path / "process")}
    )
    monkeypatch.setattr("os.environ", process)
    path = config_file("[api]\nhost = '127.0.0.2'\n")
    settings = load_settings(path, env={"XDG_STATE_HOME": str(tmp_path / "given")})
    assert process.writes == []
    assert process == {"MEMWARDEN_API__PORT": "1111", "XDG_STATE_HOME": str(tmp_path / "process")}
    assert settings.api.port == 7077  # the default: the given env has no port, ours is unread
    assert settings.home == tmp_path / "given" / "memwarden"
    assert settings.api.host == "127.0.0.2"
    # without env=, the process environment is read (and still not written)
    assert load_settings(path).api.port == 1111
    assert load_settings(path).home == tmp_path / "process" / "memwarden"
    assert process.writes == []


def test_precedence_arguments_then_environment_then_file_then_defaults(config_file, tmp_path):
    """Each layer wins over the ones below it, field by field (nested tables merged)."""
    path = config_file(
        "log_level = 'warning'\nplugins = 'fs'\n"
        "[api]\nport = 7000\nhost = '127.0.0.2'\nmax_body_bytes = 2048\n"
    )
    env = {
        "MEMWARDEN_API__PORT": "8000",
        "MEMWARDEN_API__HOST": "127.0.0.3",
        "MEMWARDEN_PLUGINS": "envvar",
        "XDG_STATE_HOME": str(tmp_path),
    }
    settings = load_settings(path, env=env, api={"port": 9000})
    assert settings.api.port == 9000  # argument > env > file
    assert settings.api.host == "127.0.0.3"  # env > file
    assert settings.plugins == "envvar"  # env > file
    assert settings.api.max_body_bytes == 2048  # file > default
    assert settings.log_level == "warning"  # file > default
    assert settings.log_format == "auto"  # the default
    assert settings.home == tmp_path / "memwarden"  # the default, from the given environment
    assert load_settings(path, env={**env, "MEMWARDEN_HOME": str(tmp_path / "h")}).home == (
        tmp_path / "h"
    )
    assert load_settings(path, env=env, home=tmp_path / "arg").home == tmp_path / "arg"


def test_inline_read_budget_is_bounded(config_file):
    """[store] inline_read_ms tunes (or with 0 turns off) searches on the loop; a budget
    that would let one search hold the loop for long is refused, naming the key."""
    assert (
        load_settings(config_file("[store]\ninline_read_ms = 0\n"), env={}).store.inline_read_ms
        == 0
    )
    assert load_settings(None, env={}).store.inline_read_ms == 0.5
    with pytest.raises(ConfigError) as err:
        load_settings(config_file("[store]\ninline_read_ms = 50\n"), env={})
    assert err.value.problems == ["store.inline_read_ms: Input should be less than or equal to 5"]


def test_maintenance_connections_are_bounded(config_file):
    """[store] maintenance_connections (PostgreSQL's decay ranges at once): 2 by default,
    1-8 from the file; 0 or more than 8 are refused, naming the key."""
    assert load_settings(None, env={}).store.maintenance_connections == 2
    one = config_file("[store]\nmaintenance_connections = 1\n")
    assert load_settings(one, env={}).store.maintenance_connections == 1
    for bad, says in (("0", "greater than or equal to 1"), ("9", "less than or equal to 8")):
        with pytest.raises(ConfigError) as err:
            load_settings(config_file(f"[store]\nmaintenance_connections = {bad}\n"), env={})
        assert err.value.problems == [f"store.maintenance_connections: Input should be {says}"]


def test_the_embed_claim_time_is_a_validated_setting(tmp_path):
    """``[search] embed_claim`` (PostgreSQL's claim on a batch of queued blocks): 120 s
    by default, a duration from the file or the environment, refused outside 1 s - 1 day
    with the field named."""
    env = {"XDG_STATE_HOME": str(tmp_path)}
    assert load_settings(None, env=env).search.embed_claim.total_seconds() == 120
    path = tmp_path / "memwarden.toml"
    path.write_text('[search]\nembed_claim = "10m"\n')
    assert load_settings(path, env=env).search.embed_claim.total_seconds() == 600
    got = load_settings(None, env={**env, "MEMWARDEN_SEARCH__EMBED_CLAIM": "45s"})
    assert got.search.embed_claim.total_seconds() == 45
    for bad in ("0s", "500ms", "2d", "soon"):
        with pytest.raises(ConfigError) as err:
            load_settings(None, env={**env, "MEMWARDEN_SEARCH__EMBED_CLAIM": bad})
        [problem] = err.value.problems
        assert problem.startswith("search.embed_claim: "), problem


def test_flood_commit_bound_is_bounded(config_file):
    """[store] flood_commit_events bounds a flood's transactions; below the normal
    transaction (20 000 events) or past a million it is refused, naming the key."""
    assert load_settings(None, env={}).store.flood_commit_events == 80_000
    assert (
        load_settings(
            config_file("[store]\nflood_commit_events = 20000\n"), env={}
        ).store.flood_commit_events
        == 20_000
    )
    for value, problem in (
        (100, "greater than or equal to 20000"),
        (2_000_000, "less than or equal to 1000000"),
    ):
        with pytest.raises(ConfigError) as err:
            load_settings(config_file(f"[store]\nflood_commit_events = {value}\n"), env={})
        assert err.value.problems == [f"store.flood_commit_events: Input should be {problem}"]


def test_flood_wal_bound_is_bounded(config_file):
    """[store] flood_wal_mib bounds the WAL while a flood defers its checkpoint (0 turns
    the deferral off); a negative size is refused, naming the key."""
    assert load_settings(None, env={}).store.flood_wal_mib == 256
    loaded = load_settings(config_file("[store]\nflood_wal_mib = 0\n"), env={})
    assert loaded.store.flood_wal_mib == 0
    with pytest.raises(ConfigError) as err:
        load_settings(config_file("[store]\nflood_wal_mib = -1\n"), env={})
    assert err.value.problems == ["store.flood_wal_mib: Input should be greater than or equal to 0"]
