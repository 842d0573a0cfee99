# Copyright 2026 memwarden contributors. MIT License.
"""When checks happen: the scheduling rules, as pure functions (``docs/RULES.md``,
"Who checks when").

Every check of a binding comes from one of two timelines, and their rules live here:

- the **revalidation queue** (the store's requests, sent by the daemon's scheduler):
  expiry (``stale_at``), a soft refutation's retry (``EvidenceConfig.retry_interval_s``),
  a ``changed`` event, a read, a manual request. A request put back because its
  binding's check is still running waits :func:`put_back_in` before it is sent again.
  After downtime :func:`plan_revalidations`
  spreads what is overdue evenly over ``staleness.spread_window`` (oldest deadline
  first), resumes what is not yet due with its remaining time, and applies the Nagios
  rule: a block whose window was mostly spent unwatched (downtime > 0.618 x window) has
  its deadline reset into the spread too. Each tick sends at most
  ``staleness.max_requests_per_tick`` (:func:`take_due`). Deterministic: no random
  numbers.
- a **polling sensor's own timeline** (``memwarden.plugins.PollingSensor``): one "next
  check at" per binding, an interval after its last check (:func:`next_check_in`: the
  interval, doubled per error up to ``backoff_max``, times the jitter draw). A
  revalidation from the queue is that binding's check too (its next poll moves an
  interval after it) and a sensor's own watcher may bring it forward to now.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from memwarden.memory.policy._config import PolicyConfig

__all__ = ["next_check_in", "plan_revalidations", "put_back_in", "take_due"]


def next_check_in(
    interval_s: float, failures: int, *, backoff_max_s: float, spread: float = 1.0
) -> float:
    """Seconds from a binding's check to its next periodic one.

    The interval; after ``failures`` errors in a row it doubles per error, up to
    ``backoff_max_s`` but never below the interval itself (a backoff never polls
    faster). ``spread`` is the caller's jitter draw, a factor in ``1 ± jitter`` (the
    randomness stays with the caller, so this stays deterministic).
    """
    wait = interval_s
    if failures > 0:
        wait = min(interval_s * 2.0 ** min(failures, 32), max(interval_s, backoff_max_s))
    return wait * spread


def put_back_in(sends: int, *, dispatch_s: float, cap_s: float) -> float:
    """Seconds a request waits when put back because its binding's check is still running.

    ``sends`` is how often it was sent before this time (``RevalidationRequest.attempts``):
    the wait is ``dispatch_s * 2^(sends + 1)`` (doubling per put-back) up to ``cap_s``
    (``evidence.retry_max``) but never below one dispatch interval. The running check
    ends within its deadline, so a doubling wait finds it done soon after, whether it
    is a quick one or a slow one, in a few sends rather than one per tick.
    """
    return min(dispatch_s * 2.0 ** min(sends + 1, 32), max(dispatch_s, cap_s))


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
