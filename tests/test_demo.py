"""The guided demo runs to completion unattended."""

from __future__ import annotations

from typer.testing import CliRunner

from memwarden.cli import app


def test_demo_runs_unattended_and_ends_with_every_checked_fact_fresh():
    """`memwarden demo --yes` refutes, stales, revalidates and confirms, then exits 0."""
    result = CliRunner().invoke(app, ["demo", "--yes"])
    assert result.exit_code == 0, result.output
    out = result.output
    for line in (
        "Each sensor checks its fact",
        "The world changes",
        "refuted",
        "soft_refuted",
        "demo finished: every checked fact is fresh again",
        # Coverage moves: an unbound fact lowers it, bind=auto and an accepted proposal
        # bring it back.
        "coverage 100%: 4 of 4 facts can be checked",
        "coverage 80%: 4 of 5 facts can be checked",
        "coverage 83%: 5 of 6 facts can be checked",
        "coverage 100%: 6 of 6 facts can be checked",
    ):
        assert line in out, line
    # Its daemon is gone when the demo ends: the last thing on screen links to nothing.
    ending = out[out.index("A person settles") :]
    assert "http://" not in ending
    assert "unix:" not in ending
