# Copyright 2026 memwarden contributors. MIT License.
"""When to send revalidation requests: no storm after downtime.

A daemon that was down must not fire every overdue request the moment it starts. On a
restart :func:`plan_revalidations` spreads what is overdue evenly over
``staleness.spread_window`` (oldest deadline first), resumes what is not yet due with
its remaining time, and applies the Nagios rule: a block whose window was mostly spent
unwatched (downtime > 0.618 x window) has its deadline reset into the spread too. Each
tick then sends at most ``staleness.max_requests_per_tick`` (:func:`take_due`).
Deterministic: the same inputs give the same plan, with no random numbers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from memwarden.memory.policy._config import PolicyConfig

__all__ = ["plan_revalidations", "take_due"]


def plan_revalidations(
    due: Iterable[tuple[str, float] | tuple[str, float, float | None]],
    *,
    now: float,
    down_since: float | None,
    cfg: PolicyConfig,
) -> list[tuple[str, float]]:
    """Plan when to ask for each block's revalidation: ``[(block_id, send_at)]`` by time.

    ``due`` holds ``(block_id, stale_at)`` or ``(block_id, stale_at, window_s)``; the
    window is needed only for the Nagios reset. ``down_since`` is when the daemon
    stopped, or ``None`` in normal running, where overdue items are sent now (and
    :func:`take_due` rate-limits them) and the rest at their deadline.
    """
    st = cfg.staleness
    spread_s = st.spread_window.total_seconds()
    downtime = None if down_since is None else max(0.0, now - down_since)
    plan: list[tuple[str, float]] = []
    spread: list[tuple[float, str]] = []
    for item in due:
        block_id, stale_at = item[0], item[1]
        window_s = item[2] if len(item) > 2 else None  # the optional third field
        if downtime is None:
            plan.append((block_id, max(stale_at, now)))
        elif stale_at <= now:
            spread.append((stale_at, block_id))  # became due while down (or before)
        elif window_s is not None and downtime > st.downtime_reset_fraction * window_s:
            spread.append((stale_at, block_id))  # Nagios: deadline reset, not "at once"
        else:
            plan.append((block_id, stale_at))  # resume with the remaining time
    spread.sort()
    n = len(spread)
    plan.extend((block_id, now + spread_s * i / n) for i, (_, block_id) in enumerate(spread))
    plan.sort(key=lambda p: (p[1], p[0]))
    return plan


def take_due(
    plan: Sequence[tuple[str, float]], now: float, *, limit: int
) -> tuple[list[tuple[str, float]], list[tuple[str, float]]]:
    """Split a plan into what to send this tick (at most ``limit``, earliest first) and the rest.

    Pass ``cfg.staleness.max_requests_per_tick`` as ``limit``. What is held back keeps its
    ``send_at`` and goes out on a later tick, still earliest first.
    """
    ready = sorted(
        (i for i, (_, send_at) in enumerate(plan) if send_at <= now),
        key=lambda i: (plan[i][1], plan[i][0]),
    )[: max(0, limit)]
    chosen = set(ready)
    taken = [plan[i] for i in ready]
    rest = [p for i, p in enumerate(plan) if i not in chosen]
    return taken, rest
