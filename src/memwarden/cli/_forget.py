"""``memwarden forget``: erase blocks for good, after showing which (docs/PRIVACY.md).

It always asks the daemon (or the ``--db`` file) for the list first, prints it, and asks
for confirmation unless ``--yes``; what it then erases is exactly the listed ids, even if
a tag or a query would match more by then. Without a terminal and without ``--yes`` it
refuses rather than guess.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from memwarden.cli._common import (
    DbOpt,
    JsonOpt,
    call,
    err,
    fail,
    id_table,
    out,
    print_json,
    privacy_for,
)

if TYPE_CHECKING:
    from memwarden.client import AsyncClient
    from memwarden.memory import Store

__all__ = ["forget"]

_SCORE_LOG = "scores.jsonl"  # the daemon's default score log, beside its database


def forget(
    block_ids: Annotated[
        list[str] | None,
        typer.Argument(help="Block ids (short ids accepted). Or use --tag or --query."),
    ] = None,
    tag: Annotated[
        str | None, typer.Option("--tag", "-t", help="Every block with this tag.")
    ] = None,
    query: Annotated[
        str | None,
        typer.Option(
            "--query", "-q", help="Every block holding all these words (archived ones too)."
        ),
    ] = None,
    reason: Annotated[
        str, typer.Option(help="Why (kept in the tombstone as given; not the content).")
    ] = "",
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Only list what would be erased.")
    ] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    vacuum: Annotated[
        bool,
        typer.Option(
            "--vacuum", help="Also rewrite the whole database file (reaches older free space)."
        ),
    ] = False,
    db: DbOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Erase blocks for good: content, history, bindings, events, reviews, index, WAL.

    A tombstone (id, when, who, why) stays. What is out of reach (backups, logs, the
    MQTT broker) is listed after.
    """
    ids = list(block_ids or [])
    chosen = sum(1 for given in (ids, tag, query) if given)
    if chosen != 1:
        raise fail("name the blocks to erase: ids, --tag or --query (exactly one)", 2)
    listing = _run(db, ids=ids, tag=tag, query=query, reason=reason, dry_run=True, vacuum=False)
    targets: list[dict[str, str]] = listing["blocks"]
    if dry_run or not targets:
        _show(listing, json_out=json_out, listed_only=True)
        return
    if not json_out:
        _table(targets, "would be erased")
    if not yes:
        if not _interactive():
            raise fail("not a terminal: pass --yes to erase without confirmation", 2)
        if not typer.confirm(f"erase {len(targets)} block(s) for good?", default=False):
            raise fail("nothing erased", 1)
    answer = _run(
        db,
        ids=[t["id"] for t in targets],
        tag=None,
        query=None,
        reason=reason,
        dry_run=False,
        vacuum=vacuum,
    )
    _show(answer, json_out=json_out, listed_only=False)


def _interactive() -> bool:
    """Whether someone can answer the confirmation (stdin is a terminal)."""
    return sys.stdin.isatty()


def _run(
    db: str | None,
    *,
    ids: list[str],
    tag: str | None,
    query: str | None,
    reason: str,
    dry_run: bool,
    vacuum: bool,
) -> dict[str, Any]:
    async def api(c: AsyncClient) -> dict[str, Any]:
        return dict(
            await c.forget(ids, tag=tag, query=query, reason=reason, dry_run=dry_run, vacuum=vacuum)
        )

    async def local(s: Store) -> dict[str, Any]:
        from memwarden.memory import ScoreLog

        full = [await s.resolve_id(ref) for ref in ids]
        targets = await s.erasure_targets(ids=full, tag=tag, query=query)
        answer: dict[str, Any] = {
            "dry_run": dry_run,
            "blocks": [t.as_dict() for t in targets],
            "erased": [],
            "unreachable": list(s.unreachable),
        }
        if dry_run or not targets:
            return answer
        said = await privacy_for(db).text(reason, "agent", "reason")  # as the API's door
        report = await s.erase([t.id for t in targets], actor="cli", reason=said, vacuum=vacuum)
        # A file store's daemon keeps its score log beside it; a PostgreSQL URL names no
        # directory (the daemon that erases through the API drops its own log's lines).
        score_log = Path(s.path).parent / _SCORE_LOG if s.backend == "sqlite" else None
        if score_log is not None and score_log.exists():
            with ScoreLog(score_log) as log:
                report.score_log_lines = await asyncio.to_thread(log.drop_blocks, report.erased)
        return {**answer, **report.as_dict()}

    result: dict[str, Any] = call(db, api=api, local=local)
    return result


def _table(targets: list[dict[str, str]], what: str) -> None:
    table = id_table([t["id"] for t in targets], "state", "text")
    for t in targets:
        table.add_row(t["id"], t["state"], t.get("text") or t["title"])
    out.print(table)
    out.print(f"{len(targets)} block(s) {what}", highlight=False)


def _show(answer: dict[str, Any], *, json_out: bool, listed_only: bool) -> None:
    if json_out:
        print_json(answer)
        return
    if listed_only:
        if not answer["blocks"]:
            out.print("no block matches: nothing to erase", highlight=False)
            return
        _table(answer["blocks"], "would be erased (--dry-run: nothing changed)")
        return
    removed = ", ".join(f"{k} {v}" for k, v in sorted(answer.get("removed", {}).items()))
    out.print(f"erased {len(answer['erased'])} block(s): {removed}", highlight=False)
    out.print(
        f"score log lines dropped: {answer.get('score_log_lines', 0)}; search index "
        f"{answer.get('fts')}; WAL "
        + ("truncated" if answer.get("wal_truncated") else "NOT truncated (a reader held it)")
        + ("; file vacuumed" if answer.get("vacuumed") else ""),
        highlight=False,
    )
    err.print("not reached (erase these yourself):", highlight=False)
    for place in answer.get("unreachable", []):
        err.print(f"  - {place}", highlight=False)
