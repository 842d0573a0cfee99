"""The one check of a binding, used by the daemon, the remote agent and the test kit.

A binding is checked the same way wherever it arrives (``POST /v1/blocks``, an import,
the stored bindings re-checked at start, the bindings an agent receives, a test's
``SensorHarness(bindings=...)``): the sensor's ``Binding`` model parses the selector,
the sensor's ``validate_binding`` (if it is a :class:`BindingValidator`) may refuse it,
and the subject is the one the binding gives or else the model's ``subject_of()``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

import structlog

from memwarden.errors import ValidationInputError
from memwarden.plugins._capabilities import BindingValidator
from memwarden.plugins._contract import BaseBinding

if TYPE_CHECKING:
    from memwarden.memory import Binding
    from memwarden.plugins._contract import SensorContext

__all__ = ["check_binding"]

log = structlog.get_logger("memwarden.plugins")

B = TypeVar("B", bound=BaseBinding)

NO_SUBJECT = "names no subject (path, test, url, check)"


def check_binding(sensor: object, ctx: SensorContext[B], binding: Binding) -> tuple[Binding, B]:
    """Check ``binding`` for ``sensor``: the binding with its subject filled in, and the
    parsed selector.

    Raises :class:`ValidationInputError` with ``(field, message)`` problems (field ``""``
    for the binding as a whole): the model's own; a ``validate_binding`` refusal (its
    ``ValueError`` message, or the fields of the ``ValidationInputError`` it raised); or,
    when ``validate_binding`` crashes, one naming the sensor (logged with the traceback:
    a bug in a plugin never becomes a 500).
    """
    selector = ctx.parse_binding(binding)
    if isinstance(sensor, BindingValidator):
        try:
            sensor.validate_binding(selector)
        except ValidationInputError:
            raise  # the hook named the fields itself
        except ValueError as err:
            raise ValidationInputError([("", str(err))]) from None
        except Exception as err:  # a bug in the plugin's hook: refuse, name the plugin
            log.exception("validate_binding_failed", sensor=ctx.name)
            problem = f"{type(err).__name__}: {err}"
            raise ValidationInputError(
                [("", f"sensor {ctx.name!r} could not check it: {problem}")]
            ) from None
    subject = binding.subject or selector.subject_of()
    if not subject:
        raise ValidationInputError([("", NO_SUBJECT)])
    if subject != binding.subject:
        binding = binding.model_copy(update={"subject": subject})
    return binding, selector
