-- Requests with their filterable columns. `doc` holds the request as created, as JSON,
-- and never changes; settling one sets `status` and writes `response` (JSON).
-- Times are integer microseconds since the Unix epoch (UTC). Indexes are partial where
-- the column is often NULL, and pending requests have their own small index: every
-- index is written on each create and settle, so only what the queries use is here.
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
    doc             TEXT NOT NULL,
    response        TEXT
);

CREATE INDEX requests_pending ON requests (id) WHERE status = 'pending';
CREATE INDEX requests_by_recipient ON requests (recipient, status, id) WHERE recipient IS NOT NULL;
CREATE INDEX requests_by_requester ON requests (requester, status, id) WHERE requester IS NOT NULL;
CREATE INDEX requests_by_session ON requests (session, id) WHERE session IS NOT NULL;
CREATE INDEX requests_by_channel ON requests (channel, status) WHERE channel IS NOT NULL;
CREATE INDEX requests_by_run ON requests (run, id) WHERE run IS NOT NULL;
CREATE INDEX requests_due ON requests (expires_at) WHERE status = 'pending' AND expires_at IS NOT NULL;
CREATE UNIQUE INDEX requests_idempotency ON requests (ifnull(requester, ''), idempotency_key)
    WHERE idempotency_key IS NOT NULL;

-- The append-only event log: one row per state change, written in the same transaction.
-- An event about a request carries no copy of it: a request changes only from pending
-- to one final state, so its row gives both the state at creation and the final one.
-- Ids are never reused, since no event is ever deleted.
CREATE TABLE events (
    id         INTEGER PRIMARY KEY,
    type       TEXT NOT NULL,
    request_id TEXT,
    at         INTEGER NOT NULL,
    data       TEXT
);
