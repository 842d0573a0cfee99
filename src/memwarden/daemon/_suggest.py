"""Binding suggestions: a fact's text matched to what the running fs sensors have indexed,
each candidate checked once (a dry run through the sensor's own check, nothing stored).

Only a candidate whose dry run **confirms** is offered as a binding; one that the file
**refutes** (the text says 45 s, the file 30) is returned under ``contradicts``: the
memory already knows the fact is wrong. A secret entry (``.env``, a key named like a
password or token) is matched by keyed hash only, and its dry run's observed value and
message are never returned. See docs/SUGGESTIONS.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import structlog

from memwarden.errors import ValidationInputError
from memwarden.memory import Binding, NewProposal
from memwarden.plugins import check_binding
from memwarden.sensors._suggest import candidates
from memwarden.sensors.fs import FsBinding, FsSensor

if TYPE_CHECKING:
    from collections.abc import Mapping

    from memwarden.memory import Store
    from memwarden.plugins import SensorRunner
    from memwarden.sensors._suggest import Candidate

__all__ = [
    "PROPOSE_CURSOR",
    "SECRET_SHOWN",
    "ProposeReport",
    "Suggested",
    "Suggestions",
    "propose",
    "suggest_bindings",
]

log = structlog.get_logger("memwarden.daemon")

SECRET_SHOWN = "(a secret: not shown)"  # noqa: S105 - the placeholder, not a secret


@dataclass(frozen=True, slots=True)
class Suggested:
    """One binding with how sure we are, why, and its dry run."""

    binding: dict[str, Any]
    confidence: float
    why: str
    check: dict[str, Any]

    def as_dict(self) -> dict[str, Any]:
        return {
            "binding": self.binding,
            "confidence": self.confidence,
            "why": self.why,
            "check": self.check,
        }


@dataclass(slots=True)
class Suggestions:
    suggestions: list[Suggested] = field(default_factory=list)
    contradicts: list[Suggested] = field(default_factory=list)
    searched: list[str] = field(default_factory=list)  # the fs sensors whose index was used

    def as_dict(self) -> dict[str, Any]:
        return {
            "suggestions": [s.as_dict() for s in self.suggestions],
            "contradicts": [s.as_dict() for s in self.contradicts],
        }


async def suggest_bindings(
    runners: Mapping[str, SensorRunner], text: str, *, limit: int = 5
) -> Suggestions:
    """Confirmed suggestions (best first, at most ``limit``) and contradictions."""
    out = Suggestions()
    scored: list[tuple[Candidate, str, SensorRunner, FsSensor]] = []
    for name, runner in sorted(runners.items()):
        sensor = runner.sensor
        if not isinstance(sensor, FsSensor) or sensor.index is None or not runner.available:
            continue
        out.searched.append(name)
        found = candidates(text, sensor.index, limit=max(4 * limit, 10))
        scored.extend((cand, name, runner, sensor) for cand in found)
    scored.sort(key=lambda t: -t[0].rank)
    seen: set[str] = set()
    for cand, name, runner, sensor in scored:
        if len(out.suggestions) >= limit and len(out.contradicts) >= limit:
            break
        raw = cand.binding(name, sensor.roots[0])
        ident = repr(sorted(raw.items()))
        if ident in seen:
            continue
        seen.add(ident)
        try:
            binding, selector = check_binding(sensor, runner.ctx, Binding.model_validate(raw))
            assert isinstance(selector, FsBinding)  # noqa: S101 - an fs sensor's model
            verdict = await sensor.dry_run(selector)
        except (ValidationInputError, ValueError) as err:
            # Our own candidate did not make a valid binding: a bug to fix, never the
            # caller's problem (and the error text may quote a value: only the kind).
            log.warning("suggestion_invalid", sensor=name, error=type(err).__name__)
            continue
        check: dict[str, Any] = {
            "outcome": verdict.outcome,
            "observed": verdict.observed,
            "message": verdict.message,
        }
        if cand.entry.secret:
            check = {"outcome": verdict.outcome, "observed": SECRET_SHOWN, "message": ""}
        shown = {"sensor": binding.sensor, **binding.selector}
        if verdict.outcome == "confirmed" and cand.agrees and len(out.suggestions) < limit:
            out.suggestions.append(Suggested(shown, cand.confidence, cand.why, check))
        elif verdict.outcome == "refuted" and not cand.agrees and len(out.contradicts) < limit:
            said = f"; the file says {_said(verdict.observed)}" if not cand.entry.secret else ""
            out.contradicts.append(Suggested(shown, cand.confidence, cand.why + said, check))
    return out


def _said(observed: Any) -> str:
    text = repr(observed) if isinstance(observed, str) else str(observed)
    return text if len(text) <= 80 else text[:79] + "…"


PROPOSE_CURSOR = "suggest_propose_cursor"  # meta: the last block rid the pass looked at
PER_FACT = 3  # binding proposals per fact, best first


@dataclass(slots=True)
class ProposeReport:
    """One proposal pass: the unbound facts looked at and the proposals newly stored."""

    looked_at: int = 0
    proposed: int = 0
    searched: list[str] = field(default_factory=list)


async def propose(
    runners: Mapping[str, SensorRunner], store: Store, *, batch: int = 200
) -> ProposeReport:
    """Propose bindings for the next ``batch`` unbound live facts (round the store, a
    cursor in ``meta``), and that a fact depends on the live facts already bound to the
    subject its suggestions name. Stores proposals, never bindings: a person accepts or
    rejects them (the review page, ``/v1/proposals``)."""
    report = ProposeReport()
    if not any(
        isinstance(r.sensor, FsSensor) and r.sensor.index is not None and r.available
        for r in runners.values()
    ):
        return report  # nothing can suggest: keep the cursor where it is
    await store.retire_proposals()
    try:
        cursor = int(await store.get_meta(PROPOSE_CURSOR) or 0)
    except ValueError:  # not ours to trust blindly: start again from the first fact
        cursor = 0
    facts = await store.unbound_live(after_rid=cursor, limit=batch)
    new: list[NewProposal] = []
    for _, block_id, title, content in facts:
        text = f"{title}\n{content}" if title else content
        try:
            found = await suggest_bindings(runners, text, limit=PER_FACT)
        except Exception as err:  # noqa: BLE001 - one fact's failure never stops the pass
            log.warning("proposal_failed", block_id=block_id, error=type(err).__name__)
            continue
        report.searched = found.searched
        subjects: dict[tuple[str, str], Suggested] = {}
        for s in found.suggestions:
            new.append(NewProposal(block_id, "binding", s.binding, s.confidence, s.why))
            subject = (str(s.binding["sensor"]), str(s.binding["path"]))
            subjects.setdefault(subject, s)  # best first: the strongest reason per subject
        for (sensor, path), others in (await store.bound_to(subjects)).items():
            best = subjects[sensor, path]
            for other in others:
                if other == block_id:
                    continue
                why = (
                    f"it speaks of {path} ({best.why}), which {other} is bound to "
                    f"({sensor}): when that fact falls, this one should be checked too"
                )
                new.append(
                    NewProposal(block_id, "depends_on", {"depends_on": other}, best.confidence, why)
                )
    report.looked_at = len(facts)
    report.proposed = await store.add_proposals(new)
    # A short batch is the end of the store: start again from the first fact next time.
    await store.set_meta(PROPOSE_CURSOR, str(facts[-1][0] if len(facts) == batch else 0))
    if report.proposed:
        log.info("proposals_made", looked_at=report.looked_at, proposed=report.proposed)
    return report
