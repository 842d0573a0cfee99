"""The rules of the block writes that do not depend on the backend: input validation, the
records a call adds, an edit's version bump, the bindings an edit keeps, drops and adds,
the dependencies it must find, the duplicates ``dedupe`` skips, and the audit details.

The SQLite :class:`~memwarden.memory._blocks.Blocks` and the PostgreSQL
:class:`~memwarden.memory.pg._blocks.PgBlocks` both use these, so only their SQL differs
(``tests/pg/test_writes_contract.py`` holds their rows equal).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from memwarden.errors import ValidationInputError
from memwarden.memory._codec import binding_nodes_json, binding_selector_json, normalise_content
from memwarden.memory._model import ANY_NODE, BlockState, NewBlock
from memwarden.memory._results import BlockPatch, validate_input
from memwarden.memory.policy import demote_core

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping, Sequence

    from memwarden.memory._model import Binding
    from memwarden.memory._record import BlockRecord
    from memwarden.memory.policy import PolicyConfig

__all__ = [
    "BindingChange",
    "apply_patch",
    "check_text",
    "delete_detail",
    "dependency_rows",
    "diff_bindings",
    "find_duplicates",
    "history_row",
    "missing_dependencies",
    "serving_node",
    "storable",
    "update_detail",
    "validate_news",
    "validate_patch",
]


def check_text(name: str, value: str) -> None:
    """A free text stored as given (an archive reason, an actor): no NUL (PostgreSQL text
    cannot hold one, so neither backend takes it) and valid UTF-8."""
    problem = None
    if "\x00" in value:
        problem = "must not contain NUL characters"
    else:
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as err:
            problem = f"is not valid UTF-8 text (bad character at position {err.start})"
    if problem is not None:
        raise ValidationInputError([(name, problem)])


def storable(text: str) -> str:
    """A machine-made text (a proposal's reason, a quarantine rule) as both backends can
    store it: each NUL and each unpaired surrogate becomes U+FFFD."""
    text = text.replace("\x00", "\ufffd")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = "".join("\ufffd" if "\ud800" <= c <= "\udfff" else c for c in text)
    return text


def validate_news(news: Sequence[NewBlock | Mapping[str, Any]]) -> list[NewBlock]:
    """Each new block validated; every error of every item at once (``i.field`` when
    there are several)."""
    validated = []
    errors: list[tuple[str, str]] = []
    for i, item in enumerate(news):
        try:
            validated.append(validate_input(NewBlock, item))
        except ValidationInputError as err:
            prefix = f"{i}." if len(news) > 1 else ""
            errors.extend((prefix + f, m) for f, m in err.errors)
    if errors:
        raise ValidationInputError(errors)
    return validated


def validate_patch(
    patch: BlockPatch | Mapping[str, Any],
) -> tuple[dict[str, Any], Sequence[Binding] | None]:
    """An edit's changes (the fields given, bindings apart) and its bindings (None: kept)."""
    p = validate_input(BlockPatch, patch)
    nulls = [k for k in sorted(p.model_fields_set) if getattr(p, k) is None]
    if nulls:  # None means "absent" only when left out; an explicit null is an error
        raise ValidationInputError(
            [(k, "cannot be null (leave the field out to keep its value)") for k in nulls]
        )
    return p.model_dump(exclude_unset=True, exclude={"bindings"}), p.bindings


def history_row(rec: BlockRecord) -> tuple[Any, ...]:
    """The version a new version replaces, as ``block_history`` keeps it (without
    ``replaced_at`` and ``replaced_by``): id, version, title, content, tags."""
    return (rec.id, rec.version, rec.title, rec.content, json.dumps(rec.tags))


def update_detail(changes: Mapping[str, Any], bindings: Sequence[Binding] | None) -> dict[str, Any]:
    detail = dict(changes)
    if bindings is not None:
        # Sensor and subject only: an expected value may be a secret's.
        detail["bindings"] = [{"sensor": b.sensor, "subject": b.subject} for b in bindings]
    return detail


def delete_detail(rec: BlockRecord, reason: str) -> dict[str, Any]:
    return {"reason": reason, "title": rec.title, "content": rec.content[:1000]}


def apply_patch(
    rec: BlockRecord,
    changes: dict[str, Any],
    now: float,
    cfg: PolicyConfig,
    *,
    rebound: bool = False,
) -> bool:
    """Apply an edit to a record; True when it is a new version (the text or the
    bindings changed).

    A new text was never checked: the block becomes unverified again, its window
    restarts, and a core block is demoted (the core rule: an update demotes). New
    bindings (``rebound``) were never checked either: unverified again, the window
    restarts, a new version (what a compare-and-set on the version must see); the text,
    tier and reliability stay.
    """
    text_changed = any(
        k in changes and changes[k] != getattr(rec, k) for k in ("title", "content", "tags")
    )
    if text_changed or rebound:
        rec.version += 1
    if text_changed:
        demote_core(rec, cfg)
    if (text_changed or rebound) and rec.state in (
        BlockState.FRESH,
        BlockState.STALE,
        BlockState.REFUTED,
    ):
        rec.state = BlockState.UNVERIFIED.value
        rec.stale_reasons = []
    for key in ("title", "content", "importance"):
        if key in changes:
            setattr(rec, key, changes[key])
    if "tags" in changes:
        rec.tags = list(dict.fromkeys(changes["tags"]))
    for key in ("category", "info_type", "volatility"):
        if key in changes:
            setattr(rec, key, str(changes[key].value))
    if "volatility" in changes and "validity_window" not in changes:
        rec.validity_window_s = cfg.window_s(rec.volatility)
        rec.half_life_s = cfg.half_life_s(rec.volatility)
    if "validity_window" in changes:
        rec.validity_window_s = changes["validity_window"].total_seconds()
    if "signals" in changes:
        rec.signals = {**rec.signals, **changes["signals"]}
    base = rec.validated_at if rec.validated_at is not None else rec.created_at
    rec.stale_at = (now if text_changed or rebound else base) + rec.validity_window_s
    rec.updated_at = now
    return text_changed or rebound


@dataclass
class BindingChange:
    """What making a list of bindings a block's own changes: the rows to delete (by id),
    the bindings to insert (sensor, subject, selector JSON, nodes JSON), the kept rows
    whose ``nodes`` change (row id, nodes JSON), and the (sensor, subject) pairs no
    longer bound, whose open revalidation requests close."""

    dropped: list[int] = field(default_factory=list)
    new: list[tuple[str, str, str, str]] = field(default_factory=list)
    unbound: list[tuple[str, str]] = field(default_factory=list)
    renodes: list[tuple[int, str]] = field(default_factory=list)


def diff_bindings(
    rows: Sequence[tuple[Any, ...]], bindings: Sequence[Binding], *, node: str
) -> BindingChange | None:
    """From the stored rows (id, sensor, subject, selector, nodes) to ``bindings``; None
    when they are the same. A binding kept as it was keeps its row; one stored twice (an
    old import) is kept once, its first row. A kept binding given without ``nodes`` keeps
    its stored list; a new one without gets ``[node]`` (the node making the edit)."""
    # Compared as the selectors' JSON re-encoded alike: a row written another way matches.
    stored: dict[tuple[str, str, str], list[int]] = {}
    stored_nodes: dict[int, str] = {}
    for r in rows:
        stored.setdefault((str(r[1]), str(r[2]), _selector_key(str(r[3]))), []).append(int(r[0]))
        stored_nodes[int(r[0])] = _selector_key(str(r[4]))
    wanted = {(b.sensor, b.subject, _selector_key(binding_selector_json(b))): b for b in bindings}
    gone = [key for key in stored if key not in wanted]
    new = [key for key in wanted if key not in stored]
    dropped = [i for key, ids in stored.items() for i in (ids if key in gone else ids[1:])]
    renodes = []
    for key, b in wanted.items():
        if key in stored and b.nodes is not None:
            nodes = binding_nodes_json(b, node)
            if stored_nodes[stored[key][0]] != _selector_key(nodes):
                renodes.append((stored[key][0], nodes))
    if not dropped and not new and not renodes:
        return None
    kept = {(s, subj) for s, subj, _ in wanted}
    return BindingChange(
        dropped=dropped,
        new=[
            (s, subj, binding_selector_json(b), binding_nodes_json(b, node))
            for s, subj, sel in new
            for b in (wanted[(s, subj, sel)],)
        ],
        unbound=[(s, subj) for s, subj, _ in gone if (s, subj) not in kept],
        renodes=renodes,
    )


def serving_node(nodes_json: str, node: str) -> str | None:
    """Who serves a binding stored by ``node`` until the leader's pass says otherwise:
    that node when the binding's list starts with it (or is ``["*"]``), else no one yet
    (the leader gives it to the first live node of its list within seconds; until then
    no node's events reach it, rather than a node that is not its first choice)."""
    nodes = json.loads(nodes_json)
    return node if nodes[:1] == [node] or nodes == [ANY_NODE] else None


def _selector_key(text: str) -> str:
    try:
        return json.dumps(json.loads(text), sort_keys=True)
    except ValueError:  # a row gone wrong never matches a binding given now
        return text


def dependency_rows(news: Sequence[NewBlock], first_rid: int) -> list[tuple[str, int]]:
    """``(depends_on, block_rid)`` for each new block's dependencies (rids from
    ``first_rid`` in order)."""
    return [(dep, first_rid + i) for i, n in enumerate(news) for dep in dict.fromkeys(n.depends_on)]


def missing_dependencies(
    news: Sequence[NewBlock], found: Mapping[str, str], new_ids: set[str]
) -> None:
    """Every target must exist (``found``: id to namespace) or be added in the same call,
    in the dependent block's namespace: a block of another namespace is "no block"."""
    missing = [
        (f"{i}.depends_on.{j}" if len(news) > 1 else f"depends_on.{j}", f"no block {dep!r}")
        for i, n in enumerate(news)
        for j, dep in enumerate(n.depends_on)
        if found.get(dep) != (n.namespace or "default") and dep not in new_ids
    ]
    if missing:
        raise ValidationInputError(missing)


async def find_duplicates(
    records: Sequence[BlockRecord],
    keys: Sequence[str],
    candidates: Callable[[str, str], Awaitable[Sequence[tuple[Any, Any]]]],
) -> dict[int, str]:
    """For each new record whose content a live block (or an earlier new one) already
    holds: its index and that block's id. ``candidates(key, namespace)`` gives the live
    blocks' ``(id, content)`` with that content key in that namespace, ordered by id."""
    found: dict[int, str] = {}
    first_new: dict[tuple[str, str], int] = {}
    for i, (rec, key) in enumerate(zip(records, keys, strict=True)):
        rows = await candidates(key, rec.namespace)  # a namespace's duplicate only
        wanted = normalise_content(rec.content)
        match = next((str(r[0]) for r in rows if normalise_content(r[1]) == wanted), None)
        if match is not None:
            found[i] = match
        elif (rec.namespace, key) in first_new:
            found[i] = records[first_new[rec.namespace, key]].id
        else:
            first_new[rec.namespace, key] = i
    return found
