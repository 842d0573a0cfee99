"""The test kit's own PostgreSQL server: fresh, loopback only, not the machine's service."""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tests.pgserver import PgServer


def test_own_server_on_loopback_only(pg_server: PgServer) -> None:
    """It answers on its own port on 127.0.0.1 and listens nowhere else."""
    assert pg_server.port != 5432
    assert pg_server.psql("SHOW listen_addresses").strip() == "127.0.0.1"
    assert pg_server.psql("SHOW port").strip() == str(pg_server.port)
    # It is our fresh cluster: the superuser is ours and there is no 'test' database
    # (which the machine's own service has).
    assert pg_server.psql("SELECT current_user").strip() == "memwarden"
    names = pg_server.psql("SELECT datname FROM pg_database").split()
    assert "test" not in names
    with socket.create_connection(("127.0.0.1", pg_server.port), timeout=5):
        pass


def test_each_database_is_fresh(pg_server: PgServer) -> None:
    """Two databases from the fixture do not share tables."""
    first = pg_server.create_database().rsplit("/", 1)[1]
    second = pg_server.create_database().rsplit("/", 1)[1]
    pg_server.psql("CREATE TABLE marker (x int)", first)
    tables = pg_server.psql(
        "SELECT count(*) FROM pg_tables WHERE tablename = 'marker'", second
    ).strip()
    assert tables == "0"
