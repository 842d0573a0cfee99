"""Properties of redaction over generated text (hypothesis)."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from memwarden.privacy import PrivacySettings, Redactor

REDACTOR = Redactor(PrivacySettings(rules={"ip": "redact"}), b"p" * 32)
ALL = frozenset({"secret", "card", "iban", "national_id", "email", "phone", "ip"})

# Pieces that look like what the detectors look for, glued with separators, so generated
# texts hit the detectors' edges (half-matches, neighbours, overlaps).
PIECES = st.sampled_from(
    [
        "ann@example.com",
        "4111 1111 1111 1111",
        "4111111111111112",
        "DE89 3704 0044 0532 0130 00",
        "536-90-4399",
        "+1 650-253-0000",
        "8.8.4.4",
        "2001:4860:4860::8844",
        "password=hunter22",
        "api_key: Zx9aQw3ErTy7UiOp1AsD",
        "AKIAIOSFODNN7EXAMPLE",
        "https://u:p4ss@db.example.com/x",
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        "0192f3a4-5b6c-7d8e-9f01-23456789abcd",
        "token",
        "=",
        ":",
        "@",
        ".",
        "+",
        "-",
        "1234",
        "x",
    ]
)
SEPARATORS = st.sampled_from(["", " ", "\n", ", ", "/", "?", "&", '"'])
TEXTS = st.lists(st.tuples(PIECES, SEPARATORS), max_size=12).map(
    lambda parts: "".join(p + s for p, s in parts)
)


@settings(max_examples=300, deadline=None)
@given(TEXTS)
@example("AKIAIOSFODNN7EXAMPLE")  # its placeholder reads like "secret: <random>"
@example("ann@example.com4111 1111 1111 1111")  # the card stands apart once replaced
@example("4111 1111 1111 1111 536-90-4399")  # the id ended the card's digit run
def test_redaction_is_idempotent_and_leaves_nothing_to_find(text):
    """Redacting a redacted text changes nothing, and nothing is found in it any more."""
    once = REDACTOR.text(text, source="agent", field="content")
    assert REDACTOR.text(once, source="agent", field="content") == once
    assert REDACTOR.detectors.scan(once, ALL) == []


@settings(max_examples=300, deadline=None)
@given(TEXTS)
@example("token=")  # "token= <digest>": the value of a secret-naming key is a secret
def test_digests_and_uuids_survive(text):
    """A SHA-256 and a UUID on a line of their own are never redacted, whatever comes
    before. (Written as the value of a secret-naming key, ``token= <digest>``, a digest
    is taken for the secret it may well be: that is the keyed rule, tested apart.)"""
    digest = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    uuid = "0192f3a4-5b6c-7d8e-9f01-23456789abcd"
    once = REDACTOR.text(f"{text}\n{digest} {uuid}", source="sensor", field="observed")
    assert once.endswith(f"\n{digest} {uuid}")
    keyed = REDACTOR.text(f"token= {digest}", source="sensor", field="observed")
    assert digest not in keyed
