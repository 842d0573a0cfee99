"""The bodies both ends publish, byte for byte as docs/MQTT.md describes them."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from memwarden.memory import Binding, RevalidationRequest
from memwarden.mqtt import (
    AGENT_ACCEPTS,
    DAEMON_OFFLINE,
    DAEMON_ONLINE,
    QUEUED_AT,
    agent_status,
    bindings_message,
    block_state,
    heartbeat,
    is_agent_id,
    resend_request,
    revalidation_request,
)


def test_daemon_messages_keep_their_bytes():
    """Re-send requests, bindings and state changes: field order and JSON spacing unchanged."""
    assert resend_request("edge1/r1", 3, 5) == (
        b'{"agent": "edge1/r1", "from_seq": 3, "to_seq": 5}'
    )
    rows = [("B1", Binding(sensor="files", subject="a.txt#/x"))]
    assert bindings_message(rows) == (
        b'[{"block_id": "B1", "binding": {"sensor": "files", "subject": "a.txt#/x"}}]'
    )
    assert bindings_message([]) == b"[]"  # a sensor with no bindings left clears them
    # With the block's window beside the binding (added later: an older agent, which
    # reads only block_id and binding, is unaffected); a block without one has none.
    rows.append(("B2", Binding(sensor="files", subject="b.txt")))
    assert bindings_message(rows, {"B1": timedelta(hours=6)}) == (
        b'[{"block_id": "B1", "binding": {"sensor": "files", "subject": "a.txt#/x"}, '
        b'"validity_window": "6h"}, '
        b'{"block_id": "B2", "binding": {"sensor": "files", "subject": "b.txt"}}]'
    )
    state = block_state(
        "B1", state="refuted", before="valid", reliability=0.5, observed_at=1.5, event_id="E1"
    )
    assert state == (
        b'{"block_id": "B1", "state": "refuted", "before": "valid", "reliability": 0.5, '
        b'"observed_at": "1970-01-01T00:00:01.500000+00:00", "event_id": "E1"}'
    )
    assert (DAEMON_ONLINE, DAEMON_OFFLINE) == (b"online", b"offline")


def test_agent_messages_keep_their_bytes():
    """Status (with a reason only when there is one) and heartbeat bodies unchanged."""
    online = agent_status(
        "online",
        agent_id="edge1",
        agent="edge1/r1",
        sensors=["a", "b"],
        heartbeat_s=10.0,
        version="1.2.3",
    )
    assert online == (
        b'{"status": "online", "agent_id": "edge1", "agent": "edge1/r1", "sensors": ["a", "b"], '
        b'"heartbeat_s": 10.0, "version": "1.2.3"}'
    )
    gone = agent_status(
        "offline",
        agent_id="edge1",
        agent="edge1/r1",
        sensors=[],
        heartbeat_s=10.0,
        version="1.2.3",
        reason="stopped",
    )
    assert json.loads(gone)["reason"] == "stopped"
    assert gone.endswith(b', "version": "1.2.3", "reason": "stopped"}')
    beat = heartbeat("edge1/r1", seq=7, queued=2, dropped=0, at=0.0)
    assert beat == (
        b'{"agent": "edge1/r1", "seq": 7, "queued": 2, "dropped": 0, '
        b'"at": "1970-01-01T00:00:00+00:00"}'
    )


def test_agent_ids_are_one_safe_topic_level():
    """An agent id is 1-64 of [A-Za-z0-9_.-]: no level separators, wildcards or blanks."""
    assert is_agent_id("edge-1.site_A")
    assert is_agent_id("x" * 64)
    for bad in ("", "x" * 65, "a/b", "+", "#", "a b", "é"):
        assert not is_agent_id(bad), bad


_NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _request(**extra: Any) -> RevalidationRequest:
    """A request for ``files``/``a.txt`` of block B1, made at ``_NOW``."""
    return RevalidationRequest(
        block_id="B1",
        sensor="files",
        subject="a.txt",
        binding=Binding(sensor="files", subject="a.txt"),
        reason="expired",
        created_at=_NOW,
        deadline=_NOW + timedelta(seconds=30),
        **extra,
    )


def test_a_revalidation_request_carries_queued_at_only_when_asked():
    """Without ``queued_at=True`` the request has the nine first fields (an agent of an
    earlier release reads them with extra fields forbidden, and would refuse more); with
    it, ``queued_at`` too, on the daemon's clock, in the format of ``created_at``."""
    request = _request(queued_at=_NOW - timedelta(minutes=5))
    first = {
        "id", "block_id", "sensor", "subject", "binding", "reason", "created_at", "deadline",
        "attempts",
    }  # fmt: skip
    body = json.loads(revalidation_request(request))
    assert set(body) == first
    assert RevalidationRequest.model_validate(body).queued_at is None
    assert json.loads(request.model_dump_json()) == body  # the model alone never adds it
    later = json.loads(revalidation_request(request, queued_at=True))
    assert set(later) == first | {QUEUED_AT}
    assert later["queued_at"] == "2025-12-31T23:55:00Z"
    assert later["created_at"] == "2026-01-01T00:00:00Z"
    assert RevalidationRequest.model_validate(later).queued_at == request.queued_at
    # A request that has no queued_at (made before it existed) goes out without one.
    bare = request.model_copy(update={"queued_at": None})
    assert set(json.loads(revalidation_request(bare, queued_at=True))) == first


def test_an_agent_status_says_what_it_accepts_only_when_it_does():
    kw: dict[str, Any] = {"agent_id": "e", "agent": "e/r", "sensors": [], "heartbeat_s": 1.0}
    assert "accepts" not in json.loads(agent_status("online", version="1", **kw))
    body = json.loads(agent_status("online", version="1", accepts=AGENT_ACCEPTS, **kw))
    assert body["accepts"] == ["queued_at"]


def test_the_strict_reading_earlier_agents_used_refuses_a_field_it_does_not_know():
    """Why queued_at is negotiated: earlier agents read a request with the model alone
    (extra fields forbidden), which refuses any field it does not know; an agent before
    queued_at knew only the nine first fields."""
    request = _request()
    body = json.loads(revalidation_request(request))
    with pytest.raises(ValidationError, match="added_later"):
        RevalidationRequest.model_validate_json(json.dumps({**body, "added_later": 1}))
