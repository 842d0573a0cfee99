"""A policy set by ``PUT /v1/privacy`` is kept in the state dir (``privacy.policy.json``):
it stays in force across a restart and a SIGHUP, over ``[privacy]`` of the configuration,
until ``DELETE /v1/privacy``; ``GET`` says where the policy in force comes from. A kept
file that is unfit stops the start and fails a reload, never a silent fall back."""

from __future__ import annotations

import contextlib
import json
import signal
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from memwarden.daemon import Daemon
from memwarden.errors import ConfigError
from memwarden.plugins import Registry
from memwarden.sensors import FsSensor
from tests.privacy.test_doors import EMAIL, serving
from tests.support import eventually_blocking, memwarden_running

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

KEPT = "privacy.policy.json"


class Running:
    def __init__(self, daemon: Daemon, client: httpx.AsyncClient):
        self.daemon, self.client = daemon, client

    async def policy(self) -> dict[str, Any]:
        answer = await self.client.get("/v1/privacy")
        assert answer.status_code == 200, answer.text
        return answer.json()  # type: ignore[no-any-return]

    async def put_email(self, action: str) -> httpx.Response:
        policy = (await self.policy())["policy"]
        policy["rules"]["email"] = action
        return await self.client.put("/v1/privacy", json=policy)

    async def add_email(self) -> httpx.Response:
        return await self.client.post("/v1/blocks", json={"content": f"mail {EMAIL}"})


@contextlib.asynccontextmanager
async def running_daemon(tmp_path: Path) -> AsyncIterator[Running]:
    # [privacy] rules: email = "redact" (the default)
    async with serving(tmp_path) as (daemon, client):
        yield Running(daemon, client)


async def test_a_put_policy_survives_a_restart_until_delete(tmp_path):
    """PUT email=reject; after a restart it is still in force, said to come from the
    kept file and to differ from the configuration; DELETE brings the configuration's
    back, now and after the next restart."""
    home = tmp_path / "home"
    async with running_daemon(tmp_path) as d:
        assert (await d.policy())["set_by"] == "config"
        answer = await d.put_email("reject")
        assert answer.status_code == 200, answer.text
        assert (await d.add_email()).status_code == 422
    kept = home / KEPT
    assert oct(kept.stat().st_mode & 0o777) == "0o600"
    async with running_daemon(tmp_path) as d:
        now = await d.policy()
        assert now["policy"]["rules"]["email"] == "reject"
        assert now["set_by"] == "api"
        assert now["source"] == str(kept)
        assert now["set_by_agent"] == "default"  # the owner token's agent
        assert now["set_at"] is not None
        assert now["config_differs"] is True
        assert (await d.add_email()).status_code == 422
        reset = await d.client.delete("/v1/privacy")
        assert reset.status_code == 200, reset.text
        assert reset.json()["set_by"] == "config"
        assert reset.json()["policy"]["rules"]["email"] == "redact"
        assert reset.json()["source"] == ""  # no configuration file: defaults
        assert not kept.exists()
        assert (await d.add_email()).status_code == 201
    async with running_daemon(tmp_path) as d:
        assert (await d.policy())["set_by"] == "config"
        again = await d.client.delete("/v1/privacy")  # nothing kept: nothing changes
        assert again.status_code == 200
        assert again.json()["policy"]["rules"]["email"] == "redact"


async def test_delete_and_put_need_the_token(tmp_path):
    async with running_daemon(tmp_path) as d:
        policy = (await d.policy())["policy"]
        async with httpx.AsyncClient(base_url=str(d.client.base_url)) as anonymous:
            assert (await anonymous.delete("/v1/privacy")).status_code == 401
            assert (await anonymous.put("/v1/privacy", json=policy)).status_code == 401
    assert not (tmp_path / "home" / KEPT).exists()


async def test_a_put_that_cannot_be_kept_changes_nothing(tmp_path):
    """When the policy cannot be written to the state dir (here its name is taken by a
    directory), the PUT is a 503 and the policy in force stays: never one a restart
    would silently drop."""
    async with running_daemon(tmp_path) as d:
        (tmp_path / "home" / KEPT).mkdir()
        answer = await d.put_email("reject")
        assert answer.status_code == 503, answer.text
        assert KEPT in answer.json()["detail"]
        now = await d.policy()
        assert (now["set_by"], now["policy"]["rules"]["email"]) == ("config", "redact")
        assert (await d.add_email()).status_code == 201


UNFIT: list[tuple[str, Any]] = [
    ("not json", "{"),
    ("another format", {"format": "something/9", "set_at": 1, "set_by": "x", "policy": {}}),
    ("a bad rule", {"rules": {"email": "shred"}}),
    ("an unknown field", {"rules": {"email": "redact"}, "surprise": 1}),
    ("no set_at", None),
    ("too large", "x" * (256 * 1024 + 10)),
    ("mode 0644", {}),
    ("a symlink", {}),
]


@pytest.mark.parametrize(("case", "content"), UNFIT, ids=[c for c, _ in UNFIT])
async def test_an_unfit_kept_policy_stops_the_start(tmp_path, case, content):
    """Hostile or broken state: the daemon refuses to start naming the file, rather than
    apply a configuration that may be laxer than what the operator set."""
    async with running_daemon(tmp_path) as d:
        assert (await d.put_email("reject")).status_code == 200
        settings = d.daemon.settings
    path = tmp_path / "home" / KEPT
    body = json.loads(path.read_text())
    if isinstance(content, str):
        path.write_text(content)
    elif case == "another format":
        path.write_text(json.dumps(content))
    elif case == "no set_at":
        del body["set_at"]
        path.write_text(json.dumps(body))
    elif case == "mode 0644":
        path.chmod(0o644)
    elif case == "a symlink":
        target = tmp_path / "elsewhere.json"
        path.rename(target)
        path.symlink_to(target)
    else:
        body["policy"].update(content)
        path.write_text(json.dumps(body))
    daemon = Daemon(settings, registry=Registry.from_classes({"fs": FsSensor}))
    with pytest.raises(ConfigError, match=KEPT):
        await daemon.run()


def test_sighup_keeps_the_put_policy_and_rereads_the_kept_file(tmp_path):
    """`memwarden run`: after a PUT, a SIGHUP with a changed [privacy] keeps the PUT's
    policy (the configuration's is reported as differing); the kept file removed by hand,
    the next SIGHUP applies the configuration; a broken kept file fails the reload and
    the running policy stays."""
    home = tmp_path / "home"
    config = tmp_path / "memwarden.toml"
    config.write_text('[privacy.rules]\nemail = "redact"\n')
    with memwarden_running(home, "--config", str(config)) as running:

        def get() -> dict[str, Any]:
            answer = httpx.get(f"{running.url}/v1/privacy", headers=running.auth, timeout=5)
            return answer.json()  # type: ignore[no-any-return]

        first = get()
        assert (first["set_by"], first["source"]) == ("config", str(config))
        policy = first["policy"]
        policy["rules"]["email"] = "reject"
        put = httpx.put(f"{running.url}/v1/privacy", json=policy, headers=running.auth, timeout=5)
        assert put.status_code == 200, put.text
        config.write_text('[privacy.rules]\nemail = "allow"\n')
        running.process.send_signal(signal.SIGHUP)
        eventually_blocking(  # a warning: the log of `memwarden run` keeps warnings
            lambda: "privacy_config_overridden" in running.log(), what="the reload"
        )
        kept = get()
        assert kept["policy"]["rules"]["email"] == "reject"
        assert (kept["set_by"], kept["config_differs"]) == ("api", True)

        (home / KEPT).unlink()
        running.process.send_signal(signal.SIGHUP)
        eventually_blocking(lambda: get()["set_by"] == "config", what="the configuration's")
        assert get()["policy"]["rules"]["email"] == "allow"

        put = httpx.put(f"{running.url}/v1/privacy", json=policy, headers=running.auth, timeout=5)
        assert put.status_code == 200
        (home / KEPT).write_text("{")
        running.process.send_signal(signal.SIGHUP)
        eventually_blocking(lambda: "reload_failed" in running.log(), what="the bad reload")
        assert KEPT in running.log()
        assert get()["policy"]["rules"]["email"] == "reject"
