# Copyright 2026 memwarden contributors. MIT License.
"""The 0-100 health score and its warnings (the self-tuning rules plus memwarden's own)."""

from __future__ import annotations

import json

import pytest

from memwarden.memory.policy import (
    HEALTH_PENALTIES,
    HealthInputs,
    PolicyConfig,
    health_report,
)

CFG = PolicyConfig()


@pytest.mark.parametrize(
    ("inputs", "score", "status", "expected"),
    [
        (HealthInputs(total=0), 100, "green", []),
        (HealthInputs(total=50, avg_retention=0.8, avg_access_count=3.0), 100, "green", []),
        (HealthInputs(total=5, stale_share=1.0), 40, "red", [("all_stale", "critical")]),
        (
            HealthInputs(total=40, stale_share=0.6, avg_access_count=2),
            75,
            "amber",
            [("majority_stale", "warning")],
        ),
        (HealthInputs(total=40, stale_share=0.5, avg_access_count=2), 100, "green", []),
        (HealthInputs(total=11, avg_retention=0.2), 85, "green", [("low_retention", "warning")]),
        (HealthInputs(total=10, avg_retention=0.2), 100, "green", []),
        (HealthInputs(total=21, avg_access_count=0.4), 95, "green", [("low_access", "info")]),
        (HealthInputs(total=20, avg_access_count=0.4), 100, "green", []),
        (
            HealthInputs(total=1, failing_sensors=["http"], sensors_total=3),
            85,
            "green",
            [("sensors_failing", "warning")],
        ),
        (
            HealthInputs(total=1, failing_sensors=["http", "fs"], sensors_total=2),
            40,
            "red",
            [("sensors_down", "critical")],
        ),
        (
            HealthInputs(total=1, revalidation_backlog=1001),
            90,
            "green",
            [("revalidation_backlog", "warning")],
        ),
        (HealthInputs(total=1, revalidation_backlog=1000), 100, "green", []),
        (HealthInputs(total=1, pending_reviews=2), 95, "green", [("pending_reviews", "info")]),
        (HealthInputs(total=1, flapping_count=3), 95, "green", [("flapping", "info")]),
    ],
    ids=[
        "empty store",
        "healthy store",
        "all stale",
        "majority stale",
        "exactly half stale is not a majority",
        "low retention with more than 10 blocks",
        "low retention ignored at 10 blocks",
        "low access with more than 20 blocks",
        "low access ignored at 20 blocks",
        "one sensor failing",
        "every sensor failing",
        "revalidation backlog over the limit",
        "backlog at the limit",
        "pending human reviews",
        "flapping blocks",
    ],
)
def test_health_warnings(inputs, score, status, expected):
    """Each condition raises its warning, with its severity, and takes off its penalty."""
    report = health_report(inputs, CFG)
    assert [(w.category, w.severity) for w in report.warnings] == expected
    assert report.score == score
    assert report.status == status


def test_a_critical_warning_alone_turns_the_status_red():
    """Every critical penalty is worth more than 50 points."""
    critical = {"all_stale", "sensors_down"}
    assert all(HEALTH_PENALTIES[c] > 50 for c in critical)


def test_everything_wrong_floors_at_zero():
    """Penalties add up, and the score never goes below 0."""
    report = health_report(
        HealthInputs(
            total=100,
            stale_share=1.0,
            avg_retention=0.1,
            avg_access_count=0.1,
            failing_sensors=["fs", "http"],
            sensors_total=2,
            revalidation_backlog=5000,
            pending_reviews=4,
            flapping_count=2,
        ),
        CFG,
    )
    assert report.score == 0
    assert report.status == "red"
    assert {w.category for w in report.warnings} == set(HEALTH_PENALTIES) - {
        "majority_stale",
        "sensors_failing",
    }


def test_amber_between_50_and_80():
    """Two warnings (majority stale and low retention) make amber, 60."""
    inputs = HealthInputs(total=30, stale_share=0.7, avg_retention=0.2, avg_access_count=1.0)
    report = health_report(inputs, CFG)
    assert (report.score, report.status) == (60, "amber")


def test_thresholds_come_from_config():
    """The backlog limit is the configured one."""
    cfg = PolicyConfig.model_validate({"health": {"backlog_warning": 10}})
    report = health_report(HealthInputs(total=1, revalidation_backlog=11), cfg)
    assert [w.category for w in report.warnings] == ["revalidation_backlog"]


def test_report_as_dict_is_json():
    """The report serializes for GET /v1/health, with readable messages."""
    report = health_report(
        HealthInputs(total=3, stale_share=1.0, failing_sensors=["http"], sensors_total=4), CFG
    )
    data = json.loads(json.dumps(report.as_dict()))
    assert data["score"] == 25
    assert data["warnings"][0] == {
        "category": "all_stale",
        "severity": "critical",
        "message": "all 3 blocks are stale: are the sensors running?",
    }
    assert data["warnings"][1]["message"] == "1 failing: http"
