-- Requests with their filterable columns; `doc` holds the whole request as JSON.
-- Times are integer microseconds since the Unix epoch (UTC).
CREATE TABLE requests (
    id              TEXT PRIMARY KEY,
    kind            TEXT NOT NULL,
    status          TEXT NOT NULL,
    recipient       TEXT,
    requester       TEXT,
    session         TEXT,
    channel         TEXT,
    agent           TEXT,
    run             TEXT,
    idempotency_key TEXT,
    created_at      INTEGER NOT NULL,
    expires_at      INTEGER,
    settled_at      INTEGER,
    doc             TEXT NOT NULL
) WITHOUT ROWID;

CREATE INDEX requests_by_status ON requests (status, id);
CREATE INDEX requests_by_recipient ON requests (recipient, status, id) WHERE recipient IS NOT NULL;
CREATE INDEX requests_by_requester ON requests (requester, status, id) WHERE requester IS NOT NULL;
CREATE INDEX requests_by_session ON requests (session, id) WHERE session IS NOT NULL;
CREATE INDEX requests_by_channel ON requests (channel, status) WHERE channel IS NOT NULL;
CREATE INDEX requests_by_run ON requests (run, id) WHERE run IS NOT NULL;
CREATE INDEX requests_due ON requests (expires_at) WHERE status = 'pending' AND expires_at IS NOT NULL;
CREATE UNIQUE INDEX requests_idempotency ON requests (ifnull(requester, ''), idempotency_key)
    WHERE idempotency_key IS NOT NULL;

-- The append-only event log: one row per state change, written in the same transaction.
CREATE TABLE events (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    type       TEXT NOT NULL,
    request_id TEXT,
    at         INTEGER NOT NULL,
    data       TEXT NOT NULL
);

CREATE INDEX events_by_request ON events (request_id, id);
