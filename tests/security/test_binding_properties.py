"""Properties over generated bindings (issue 13): a binding the fs or http sensor accepts
never makes it read outside its roots or reach a scheme/host/port outside its list.

The fs property watches what the sensor really opens: every file descriptor it opens is
resolved through ``/proc/self/fd`` and must lie inside the root. The http property
answers every request from a mock transport that records where it was really sent (and
with which headers), and answers some with a redirect to a host that is not allowed.
"""

from __future__ import annotations

import asyncio
import builtins
import os
from pathlib import Path
from typing import Any
from unittest import mock

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from memwarden.sensors.fs import FsBinding, FsConfig, FsSensor, binding_id
from memwarden.sensors.http import HttpBinding, HttpConfig, HttpSensor

# ---------------------------------------------------------------------- fs

SECRET = b"secret outside the root"


@pytest.fixture(scope="module")
def fs_world(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A root with files, a nested directory, links that stay and links that leave."""
    base = tmp_path_factory.mktemp("fsprop")
    root = (base / "root").resolve()
    outside = (base / "outside").resolve()
    (root / "sub" / "deep").mkdir(parents=True)
    outside.mkdir()
    (outside / "secret.json").write_bytes(b'{"k": "' + SECRET + b'"}')
    (outside / "dir").mkdir()
    (outside / "dir" / "x.txt").write_bytes(SECRET)
    (root / "a.json").write_text('{"k": "v", "n": [1, 2]}')
    (root / "sub" / "b.yaml").write_text("k: v\n")
    (root / "sub" / "deep" / "c.txt").write_text("hello\n")
    (root / "in-link").symlink_to(root / "a.json")
    (root / "out-link").symlink_to(outside / "secret.json")
    (root / "sub" / "out-dir").symlink_to(outside / "dir")
    (root / "sub" / "up").symlink_to(base)
    os.mkfifo(root / "pipe")
    return root, outside


_SEGMENTS = st.sampled_from(
    [
        "a.json", "sub", "deep", "b.yaml", "c.txt", "in-link", "out-link", "out-dir", "up",
        "pipe", "..", ".", "", "outside", "secret.json", "dir", "x.txt", "root", "*", "**",
        "?.json", "[a-z]*", "[!a]*", "*.txt", "~", "%2e%2e", "..\\..",
    ]
)  # fmt: skip


@st.composite
def fs_selectors(draw: st.DrawFn, root: Path, outside: Path) -> dict[str, Any]:
    parts = draw(st.lists(_SEGMENTS, min_size=1, max_size=4))
    start = draw(st.sampled_from(["", "", "", f"{root}/", f"{outside}/", f"{root}/../", "/"]))
    selector: dict[str, Any] = {"path": start + "/".join(parts)}
    kind = draw(st.sampled_from(["none", "exists", "absent", "sha256", "regex", "key"]))
    if kind in ("exists", "absent"):
        selector[kind] = True
    elif kind == "sha256":
        selector["sha256"] = "0" * 64
    elif kind == "regex":
        selector["regex"] = draw(st.sampled_from([".*", "secret", "^(a+)+$", "(?s).+"]))
    elif kind == "key":
        selector["key"] = draw(st.sampled_from(["", "/k", "/n/0"]))
    return selector


class _Opened:
    """Every file or directory the code under test opens, by its real location."""

    def __init__(self) -> None:
        self.paths: list[str] = []
        self._os_open = os.open
        self._open = builtins.open
        self._scandir = os.scandir

    def os_open(self, path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        fd = self._os_open(path, flags, *args, **kwargs)
        self.paths.append(str(Path(f"/proc/self/fd/{fd}").readlink()))
        return fd

    def open(self, file: Any, *args: Any, **kwargs: Any) -> Any:
        handle = self._open(file, *args, **kwargs)
        if hasattr(handle, "fileno"):
            self.paths.append(str(Path(f"/proc/self/fd/{handle.fileno()}").readlink()))
        return handle

    def scandir(self, path: Any = ".") -> Any:
        if isinstance(path, int):
            self.paths.append(str(Path(f"/proc/self/fd/{path}").readlink()))
        else:  # by name: where it leads (conservative: a link to a file counts too)
            self.paths.append(os.path.realpath(path))
        return self._scandir(path)


def test_an_accepted_fs_binding_never_reads_outside_its_root(fs_world):
    root, outside = fs_world
    sensor = FsSensor(FsConfig.model_validate({"roots": [str(root)]}))
    accepted: list[str] = []

    @settings(max_examples=300)
    @given(fs_selectors(root, outside))
    def check(raw: dict[str, Any]) -> None:
        try:
            selector = FsBinding.model_validate(raw)
            sensor.validate_binding(selector)
        except (ValidationError, ValueError):
            return  # refused when added: nothing to run
        accepted.append(selector.path)
        target = sensor._target_of(selector)
        bid = binding_id("b", selector.path, raw)
        bound = sensor._make_bound(bid, "b", selector.path, selector, target)
        opened = _Opened()
        with (
            mock.patch.object(os, "open", opened.os_open),
            mock.patch.object(builtins, "open", opened.open),
            mock.patch.object(os, "scandir", opened.scandir),
        ):
            [(_, _, verdicts)] = sensor._check_sync([(target.key, None, [(bound, "force")])])
        for path in opened.paths:
            assert path == str(root) or path.startswith(f"{root}/"), (raw, path)
        for _, verdict in verdicts:
            assert "secret outside" not in str(verdict.observed), raw
            assert "secret outside" not in verdict.message, raw

    check()
    assert len(accepted) >= 10, "too few generated bindings were accepted to mean anything"


# ---------------------------------------------------------------------- http

ALLOWED = ["https://api.example.com", "127.0.0.1:8080", "*.internal.test"]
SECRET_HEADER = "Bearer only-for-api.example.com"


def _allowed(scheme: str, host: str, port: int) -> bool:
    """The intended policy, written out independently of the sensor's parser."""
    if (scheme, host, port) == ("https", "api.example.com", 443):
        return True
    if host == "127.0.0.1" and port == 8080 and scheme in ("http", "https"):
        return True
    default = {"http": 80, "https": 443}[scheme]
    return host.endswith(".internal.test") and port == default


_HOSTS = st.sampled_from(
    [
        "api.example.com", "API.EXAMPLE.COM", "api.example.com.", "example.com",
        "evil.com", "api.example.com.evil.com", "127.0.0.1", "localhost", "[::1]",
        "2130706433", "0x7f.0.0.1", "a.internal.test", "internal.test", "x.a.internal.test",
        "api.example.com@evil.com", "evil.com#@api.example.com", "api.example.com\\@evil.com",
        "evil.com%2f@api.example.com", "user:pw@api.example.com",
    ]
)  # fmt: skip


_NEAR_HOSTS = st.sampled_from(
    ["api.example.com", "API.example.com.", "127.0.0.1", "a.internal.test", "b.a.internal.test"]
)


@st.composite
def http_selectors(draw: st.DrawFn) -> dict[str, Any]:
    if draw(st.booleans()):  # near the allowed list: mostly accepted, so mostly fetched
        scheme = draw(st.sampled_from(["http", "https"]))
        host = draw(_NEAR_HOSTS)
        port = draw(st.sampled_from(["", ":443", ":8080", ":80"]))
    else:
        scheme = draw(st.sampled_from(["http", "https", "HTTPS", "ftp", "file", ""]))
        host = draw(_HOSTS)
        port = draw(st.sampled_from(["", ":80", ":443", ":8080", ":8443", ":0", ":08080", ":*"]))
    path = draw(st.sampled_from(["/", "/v", "/../../x", "?a=1", "#frag", "/%2e%2e/"]))
    selector: dict[str, Any] = {"url": f"{scheme}://{host}{port}{path}"}
    if draw(st.booleans()):
        selector["interval"] = draw(st.sampled_from(["0s", "1ms", "500ms", "1s", "1h"]))
    return selector


def test_an_accepted_http_binding_reaches_only_allowed_targets(tmp_path):
    config = HttpConfig.model_validate(
        {
            "allowed_hosts": ALLOWED,
            "headers": [
                {"host": "https://api.example.com", "values": {"Authorization": SECRET_HEADER}}
            ],
        }
    )
    sensor = HttpSensor(config)
    sent: list[httpx.Request] = []
    accepted: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(302, headers={"Location": "http://evil.com/landing"})

    sensor._client = httpx.AsyncClient(
        transport=httpx.MockTransport(answer), follow_redirects=False
    )

    @settings(max_examples=300)
    @given(http_selectors())
    def check(raw: dict[str, Any]) -> None:
        sent.clear()
        try:
            selector = HttpBinding.model_validate(raw)
            sensor.validate_binding(selector)
        except (ValidationError, ValueError):
            return
        accepted.append(selector.url)
        asyncio.run(sensor.observe(selector))
        assert len(sent) == 1, (raw, sent)  # one request: the redirect was not followed
        [request] = sent
        url = request.url
        port = url.port or {"http": 80, "https": 443}[url.scheme]
        assert _allowed(url.scheme, url.host.rstrip("."), port), (raw, str(url))
        if request.headers.get("authorization") is not None:
            assert (url.scheme, url.host.rstrip("."), port) == ("https", "api.example.com", 443)

    check()
    assert len(accepted) >= 10, "too few generated bindings were accepted to mean anything"
