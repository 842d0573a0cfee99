"""Binding suggestions: a fact's text matched to what the running sensors can see, each
candidate checked once (a dry run through the sensor's own check, nothing stored).

Every running sensor with the :class:`~memwarden.plugins.SuggestsBindings` capability
offers candidates (fs: values in files; code_test: tests; runtime: configured checks;
http: URLs on allowed hosts). They are merged best first, each validated as a binding
like one a block brings (a candidate that is not valid is a bug of ours: logged,
skipped), and dry-run in rounds — concurrently within a round, so a test sensor runs a
round's tests in one batch — until ``limit`` suggestions and contradictions are found or
:data:`MAX_DRY_RUNS` ran.

Only a candidate whose dry run bears it out is offered; one whose dry run refutes what
the text says is returned under ``contradicts``: the memory already knows the fact is
wrong (see :class:`~memwarden.plugins.BindingCandidate` for which is which). A secret's
dry run never shows its observed value or message. See docs/SUGGESTIONS.md.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import structlog

from memwarden.errors import ValidationInputError
from memwarden.memory import Binding, NewProposal
from memwarden.plugins import DryRun, SuggestsBindings, check_binding
from memwarden.plugins._guard import Crash, guarded

if TYPE_CHECKING:
    from collections.abc import Mapping

    from memwarden.memory import Store
    from memwarden.plugins import BindingCandidate, SensorRunner

__all__ = [
    "DRY_RUN_TIMEOUT_S",
    "MAX_DRY_RUNS",
    "MIN_CONTRADICTION",
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
MAX_DRY_RUNS = 30  # per request, whatever the limit: each is a real check
DRY_RUN_TIMEOUT_S = 60.0  # one round of dry runs (a test run may be slow)
MIN_CONTRADICTION = 0.6  # a failing check named in the text, not its value: this sure


@dataclass(frozen=True, slots=True)
class Suggested:
    """One binding with how sure we are, why, and its dry run."""

    binding: dict[str, Any]
    confidence: float
    why: str
    check: dict[str, Any]
    subject: str = ""  # what the binding checks (its sensor's subject: a path, a test id ...)

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
    searched: list[str] = field(default_factory=list)  # the sensors that were asked
    dry_runs: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "suggestions": [s.as_dict() for s in self.suggestions],
            "contradicts": [s.as_dict() for s in self.contradicts],
        }


@dataclass(frozen=True, slots=True)
class _Pending:
    cand: BindingCandidate
    name: str
    runner: SensorRunner
    sensor: SuggestsBindings[Any]


async def suggest_bindings(
    runners: Mapping[str, SensorRunner],
    text: str,
    *,
    limit: int = 5,
    max_dry_runs: int = MAX_DRY_RUNS,
    dry_run_timeout_s: float = DRY_RUN_TIMEOUT_S,
) -> Suggestions:
    """Confirmed suggestions (best first, at most ``limit``) and contradictions."""
    out = Suggestions()
    pool: list[_Pending] = []
    for name, runner in sorted(runners.items()):
        sensor = runner.sensor
        if not isinstance(sensor, SuggestsBindings) or not runner.available:
            continue
        out.searched.append(name)
        found = await guarded(sensor.binding_candidates(text, limit=max(4 * limit, 10)))
        if isinstance(found, Crash):  # one sensor's matcher must not fail the rest
            log.warning(
                "suggestion_candidates_failed", sensor=name, error=type(found.error).__name__
            )
            continue
        pool.extend(_Pending(c, name, runner, sensor) for c in found)
    pool.sort(key=lambda p: (-p.cand.order, p.name))
    seen: set[str] = set()
    queue = iter(pool)
    while out.dry_runs < max_dry_runs and (
        len(out.suggestions) < limit or len(out.contradicts) < limit
    ):
        batch: list[tuple[_Pending, Binding, Any]] = []
        for item in queue:
            raw = {"sensor": item.name, **item.cand.selector}
            ident = repr(sorted(raw.items()))
            if ident in seen:
                continue
            seen.add(ident)
            try:
                binding, selector = check_binding(
                    item.sensor, item.runner.ctx, Binding.model_validate(raw)
                )
            except (ValidationInputError, ValueError) as err:
                # Our own candidate did not make a valid binding: a bug to fix, never the
                # caller's problem (and the error text may quote a value: only the kind).
                log.warning("suggestion_invalid", sensor=item.name, error=type(err).__name__)
                continue
            batch.append((item, binding, selector))
            if len(batch) >= min(2 * limit, max_dry_runs - out.dry_runs):
                break
        if not batch:
            break
        out.dry_runs += len(batch)
        runs = await asyncio.gather(
            *(_dry_run(p.sensor, sel, dry_run_timeout_s) for p, _, sel in batch)
        )
        for (item, binding, _), run in zip(batch, runs, strict=True):
            _classify(out, item.cand, binding, run, limit)
    return out


async def _dry_run(sensor: SuggestsBindings[Any], selector: Any, timeout_s: float) -> DryRun:
    run = await guarded(sensor.dry_run(selector), timeout_s=timeout_s)
    if not isinstance(run, Crash):
        return run
    if run.timed_out:
        return DryRun("error", message=f"the dry run took more than {timeout_s:g}s")
    # A crashing check is an error, as in a revalidation.
    return DryRun("error", message=f"the dry run failed: {type(run.error).__name__}")


def _classify(
    out: Suggestions, cand: BindingCandidate, binding: Binding, run: DryRun, limit: int
) -> None:
    """Offer, contradict or drop one candidate by its dry run."""
    if run.outcome not in ("confirmed", "refuted"):
        return
    confirmed = run.outcome == "confirmed"
    if cand.agrees is None:
        # "X is down" and X's check fails: true, but no binding asserts that: dropped. A
        # check found by its name alone contradicts only when the match is strong.
        offer = confirmed and not cand.negated
        contradict = confirmed == cand.negated and cand.confidence >= MIN_CONTRADICTION
    else:
        offer, contradict = confirmed and cand.agrees, not confirmed and not cand.agrees
    check: dict[str, Any] = {
        "outcome": run.outcome,
        "observed": run.observed,
        "message": run.message,
    }
    if cand.secret:
        check = {"outcome": run.outcome, "observed": SECRET_SHOWN, "message": ""}
    shown = {"sensor": binding.sensor, **binding.selector}
    if offer and len(out.suggestions) < limit:
        out.suggestions.append(Suggested(shown, cand.confidence, cand.why, check, binding.subject))
    elif contradict and len(out.contradicts) < limit:
        said = ""
        if not cand.secret and cand.agrees is False:
            said = f"; {cand.found} {_said(run.observed)}"
        elif not cand.secret:
            said = f"; {cand.found}: {_said(run.observed)}"
        out.contradicts.append(
            Suggested(shown, cand.confidence, cand.why + said, check, binding.subject)
        )


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
    if not any(isinstance(r.sensor, SuggestsBindings) and r.available for r in runners.values()):
        return report  # nothing can suggest: keep the cursor where it is
    await store.retire_proposals()
    try:
        cursor = int(await store.get_meta(PROPOSE_CURSOR) or 0)
    except ValueError:  # not ours to trust blindly: start again from the first fact
        cursor = 0
    facts = await store.unbound_live(after_rid=cursor, limit=batch)
    new: list[NewProposal] = []
    for _, block_id, title, content, namespace in facts:
        text = f"{title}\n{content}" if title else content
        # Sensor code runs for each fact (matchers, binding models, dry runs): one fact's
        # failure never stops the pass.
        found = await guarded(suggest_bindings(runners, text, limit=PER_FACT))
        if isinstance(found, Crash):
            log.warning("proposal_failed", block_id=block_id, error=type(found.error).__name__)
            continue
        report.searched = found.searched
        subjects: dict[tuple[str, str], Suggested] = {}
        for s in found.suggestions:
            new.append(NewProposal(block_id, "binding", s.binding, s.confidence, s.why))
            key = (str(s.binding["sensor"]), s.subject)
            subjects.setdefault(key, s)  # best first: the strongest reason per subject
        # Only facts of the same namespace: one project's fact never leans on another's.
        linked = await store.bound_to(subjects, namespace=namespace)
        for (sensor, subject), others in linked.items():
            best = subjects[sensor, subject]
            for other in others:
                if other == block_id:
                    continue
                why = (
                    f"it speaks of {subject} ({best.why}), which {other} is bound to "
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
