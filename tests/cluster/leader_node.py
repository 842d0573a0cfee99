"""One node contending for the lease, for the two-process tests: ``python -m
tests.cluster.leader_node DSN NODE``. While it leads, it runs a counted job: each run is
a row of ``job_runs`` (started, then finished, each committed on its own), so the test
can see from the database whether two nodes ever ran the job at once. SIGTERM stops it
cleanly (the lease is released)."""

from __future__ import annotations

import asyncio
import signal
import sys

import asyncpg

from memwarden.cluster import Leader, Term


async def main(dsn: str, node: str) -> None:
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    conn = await asyncpg.connect(dsn)

    async def counted(term: Term) -> None:
        while True:
            run = await conn.fetchval(
                "INSERT INTO job_runs (node, epoch, started_at)"
                " VALUES ($1, $2, clock_timestamp()) RETURNING id",
                node,
                term.epoch,
            )
            await conn.execute("SELECT pg_sleep(0.02)")  # the job's work
            await conn.execute(
                "UPDATE job_runs SET finished_at = clock_timestamp() WHERE id = $1", run
            )

    async with Leader(dsn, node=node) as leader, asyncio.TaskGroup() as tg:
        runner = tg.create_task(leader.run_while_leader(counted, name="counted"))
        await stop.wait()
        runner.cancel()
    await conn.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
