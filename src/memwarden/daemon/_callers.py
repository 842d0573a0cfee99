"""Who is calling: the API's named tokens (agents), each with its operations and namespaces.

The state dir's token (``<home>/token``) is the agent ``default``: every operation, every
namespace, unless ``[agents.default]`` narrows it, so a daemon configured with no
``[agents]`` behaves as it always did. Every other ``[agents.<name>]`` brings its own
token from a file (checked like the state dir's) or from an environment variable of the
daemon, never from the TOML.

A bearer token is compared with every agent's, each with :func:`hmac.compare_digest` and
without stopping at the first match, so how long the check takes says nothing about which
token (or how much of one) matched. Two agents may not share a token (the daemon refuses
to start): a token names exactly one agent.

Namespaces: a block belongs to one namespace (``default`` unless its writer chose
another); a caller reads, searches, edits and forgets only blocks of its namespaces, and a
block of another namespace is *not found* to it (404, never 403: its existence is not
told). An operation the caller's agent lacks is 403, naming the operation, before anything
is applied. The privacy profile an agent's writes go through is
:func:`privacy_profile_for` (the one place the redaction policy asks).
"""

from __future__ import annotations

import hmac
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from memwarden.daemon._config import OPERATIONS
from memwarden.daemon._token import MIN_TOKEN_CHARS, read_token
from memwarden.errors import ConfigError
from memwarden.privacy import profile_scope

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from memwarden.daemon._config import AgentPolicy, Settings

__all__ = [
    "DEFAULT_AGENT",
    "DEFAULT_NAMESPACE",
    "Caller",
    "Callers",
    "load_callers",
    "privacy_profile_for",
]

DEFAULT_AGENT = "default"
DEFAULT_NAMESPACE = "default"
EVERY_NAMESPACE = "*"


@dataclass(frozen=True, slots=True)
class Caller:
    """One agent as a request sees it: its name, operations and namespaces.

    ``namespaces`` is ``None`` for an agent of every namespace (``"*"``).
    """

    name: str
    operations: frozenset[str]
    namespaces: frozenset[str] | None
    home_namespace: str
    privacy_profile: str = "default"

    @property
    def actor(self) -> str:
        """Who the audit trail, the history and a tombstone name: ``api`` for the default
        agent (as before agents existed), ``api:<name>`` for another."""
        return "api" if self.name == DEFAULT_AGENT else f"api:{self.name}"

    def session_key(self, session: str | None) -> str | None:
        """A read session's key: the agent's own (another agent naming the same session
        id gets its own notices, never these)."""
        if session is None or self.name == DEFAULT_AGENT:
            return session
        return f"{self.name}/{session}"

    def may(self, operation: str) -> bool:
        """Whether this agent may do ``operation`` (one of :data:`OPERATIONS`)."""
        return operation in self.operations

    def sees(self, namespace: str) -> bool:
        """Whether a block of ``namespace`` exists for this agent."""
        return self.namespaces is None or namespace in self.namespaces

    def scope(self) -> list[str] | None:
        """The namespaces the store's reads are limited to (``None``: all), sorted."""
        return None if self.namespaces is None else sorted(self.namespaces)

    def namespace_for_write(self, asked: str | None) -> str | None:
        """The namespace a new block goes to: the one asked for if this agent may write
        there, else ``None`` (refused); without one asked, the agent's first."""
        if asked is None:
            return self.home_namespace
        return asked if self.sees(asked) else None


def caller_of(name: str, policy: AgentPolicy | None) -> Caller:
    """The :class:`Caller` an agent's policy describes (``None``: the default agent as
    it always was: every operation, every namespace)."""
    if policy is None:
        return Caller(
            name=name,
            operations=frozenset(OPERATIONS),
            namespaces=None,
            home_namespace=DEFAULT_NAMESPACE,
        )
    every = policy.namespaces == [EVERY_NAMESPACE]
    return Caller(
        name=name,
        operations=frozenset(policy.operations),
        namespaces=None if every else frozenset(policy.namespaces),
        home_namespace=DEFAULT_NAMESPACE if every else policy.namespaces[0],
        privacy_profile=policy.privacy_profile,
    )


def privacy_profile_for(caller: Caller) -> str:
    """The privacy scope this caller's writes are judged in (the one place the redaction
    policy asks): ``agent``, or ``profile:<name>`` when the agent's ``privacy_profile``
    names a profile of ``[privacy.profiles]``."""
    return profile_scope(caller.privacy_profile)


class Callers:
    """The table of tokens: which agent a bearer token belongs to."""

    def __init__(self, entries: Iterable[tuple[bytes, Caller]]) -> None:
        self._entries = [(token, caller) for token, caller in entries if token]
        names = [c.name for _, c in self._entries]
        if len(set(names)) != len(names):
            raise ConfigError("agents: an agent is listed twice")
        tokens = [t for t, _ in self._entries]
        if len(set(tokens)) != len(tokens):
            shared = sorted(
                {c.name for t, c in self._entries if tokens.count(t) > 1},
            )
            message = f"agents: {', '.join(shared)} share one token; each needs its own"
            raise ConfigError(message, problems=[message])

    @classmethod
    def single(cls, token: str) -> Callers:
        """Only the state dir's token, as the default agent (every operation and namespace)."""
        return cls([(token.encode(), caller_of(DEFAULT_AGENT, None))])

    @property
    def names(self) -> list[str]:
        return sorted(c.name for _, c in self._entries)

    def match(self, header: bytes | str | None) -> Caller | None:
        """The agent an ``Authorization: Bearer <token>`` value names, or ``None``.

        Every token is compared (constant time each, no early exit); an empty token,
        another scheme or bytes that are not ASCII match nothing.
        """
        if header is None:
            return None
        raw = header.encode("latin-1", "replace") if isinstance(header, str) else header
        scheme, _, given = raw.strip().partition(b" ")
        given = given.strip()
        if scheme.lower() != b"bearer" or not given or not given.isascii():
            return None
        found: Caller | None = None
        for token, caller in self._entries:
            if hmac.compare_digest(given, token) and found is None:
                found = caller
        return found


def load_callers(
    settings: Settings, default_token: str, environ: Mapping[str, str] | None = None
) -> Callers:
    """Every configured agent with its token; a :class:`ConfigError` naming the agent and
    the problem when a token cannot be had (a file unfit, a variable unset or too short).
    """
    env = os.environ if environ is None else environ
    policies = settings.agents
    entries = [(default_token.encode(), caller_of(DEFAULT_AGENT, policies.get(DEFAULT_AGENT)))]
    problems: list[str] = []
    for name, policy in sorted(policies.items()):
        if name == DEFAULT_AGENT:
            continue
        token: str | None = None
        if policy.token_file is not None:
            try:
                token = read_token(policy.token_file)
            except ConfigError as err:
                problems.append(f"agents.{name}.token_file: {err}")
                continue
        elif policy.token_env is not None:
            value = (env.get(policy.token_env) or "").strip()
            if len(value) < MIN_TOKEN_CHARS or not all(0x21 <= ord(c) <= 0x7E for c in value):
                problems.append(
                    f"agents.{name}.token_env: ${policy.token_env} is unset or not a token "
                    f"(at least {MIN_TOKEN_CHARS} printable ASCII characters, no spaces)"
                )
                continue
            token = value
        if token is not None:
            entries.append((token.encode(), caller_of(name, policy)))
    if problems:
        raise ConfigError("; ".join(problems), problems=problems)
    return Callers(entries)
