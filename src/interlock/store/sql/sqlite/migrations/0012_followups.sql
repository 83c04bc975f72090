-- Follow-up messages: text a person sent to a run while it was busy, held until the
-- run's agent takes it at its next turn boundary (`state` 'delivered') or the person
-- withdraws it ('withdrawn'). Held rows of an ended run stay, read-only, for a client to
-- send again. Times are integer microseconds since the Unix epoch (UTC).
CREATE TABLE followups (
    id        TEXT PRIMARY KEY,
    run_id    TEXT NOT NULL,
    text      TEXT NOT NULL,
    sender    TEXT,
    queued_at INTEGER NOT NULL,
    state     TEXT NOT NULL DEFAULT 'queued',
    done_at   INTEGER
);

CREATE INDEX followups_held ON followups (run_id, queued_at, id) WHERE state = 'queued';
