"""Each detector, with what it must find and what it must leave alone (issue 19)."""

from __future__ import annotations

import pytest

from memwarden.privacy import Detectors, PrivacySettings, Redactor

ALL = frozenset({"secret", "card", "iban", "national_id", "email", "phone", "ip"})
KEY = b"k" * 32


def kinds(text: str, **options) -> list[tuple[str, str]]:
    """(kind, matched text) of every finding."""
    detectors = Detectors(national_ids=["us.ssn", "es.dni", "it.codicefiscale"], **options)
    return [(f.kind, text[f.start : f.end]) for f in detectors.scan(text, ALL)]


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("write to bob.smith@example.com.", "bob.smith@example.com"),
        ("Bob@Example.COM", "Bob@Example.COM"),
        # inside a URL: the query keeps its key
        ("https://x.example.com/u?user=alice@example.org&x=1", "alice@example.org"),
        ("mailto:carol+tag@mail.example.net", "carol+tag@mail.example.net"),
        ("url-encoded alice%40example.org in a link", "alice%40example.org"),
    ],
)
def test_email_found(text, found):
    """An address is found alone, in a URL's query, after mailto: and percent-encoded."""
    assert kinds(text) == [("email", found)]


@pytest.mark.parametrize(
    "text",
    [
        "pip install foo@git+https",  # no domain with a top-level label
        "user@localhost",
        "@decorator on a method",
        "a.b@c",
    ],
)
def test_not_email(text):
    """Things with an @ that are not addresses stay."""
    assert [k for k, _ in kinds(text) if k == "email"] == []


def test_url_password_wins_over_the_email_it_looks_like():
    """``user:pass@host`` in a URL: the password is a secret; the host stays readable."""
    text = "postgres://app:s3cretPass@db.example.com:5432/main"
    assert kinds(text) == [("secret", "s3cretPass")]


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("visa 4111 1111 1111 1111 ok", "4111 1111 1111 1111"),
        ("4111-1111-1111-1111", "4111-1111-1111-1111"),
        ("amex 378282246310005", "378282246310005"),
        ("amex 3782 822463 10005", "3782 822463 10005"),
        ("mc 5555555555554444", "5555555555554444"),
        # the number, then more digits: the number is found, the rest kept
        ("card 4111 1111 1111 1111 2031", "4111 1111 1111 1111"),
    ],
)
def test_card_found(text, found):
    """Card numbers with a known prefix and length that pass Luhn are found."""
    assert kinds(text) == [("card", found)]


@pytest.mark.parametrize(
    "text",
    [
        "4111 1111 1111 1112",  # fails Luhn
        "order 1234567812345678",  # no card prefix (and fails Luhn)
        "ts 1732450000000",  # a millisecond timestamp
        "id 41111111111111111111111",  # a longer run of digits holds no card
        "9999999999999995",  # passes Luhn, no issuer starts with 9
    ],
)
def test_not_card(text):
    """Numbers that fail Luhn, have no issuer prefix or run on are kept."""
    assert [k for k, _ in kinds(text) if k == "card"] == []


def test_iban_checked():
    """An IBAN with a good checksum is found (spaced or not); one digit off is kept."""
    assert kinds("pay DE89 3704 0044 0532 0130 00 today") == [
        ("iban", "DE89 3704 0044 0532 0130 00")
    ]
    assert kinds("GB82WEST12345698765432") == [("iban", "GB82WEST12345698765432")]
    assert kinds("pay DE89 3704 0044 0532 0130 01 today") == []


def test_national_ids_checked():
    """National ids are found by their check digits (or, for SSNs, their ranges)."""
    assert kinds("ssn 536-90-4399") == [("national_id", "536-90-4399")]
    assert kinds("dni 54362315K") == [("national_id", "54362315K")]
    assert kinds("cf RCCMNL83S18D969H") == [("national_id", "RCCMNL83S18D969H")]
    # wrong check letter, impossible SSN area, a date
    assert kinds("dni 54362315A, ssn 666-12-3456, on 2024-01-15") == []


def test_ip_addresses():
    """Public IPv4 and IPv6 are found; private, loopback, versions and times are not."""
    text = "hit 8.8.4.4 and 2001:4860:4860::8844 from 10.0.0.5 at 12:30:45 (v1.2.3.4.5, ::1)"
    assert kinds(text) == [("ip", "8.8.4.4"), ("ip", "2001:4860:4860::8844")]
    assert kinds("std::string Foo::bar a::b dead:beef") == []
    assert kinds("lan 10.0.0.5", ip_scope="all") == [("ip", "10.0.0.5")]
    assert kinds("999.1.1.1 and 1.2.3") == []


def test_phone_numbers():
    """International numbers are found and checked; local ones only in a configured region."""
    assert kinds("call +1 650-253-0000 now") == [("phone", "+1 650-253-0000")]
    assert kinds("+44 20 7946 0958") == [("phone", "+44 20 7946 0958")]
    assert kinds("+1 000 000 0000") == []  # not a valid number
    assert kinds("call (650) 253-0000") == []  # no region: local numbers are not looked for
    found = kinds("call (650) 253-0000", phone_regions=["US"])
    assert found == [("phone", "(650) 253-0000")]


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("AKIAIOSFODNN7EXAMPLE", "AKIAIOSFODNN7EXAMPLE"),
        ("token ghp_" + "a1B2" * 9, "ghp_" + "a1B2" * 9),
        ("xoxb-123456789012-abcdefghij", "xoxb-123456789012-abcdefghij"),
        ("sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc", "sk_live_4eC39HqLyjWDarjtT1zdp7dc"),
        (
            "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9",
            "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9",
        ),
        ("api_key = 'Zx9aQw3ErTy7UiOp1AsD'", "Zx9aQw3ErTy7UiOp1AsD"),
        ("password: hunter22", "hunter22"),
        ("password: supersecret", "supersecret"),
        ('"client_secret": "c8Fq2LmZ0pWx7Rt4Vb9N"', "c8Fq2LmZ0pWx7Rt4Vb9N"),
        ("Authorization: Bearer abcDEF123ghiJKL456mno", "abcDEF123ghiJKL456mno"),
        # under a secret-naming key even a hex value is a secret
        ("API_TOKEN=9f86d081884c7d659a2feaa0c55ad015", "9f86d081884c7d659a2feaa0c55ad015"),
    ],
)
def test_secret_found(text, found):
    """Known token prefixes, JWTs, bearer tokens and random values after secret keys."""
    assert kinds(text) == [("secret", found)]


def test_private_key_block_whole():
    """A private key block is redacted from BEGIN to END, and a truncated one to its end."""
    block = "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA\nq8W3\n-----END RSA PRIVATE KEY-----"
    assert kinds(f"key:\n{block}\nafter") == [("secret", block)]
    cut = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA"
    assert kinds(cut) == [("secret", cut)]


@pytest.mark.parametrize(
    "text",
    [
        # what bindings check: a SHA-256, a git commit id, a UUID
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        "sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        "HEAD is at 9fceb02d0ae598e95dc970b74767f19372d61af8",
        "commit=9fceb02d0ae598e95dc970b74767f19372d61af8",
        "request 0192f3a4-5b6c-7d8e-9f01-23456789abcd failed",
        "id: 0192f3a4-5b6c-7d8e-9f01-23456789abcd",
        # key names without a secret value
        "token=abc",
        "password: ${DB_PASSWORD}",
        "secret: <from the vault>",
        "api_key: ********",
        "max_tokens=4096",
        "the token endpoint returns a session",
        '{"token": "FileNotFoundError", "api_key": "ReadTheDocsForTheKeyName"}',  # words
        # code: the key's own name, a call, an attribute, a type, an index
        "client(password=password)",
        "token = secrets.token_urlsafe(32)",
        "pw = settings.password.get_secret_value()",
        "password: SecretStr | None = None",
        'password = USERS["edge"]',
        "the first pass: score the blocks",
        "sk-learn is a library",
    ],
)
def test_not_secret(text):
    """Digests, commit ids, UUIDs, references and prose are not secrets."""
    assert kinds(text) == []


def test_placeholders_are_typed_keyed_and_stable():
    """Same value -> same placeholder (also written differently); another key -> another."""
    r = Redactor(PrivacySettings(), KEY)
    one = r.text("mail Bob@Example.com", source="agent", field="content")
    two = r.text("mail bob@example.com", source="agent", field="content")
    assert one == two
    assert one.startswith("mail [email:")
    assert len(one) == len("mail [email:]") + 16
    other = Redactor(PrivacySettings(), b"x" * 32).text(
        "mail bob@example.com", source="agent", field="content"
    )
    assert other != one
    # a redacted text is left as it is: redaction is idempotent
    assert r.text(one, source="agent", field="content") == one


def test_json_values_and_secret_keys():
    """Every string of a JSON value is scanned; a value under a secret key is a secret."""
    r = Redactor(PrivacySettings(), KEY)
    out = r.json(
        {"password": "hunter2", "users": ["ann@example.com"], "n": 3, "sha256": "ab" * 32},
        source="sensor",
        field="observed",
    )
    assert out["password"].startswith("[secret:")
    assert out["users"][0].startswith("[email:")
    assert out["n"] == 3
    assert out["sha256"] == "ab" * 32


def test_hostile_near_matches_are_bounded():
    """A megabyte of near-matches costs at most max_checks library checks per detector;
    past the budget each candidate counts as found (fail closed)."""
    detectors = Detectors(max_checks=50)
    text = "4111 1111 1111 1112, " * 50_000  # 1 MB of Luhn failures
    found = detectors.scan(text, frozenset({"card"}))
    assert found
    assert all(not f.checked for f in found)
    assert len(found) == 50_000 - 50
    phones = "+1 202 555 01 " * 70_000
    assert all(not f.checked for f in Detectors(max_checks=50).scan(phones, ALL))
