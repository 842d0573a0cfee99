"""``/v1/export`` and ``/v1/import``: whole blocks out, and back in (idempotent by id)."""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request

from memwarden.daemon._routes._deps import Admin, DaemonDep
from memwarden.errors import ValidationInputError

__all__ = ["router"]

router = APIRouter(tags=["blocks"])


@router.get("/v1/export")
async def export_blocks(
    _: Admin,
    daemon: DaemonDep,
    after: Annotated[
        str | None, Query(max_length=64, description="Blocks with ids after this one.")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 200,
) -> list[dict[str, Any]]:
    """Whole blocks, by id, as `memwarden import` reads them: the block, its stored
    record, bindings, dependencies, validation history and earlier versions."""
    return await daemon.store.export_blocks(after=after, limit=limit)


@router.post("/v1/import")
async def import_blocks(request: Request, _: Admin, daemon: DaemonDep) -> dict[str, int]:
    """Import export objects (idempotent by block id: blocks already here are left
    unchanged; bindings this daemon's sensors refuse are stored quarantined). Objects
    without ``format`` are new blocks, added as by ``POST /v1/blocks``."""
    try:
        body = json.loads(await request.body())
    except ValueError as err:
        raise ValidationInputError([("body", f"not JSON: {err}")]) from None
    if not isinstance(body, list) or not all(isinstance(r, dict) for r in body):
        raise ValidationInputError([("body", "a list of export objects")])
    if len(body) > 10_000:
        raise ValidationInputError([("body", "at most 10000 objects per request")])
    return await daemon.import_blocks(body)
