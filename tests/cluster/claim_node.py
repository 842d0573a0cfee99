"""A claimer in a process of its own: ``python tests/cluster/claim_node.py DSN WHO NOW``
claims node ``a``'s requests five at a time until none is left and prints their ids."""

from __future__ import annotations

import asyncio
import sys

from memwarden.cluster import claim_revalidations, connect


async def main(dsn: str, who: str, now: float) -> None:
    conn = await connect(dsn)
    try:
        while batch := await claim_revalidations(conn, "a", claimer=who, limit=5, now=now):
            sys.stdout.write("".join(f"{r.id}\n" for r in batch))
    finally:
        await conn.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], float(sys.argv[3])))
