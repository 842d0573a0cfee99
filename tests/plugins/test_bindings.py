"""check_binding: the one check of a binding that the daemon, the agent and the test kit
share (model, then validate_binding, then the subject)."""

from __future__ import annotations

import pytest
from structlog.testing import capture_logs

from memwarden.memory import Binding
from memwarden.plugins import BaseBinding, ValidationInputError, check_binding


class VarBinding(BaseBinding):
    var: str
    equals: str | None = None

    def subject_of(self) -> str:
        return self.var


class Plain:
    """No validate_binding: only the model and the subject rules apply."""


class Refuses:
    def validate_binding(self, selector: VarBinding) -> None:
        if selector.var == "HOME":
            raise ValueError("var: 'HOME' is not allowed")
        if selector.var == "NAMED":
            raise ValidationInputError([("equals", "must be upper case")])
        if selector.var == "BUG":
            raise KeyError("oops")


def _problems(sensor: object, ctx, **selector) -> list[tuple[str, str]]:
    with pytest.raises(ValidationInputError) as err:
        check_binding(sensor, ctx, Binding(sensor="s", **selector))
    return err.value.errors


def test_the_subject_comes_from_the_binding_first_then_subject_of(make_ctx):
    """A given subject beats subject_of(); without one, subject_of() fills it in."""
    ctx = make_ctx(binding_model=VarBinding)
    binding, selector = check_binding(Plain(), ctx, Binding(sensor="s", var="APP"))
    assert (binding.subject, selector.var) == ("APP", "APP")
    given, _ = check_binding(Plain(), ctx, Binding(sensor="s", subject="the app", var="APP"))
    assert given.subject == "the app"


def test_model_problems_name_the_field_and_are_strict(make_ctx):
    """The model's own refusals name the key; no coercion ("equals": 1 is not a str)."""
    ctx = make_ctx(binding_model=VarBinding)
    assert [f for f, _ in _problems(Plain(), ctx, var="APP", equals=1)] == ["equals"]
    assert [f for f, _ in _problems(Plain(), ctx, var="APP", colour="red")] == ["colour"]


def test_validate_binding_refusals_and_crashes(make_ctx):
    """A ValueError refuses with its message; a ValidationInputError keeps its fields; a
    crash refuses naming the sensor, logged with the traceback, never raised as is."""
    ctx = make_ctx(name="env", binding_model=VarBinding)
    assert _problems(Refuses(), ctx, var="HOME") == [("", "var: 'HOME' is not allowed")]
    assert _problems(Refuses(), ctx, var="NAMED") == [("equals", "must be upper case")]
    with capture_logs() as logs:
        [(field, message)] = _problems(Refuses(), ctx, var="BUG")
    assert field == ""
    assert message.startswith("sensor 'env' could not check it: KeyError")
    assert [e["event"] for e in logs] == ["validate_binding_failed"]
    binding, _ = check_binding(Refuses(), ctx, Binding(sensor="s", var="APP"))
    assert binding.subject == "APP"


def test_a_binding_with_no_subject_is_refused(make_ctx):
    """Nothing names a subject (no given one, no standard key, subject_of() None)."""

    class Anything(BaseBinding):
        flag: bool = True

    ctx = make_ctx(binding_model=Anything)
    assert _problems(Plain(), ctx) == [("", "names no subject (path, test, url, check)")]
