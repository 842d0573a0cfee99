"""The unit files, sysusers/tmpfiles snippets and example config, checked by systemd's tools."""

from __future__ import annotations

import re
import subprocess
from typing import TYPE_CHECKING

from memwarden.daemon import load_settings
from memwarden.daemon._config import BusSettings
from tests.deploy._units import (
    SYSTEM_UNIT,
    SYSTEMD,
    USER_UNIT,
    need_tool,
    service_settings,
    time_span_s,
)

if TYPE_CHECKING:
    from pathlib import Path

MAX_EXPOSURE = 1.5


def run(argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60, **kwargs)  # type: ignore[call-overload]


def test_system_unit_verifies(systemd_analyze, memwarden_bin, tmp_path):
    """`systemd-analyze verify` accepts memwarden.service (ExecStart pointed at our binary)."""
    text = SYSTEM_UNIT.read_text()
    assert "ExecStart=/usr/bin/memwarden " in text
    unit = tmp_path / "memwarden.service"
    unit.write_text(text.replace("ExecStart=/usr/bin/memwarden ", f"ExecStart={memwarden_bin} "))
    result = run([systemd_analyze, "verify", "--man=no", str(unit)])
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip() == "", result.stderr


def test_user_unit_verifies(systemd_analyze, memwarden_bin, tmp_path):
    """`systemd-analyze --user verify` accepts memwarden-user.service as shipped (%h/.local/bin)."""
    home = tmp_path / "home"
    (home / ".local" / "bin").mkdir(parents=True)
    (home / ".local" / "bin" / "memwarden").symlink_to(memwarden_bin)
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    env = {"HOME": str(home), "XDG_RUNTIME_DIR": str(runtime), "PATH": "/usr/bin:/bin"}
    result = run([systemd_analyze, "--user", "verify", "--man=no", str(USER_UNIT)], env=env)
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip() == "", result.stderr


def test_system_unit_exposure_is_at_most_1_5(systemd_analyze):
    """`systemd-analyze security --offline` rates memwarden.service at exposure <= 1.5."""
    result = run(
        [systemd_analyze, "security", "--offline=true", "--threshold=15", str(SYSTEM_UNIT)]
    )
    match = re.search(r"Overall exposure level for memwarden\.service:\s*([\d.]+)", result.stdout)
    assert match, result.stdout + result.stderr
    exposure = float(match.group(1))
    assert exposure <= MAX_EXPOSURE, result.stdout
    assert result.returncode == 0, result.stdout + result.stderr  # the --threshold agrees


def test_units_speak_notify_with_watchdog_reload_and_timeouts():
    """Both units: Type=notify from the main process, a watchdog, SIGHUP reload, and a
    stop timeout longer than the daemon's default bus drain."""
    drain_s = BusSettings().drain_timeout.total_seconds()
    for unit in (SYSTEM_UNIT, USER_UNIT):
        s = {k: v[-1] for k, v in service_settings(unit).items()}
        assert (s["Type"], s["NotifyAccess"]) == ("notify", "main"), unit
        assert s["ExecReload"].endswith("kill -HUP $MAINPID"), unit
        assert 0 < time_span_s(s["WatchdogSec"]) <= 60, unit
        assert s["Restart"] == "on-failure", unit
        assert time_span_s(s["RestartSec"]) > 0, unit
        assert time_span_s(s["TimeoutStartSec"]) > 0, unit
        assert time_span_s(s["TimeoutStopSec"]) >= 2 * drain_s, unit
        assert " run --config " in s["ExecStart"], unit


def test_sysusers_creates_the_service_user(tmp_path):
    """memwarden.sysusers creates a system user and group `memwarden` with no login shell."""
    sysusers = need_tool("systemd-sysusers")
    (tmp_path / "etc").mkdir()
    snippet = (SYSTEMD / "memwarden.sysusers").read_text()
    result = run([sysusers, f"--root={tmp_path}", "-"], input=snippet)
    assert result.returncode == 0, result.stderr
    (user,) = [
        line.split(":")
        for line in (tmp_path / "etc" / "passwd").read_text().splitlines()
        if line.startswith("memwarden:")
    ]
    assert int(user[2]) < 1000, user  # a system user
    assert user[6].endswith("nologin"), user
    assert any(
        line.startswith("memwarden:") for line in (tmp_path / "etc" / "group").read_text().split()
    )


def test_tmpfiles_creates_config_and_backup_directories(tmp_path):
    """memwarden.tmpfiles creates /etc/memwarden (0755) and /var/backups/memwarden (0700)."""
    tmpfiles = need_tool("systemd-tmpfiles")
    snippet = (SYSTEMD / "memwarden.tmpfiles").read_text()
    result = run([tmpfiles, f"--root={tmp_path}", "--create", "-"], input=snippet)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "etc/memwarden").stat().st_mode & 0o777 == 0o755
    assert (tmp_path / "var/backups/memwarden").stat().st_mode & 0o777 == 0o700


def test_example_config_is_valid_and_loopback_only(tmp_path: Path):
    """systemd/memwarden.toml loads without problems and keeps the API on loopback."""
    settings = load_settings(SYSTEMD / "memwarden.toml", env={"STATE_DIRECTORY": str(tmp_path)})
    assert settings.home == tmp_path  # from the unit's StateDirectory=, not the file
    assert settings.api.host == "127.0.0.1"
    assert settings.sensors == {}
