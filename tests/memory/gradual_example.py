"""The composite scorer's gradual promotion example, its inputs and its arithmetic written out.

The example (docs/RULES.md, "Example"): a user says they like programming in Python.

- day 1: two reads in one session; the block scores about **4.2** (and is not promoted);
- day 2: the user refers to it again; four reads in two sessions, nothing contradicts it;
  about **6.1**, still under the 7.0 threshold;
- day 3: the user confirms it ("Yes, Python is my favorite", a confirmation worth +2 of
  engagement); about **7.8**, over 7.0: promoted to long_term by the threshold, not by a
  fast-track trigger.

The example states those totals to one decimal and only some of the inputs. The inputs
below fill in the rest, and the expected components are worked out here by hand from the
rules (the weights 0.30/0.25/0.25/0.20 and each component's formula, docs/RULES.md), not
by calling the scorer: a test compares the scorer with this arithmetic, and this
arithmetic with the example's totals.
"""

from __future__ import annotations

from dataclasses import dataclass

CONTENT = (
    "I like programming in Python. Python is my favourite language; I prefer it for scripting."
)
STEADY_SIGNALS = {"consistency": 2.0, "emotional_weight": 1.0}  # the same all three days

# Semantic importance, the same every day: three preference markers ("I like", "my
# favourite", "I prefer") at 2.0 each, and three pronouns ("I", "my", "I") at 0.5 each.
SEMANTIC = 3 * 2.0 + 3 * 0.5  # 7.5
THRESHOLD = 7.0


@dataclass(frozen=True)
class Day:
    """One day of the example: what happened, and the score worked out by hand."""

    reads: tuple[tuple[float, str], ...]  # today's reads: (hours after the add, session)
    mentions: int  # signals["user_initiated_mentions"], counted so far
    confirmations: int  # signals["user_confirmations"], counted so far
    reinforcements: int  # sensor confirmations so far (each one a "confirmed" event)
    confirmed_at_h: float | None  # when today's sensor confirmation arrives
    scored_at_h: float  # when the score is taken: at the day's last read (recency 1)
    access: float
    stability: float
    engagement: float
    stated_total: float  # the example's figure
    promoted: bool

    @property
    def total(self) -> float:
        return 0.30 * self.access + 0.25 * self.stability + 0.25 * self.engagement + 0.20 * SEMANTIC


# Each component as the rules define it, term by term:
#   access      = (min(reads x 1.5, 6) + spread + min(sessions x 0.5, 2)) x recency
#                 spread = 2 x min(span / 72 h, 1) x (gaps of >= 1 h) / (all gaps)
#                 recency = 1 here: each day is scored at the moment of its last read
#   stability   = min(age / 24 h, 3) + reinforcements x 1 + consistency (2)
#   engagement  = min(confirmations x 2 + mentions x 1.5 + emotional weight (1), 10)
DAYS = (
    # Reads at 14:00 and 14:30 (one gap, 30 min: not spaced, so no spread), one session.
    Day(
        reads=((14.0, "s1"), (14.5, "s1")),
        mentions=2,
        confirmations=0,
        reinforcements=0,
        confirmed_at_h=None,
        scored_at_h=14.5,
        access=2 * 1.5 + 0.0 + 1 * 0.5,  # 3.5
        stability=14.5 / 24 + 0 + 2.0,  # 2.604
        engagement=0 * 2.0 + 2 * 1.5 + 1.0,  # 4.0
        stated_total=4.2,  # 1.05 + 0.651 + 1.0 + 1.5 = 4.201; blocked anyway: 2 reads < 3
        promoted=False,
    ),
    # Reads at 07:00 and 07:30 the next day (31 h and 31.5 h), a second session. The span
    # 14:00 -> 31:30 is 17.5 h; of the gaps 0.5 h, 16.5 h, 0.5 h one is spaced.
    Day(
        reads=((31.0, "s2"), (31.5, "s2")),
        mentions=3,
        confirmations=0,
        reinforcements=1,
        confirmed_at_h=31.25,
        scored_at_h=31.5,
        access=min(4 * 1.5, 6) + 2 * (17.5 / 72) * (1 / 3) + 2 * 0.5,  # 7.162
        stability=31.5 / 24 + 1 * 1.0 + 2.0,  # 4.3125
        engagement=0 * 2.0 + 3 * 1.5 + 1.0,  # 5.5
        stated_total=6.1,  # 2.149 + 1.078 + 1.375 + 1.5 = 6.102 < 7.0
        promoted=False,
    ),
    # Reads at 06:00 and 06:30 on day 3 (54 h, 54.5 h), session s2 again (a third session
    # would be a fast track). Span 14:00 -> 54:30 is 40.5 h; gaps 0.5, 16.5, 0.5, 22.5,
    # 0.5 h: two of five spaced. Engagement 2 + 7.5 + 1 = 10.5 is capped at 10.
    Day(
        reads=((54.0, "s2"), (54.5, "s2")),
        mentions=5,
        confirmations=1,
        reinforcements=2,
        confirmed_at_h=54.25,
        scored_at_h=54.5,
        access=min(6 * 1.5, 6) + 2 * (40.5 / 72) * (2 / 5) + 2 * 0.5,  # 7.45
        stability=54.5 / 24 + 2 * 1.0 + 2.0,  # 6.271
        engagement=min(1 * 2.0 + 5 * 1.5 + 1.0, 10),  # 10
        stated_total=7.8,  # 2.235 + 1.568 + 2.5 + 1.5 = 7.803 >= 7.0, 54.5 h old, 6 reads
        promoted=True,
    ),
)
