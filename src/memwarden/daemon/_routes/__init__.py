"""The API's routes: one ``APIRouter`` per resource, the daemon and the token injected
with ``Depends`` (``_deps.py``), errors answered by the handlers in ``_errors.py``.

:func:`memwarden.daemon._api.create_app` includes :data:`ROUTERS` and registers
:data:`EXCEPTION_HANDLERS`; nothing here holds state of its own.
"""

from __future__ import annotations

from memwarden.daemon._routes import (
    blocks,
    erasure,
    events,
    ops,
    privacy,
    proposals,
    reviews,
    search,
    suggest,
    transfer,
)
from memwarden.daemon._routes._deps import ErrorMessage
from memwarden.daemon._routes._errors import EXCEPTION_HANDLERS

__all__ = ["EXCEPTION_HANDLERS", "ROUTERS", "ErrorMessage"]

ROUTERS = (
    ops.router,
    blocks.router,
    reviews.router,
    search.router,
    transfer.router,
    suggest.router,
    proposals.router,
    events.router,
    erasure.router,
    privacy.router,
)
