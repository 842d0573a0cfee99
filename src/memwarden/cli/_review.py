"""``memwarden review``: the human review queue — list, show, confirm, reject, edit.

Every command works against the running daemon (its ``/v1/reviews`` routes) or, with
``--db``, on a database file directly. A decision records who decided (``--by``,
default ``$USER``) and an optional ``--comment``.
"""

from __future__ import annotations

import getpass
import json
from typing import TYPE_CHECKING, Annotated, Any, Literal
from urllib.parse import urlencode

import typer
from rich.table import Table

from memwarden.cli._common import (
    DbOpt,
    JsonOpt,
    call,
    fail,
    id_table,
    out,
    print_json,
    privacy_for,
)
from memwarden.errors import MemwardenError

if TYPE_CHECKING:
    from memwarden.client import AsyncClient
    from memwarden.memory import Store

__all__ = ["open_console", "review_app"]

review_app = typer.Typer(
    help="The human review queue: blocks waiting for a person to confirm, reject or edit.",
    invoke_without_command=True,
)


@review_app.callback()
def _review_root(
    ctx: typer.Context,
    open_page: Annotated[
        bool,
        typer.Option("--open", help="Print a one-time sign-in link to the review page."),
    ] = False,
    by: Annotated[str | None, typer.Option("--by", help="Who signs in (default: $USER).")] = None,
) -> None:
    if open_page:
        reviewer = _reviewer(by)

        async def api(c: AsyncClient) -> Any:
            return await c.review_link(reviewer)

        async def local(_: Store) -> Any:
            raise MemwardenError("the review page is served by the running daemon")

        url = call(None, api=api, local=local)
        typer.echo(f"Open this link to review as {reviewer} (it works once, for 10 minutes):")
        typer.echo(url)
        raise typer.Exit
    if ctx.invoked_subcommand is None:
        typer.echo(ctx.get_help())
        raise typer.Exit


def open_console(
    block_id: Annotated[
        str | None,
        typer.Argument(help="A block id (or short id): the link opens its page."),
    ] = None,
    by: Annotated[str | None, typer.Option("--by", help="Who signs in (default: $USER).")] = None,
) -> None:
    """Print a one-time sign-in link to the memory console (a block's page with an id)."""
    reviewer = _reviewer(by)

    async def api(c: AsyncClient) -> Any:
        page = "/review/search"
        if block_id is not None:
            block = await c.get(block_id)  # a clear error for an unknown id, before the link
            page = f"/review/blocks/{block.id}"
        return f"{await c.review_link(reviewer)}&{urlencode({'next': page})}"

    async def local(_: Store) -> Any:
        raise MemwardenError("the console is served by the running daemon")

    url = call(None, api=api, local=local)
    typer.echo(f"Open this link to sign in as {reviewer} (it works once, for 10 minutes):")
    typer.echo(url)


IdArg = Annotated[str, typer.Argument(help="The review item's id (from `review list`).")]
ByOpt = Annotated[
    str | None,
    typer.Option("--by", envvar="USER", help="Who decides (recorded). Default: $USER."),
]
CommentOpt = Annotated[str, typer.Option("--comment", "-m", help="Why (kept with the decision).")]


def _reviewer(by: str | None) -> str:
    if by and by.strip():
        return by.strip()
    try:
        return getpass.getuser()
    except (OSError, KeyError):
        raise fail("who decides? pass --by NAME (or set $USER)", 2) from None


# ---------------------------------------------------------------------- reading


@review_app.command("list")
def list_items(
    status: Annotated[
        str, typer.Option(help="pending, decided or all.", case_sensitive=False)
    ] = "pending",
    limit: Annotated[int, typer.Option(min=1, max=10000)] = 100,
    db: DbOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """What waits for a person (oldest first), with the reason."""

    async def api(c: AsyncClient) -> Any:
        return await c.reviews(status, limit)

    async def local(s: Store) -> Any:
        return await s.list_reviews(status=status, limit=limit)

    items = call(db, api=api, local=local)
    if json_out:
        print_json(items)
        return
    if not items:
        out.print("no reviews pending" if status == "pending" else "no reviews")
        return
    # The id is shown whole (a cut id is refused), so the rest is packed into three
    # columns that wrap: this stays readable at 80 columns.
    table = id_table([item["id"] for item in items], "reason", "block", "status")
    for item in items:
        block = item["block"] or {}
        about = (
            f"{(block.get('title') or block.get('content') or '')[:50]} "
            f"({block.get('state', '')}, r={block['reliability']:.2f})"
            if block
            else "(deleted)"
        )
        when = item["created_at"][5:16].replace("T", " ")
        table.add_row(
            item["id"],
            item["reason"][:60],
            about,
            f"{item['decision']} by {item['decided_by']}" if item["decision"] else f"asked {when}",
        )
    out.print(table)


@review_app.command()
def show(
    review_id: IdArg,
    events: Annotated[int, typer.Option(min=0, max=1000, help="How many events.")] = 10,
    db: DbOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """One item: the block, the reason, and the evidence (its last events)."""

    async def api(c: AsyncClient) -> Any:
        return await c.review(review_id, events=events)

    async def local(s: Store) -> Any:
        return await s.get_review(review_id, events=events)

    data = call(db, api=api, local=local)
    if json_out:
        print_json(data)
        return
    review, block = data["review"], data["block"]
    out.print(f"[bold]review {review['id']}[/bold] ({review['status']})", highlight=False)
    out.print(f"reason: {review['reason']}", highlight=False, soft_wrap=True)
    if review["decision"]:
        out.print(
            f"decided: {review['decision']} by {review['decided_by']} at "
            f"{review['decided_at'][:19]}"
            + (f" — {review['comment']}" if review["comment"] else ""),
            highlight=False,
            soft_wrap=True,
        )
    if block is None:
        out.print("the block was deleted")
        return
    v = block["validation"]
    out.print(f"\n[bold]{block['title'] or block['id']}[/bold]", highlight=False)
    out.print(block["content"], highlight=False, soft_wrap=True)
    out.print(
        f"state {block['state']} · reliability {v['reliability']:.2f} · validated "
        f"{(v['validated_at'] or 'never')[:19]}"
        + (f" by {v['validated_by']}" if v["validated_by"] else ""),
        highlight=False,
    )
    if data["events"]:
        table = Table("observed", "sensor", "outcome", "message")
        for e in data["events"]:
            table.add_row(e["observed_at"][:19], e["sensor"], e["outcome"], e["message"][:70])
        out.print(table)


# ---------------------------------------------------------------------- deciding


def _decide(
    review_id: str,
    decision: str,
    *,
    by: str | None,
    comment: str,
    content: str | None,
    db: str | None,
    json_out: bool,
) -> None:
    reviewer = _reviewer(by)
    body: dict[str, Any] = {"decision": decision, "decided_by": reviewer, "comment": comment}
    if content is not None:
        body["content"] = content

    async def api(c: AsyncClient) -> Any:
        return await c.decide(
            review_id, decision, decided_by=reviewer, comment=comment, content=content
        )

    async def local(s: Store) -> Any:
        said, new_content = await privacy_for(db).review(comment, content)  # the review door
        return await s.decide_review(
            review_id, decision, reviewer=reviewer, comment=said, new_content=new_content
        )

    data = call(db, api=api, local=local)
    if json_out:
        print_json(data)
        return
    block = data["block"]
    done = {"confirm": "confirmed", "reject": "rejected", "edit": "edited and confirmed"}[decision]
    now = (
        "the block is gone"
        if block is None
        else f"now {block['state']} (reliability {block['validation']['reliability']:.2f})"
    )
    out.print(f"{done} {data['review']['block_id']} as {reviewer}: {now}", highlight=False)


@review_app.command()
def confirm(
    review_id: IdArg,
    by: ByOpt = None,
    comment: CommentOpt = "",
    db: DbOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """The block is true: confirm it (reliability 0.95)."""
    _decide(review_id, "confirm", by=by, comment=comment, content=None, db=db, json_out=json_out)


@review_app.command()
def reject(
    review_id: IdArg,
    by: ByOpt = None,
    comment: CommentOpt = "",
    db: DbOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """The block is false: refute it (a human's refutation is hard at once)."""
    _decide(review_id, "reject", by=by, comment=comment, content=None, db=db, json_out=json_out)


@review_app.command()
def edit(
    review_id: IdArg,
    content: Annotated[str, typer.Option("--content", help="The corrected text.")],
    by: ByOpt = None,
    comment: CommentOpt = "",
    db: DbOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Replace the block's text (the old version stays in its history) and confirm it."""
    _decide(review_id, "edit", by=by, comment=comment, content=content, db=db, json_out=json_out)


# ---------------------------------------------------------------------- proposals


@review_app.command("proposals")
def list_proposals(
    status: Annotated[
        str,
        typer.Option(help="pending, accepted, rejected, obsolete or all.", case_sensitive=False),
    ] = "pending",
    limit: Annotated[int, typer.Option(min=1, max=1000)] = 100,
    db: DbOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Bindings (and depends_on) the periodic pass proposes for unbound facts."""
    statuses: dict[str, Literal["pending", "accepted", "rejected", "obsolete", "all"]] = {
        "pending": "pending",
        "accepted": "accepted",
        "rejected": "rejected",
        "obsolete": "obsolete",
        "all": "all",
    }
    if status not in statuses:
        raise fail(
            f"--status: {status!r} is not one of pending, accepted, rejected, obsolete, all", 2
        )

    async def api(c: AsyncClient) -> Any:
        return await c.proposals(status=status, limit=limit)

    async def local(s: Store) -> Any:
        found = await s.list_proposals(status=statuses[status], limit=limit)
        return [p.as_dict() for p in found]

    items = call(db, api=api, local=local)
    if json_out:
        print_json(items)
        return
    if not items:
        out.print("no proposals pending" if status == "pending" else "no proposals")
        return
    # The proposal id is shown whole (a cut id is refused); why is in --json.
    table = id_table([p["id"] for p in items], "fact", "proposal")
    for p in items:
        table.add_row(p["id"], p["block_id"].replace("-", "")[-10:], _proposal_text(p))
    out.print(table)


def _proposal_text(p: dict[str, Any]) -> str:
    """``config/app.yaml /http/timeout = 30 (0.90)``, or ``depends on <id> (0.80)``."""
    what = dict(p["proposal"])
    if p["kind"] == "depends_on":
        text = f"depends on {what.get('depends_on')}"
    else:
        where = " ".join(str(what.pop(k)) for k in ("path", "key") if k in what)
        what.pop("sensor", None)
        rest = " ".join(f"{k}={json.dumps(v)}" for k, v in what.items())
        text = f"{where} {rest}".strip()
    status = "" if p["status"] == "pending" else f", {p['status']}"
    return f"{text} ({p['confidence']:.2f}{status})"


def _decide_proposal(proposal_id: str, action: str, *, by: str | None, json_out: bool) -> None:
    reviewer = _reviewer(by)

    async def api(c: AsyncClient) -> Any:
        return await c.decide_proposal(
            proposal_id, "accept" if action == "accept" else "reject", decided_by=reviewer
        )

    async def local(_: Store) -> Any:
        raise MemwardenError("deciding a proposal needs the running daemon (its sensors check it)")

    data = call(None, api=api, local=local)
    if json_out:
        print_json(data)
        return
    out.print(
        f"{data['status']} {data['id']} for {data['block_id']} as {reviewer}", highlight=False
    )


ProposalArg = Annotated[str, typer.Argument(help="The proposal's id (from `review proposals`).")]


@review_app.command("accept-proposal")
def accept_proposal(proposal_id: ProposalArg, by: ByOpt = None, json_out: JsonOpt = False) -> None:
    """Accept a proposal: bind the fact (checked by its sensor), or record its dependency."""
    _decide_proposal(proposal_id, "accept", by=by, json_out=json_out)


@review_app.command("reject-proposal")
def reject_proposal(proposal_id: ProposalArg, by: ByOpt = None, json_out: JsonOpt = False) -> None:
    """Reject a proposal (it is not proposed again)."""
    _decide_proposal(proposal_id, "reject", by=by, json_out=json_out)
