"""A batch's evidence writes go out as multi-row statements in parts of 512, 256, ... 1
(``memory._eventbatch._ValuesUpdate``): every block of a batch of any size gets its own
values, blocks outside the batch keep theirs."""

from __future__ import annotations

from memwarden.memory import Binding, BlockState, NewBlock, ValidationEvent, from_ts

N = 701  # 700 in the batch (not a power of two in either statement) and one left out


def ev(i: int, at: float) -> ValidationEvent:
    return ValidationEvent(
        sensor="fs", subject=f"f/{i}.txt", outcome="confirmed", observed_at=from_ts(at)
    )


async def test_a_batch_of_700_blocks_writes_each_its_own_evidence(store, clock):
    ids = await store.add_many(
        [
            NewBlock(content=f"setting {i}", bindings=[Binding(sensor="fs", path=f"f/{i}.txt")])
            for i in range(N)
        ]
    )
    clock.advance(3600)
    start = clock.time() - 1000  # every observation below is in the past
    # 300 blocks fresh first: the batch below then leaves their state as it was (written
    # without state and reasons: 256 + 32 + 8 + 4 rows) and changes the 400 others'
    # (256 + 128 + 16 rows).
    first = await store.apply_events([ev(i, start - 30 + i / 1000) for i in range(300)])
    assert first.accepted == 300
    result = await store.apply_events([ev(i, start + i) for i in range(N - 1)])
    assert result.accepted == N - 1
    assert result.unmatched == 0
    assert sorted(c.block_id for c in result.changes) == sorted(ids[300:-1])
    for i, block_id in enumerate(ids[:-1]):
        got = await store.get(block_id)
        assert got.state == BlockState.FRESH, i
        assert got.validation.validated_at == from_ts(start + i), i
        assert got.reinforcement_count == (2 if i < 300 else 1), i
        assert got.stale_at == from_ts(start + i + got.validation.validity_window.total_seconds())
    left_out = await store.get(ids[-1])
    assert left_out.state == BlockState.UNVERIFIED
    assert left_out.validation.validated_at is None
    assert left_out.reinforcement_count == 0
