"""One connection's aiomqtt client: MQTT 3.1.1, a persistent session, TLS, credentials,
and the delayed acknowledgement (PUBACK) the daemon sends only after a commit."""

from __future__ import annotations

import ssl
from typing import TYPE_CHECKING, Protocol

import aiomqtt

from memwarden.errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Callable
    from datetime import timedelta
    from pathlib import Path

    from pydantic import SecretStr

__all__ = ["ConnectionSettings", "make_client", "manual_acks", "tls_context"]


class ConnectionSettings(Protocol):
    """What a connection needs of the ``[mqtt]`` settings (the daemon's and an agent's)."""

    @property
    def host(self) -> str: ...
    @property
    def port(self) -> int: ...
    @property
    def username(self) -> str | None: ...
    @property
    def password(self) -> SecretStr | None: ...
    @property
    def tls(self) -> bool: ...
    @property
    def ca_file(self) -> Path | None: ...
    @property
    def cert_file(self) -> Path | None: ...
    @property
    def key_file(self) -> Path | None: ...
    @property
    def tls_insecure(self) -> bool: ...
    @property
    def keepalive_s(self) -> int: ...
    @property
    def connect_timeout(self) -> timedelta: ...
    @property
    def inflight_max(self) -> int: ...


def tls_context(settings: ConnectionSettings) -> ssl.SSLContext | None:
    """The TLS context for ``mqtts://`` (None for ``mqtt://``); ConfigError on bad files."""
    if not settings.tls:
        return None
    try:
        ctx = ssl.create_default_context(
            cafile=str(settings.ca_file) if settings.ca_file is not None else None
        )
        if settings.cert_file is not None:
            ctx.load_cert_chain(settings.cert_file, settings.key_file)
    except (OSError, ssl.SSLError) as err:
        raise ConfigError(f"mqtt: cannot load the TLS files: {err}") from err
    if settings.tls_insecure:
        ctx.check_hostname = False
    return ctx


def make_client(
    settings: ConnectionSettings,
    *,
    client_id: str,
    will: aiomqtt.Will | None,
    tls: ssl.SSLContext | None,
) -> aiomqtt.Client:
    """An aiomqtt client for one connection: MQTT 3.1.1, persistent session, QoS 1 window."""
    password = settings.password.get_secret_value() if settings.password is not None else None
    client = aiomqtt.Client(
        settings.host,
        settings.port,
        username=settings.username,
        password=password,
        identifier=client_id,
        protocol=aiomqtt.ProtocolVersion.V311,
        clean_session=False,  # the broker keeps our subscriptions and queues while we are away
        will=will,
        keepalive=settings.keepalive_s,
        timeout=settings.connect_timeout.total_seconds(),
        tls_context=tls,
        max_inflight_messages=settings.inflight_max,
    )
    # aiomqtt warns once per call beyond this many unanswered calls; our window is larger.
    client.pending_calls_threshold = settings.inflight_max + 16
    return client


def manual_acks(client: aiomqtt.Client) -> Callable[[aiomqtt.Message], None]:
    """Turn off automatic PUBACKs on ``client``; returns the function that sends one.

    aiomqtt acknowledges a QoS 1 message as soon as it is received and offers no
    delayed acknowledgement. paho-mqtt 2, which it wraps, does: ``manual_ack_set(True)``
    before connecting, then ``ack(mid, qos)`` per message. This is the one place we
    reach through aiomqtt to its paho client (``client._client``); call it before
    ``async with client`` and only ack messages of that same connection (message ids
    are per connection). paho runs in the event loop's thread here, so ``ack`` is safe
    to call from a coroutine.
    """
    paho = client._client  # noqa: SLF001 - see the docstring: the only private access
    paho.manual_ack_set(on=True)

    def ack(message: aiomqtt.Message) -> None:
        paho.ack(message.mid, message.qos)

    return ack
