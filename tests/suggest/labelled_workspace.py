"""The labelled set's world: a small shop monorepo (config and manifest files), its API's
pytest project, a local HTTP endpoint and runtime checks. The facts about it are in
``labelled_facts.py``; ``test_labelled.py`` runs them."""

from __future__ import annotations

import json
import textwrap

# ---------------------------------------------------------------------- config files

FILES: dict[str, str] = {
    "package.json": json.dumps(
        {
            "name": "shop",
            "version": "2.4.0",
            "private": True,
            "workspaces": ["web", "services/*"],
            "engines": {"node": ">=20.11"},
            "scripts": {"build": "turbo run build", "lint": "eslint ."},
            "devDependencies": {"turbo": "^1.13.3", "eslint": "^8.57.0"},
        },
        indent=2,
    ),
    "web/package.json": json.dumps(
        {
            "name": "shop-web",
            "version": "2.4.0",
            "dependencies": {
                "react": "^18.3.1",
                "react-dom": "^18.3.1",
                "next": "14.2.3",
                "zod": "^3.23.8",
            },
            "devDependencies": {"typescript": "~5.4.5", "vitest": "^1.6.0"},
        },
        indent=2,
    ),
    "web/tsconfig.json": json.dumps(
        {
            "compilerOptions": {
                "target": "ES2022",
                "module": "esnext",
                "strict": True,
                "jsx": "preserve",
                "baseUrl": "src",
            }
        },
        indent=2,
    ),
    "web/.eslintrc.json": json.dumps(
        {"extends": ["next/core-web-vitals"], "rules": {"max-len": ["error", {"code": 120}]}}
    ),
    "web/.prettierrc.json": json.dumps(
        {"printWidth": 100, "singleQuote": True, "semi": False, "tabWidth": 2}
    ),
    "services/api/pyproject.toml": textwrap.dedent(
        """\
        [project]
        name = "shop-api"
        version = "3.1.0"
        requires-python = ">=3.11"
        dependencies = ["fastapi>=0.111", "sqlalchemy>=2.0", "pydantic>=2.7"]

        [tool.pytest.ini_options]
        testpaths = ["tests"]

        [tool.ruff]
        line-length = 99
        target-version = "py311"

        [tool.coverage.report]
        fail_under = 85
        """
    ),
    "services/api/config/settings.yaml": textwrap.dedent(
        """\
        server:
          host: 0.0.0.0
          port: 8000
          workers: 4
          request_timeout: 30
        cors:
          allowed_origins:
            - https://shop.example.com
          max_age: 600
        pagination:
          default_page_size: 25
          max_page_size: 200
        """
    ),
    "services/api/.env": (
        "DATABASE_URL=postgresql://shop:s3cretpw@db.internal:5432/shop\n"
        "JWT_SECRET=change-me-7f3a9\n"
        "SENTRY_ENVIRONMENT=production\n"
        "LOG_FORMAT=json\n"
    ),
    "services/worker/config.toml": textwrap.dedent(
        """\
        [worker]
        concurrency = 8
        prefetch_multiplier = 4
        max_tasks_per_child = 1000

        [retry]
        max_attempts = 5
        backoff_seconds = 30

        [schedule]
        cleanup_cron = "0 3 * * *"
        report_cron = "30 6 * * 1"
        """
    ),
    "services/worker/celery.ini": textwrap.dedent(
        """\
        [celery]
        broker_pool_limit = 10
        task_time_limit = 300
        result_expires = 86400
        timezone = Europe/Berlin
        """
    ),
    "deploy/k8s/api-deployment.yaml": textwrap.dedent(
        """\
        apiVersion: apps/v1
        kind: Deployment
        metadata:
          name: shop-api
          namespace: shop-prod
        spec:
          replicas: 3
          template:
            spec:
              containers:
                - name: api
                  image: registry.example.com/shop-api:3.1.0
                  resources:
                    limits:
                      memory: 1Gi
                      cpu: 500m
        """
    ),
    "deploy/k8s/worker-deployment.yaml": textwrap.dedent(
        """\
        apiVersion: apps/v1
        kind: Deployment
        metadata:
          name: shop-worker
          namespace: shop-prod
        spec:
          replicas: 2
          template:
            spec:
              containers:
                - name: worker
                  image: registry.example.com/shop-worker:3.1.0
                  resources:
                    limits:
                      memory: 2Gi
        """
    ),
    "deploy/k8s/hpa.yaml": textwrap.dedent(
        """\
        apiVersion: autoscaling/v2
        kind: HorizontalPodAutoscaler
        metadata:
          name: shop-api
        spec:
          minReplicas: 3
          maxReplicas: 12
          targetCPUUtilizationPercentage: 70
        """
    ),
    "docker-compose.yml": textwrap.dedent(
        """\
        services:
          db:
            image: postgres:16.3
            ports:
              - "5432:5432"
          redis:
            image: redis:7.2-alpine
          mailhog:
            image: mailhog/mailhog:v1.0.1
        """
    ),
    ".github/workflows/ci.yml": textwrap.dedent(
        """\
        name: ci
        on: [push]
        jobs:
          test:
            runs-on: ubuntu-22.04
            timeout-minutes: 20
            steps:
              - uses: actions/checkout@v4
              - uses: actions/setup-python@v5
                with:
                  python-version: "3.12"
        """
    ),
    "config/db.yaml": textwrap.dedent(
        """\
        database:
          host: db.internal
          port: 5432
          name: shop
          pool_size: 20
          max_overflow: 10
          statement_timeout_ms: 15000
          ssl_mode: require
        replica:
          host: db-replica.internal
          lag_alert_seconds: 60
        """
    ),
    "config/cache.toml": textwrap.dedent(
        """\
        [redis]
        url = "redis://cache.internal:6379/0"
        max_connections = 50

        [ttl]
        product_page = 300
        session = 1800
        search_results = 120
        """
    ),
    "config/logging.yaml": textwrap.dedent(
        """\
        level: info
        format: json
        retention_days: 14
        loggers:
          sqlalchemy: warning
          uvicorn_access: error
        """
    ),
    "config/features.json": json.dumps(
        {
            "new_checkout": True,
            "guest_checkout": False,
            "recommendations": True,
            "dark_mode": False,
            "gift_cards": True,
        },
        indent=2,
    ),
    "config/mail.json": json.dumps(
        {
            "smtp": {"host": "smtp.sendgrid.net", "port": 587, "use_tls": True},
            "from_address": "orders@shop.example.com",
            "reply_to": "support@shop.example.com",
            "daily_limit": 50000,
        },
        indent=2,
    ),
    "config/rate_limits.yaml": textwrap.dedent(
        """\
        default:
          requests_per_minute: 600
          burst: 100
        login:
          attempts_per_hour: 10
          lockout_minutes: 15
        search:
          requests_per_minute: 120
        """
    ),
    "config/search.yaml": textwrap.dedent(
        """\
        search:
          engine: opensearch
          index: products-v3
          shards: 6
          replicas: 1
          min_score: 0.35
          synonyms_file: synonyms.txt
        """
    ),
    "config/queue.toml": textwrap.dedent(
        """\
        [queue]
        backend = "rabbitmq"
        host = "mq.internal"
        visibility_timeout = "45s"
        dead_letter_after = 3
        max_message_kb = 256
        """
    ),
    "config/payments.json": json.dumps(
        {
            "provider": "stripe",
            "currency": "EUR",
            "capture": "manual",
            "refund_window_days": 30,
            "min_order_cents": 500,
            "webhook_tolerance_s": 300,
        },
        indent=2,
    ),
    "config/auth.yaml": textwrap.dedent(
        """\
        jwt:
          algorithm: RS256
          access_token_ttl: 15m
          refresh_token_ttl: 30d
          issuer: https://auth.shop.example.com
        password:
          min_length: 12
          bcrypt_rounds: 12
        mfa:
          required_for_admins: true
        """
    ),
    "config/storage.yaml": textwrap.dedent(
        """\
        s3:
          bucket: shop-assets-prod
          region: eu-central-1
          max_upload_mb: 25
        images:
          thumbnail_width: 320
          quality: 82
        """
    ),
    "config/metrics.yaml": textwrap.dedent(
        """\
        prometheus:
          scrape_interval: 15s
          port: 9102
        alerts:
          error_rate_threshold: 0.02
          p99_latency_ms: 800
        """
    ),
    "config/i18n.json": json.dumps(
        {"default_locale": "de-DE", "supported": ["de-DE", "en-GB", "fr-FR"], "fallback": "en-GB"}
    ),
    "setup.cfg": textwrap.dedent(
        """\
        [flake8]
        max-line-length = 99
        exclude = .git,build

        [mypy]
        strict = True
        """
    ),
    "tox.ini": textwrap.dedent(
        """\
        [tox]
        envlist = py311,py312

        [testenv]
        deps = pytest
        """
    ),
    "renovate.json": json.dumps(
        {
            "extends": ["config:recommended"],
            "schedule": ["before 6am on monday"],
            "prConcurrentLimit": 5,
        }
    ),
    "mkdocs.yml": textwrap.dedent(
        """\
        site_name: Shop developer docs
        theme:
          name: material
        """
    ),
    "tools/cli/Cargo.toml": textwrap.dedent(
        """\
        [package]
        name = "shopctl"
        version = "0.9.2"
        edition = "2021"

        [dependencies]
        clap = "4.5"
        reqwest = "0.12"
        """
    ),
    ".env.production": "CDN_URL=https://cdn.shop.example.com\nSTRIPE_API_KEY=sk_live_51Habc\n",
}

# ---------------------------------------------------------------------- the pytest project

API_PROJECT: dict[str, str] = {
    "shop/__init__.py": "",
    "shop/pricing.py": textwrap.dedent(
        """\
        def apply_discount(price_cents: int, percent: int) -> int:
            # A known bug: a discount over 100 % makes the price negative.
            return price_cents - price_cents * percent // 100

        def vat(price_cents: int, rate: float = 0.19) -> int:
            return round(price_cents * rate)

        def round_to_cents(value: float) -> int:
            return int(value + 0.5)
        """
    ),
    "shop/auth.py": textwrap.dedent(
        """\
        import time

        def token_valid(expires_at: float, now: float | None = None) -> bool:
            return (now if now is not None else time.time()) < expires_at

        def password_ok(password: str) -> bool:
            return len(password) >= 12
        """
    ),
    "shop/cart.py": textwrap.dedent(
        """\
        class Cart:
            def __init__(self):
                self.items = {}

            def add(self, sku: str, qty: int = 1) -> None:
                if qty <= 0:
                    raise ValueError("quantity must be positive")
                self.items[sku] = self.items.get(sku, 0) + qty

            def total_items(self) -> int:
                return sum(self.items.values())
        """
    ),
    "shop/slugs.py": textwrap.dedent(
        """\
        import re

        def slugify(text: str) -> str:
            return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
        """
    ),
    "tests/__init__.py": "",
    "tests/test_pricing.py": textwrap.dedent(
        '''\
        from shop.pricing import apply_discount, round_to_cents, vat

        def test_discount_reduces_price():
            """A 10 % discount takes 10 % off the price."""
            assert apply_discount(1000, 10) == 900

        def test_discount_never_makes_price_negative():
            """Even a discount over 100 % leaves the price at zero, never below."""
            assert apply_discount(1000, 150) >= 0

        def test_vat_is_nineteen_percent_by_default():
            """German VAT (19 %) is the default rate."""
            assert vat(10000) == 1900

        def test_round_to_cents_rounds_half_up():
            assert round_to_cents(10.5) == 11
        '''
    ),
    "tests/test_auth.py": textwrap.dedent(
        '''\
        from shop.auth import password_ok, token_valid

        class TestTokens:
            def test_expired_token_is_rejected(self):
                """A token past its expiry time is not valid."""
                assert not token_valid(expires_at=100.0, now=200.0)

            def test_fresh_token_is_accepted(self):
                assert token_valid(expires_at=300.0, now=200.0)

        def test_short_passwords_are_refused():
            """Passwords shorter than 12 characters are refused."""
            assert not password_ok("short")

        def test_long_passphrase_is_allowed():
            assert password_ok("correct horse battery staple")
        '''
    ),
    "tests/test_cart.py": textwrap.dedent(
        '''\
        import pytest

        from shop.cart import Cart

        def test_adding_same_item_twice_increases_quantity():
            """Adding an item already in the cart adds to its quantity."""
            cart = Cart()
            cart.add("sku-1")
            cart.add("sku-1", 2)
            assert cart.items["sku-1"] == 3

        def test_zero_quantity_is_rejected():
            with pytest.raises(ValueError):
                Cart().add("sku-1", 0)

        def test_cart_counts_total_items():
            cart = Cart()
            cart.add("a", 2)
            cart.add("b", 1)
            assert cart.total_items() == 3
        '''
    ),
    "tests/test_slugs.py": textwrap.dedent(
        '''\
        from shop.slugs import slugify

        def test_slugify_lowercases_and_joins_with_dashes():
            """Product names become lowercase slugs joined by dashes."""
            assert slugify("Blue Running Shoes") == "blue-running-shoes"

        def test_slugify_strips_punctuation():
            assert slugify("Hello, World!") == "hello-world"

        def test_slugify_keeps_unicode_letters():
            """Umlauts survive in slugs (customers search for Müsli)."""
            assert slugify("Müsli") == "müsli"
        '''
    ),
}

# ---------------------------------------------------------------------- the HTTP endpoint

# path -> (status, JSON body); served on 127.0.0.1 at a free port ({base} in the facts).
ROUTES: dict[str, tuple[int, object]] = {
    "/health": (200, {"status": "ok", "db": "ok", "cache": "ok"}),
    "/version": (200, {"version": "3.1.0", "commit": "9f2c1ab", "python": "3.11.9"}),
    "/config": (200, {"currency": "EUR", "max_cart_items": 50, "maintenance": False}),
    "/legacy": (410, {"error": "gone"}),
    "/admin": (401, {"error": "unauthorized"}),
}
