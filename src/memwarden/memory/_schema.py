"""The versioned SQLite schema. ``PRAGMA user_version`` says which migrations ran.

Append a migration to :data:`MIGRATIONS` to change the schema; never edit one that has
shipped. Each runs in one transaction with the version bump.
"""

from __future__ import annotations

import sqlite3

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "split_statements"]

_V1 = """
-- rid is the internal key (joins, the FTS index, the hot UPDATE); id is the public
-- UUIDv7 that callers see.
CREATE TABLE blocks (
    rid INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    title TEXT NOT NULL DEFAULT '',
    content TEXT NOT NULL,
    tags TEXT NOT NULL DEFAULT '[]',
    source TEXT NOT NULL,
    category TEXT NOT NULL,
    info_type TEXT NOT NULL,
    volatility TEXT NOT NULL,
    tier TEXT NOT NULL,
    state TEXT NOT NULL,
    stale_reasons TEXT NOT NULL DEFAULT '',
    reliability REAL NOT NULL,
    importance REAL NOT NULL,
    validated_by TEXT,
    validated_at REAL,
    validity_window_s REAL NOT NULL,
    stale_at REAL,
    half_life_s REAL NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    last_accessed_at REAL,
    access_count INTEGER NOT NULL DEFAULT 0,
    recent_access_count INTEGER NOT NULL DEFAULT 0,
    session_count INTEGER NOT NULL DEFAULT 0,
    reinforcement_count INTEGER NOT NULL DEFAULT 0,
    contradiction_count INTEGER NOT NULL DEFAULT 0,
    last_contradiction_at REAL,
    consecutive_refutations INTEGER NOT NULL DEFAULT 0,
    consecutive_errors INTEGER NOT NULL DEFAULT 0,
    outcome_history TEXT NOT NULL DEFAULT '',
    flapping INTEGER NOT NULL DEFAULT 0,
    stability REAL NOT NULL DEFAULT 0,
    retention REAL NOT NULL DEFAULT 1,
    archived_at REAL,
    archive_reason TEXT,
    version INTEGER NOT NULL DEFAULT 1,
    signals TEXT NOT NULL DEFAULT '{}'
);
-- The staleness sweep: an index range scan over exactly the blocks that can expire.
CREATE INDEX blocks_due ON blocks(stale_at) WHERE state IN ('fresh', 'unverified');
-- No plain state/tier indexes: every event changes a block's state, and keeping more
-- indexes in step cost more ingest throughput than the rare filtered listing gains.

CREATE VIRTUAL TABLE blocks_fts USING fts5(
    title, content, tags, content='blocks', content_rowid='rid',
    tokenize='unicode61 remove_diacritics 2'
);
-- Archived blocks live in cold storage: out of the search index until restored.
CREATE TRIGGER blocks_fts_insert AFTER INSERT ON blocks WHEN new.state <> 'archived' BEGIN
    INSERT INTO blocks_fts(rowid, title, content, tags)
    VALUES (new.rid, new.title, new.content, new.tags);
END;
CREATE TRIGGER blocks_fts_delete AFTER DELETE ON blocks WHEN old.state <> 'archived' BEGIN
    INSERT INTO blocks_fts(blocks_fts, rowid, title, content, tags)
    VALUES ('delete', old.rid, old.title, old.content, old.tags);
END;
CREATE TRIGGER blocks_fts_edit AFTER UPDATE OF title, content, tags ON blocks
WHEN old.state <> 'archived' AND new.state <> 'archived' BEGIN
    INSERT INTO blocks_fts(blocks_fts, rowid, title, content, tags)
    VALUES ('delete', old.rid, old.title, old.content, old.tags);
    INSERT INTO blocks_fts(rowid, title, content, tags)
    VALUES (new.rid, new.title, new.content, new.tags);
END;
CREATE TRIGGER blocks_fts_archive AFTER UPDATE OF state ON blocks
WHEN new.state = 'archived' AND old.state <> 'archived' BEGIN
    INSERT INTO blocks_fts(blocks_fts, rowid, title, content, tags)
    VALUES ('delete', old.rid, old.title, old.content, old.tags);
END;
CREATE TRIGGER blocks_fts_restore AFTER UPDATE OF state ON blocks
WHEN old.state = 'archived' AND new.state <> 'archived' BEGIN
    INSERT INTO blocks_fts(rowid, title, content, tags)
    VALUES (new.rid, new.title, new.content, new.tags);
END;

CREATE TABLE bindings (
    id INTEGER PRIMARY KEY,
    block_rid INTEGER NOT NULL REFERENCES blocks(rid) ON DELETE CASCADE,
    sensor TEXT NOT NULL,
    subject TEXT NOT NULL,
    selector TEXT NOT NULL DEFAULT '{}',
    created_at REAL NOT NULL
);
CREATE INDEX bindings_subject ON bindings(subject, sensor, block_rid);
CREATE INDEX bindings_block ON bindings(block_rid);
CREATE INDEX bindings_sensor ON bindings(sensor);

-- The event log is append-only: what sensors said, as they said it.
CREATE TABLE events (
    seq INTEGER PRIMARY KEY,
    event_id TEXT NOT NULL UNIQUE,
    sensor TEXT NOT NULL,
    subject TEXT NOT NULL,
    outcome TEXT NOT NULL,
    observed_at REAL NOT NULL,
    received_at REAL NOT NULL,
    reliability REAL,
    validity_window_s REAL,
    request_id TEXT,
    block_id TEXT,
    message TEXT NOT NULL DEFAULT '',
    observed TEXT,
    agent TEXT,
    agent_seq INTEGER
);
-- What each event did to each block it reached (also append-only).
CREATE TABLE effects (
    block_rid INTEGER NOT NULL,
    event_seq INTEGER NOT NULL,
    state_before TEXT NOT NULL,
    state_after TEXT NOT NULL,
    reliability_before REAL NOT NULL,
    reliability_after REAL NOT NULL,
    detail TEXT,
    PRIMARY KEY (block_rid, event_seq)
) WITHOUT ROWID;
CREATE TRIGGER events_no_update BEFORE UPDATE ON events BEGIN
    SELECT RAISE(ABORT, 'the event log is append-only');
END;
CREATE TRIGGER events_no_delete BEFORE DELETE ON events BEGIN
    SELECT RAISE(ABORT, 'the event log is append-only');
END;
CREATE TRIGGER effects_no_update BEFORE UPDATE ON effects BEGIN
    SELECT RAISE(ABORT, 'the event log is append-only');
END;

CREATE TABLE revalidations (
    id TEXT PRIMARY KEY,
    block_id TEXT NOT NULL,
    sensor TEXT NOT NULL,
    subject TEXT NOT NULL,
    reason TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'pending',
    created_at REAL NOT NULL,
    send_at REAL NOT NULL,
    deadline_s REAL NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    finished_at REAL,
    outcome TEXT
);
CREATE INDEX revalidations_pending ON revalidations(send_at) WHERE status = 'pending';
CREATE UNIQUE INDEX revalidations_open ON revalidations(block_id, sensor, subject)
    WHERE status IN ('pending', 'sent');

CREATE TABLE accesses (
    id INTEGER PRIMARY KEY,
    block_id TEXT NOT NULL,
    session_id TEXT,
    at REAL NOT NULL
);
CREATE INDEX accesses_block ON accesses(block_id, at);

CREATE TABLE sessions (
    block_id TEXT NOT NULL,
    session_id TEXT NOT NULL,
    first_at REAL NOT NULL,
    last_at REAL NOT NULL,
    count INTEGER NOT NULL DEFAULT 1,
    PRIMARY KEY (block_id, session_id)
) WITHOUT ROWID;

CREATE TABLE dead_letters (
    id INTEGER PRIMARY KEY,
    received_at REAL NOT NULL,
    source TEXT NOT NULL,
    reason TEXT NOT NULL,
    payload TEXT NOT NULL
);

CREATE TABLE audit (
    id INTEGER PRIMARY KEY,
    at REAL NOT NULL,
    actor TEXT NOT NULL,
    action TEXT NOT NULL,
    block_id TEXT,
    detail TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX audit_block ON audit(block_id, id);
"""

_V2 = """
-- Edits keep the old text: a block's earlier versions, newest last.
CREATE TABLE block_history (
    block_id TEXT NOT NULL,
    version INTEGER NOT NULL,
    title TEXT NOT NULL,
    content TEXT NOT NULL,
    tags TEXT NOT NULL,
    replaced_at REAL NOT NULL,
    replaced_by TEXT NOT NULL,
    PRIMARY KEY (block_id, version)
) WITHOUT ROWID;

-- The human review queue.
CREATE TABLE reviews (
    id TEXT PRIMARY KEY,
    block_id TEXT NOT NULL,
    reason TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'pending',
    created_at REAL NOT NULL,
    decided_at REAL,
    decided_by TEXT,
    decision TEXT,
    comment TEXT
);
CREATE UNIQUE INDEX reviews_open ON reviews(block_id) WHERE status = 'pending';
CREATE INDEX reviews_status ON reviews(status, created_at);

-- Small facts the daemon keeps about itself (last time it was alive, ...).
CREATE TABLE meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID;
"""

_V3 = """
-- A block may rest on others: when one of those is refuted or goes stale, its
-- dependents go stale too (reason 'dependency') and are revalidated.
CREATE TABLE dependencies (
    depends_on TEXT NOT NULL,
    block_rid INTEGER NOT NULL REFERENCES blocks(rid) ON DELETE CASCADE,
    PRIMARY KEY (depends_on, block_rid)
) WITHOUT ROWID;
CREATE INDEX dependencies_block ON dependencies(block_rid);
"""

_V4 = """
-- What the MQTT bridge must publish while the broker is away (state changes,
-- revalidation requests, bindings): bounded, the oldest dropped first (and counted).
CREATE TABLE outbox (
    id INTEGER PRIMARY KEY,
    created_at REAL NOT NULL,
    topic TEXT NOT NULL,
    payload BLOB NOT NULL,
    qos INTEGER NOT NULL DEFAULT 1,
    retain INTEGER NOT NULL DEFAULT 0
);
-- Where each remote agent run got to (gap detection after a restart); only the
-- events that came from an agent are in it.
CREATE INDEX events_agent_seq ON events(agent, agent_seq) WHERE agent IS NOT NULL;
"""

_V5 = """
-- Compaction, the one sanctioned delete from the event log. The append-only triggers
-- let a DELETE through only while the compaction job holds this guard row, which it
-- inserts and removes inside its own transaction (so no commit ever contains it).
CREATE TABLE compaction_guard (
    id INTEGER PRIMARY KEY CHECK (id = 1)
);
DROP TRIGGER events_no_delete;
CREATE TRIGGER events_no_delete BEFORE DELETE ON events
WHEN NOT EXISTS (SELECT 1 FROM compaction_guard) BEGIN
    SELECT RAISE(ABORT, 'the event log is append-only');
END;
CREATE TRIGGER effects_no_delete BEFORE DELETE ON effects
WHEN NOT EXISTS (SELECT 1 FROM compaction_guard) BEGIN
    SELECT RAISE(ABORT, 'the event log is append-only');
END;
-- A compacted run of identical outcomes from one sensor on one block: its first and
-- last events stay in the log, the ones between are counted here ("confirmed x count
-- between first_observed_at and last_observed_at").
CREATE TABLE event_runs (
    block_rid INTEGER NOT NULL,
    last_seq INTEGER NOT NULL,
    first_seq INTEGER NOT NULL,
    sensor TEXT NOT NULL,
    outcome TEXT NOT NULL,
    count INTEGER NOT NULL,
    first_observed_at REAL NOT NULL,
    last_observed_at REAL NOT NULL,
    compacted_at REAL NOT NULL,
    PRIMARY KEY (block_rid, last_seq)
) WITHOUT ROWID;
CREATE TRIGGER event_runs_no_update BEFORE UPDATE ON event_runs BEGIN
    SELECT RAISE(ABORT, 'the event log is append-only');
END;
CREATE TRIGGER event_runs_no_delete BEFORE DELETE ON event_runs
WHEN NOT EXISTS (SELECT 1 FROM compaction_guard) BEGIN
    SELECT RAISE(ABORT, 'the event log is append-only');
END;
-- Which blocks an event reached (an event routed by subject may reach several): an
-- event leaves the log only when no block's history holds it any more.
CREATE INDEX effects_event ON effects(event_seq);
CREATE INDEX dead_letters_received ON dead_letters(received_at);
-- A stored binding that today's rules refuse (written by an older memwarden) is
-- quarantined at start instead of failing it: never checked, never sent to its sensor.
ALTER TABLE bindings ADD COLUMN quarantine TEXT;
ALTER TABLE bindings ADD COLUMN quarantined_at REAL;
"""

_V6 = """
-- Short ids: the random part of a UUIDv7 id (its last 19 hex digits, the version digit
-- left out) reversed, so "the ids ending in these digits" is an index range scan. A
-- generated column: every way a block is inserted fills it.
ALTER TABLE blocks ADD COLUMN id_key TEXT GENERATED ALWAYS AS (
    substr(id, 36, 1) || substr(id, 35, 1) || substr(id, 34, 1) || substr(id, 33, 1) ||
    substr(id, 32, 1) || substr(id, 31, 1) || substr(id, 30, 1) || substr(id, 29, 1) ||
    substr(id, 28, 1) || substr(id, 27, 1) || substr(id, 26, 1) || substr(id, 25, 1) ||
    substr(id, 23, 1) || substr(id, 22, 1) || substr(id, 21, 1) || substr(id, 20, 1) ||
    substr(id, 18, 1) || substr(id, 17, 1) || substr(id, 16, 1)
) VIRTUAL;
CREATE INDEX blocks_id_key ON blocks(id_key);
-- Duplicate detection: a hash of the normalised content (casefolded, whitespace
-- collapsed), set by the store on add and edit; NULL for rows written before it existed
-- until the store fills them in.
ALTER TABLE blocks ADD COLUMN content_key TEXT;
CREATE INDEX blocks_content_key ON blocks(content_key);
"""

_V7 = """
-- Events that reached no block (no binding for their sensor and subject) are no block's
-- record: once older than compaction.after they leave the log, and what they were stays
-- as a count per sensor, outcome and UTC day of arrival. A flood of them, whatever its
-- subjects, cannot fill the disk.
CREATE TABLE unmatched_counts (
    sensor TEXT NOT NULL,
    day TEXT NOT NULL,
    outcome TEXT NOT NULL,
    count INTEGER NOT NULL,
    first_received_at REAL NOT NULL,
    last_received_at REAL NOT NULL,
    PRIMARY KEY (sensor, day, outcome)
) WITHOUT ROWID;
"""

_V8 = """
-- Proposals for a person to accept or reject: a binding for an unbound block, or that a
-- block depends on another (the periodic suggestion pass finds them; docs/SUGGESTIONS.md).
-- Nothing is applied until accepted. One row per (block, kind, what is proposed), whatever
-- its status: a rejected proposal is remembered and not proposed again.
CREATE TABLE proposals (
    id TEXT PRIMARY KEY,
    block_rid INTEGER NOT NULL REFERENCES blocks(rid) ON DELETE CASCADE,
    kind TEXT NOT NULL,
    key TEXT NOT NULL,
    proposal TEXT NOT NULL,
    confidence REAL NOT NULL,
    why TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'pending',
    created_at REAL NOT NULL,
    decided_at REAL,
    decided_by TEXT
);
CREATE UNIQUE INDEX proposals_key ON proposals(block_rid, kind, key);
CREATE INDEX proposals_status ON proposals(status, created_at);
"""

_V9 = """
-- Erasure (``memwarden forget``): a block's content goes from every table, and what
-- stays is a tombstone here: which block, when, who, why (as given) and how many rows
-- each table lost. Never the content. Append-only like the event log.
CREATE TABLE erasures (
    id INTEGER PRIMARY KEY,
    block_id TEXT NOT NULL,
    erased_at REAL NOT NULL,
    actor TEXT NOT NULL,
    reason TEXT NOT NULL DEFAULT '',
    removed TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX erasures_block ON erasures(block_id);
CREATE TRIGGER erasures_no_update BEFORE UPDATE ON erasures BEGIN
    SELECT RAISE(ABORT, 'the erasure log is append-only');
END;
CREATE TRIGGER erasures_no_delete BEFORE DELETE ON erasures BEGIN
    SELECT RAISE(ABORT, 'the erasure log is append-only');
END;
-- An event that reached an erased block and others too stays in their histories, its
-- observation and message blanked: the one sanctioned UPDATE of the log, let through
-- only while the guard row exists (inside the erasing transaction, as for compaction).
DROP TRIGGER events_no_update;
CREATE TRIGGER events_no_update BEFORE UPDATE ON events
WHEN NOT EXISTS (SELECT 1 FROM compaction_guard) BEGIN
    SELECT RAISE(ABORT, 'the event log is append-only');
END;
"""

_V10 = """
-- Namespaces (projects): a block belongs to one; an API agent reads, searches and
-- reinforces only the blocks of its namespaces (docs/PRIVACY.md, "Agents and
-- namespaces"). Every existing block is in 'default', which the default token reads.
-- The index serves the scoped listing and the scoped short-id lookup; a namespace is
-- set once, at insert, so events never touch it.
ALTER TABLE blocks ADD COLUMN namespace TEXT NOT NULL DEFAULT 'default';
CREATE INDEX blocks_namespace ON blocks(namespace, id);
"""

_V11 = """
-- Search by meaning (docs/SEARCH.md): one vector per block, made by the configured
-- embedder from its title and content, int8-quantised (each number x 127 of a unit
-- vector) with the model that made it. ``embed_queue`` is what still needs a vector:
-- triggers queue a block when it is added or its text changes, and the daemon's
-- embedding task drains it off the write path (``gen`` tells an edit made meanwhile).
CREATE TABLE block_vectors (
    block_rid INTEGER PRIMARY KEY REFERENCES blocks(rid) ON DELETE CASCADE,
    model TEXT NOT NULL,
    dim INTEGER NOT NULL,
    vector BLOB NOT NULL
);
CREATE TABLE embed_queue (
    block_rid INTEGER PRIMARY KEY REFERENCES blocks(rid) ON DELETE CASCADE,
    gen INTEGER NOT NULL DEFAULT 0
);
INSERT INTO embed_queue (block_rid) SELECT rid FROM blocks;
CREATE TRIGGER embed_queue_on_insert AFTER INSERT ON blocks BEGIN
    INSERT INTO embed_queue (block_rid) VALUES (new.rid)
    ON CONFLICT (block_rid) DO UPDATE SET gen = gen + 1;
END;
CREATE TRIGGER embed_queue_on_edit AFTER UPDATE OF title, content ON blocks
WHEN old.title IS NOT new.title OR old.content IS NOT new.content BEGIN
    INSERT INTO embed_queue (block_rid) VALUES (new.rid)
    ON CONFLICT (block_rid) DO UPDATE SET gen = gen + 1;
END;
"""

_V12 = """
-- The console's charts over time (docs/CONSOLE.md, "The time series"): one row per
-- 5 minutes per metric and key, written by the scheduler's series pass and pruned past
-- its retention (14 days). metric: 'state' and 'tier' (blocks, key the state or tier),
-- 'backlog' (open revalidations, key ''), 'events' and 'errors' (received in the slot,
-- key the sensor). ``at`` is the slot's start (POSIX seconds, a multiple of 300).
CREATE TABLE metric_series (
    metric TEXT NOT NULL,
    key TEXT NOT NULL,
    at REAL NOT NULL,
    value INTEGER NOT NULL,
    PRIMARY KEY (metric, key, at)
) WITHOUT ROWID;
CREATE INDEX metric_series_at ON metric_series(at);
"""

_V13 = """
-- Retention over time (docs/CONSOLE.md, "Retention over time"): the inputs of the
-- decay formula (docs/RULES.md) each time one of them changed, so the block page can
-- draw retention at any moment from the formula itself. A trigger writes a row when a
-- block is added or one of importance, half-life, tier, state, stale_at, validated_at or
-- last_accessed_at changes; ``at`` is when: the latest of updated_at, last_accessed_at
-- and validated_at (the daemon's clock or the observation; each only moves forward, so
-- a block's points come in order); ``touched_at`` the last touch (creation, validation
-- or read).
-- Bounded: at most 500 rows per block (the newest), trimmed at each insert.
CREATE TABLE retention_points (
    block_rid INTEGER NOT NULL,
    at REAL NOT NULL,
    importance REAL NOT NULL,
    touched_at REAL NOT NULL,
    half_life_s REAL NOT NULL,
    tier TEXT NOT NULL,
    state TEXT NOT NULL,
    stale_at REAL,
    PRIMARY KEY (block_rid, at)
) WITHOUT ROWID;
CREATE TRIGGER retention_points_insert AFTER INSERT ON blocks BEGIN
    INSERT OR REPLACE INTO retention_points
    VALUES (new.rid, max(new.updated_at, coalesce(new.last_accessed_at, 0),
            coalesce(new.validated_at, 0)),
        new.importance,
        max(new.created_at, coalesce(new.validated_at, new.created_at),
            coalesce(new.last_accessed_at, new.created_at)),
        new.half_life_s, new.tier, new.state, new.stale_at);
END;
CREATE TRIGGER retention_points_update AFTER UPDATE OF importance, half_life_s, tier, state,
    stale_at, validated_at, last_accessed_at ON blocks
WHEN old.importance IS NOT new.importance OR old.half_life_s IS NOT new.half_life_s
    OR old.tier IS NOT new.tier OR old.state IS NOT new.state
    OR old.stale_at IS NOT new.stale_at OR old.validated_at IS NOT new.validated_at
    OR old.last_accessed_at IS NOT new.last_accessed_at BEGIN
    INSERT OR REPLACE INTO retention_points
    VALUES (new.rid, max(new.updated_at, coalesce(new.last_accessed_at, 0),
            coalesce(new.validated_at, 0)),
        new.importance,
        max(new.created_at, coalesce(new.validated_at, new.created_at),
            coalesce(new.last_accessed_at, new.created_at)),
        new.half_life_s, new.tier, new.state, new.stale_at);
    DELETE FROM retention_points WHERE block_rid = new.rid AND at < (
        SELECT at FROM retention_points WHERE block_rid = new.rid
        ORDER BY at DESC LIMIT 1 OFFSET 499);
END;
CREATE TRIGGER retention_points_delete AFTER DELETE ON blocks BEGIN
    DELETE FROM retention_points WHERE block_rid = old.rid;
END;
-- Blocks from before this version: their inputs as they stand, from their last change
-- (the page says there is no retention history before that).
INSERT INTO retention_points
SELECT rid, max(updated_at, coalesce(last_accessed_at, updated_at)), importance,
    max(created_at, coalesce(validated_at, created_at), coalesce(last_accessed_at, created_at)),
    half_life_s, tier, state, stale_at FROM blocks;
"""

_V14_ID_KEY_INDEX = """
-- Migration 14. The short-id key becomes an index
-- on the expression instead of a VIRTUAL generated column with an index: SQLite computes
-- every generated column of a row on each UPDATE of that row, whatever it changes, and
-- the 19 substr() of this one cost about 4 us a row (a third of a decay cycle's CPU over
-- 1 000 000 blocks, every event's state change too). An index on an expression is kept
-- in step only when a column it reads changes (here: the id, which never does).
-- Dropping a VIRTUAL column rewrites no row. Queries name the same expression
-- (memwarden.memory._shortid.ID_KEY_SQL) for SQLite to use the index.
DROP INDEX blocks_id_key;
ALTER TABLE blocks DROP COLUMN id_key;
CREATE INDEX blocks_id_key ON blocks((
    substr(id, 36, 1) || substr(id, 35, 1) || substr(id, 34, 1) || substr(id, 33, 1) ||
    substr(id, 32, 1) || substr(id, 31, 1) || substr(id, 30, 1) || substr(id, 29, 1) ||
    substr(id, 28, 1) || substr(id, 27, 1) || substr(id, 26, 1) || substr(id, 25, 1) ||
    substr(id, 23, 1) || substr(id, 22, 1) || substr(id, 21, 1) || substr(id, 20, 1) ||
    substr(id, 18, 1) || substr(id, 17, 1) || substr(id, 16, 1)
));
"""

_V15_NODES = """
-- Migration 15. Node-scoped bindings (docs/SCALE.md, "Node-scoped bindings"): the nodes
-- whose sensor checks a binding, in order (a JSON list of node names, or ["*"]: any node), and the
-- node serving it now. Bindings from before this version keep working as they did: any
-- node (["*"]); the daemon that opens the store serves them (on PostgreSQL the leader
-- picks a live node).
ALTER TABLE bindings ADD COLUMN nodes TEXT NOT NULL DEFAULT '["*"]';
ALTER TABLE bindings ADD COLUMN served_by TEXT;
-- A revalidation request goes to the node serving its binding (NULL: none yet).
ALTER TABLE revalidations ADD COLUMN node TEXT;
"""

MIGRATIONS: tuple[str, ...] = (
    _V1,
    _V2,
    _V3,
    _V4,
    _V5,
    _V6,
    _V7,
    _V8,
    _V9,
    _V10,
    _V11,
    _V12,
    _V13,
    _V14_ID_KEY_INDEX,
    _V15_NODES,
)
SCHEMA_VERSION = len(MIGRATIONS)


def split_statements(script: str) -> list[str]:
    """Split a script into complete statements (triggers keep their inner ``;``)."""
    out: list[str] = []
    buf = ""
    for line in script.splitlines(keepends=True):
        if not buf and (not line.strip() or line.lstrip().startswith("--")):
            continue
        buf += line
        if sqlite3.complete_statement(buf):
            out.append(buf.strip())
            buf = ""
    if buf.strip():
        out.append(buf.strip())
    return out
