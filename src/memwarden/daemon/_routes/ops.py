"""Operations: liveness (``/healthz``, open), health (``/v1/health``) and Prometheus
metrics (``/metrics``)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import PlainTextResponse

from memwarden import __version__
from memwarden.client import HealthAnswer
from memwarden.daemon._metrics import render
from memwarden.daemon._routes._deps import Admin, DaemonDep, Reader

__all__ = ["router"]

router = APIRouter(tags=["ops"])


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """Liveness: open, no token."""
    return {"status": "ok", "version": __version__}


@router.get("/v1/health")
async def health(caller: Reader, daemon: DaemonDep) -> HealthAnswer:
    """0-100 health: ``green`` (80+), ``amber`` (50+) or ``red``, with categorized
    warnings (worst first), the counts behind it, each sensor's status, quarantined
    bindings, dead letters and, with the MQTT bridge, its state (``mqtt``). The blocks
    counted are those of the token's agent's namespaces."""
    return await daemon.health(namespaces=caller.scope())


@router.get("/metrics", response_class=PlainTextResponse)
async def metrics(_: Admin, daemon: DaemonDep) -> PlainTextResponse:
    """Prometheus text format (every namespace's counts: the ``admin`` operation)."""
    body, content_type = await render(daemon)
    return PlainTextResponse(body, media_type=content_type)
