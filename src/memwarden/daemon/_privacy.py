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

**A policy set through the API is kept** in ``privacy.policy.json`` in the state dir
(0600, written atomically and durably before it applies), as PostgreSQL's ``ALTER
SYSTEM`` keeps ``postgresql.auto.conf``: it overrides ``[privacy]`` of the configuration
at every start and SIGHUP until ``DELETE /v1/privacy`` removes it. A file that is there
but unfit stops the start (never a silent fall back to a laxer policy) and fails a
reload (the running policy stays). ``GET /v1/privacy`` says which one is in force.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import structlog
from pydantic import ValidationError

from memwarden._files import fsync_dir, private_dir, read_private, write_private
from memwarden.daemon._token import refusal
from memwarden.errors import StorageError, ValidationInputError
from memwarden.memory import (
    BlockPatch,
    NewBlock,
    content_key,
    from_ts,
    is_export_row,
    validate_input,
)
from memwarden.privacy import (
    PrivacyRejectedError,
    PrivacySettings,
    Redactor,
    Scope,
    TooLongError,
    json_chars,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from pathlib import Path

    from memwarden.daemon._config import Settings
    from memwarden.memory import ValidationEvent

__all__ = [
    "KEY_FILE",
    "POLICY_FILE",
    "PrivacyDoors",
    "StoredPolicy",
    "ensure_key",
    "privacy_for_database",
    "read_policy_file",
    "remove_policy_file",
    "write_policy_file",
]

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

    refuse = refusal(
        f"privacy key file {path}",
        "Fix it, or delete it to have a new key made at the next start (placeholders "
        "written before then stop matching new ones)",
    )
    raw = read_private(path, 255, refuse)
    text = raw.decode("ascii", "replace").strip()
    try:
        key = bytes.fromhex(text)
    except ValueError:
        key = b""
    if len(text) != _KEY_HEX or len(key) != _KEY_HEX // 2:
        raise refuse(f"does not hold {_KEY_HEX} hex digits")
    return key


POLICY_FILE = "privacy.policy.json"
_POLICY_FORMAT = "memwarden.privacy-policy/1"
_POLICY_MAX_BYTES = 256 * 1024  # a policy is a few KiB; more is not one we wrote


@dataclass(frozen=True, slots=True)
class StoredPolicy:
    """A policy set through the API, as kept in the state dir."""

    policy: PrivacySettings
    set_at: float
    set_by: str  # the agent whose token set it


def read_policy_file(home: Path) -> StoredPolicy | None:
    """The policy kept in ``home/privacy.policy.json``; None when there is none. A file
    that is there but unfit (not ours, looser than 0600, not the format, a policy that
    does not validate) is a :class:`ConfigError` naming it: never ignored, since the
    configuration's policy may be laxer than the one the operator set."""
    path = home / POLICY_FILE
    if not os.path.lexists(path):
        return None

    refuse = refusal(
        f"privacy policy file {path}",
        "Fix it, or delete it to apply [privacy] of the configuration (it holds the policy "
        "last set by PUT /v1/privacy)",
    )
    raw = read_private(path, _POLICY_MAX_BYTES, refuse)
    try:
        data = json.loads(raw)
    except ValueError:
        raise refuse("is not JSON") from None
    if not isinstance(data, dict) or data.get("format") != _POLICY_FORMAT:
        raise refuse(f'is not a {_POLICY_FORMAT} file ("format")')
    try:
        policy = PrivacySettings.model_validate(data.get("policy"))
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "policy"
        raise refuse(f"policy.{where}: {first['msg']}") from None
    at, by = data.get("set_at"), data.get("set_by")
    if not isinstance(at, int | float) or isinstance(at, bool) or not isinstance(by, str):
        raise refuse('needs "set_at" (epoch seconds) and "set_by" (text)')
    return StoredPolicy(policy, float(at), by[:128])


def write_policy_file(home: Path, stored: StoredPolicy) -> None:
    """Keep ``stored`` as ``home/privacy.policy.json``: atomically, 0600, durably."""
    body = {
        "format": _POLICY_FORMAT,
        "set_at": stored.set_at,
        "set_by": stored.set_by,
        "policy": stored.policy.model_dump(mode="json"),
    }
    private_dir(home)
    write_private(home / POLICY_FILE, (json.dumps(body, indent=2) + "\n").encode())


def remove_policy_file(home: Path) -> bool:
    """Remove the kept policy (durably); whether there was one."""
    path = home / POLICY_FILE
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    fsync_dir(home)
    return True


def privacy_for_database(db: Path, settings: Settings) -> PrivacyDoors:
    """The doors the CLI's writes with ``--db FILE`` pass (no daemon): the policy the
    daemon of that database applies — ``[privacy]`` of ``settings``, overridden by the
    policy a PUT kept in its state dir — with its HMAC key, so placeholders equal the
    daemon's. Its state dir is ``settings.home`` when ``db`` is the database those
    settings name, else the directory holding ``db`` (where a daemon keeps its key and
    policy beside ``memwarden.db``); a key is made there when there is none. An unfit
    kept policy or key is a :class:`ConfigError`, never a write without the policy."""
    same = settings.db_path.absolute().resolve() == db.absolute().resolve()
    home = settings.home if same else db.absolute().parent
    return PrivacyDoors(settings.privacy, ensure_key(home), stored=read_policy_file(home))


class PrivacyDoors:
    """The running policy and what it is applied to; swapped whole on reload and PUT.

    The policy in force is the one kept from the API (``stored``) when there is one,
    else the configuration's; both are known, so a reload can say which it applied."""

    def __init__(
        self,
        policy: PrivacySettings,
        key: bytes,
        *,
        stored: StoredPolicy | None = None,
        home: Path | None = None,
        config_file: str = "",
    ) -> None:
        self.config_policy = policy
        self.stored = stored
        self.home = home  # where a PUT keeps its policy (None: it is not kept)
        self.config_file = config_file
        self.redactor = Redactor(stored.policy if stored else policy, key)
        self._lock = asyncio.Lock()  # one change at a time: the file and memory agree

    @property
    def policy(self) -> PrivacySettings:
        return self.redactor.policy

    @property
    def changed_by(self) -> Literal["config", "api"]:
        return "api" if self.stored is not None else "config"

    def _apply(self, policy: PrivacySettings, by: str) -> bool:
        changed = policy != self.redactor.policy
        if changed:
            self.redactor = self.redactor.with_policy(policy)
            log.info("privacy_policy_applied", by=by)
        return changed

    def configure(self, config_policy: PrivacySettings, stored: StoredPolicy | None) -> bool:
        """A start or reload's outcome: the configuration's policy and the kept one (both
        read and validated in full by the caller); whether the policy in force changed."""
        self.config_policy, self.stored = config_policy, stored
        if stored is not None and stored.policy != config_policy:
            log.warning(
                "privacy_config_overridden",
                file=str(self.home / POLICY_FILE) if self.home else POLICY_FILE,
                hint="the policy set by PUT /v1/privacy stays in force; "
                "DELETE /v1/privacy goes back to [privacy] of the configuration",
            )
        return self._apply(stored.policy if stored else config_policy, "config")

    async def put(self, policy: PrivacySettings, *, by: str, at: float) -> None:
        """Keep ``policy`` (validated in full) and apply it: kept first, so a policy in
        force is one a restart applies again; a file that cannot be written is a
        :class:`StorageError` and nothing changes."""
        async with self._lock:
            stored = StoredPolicy(policy, at, by)
            if self.home is not None:
                try:
                    await asyncio.to_thread(write_policy_file, self.home, stored)
                except OSError as err:
                    raise StorageError(
                        f"cannot keep the privacy policy in {self.home / POLICY_FILE}: "
                        f"{err.strerror or err}; the policy in force did not change"
                    ) from None
            self.stored = stored
            self._apply(policy, "api")

    async def reset(self) -> None:
        """Forget the kept policy: the configuration's applies again."""
        async with self._lock:
            if self.home is not None:
                try:
                    await asyncio.to_thread(remove_policy_file, self.home)
                except OSError as err:
                    raise StorageError(
                        f"cannot remove {self.home / POLICY_FILE}: {err.strerror or err}"
                    ) from None
            self.stored = None
            self._apply(self.config_policy, "config")

    def describe(self) -> dict[str, Any]:
        stats = self.redactor.stats
        stored = self.stored
        if stored is not None:
            source = str(self.home / POLICY_FILE) if self.home else POLICY_FILE
        else:
            source = self.config_file
        return {
            "policy": self.policy.model_dump(mode="json"),
            "set_by": self.changed_by,
            "source": source,
            "set_at": from_ts(stored.set_at).isoformat() if stored else None,
            "set_by_agent": stored.set_by if stored else None,
            "config_differs": stored is not None and stored.policy != self.config_policy,
            "redacted": dict(sorted(stats.redacted.items())),
            "rejected": dict(sorted(stats.rejected.items())),
            "unchecked": stats.unchecked,
        }

    # ------------------------------------------------------------------ whole inputs

    async def import_rows(
        self, rows: Sequence[Mapping[str, Any]]
    ) -> tuple[list[dict[str, Any]], list[NewBlock | Mapping[str, Any]]]:
        """An import's rows screened (source ``import``), all before anything is stored:
        the export objects, and the plain new blocks (a row that is not a valid block is
        passed on as it is: the store names its problem). A refusal names the row."""
        exported = [await self.export_row(r, i) for i, r in enumerate(rows) if is_export_row(r)]
        plain: list[NewBlock | Mapping[str, Any]] = []
        for i, row in enumerate(rows):
            if is_export_row(row):
                continue
            try:
                plain.append(await self.new_block(validate_input(NewBlock, row), "import"))
            except PrivacyRejectedError as err:
                raise PrivacyRejectedError(f"{i}.{err.field}", err.rule, err.source) from None
            except TooLongError as err:
                raise TooLongError(f"{i}.{err.field}", err.size, err.limit) from None
            except ValidationInputError:
                plain.append(row)
        return exported, plain

    async def review(self, comment: str, new_content: str | None) -> tuple[str, str | None]:
        """A review decision's comment and new content (source ``review``)."""
        comment = await self.text(comment, "review", "comment")
        if new_content is not None:
            new_content = await self.text(new_content, "review", "content")
        return comment, new_content

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
                    screened = r.json(tags, source="import", field=field)
                    if screened != tags:  # else the stored text stays byte for byte
                        out[name] = json.dumps(screened, ensure_ascii=False)
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
