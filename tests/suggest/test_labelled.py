"""A labelled set: facts written the way agents write them, each with its correct binding
(or none, or a contradiction), run through POST /v1/suggest-bindings on a real daemon.

It measures the top suggestion's precision and recall with Wilson 95 % lower bounds and
asserts floors this version reaches (docs/SUGGESTIONS.md has the figures). It is small
(46 facts over 12 files): the bounds are wide, which is why they are reported as bounds.
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING

from tests.suggest.conftest import start_api

if TYPE_CHECKING:
    from pathlib import Path

FILES: dict[str, str] = {
    "config/app.yaml": (
        "http:\n  timeout: 30\n  port: 8080\n  retries: 3\nlogging:\n  level: debug\n"
        "features:\n  dark_mode: true\n"
    ),
    "config/db.yaml": (
        "db:\n  host: db.internal\n  pool_size: 10\n  timeout_ms: 5000\n  name: orders\n"
    ),
    "package.json": json.dumps(
        {
            "name": "web",
            "version": "1.2.3",
            "dependencies": {"react": "^18.2.0"},
            "devDependencies": {"typescript": "~5.4.2"},
            "engines": {"node": ">=20"},
        }
    ),
    "pyproject.toml": (
        '[project]\nname = "memwarden-demo"\nversion = "0.4.1"\nrequires-python = ">=3.11"\n'
        "[tool.ruff]\nline-length = 100\n"
    ),
    "settings.ini": "[server]\nworkers = 4\nhost = 0.0.0.0\n[cache]\nttl = 600\n",
    ".env": "API_TOKEN=abc-123-def\nREDIS_URL=redis://cache:6379\n",
    "deploy/k8s.yaml": (
        "spec:\n  replicas: 3\n  image: registry.local/web:1.2.3\n"
        "  resources:\n    limits:\n      memory: 512Mi\n"
    ),
    "config/queue.toml": (
        '[queue]\nmax_size = 1000\nvisibility_timeout = "30s"\nbackend = "rabbitmq"\n'
    ),
    "tsconfig.json": json.dumps(
        {"compilerOptions": {"target": "ES2022", "strict": True, "module": "esnext"}}
    ),
    "config/mail.json": json.dumps(
        {"smtp": {"host": "smtp.example.com", "port": 587}, "sender": "noreply@example.com"}
    ),
    "config/rate.yaml": "rate_limit:\n  requests_per_minute: 120\n  burst: 20\n",
    "config/search.yaml": (
        "search:\n  engine: elasticsearch\n  index_name: products\n  shards: 5\n"
    ),
}

# (fact, the binding's (path, pointer) or None) - a confirming binding expected
SUPPORTED: list[tuple[str, tuple[str, str] | None]] = [
    ("The API timeout is 30 s", ("config/app.yaml", "/http/timeout")),
    ("The HTTP server listens on port 8080", ("config/app.yaml", "/http/port")),
    ("The client makes 3 retries", ("config/app.yaml", "/http/retries")),
    ("Log level is debug", ("config/app.yaml", "/logging/level")),
    ("Dark mode is enabled", ("config/app.yaml", "/features/dark_mode")),
    ("The database host is db.internal", ("config/db.yaml", "/db/host")),
    ("DB connection pool size is 10", ("config/db.yaml", "/db/pool_size")),
    ("Database queries time out after 5 seconds", ("config/db.yaml", "/db/timeout_ms")),
    ("The database is called orders", ("config/db.yaml", "/db/name")),
    ("web is at version 1.2.3", ("package.json", "/version")),
    ("We use React 18.2.0", ("package.json", "/dependencies/react")),
    ("TypeScript 5.4.2 is the compiler", ("package.json", "/devDependencies/typescript")),
    ("Node 20 or newer is required", ("package.json", "/engines/node")),
    ("The demo project is version 0.4.1", ("pyproject.toml", "/project/version")),
    ("It needs Python 3.11 or newer", ("pyproject.toml", "/project/requires-python")),
    ("Ruff line length is 100", ("pyproject.toml", "/tool/ruff/line-length")),
    ("The server runs 4 workers", ("settings.ini", "/server/workers")),
    ("Cache TTL is 10 minutes", ("settings.ini", "/cache/ttl")),
    ("The server binds to 0.0.0.0", ("settings.ini", "/server/host")),
    ("Redis runs at redis://cache:6379", (".env", "/REDIS_URL")),
    ("Kubernetes runs 3 replicas", ("deploy/k8s.yaml", "/spec/replicas")),
    ("Pods are limited to 512Mi of memory", ("deploy/k8s.yaml", "/spec/resources/limits/memory")),
    ("The queue holds at most 1000 messages", ("config/queue.toml", "/queue/max_size")),
    ("Queue visibility timeout is 30 s", ("config/queue.toml", "/queue/visibility_timeout")),
    ("The queue backend is RabbitMQ", ("config/queue.toml", "/queue/backend")),
    ("TypeScript targets ES2022", ("tsconfig.json", "/compilerOptions/target")),
    ("TypeScript strict mode is on", ("tsconfig.json", "/compilerOptions/strict")),
    ("SMTP host is smtp.example.com", ("config/mail.json", "/smtp/host")),
    ("Mail goes out through SMTP port 587", ("config/mail.json", "/smtp/port")),
    ("Mail is sent from noreply@example.com", ("config/mail.json", "/sender")),
    ("We allow 120 requests per minute", ("config/rate.yaml", "/rate_limit/requests_per_minute")),
    ("Burst size is 20", ("config/rate.yaml", "/rate_limit/burst")),
    ("Search runs on Elasticsearch", ("config/search.yaml", "/search/engine")),
    ("The product index is named products", ("config/search.yaml", "/search/index_name")),
    ("Elasticsearch uses 5 shards", ("config/search.yaml", "/search/shards")),
    ("The team meets every Monday", None),
    ("Deploys happen on Fridays at 5 pm", None),
    ("Alice owns the billing service", None),
    ("The office wifi password is changed monthly", None),
    ("We migrated from MySQL last year", None),
    ("The CI pipeline takes about 12 minutes", None),
    ("Customers complain about slow checkout", None),
]

# (fact, the (path, pointer) the file contradicts)
CONTRADICTED: list[tuple[str, tuple[str, str]]] = [
    ("The API timeout is 45 s", ("config/app.yaml", "/http/timeout")),
    ("The server runs 8 workers", ("settings.ini", "/server/workers")),
    ("Kubernetes runs 5 replicas", ("deploy/k8s.yaml", "/spec/replicas")),
    ("The SMTP port is 25", ("config/mail.json", "/smtp/port")),
]


def wilson_lower(successes: int, n: int, z: float = 1.96) -> float:
    """The lower end of the Wilson score interval (95 %) for a proportion."""
    if n == 0:
        return 0.0
    p = successes / n
    centre = p + z * z / (2 * n)
    margin = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return (centre - margin) / (1 + z * z / n)


def _target(binding: dict[str, object]) -> tuple[str, str]:
    """(path, pointer) of a suggested binding; a regex binding names its key in the regex."""
    if "key" in binding:
        return str(binding["path"]), str(binding["key"])
    regex = str(binding["regex"])
    name = regex.split(r"(?:export\s+)?", 1)[1].split(r"\s*", 1)[0]
    section = ""
    return str(binding["path"]), f"{section}/{name.replace(chr(92), '')}"


def _same(found: tuple[str, str], want: tuple[str, str]) -> bool:
    """The same file and key (INI regexes do not name the section: the key's name counts)."""
    if found[0] != want[0]:
        return False
    return found[1] == want[1] or (
        want[0].endswith(".ini") and found[1].rsplit("/", 1)[-1] == want[1].rsplit("/", 1)[-1]
    )


def test_wilson_lower_bound_matches_known_values():
    assert round(wilson_lower(9, 10), 3) == 0.596
    assert round(wilson_lower(0, 10), 3) == 0.0
    assert wilson_lower(0, 0) == 0.0


async def test_top_suggestion_precision_and_recall(tmp_path: Path):
    async with start_api(tmp_path, FILES) as api:
        results = []
        for fact, want in SUPPORTED:
            found = await api.post("/v1/suggest-bindings", {"content": fact, "limit": 3})
            top = found["suggestions"][0] if found["suggestions"] else None
            assert top is None or top["check"]["outcome"] == "confirmed"
            results.append((fact, want, top))
        contradictions = []
        for fact, want in CONTRADICTED:
            found = await api.post("/v1/suggest-bindings", {"content": fact, "limit": 3})
            contradictions.append(
                any(_same(_target(c["binding"]), want) for c in found["contradicts"])
            )
    offered = [(w, t) for _, w, t in results if t is not None]
    correct = sum(1 for w, t in offered if w is not None and _same(_target(t["binding"]), w))
    positives = sum(1 for _, w, _ in results if w is not None)
    auto = [(w, t) for w, t in offered if t["confidence"] >= 0.85]
    auto_correct = sum(1 for w, t in auto if w is not None and _same(_target(t["binding"]), w))
    figures = {
        "facts": len(SUPPORTED) + len(CONTRADICTED),
        "files": len(FILES),
        "top1_precision": f"{correct}/{len(offered)}",
        "top1_precision_lb": round(wilson_lower(correct, len(offered)), 3),
        "top1_recall": f"{correct}/{positives}",
        "top1_recall_lb": round(wilson_lower(correct, positives), 3),
        "auto_precision": f"{auto_correct}/{len(auto)}",
        "auto_precision_lb": round(wilson_lower(auto_correct, len(auto)), 3),
        "contradictions_found": f"{sum(contradictions)}/{len(contradictions)}",
    }
    print("labelled set:", json.dumps(figures))  # noqa: T201 - the figures SUGGESTIONS.md reports
    misses = [
        (fact, want, t and _target(t["binding"]))
        for fact, want, t in results
        if (t is None and want is not None)
        or (t is not None and (want is None or not _same(_target(t["binding"]), want)))
    ]
    print("misses:", misses)  # noqa: T201 - what to look at when a floor fails
    # Floors this version reaches (measured: precision 32/32, recall 32/35, auto 10/10,
    # contradictions 4/4); a change to the matcher that lowers them fails here.
    assert wilson_lower(correct, len(offered)) >= 0.85, misses
    assert wilson_lower(correct, positives) >= 0.7, misses
    assert auto_correct == len(auto) >= 8, auto
    assert all(contradictions), contradictions
