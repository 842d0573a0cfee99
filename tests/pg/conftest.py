"""PostgreSQL tests start their own server (tests/pgserver.py), never the machine's."""

from tests.pgserver import pg_server

__all__ = ["pg_server"]
