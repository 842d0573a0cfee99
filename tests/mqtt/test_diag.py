import asyncio, pytest
from tests.mqtt.conftest import stored
from tests.mqtt.test_faults import _emit

async def test_diag(mosquitto_broker, start_daemon, start_agent, eventually):
    broker = mosquitto_broker()
    d = await start_daemon(broker)
    a = await start_agent(broker)
    await d.obj.mqtt.connected()
    await a.obj.connected()
    await _emit(a.obj, 300)
    broker.kill()
    await _emit(a.obj, 200, start=300)
    broker.start()
    db = d.obj.settings.db_path
    try:
        await eventually(lambda: stored(db, a.obj.agent) == (500, 500), timeout_s=12)
    except BaseException:
        print("STORED", stored(db, a.obj.agent), "last_seq", a.obj.last_seq)
        import sqlite3
        qdb = a.obj.state_dir / "agent-queue.db"
        with sqlite3.connect(qdb) as c:
            print("QROWS", c.execute("select count(*), sum(sent_at is null), min(id), max(id), min(seq), max(seq) from queue").fetchone())
            print("QUNSENT", c.execute("select id, seq from queue where sent_at is null").fetchall()[:20])
            print("QCOUNTERS", c.execute("select * from counters").fetchall())
        print("AGENTQ", await a.obj.queue.stats(), "acked_seq", a.obj._acked_seq, "inflight", a.obj._inflight, "caught_up", a.obj._caught_up, "published", a.obj.published)
        h = await d.obj.health()
        print("BRIDGE", h["mqtt"])
        print("GAPS", d.obj.mqtt.gaps.missing_ranges(a.obj.agent), d.obj.mqtt.gaps._runs.get(a.obj.agent))
        print("BROKERLOG", broker.log[-30:])
        for t in asyncio.all_tasks():
            if "mqtt" in t.get_name() or "agent" in t.get_name():
                print("TASK", t.get_name(), t.get_stack(limit=3)[-1:] )
        raise
