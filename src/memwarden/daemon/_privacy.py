"""Privacy at every door: what the daemon stores passes the policy first.

The doors, each with its source (``[privacy.sources.<source>]``):

- ``agent``: a block's title, content and tags when added or edited (HTTP API, MCP and
  the CLI all come through :meth:`Daemon.add_block` / :meth:`Daemon.edit_block`), the
  reason of a review request;
- ``sensor``: an event's ``observed`` value and ``message``, from a local sensor
  (:meth:`Bus.put`) or from outside (``POST /v1/events``, MQTT: :meth:`Bus.submit`);
- ``review``: a review decision's comment and new content, and its event;
- ``import``: an imported block's record, earlier versions and history.

What a binding checks is left as it is: its selector and expected value (the sensor
compares the world to them), an event's ``subject`` (how it finds its blocks). A sensor
decides its verdict on what it saw before the event reaches the bus, so redacting the
stored ``observed`` never changes a verdict: an fs ``sha256`` binding still confirms.

The HMAC key is ``privacy.key`` in the state dir: 32 random bytes, made once (0600,
durably) and checked at each start like the API token. Losing it changes every future
placeholder (facts written before and after no longer compare equal), nothing else.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
from typing import TYPE_CHECKING, Any, Literal

import structlog

from memwarden.errors import ConfigError, ValidationInputError
from memwarden.memory import BlockPatch, validate_input
from memwarden.memory._codec import content_key
from memwarden.memory._files import private_dir, read_private, write_private
from memwarden.privacy import (
    PrivacySettings,
    Redactor,
    Scope,
    TooLongError,
    json_chars,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from pathlib import Path

    from memwarden.memory import NewBlock, ValidationEvent

__all__ = ["KEY_FILE", "PrivacyDoors", "ensure_key"]

log = structlog.get_logger("memwarden.privacy")

KEY_FILE = "privacy.key"
_KEY_HEX = 64
# Inputs whose strings add up to more than this are scanned in a worker thread, so a big
# body never holds the event loop (RE2 and the checks release it between calls).
THREAD_CHARS = 64 * 1024


def ensure_key(home: Path) -> bytes:
    """The HMAC key in ``home/privacy.key``: made when absent, checked when present
    (a :class:`ConfigError` naming the problem otherwise)."""
    path = home / KEY_FILE
    if not os.path.lexists(path):
        private_dir(home)
        made = secrets.token_hex(32)
        if write_private(path, (made + "\n").encode(), replace=False):
            return bytes.fromhex(made)

    def refuse(problem: str) -> ConfigError:
        message = (
            f"privacy key file {path}: {problem}. Fix it, or delete it to have a new key "
            "made at the next start (placeholders written before then stop matching new ones)"
        )
        return ConfigError(message, problems=[message])

    raw = read_private(path, 255, refuse)
    text = raw.decode("ascii", "replace").strip()
    try:
        key = bytes.fromhex(text)
    except ValueError:
        key = b""
    if len(text) != _KEY_HEX or len(key) != _KEY_HEX // 2:
        raise refuse(f"does not hold {_KEY_HEX} hex digits")
    return key


class PrivacyDoors:
    """The running policy and what it is applied to; swapped whole on reload and PUT."""

    def __init__(self, policy: PrivacySettings, key: bytes) -> None:
        self.redactor = Redactor(policy, key)
        self.changed_by: Literal["config", "api"] = "config"

    @property
    def policy(self) -> PrivacySettings:
        return self.redactor.policy

    def set_policy(self, policy: PrivacySettings, *, by: Literal["config", "api"]) -> bool:
        """Apply ``policy`` (already validated in full); whether it differs."""
        changed = policy != self.redactor.policy
        if changed:
            self.redactor = self.redactor.with_policy(policy)
            log.info("privacy_policy_applied", by=by)
        self.changed_by = by
        return changed

    def describe(self) -> dict[str, Any]:
        stats = self.redactor.stats
        return {
            "policy": self.policy.model_dump(mode="json"),
            "set_by": self.changed_by,
            "redacted": dict(sorted(stats.redacted.items())),
            "rejected": dict(sorted(stats.rejected.items())),
            "unchecked": stats.unchecked,
        }

    # ------------------------------------------------------------------ blocks

    async def new_block(self, block: NewBlock, source: Scope) -> NewBlock:
        if not self.redactor.active(source):
            return block
        size = len(block.content) + len(block.title) + sum(len(t) for t in block.tags)
        update = await _run(
            self._block_fields, block.title, block.content, block.tags, source, size
        )
        if not update:
            return block
        # Checked again: a placeholder may be longer than the value it replaced.
        return validate_input(type(block), {**block.model_dump(), **update})

    async def patch(self, patch: BlockPatch, source: Scope) -> BlockPatch:
        if not self.redactor.active(source):
            return patch
        size = len(patch.content or "") + len(patch.title or "") + len(patch.tags or ())
        update = await _run(
            self._block_fields, patch.title, patch.content, patch.tags, source, size
        )
        if not update:
            return patch
        return validate_input(BlockPatch, {**patch.model_dump(exclude_unset=True), **update})

    def _block_fields(
        self, title: str | None, content: str | None, tags: list[str] | None, source: Scope
    ) -> dict[str, Any]:
        r = self.redactor
        update: dict[str, Any] = {}
        if title:
            new = r.text(title, source=source, field="title")
            if new != title:
                update["title"] = new
        if content:
            new = r.text(content, source=source, field="content")
            if new != content:
                update["content"] = new
        if tags:
            new_tags = [r.text(t, source=source, field=f"tags.{i}") for i, t in enumerate(tags)]
            if new_tags != tags:
                update["tags"] = new_tags
        return update

    async def text(self, value: str, source: Scope, field: str) -> str:
        if not self.redactor.active(source):
            return value
        out: str = await _run(
            lambda: self.redactor.text(value, source=source, field=field), len(value)
        )
        return out

    # ------------------------------------------------------------------ events

    def event(self, event: ValidationEvent, source: Scope) -> ValidationEvent:
        """The event as it may be stored. Raises :class:`PrivacyRejectedError` for a
        rejected finding; a value too long to scan is withheld (the verdict is kept)."""
        r = self.redactor
        observed = event.observed
        if not r.active(source) or (
            (observed is None or isinstance(observed, (bool, int, float))) and not event.message
        ):
            return event
        update: dict[str, Any] = {}
        try:
            redacted = (
                r.text(observed, source=source, field="observed")
                if isinstance(observed, str)
                else r.json(observed, source=source, field="observed")
            )
        except TooLongError:
            redacted = (
                f"[withheld: longer than [privacy] max_scan_chars = {r.policy.max_scan_chars}]"
            )
        if redacted is not observed and redacted != observed:
            update["observed"] = redacted
        if event.message:
            message = r.text(event.message, source=source, field="message")
            if message != event.message:
                update["message"] = message[:4096]
        return event.model_copy(update=update) if update else event

    def _screened(
        self, event: ValidationEvent, source: Scope
    ) -> ValidationEvent | ValidationInputError:
        try:
            return self.event(event, source)
        except ValidationInputError as err:
            return err

    async def screen_events(
        self, events: Sequence[ValidationEvent], source: Scope
    ) -> list[ValidationEvent | ValidationInputError]:
        """Each event as it may be stored, or why it may not be (the bus's ``screen``).

        Small events are screened here; once the strings screened here add up to
        ``THREAD_CHARS``, the rest go to a worker thread, so a big batch or one big event
        never holds the event loop."""
        if not self.redactor.active(source):
            return list(events)
        out: list[ValidationEvent | ValidationInputError] = []
        later: list[int] = []
        budget = THREAD_CHARS
        for i, event in enumerate(events):
            observed = event.observed
            if isinstance(observed, str):
                size = len(observed)
            elif observed is None or isinstance(observed, (bool, int, float)):
                size = 0
            else:
                size = json_chars(observed, THREAD_CHARS + 1)
            size += len(event.message)
            if size > budget:
                later.append(i)
                out.append(event)
                continue
            budget -= size
            out.append(self._screened(event, source))
        if later:
            done = await asyncio.to_thread(
                lambda: [self._screened(events[i], source) for i in later]
            )
            for i, screened in zip(later, done, strict=True):
                out[i] = screened
        return out

    def query(self, text: str) -> str:
        """A search query with what the policy redacts from agents replaced by its
        placeholder, so searching for a value finds the blocks that hold its placeholder
        (a query is never refused: a value a rule rejects is looked for the same way)."""
        return self.redactor.mask(text, source="agent")

    def scrub(self, text: str) -> str:
        """A dead letter's payload (a malformed or refused message) as it may be stored:
        redacted like a sensor's observation, or withheld whole where a rule rejects."""
        try:
            return self.redactor.text(text, source="sensor", field="payload")
        except ValidationInputError:
            return "[withheld: the privacy policy refuses what this payload holds]"

    # ------------------------------------------------------------- imported blocks

    async def export_row(self, row: Mapping[str, Any], index: int) -> dict[str, Any]:
        """An export object with its stored texts redacted (source ``import``)."""
        if not self.redactor.active("import"):
            return dict(row)
        size = len(json.dumps(row, default=str))
        out: dict[str, Any] = await _run(lambda: self._export_row(row, index), size)
        return out

    def _export_row(self, row: Mapping[str, Any], index: int) -> dict[str, Any]:
        out = dict(row)
        where = f"{index}"
        rec = row.get("record")
        if isinstance(rec, dict):
            rec = self._texts(rec, ("title", "content", "tags"), f"{where}.record")
            if "content" in rec and "content_key" in rec and isinstance(rec["content"], str):
                rec["content_key"] = content_key(rec["content"])
            out["record"] = rec
        view = row.get("block")
        if isinstance(view, dict):
            out["block"] = self._texts(view, ("title", "content", "tags"), f"{where}.block")
        versions = row.get("versions")
        if isinstance(versions, list):
            out["versions"] = [
                self._texts(v, ("title", "content", "tags"), f"{where}.versions.{j}")
                if isinstance(v, dict)
                else v
                for j, v in enumerate(versions)
            ]
        history = row.get("history")
        if isinstance(history, list):
            out["history"] = [
                self._history(h, f"{where}.history.{j}") for j, h in enumerate(history)
            ]
        return out

    def _texts(self, obj: Mapping[str, Any], names: tuple[str, ...], where: str) -> dict[str, Any]:
        r = self.redactor
        out = dict(obj)
        for name in names:
            value = obj.get(name)
            field = f"{where}.{name}"
            if isinstance(value, str) and name == "tags" and value.startswith("["):
                try:
                    tags = json.loads(value)
                except ValueError:
                    tags = None
                if isinstance(tags, list):
                    out[name] = json.dumps(r.json(tags, source="import", field=field))
                    continue
            if isinstance(value, (str, list)):
                out[name] = r.json(value, source="import", field=field)
        return out

    def _history(self, h: Any, where: str) -> Any:
        if not isinstance(h, dict) or not isinstance(h.get("event"), dict):
            return h
        event = dict(h["event"])
        r = self.redactor
        if isinstance(event.get("message"), str):
            event["message"] = r.text(event["message"], source="import", field=f"{where}.message")
        observed = event.get("observed")
        if isinstance(observed, str):  # stored as JSON text
            try:
                value = json.loads(observed)
            except ValueError:
                value = observed
            redacted = r.json(value, source="import", field=f"{where}.observed")
            if redacted != value:
                event["observed"] = json.dumps(redacted, separators=(",", ":"))
        return {**h, "event": event}


async def _run(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args[:-1])`` here, or in a worker thread when the input (``args[-1]``
    characters) is big."""
    *call, size = args
    if size > THREAD_CHARS:
        return await asyncio.to_thread(fn, *call)
    return fn(*call)
