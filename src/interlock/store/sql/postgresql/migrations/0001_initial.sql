-- Requests with their filterable columns, as in the SQLite schema. `doc` holds the
-- request as created (JSON) and never changes; settling one sets `status`, `settled_at`
-- and `response`. Indexes are partial where the column is often NULL, and pending
-- requests have their own small index: every index is written on each create and settle.
CREATE TABLE requests (
    id              text PRIMARY KEY,
    kind            text NOT NULL,
    status          text NOT NULL,
    recipient       text,
    requester       text,
    session         text,
    channel         text,
    agent           text,
    run             text,
    idempotency_key text,
    created_at      timestamptz NOT NULL,
    expires_at      timestamptz,
    settled_at      timestamptz,
    doc             json NOT NULL,
    response        json
);

CREATE INDEX requests_pending ON requests (id) WHERE status = 'pending';
CREATE INDEX requests_by_recipient ON requests (recipient, status, id) WHERE recipient IS NOT NULL;
CREATE INDEX requests_by_requester ON requests (requester, status, id) WHERE requester IS NOT NULL;
CREATE INDEX requests_by_session ON requests (session, id) WHERE session IS NOT NULL;
CREATE INDEX requests_by_channel ON requests (channel, status) WHERE channel IS NOT NULL;
CREATE INDEX requests_by_run ON requests (run, id) WHERE run IS NOT NULL;
CREATE INDEX requests_due ON requests (expires_at) WHERE status = 'pending' AND expires_at IS NOT NULL;
CREATE UNIQUE INDEX requests_idempotency ON requests (coalesce(requester, ''), idempotency_key)
    WHERE idempotency_key IS NOT NULL;

-- The append-only event log: one row per state change, written in the same transaction
-- as the change. An event about a request carries no copy of it (the request row gives
-- both the state at creation and the final one).
CREATE TABLE events (
    id         bigint PRIMARY KEY,
    type       text NOT NULL,
    request_id text,
    at         timestamptz NOT NULL,
    data       json
);

-- Event ids are handed out in commit order, so a reader that has seen event N never
-- later finds a new event below N, and a stream resuming from `Last-Event-ID` on any
-- node misses nothing. A sequence default alone does not give that: two transactions
-- may draw 5 and 6 and commit 6 first, and a reader between the two commits would see
-- 6 and move past 5 for good.
--
-- So every insert into `events` goes through this trigger, which takes a transaction
-- lock and only then draws the id; the lock is released after the commit has become
-- visible, so ids are drawn and made visible one transaction at a time, and what a
-- reader sees is always every event up to some id (a rolled-back transaction leaves a
-- gap that nothing fills later). Each writer makes its event insert its last statement,
-- so the lock is held for that insert and the commit only, and nothing taken after it
-- can wait on another lock. The cost is small: every such transaction also NOTIFYs,
-- and PostgreSQL already serializes the commits of notifying transactions (a global
-- lock from pre-commit to the end of the commit, so that notifications queue in commit
-- order). The alternative, recording pg_current_xact_id() and letting readers see only
-- events older than the oldest running transaction, needs no lock but stalls every
-- stream behind any long writing transaction anywhere on the server.
-- The sequence keeps CACHE 1: cached blocks of ids per session would break the order.
CREATE SEQUENCE events_id_seq AS bigint CACHE 1 OWNED BY events.id;

CREATE FUNCTION interlock_event_id() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(7598390718262734181);  -- 'interlock events'
    NEW.id := nextval('events_id_seq');
    PERFORM pg_notify('interlock', '');  -- once per transaction: equal payloads fold
    RETURN NEW;
END
$$;

CREATE TRIGGER events_in_commit_order BEFORE INSERT ON events
    FOR EACH ROW EXECUTE FUNCTION interlock_event_id();

-- Humans and agents, and their bearer tokens (only a SHA-256 of each secret is kept).
CREATE TABLE principals (
    name       text PRIMARY KEY,
    kind       text NOT NULL CHECK (kind IN ('human', 'agent')),
    owner      text REFERENCES principals (name),
    created_at timestamptz NOT NULL
);

CREATE TABLE tokens (
    id         text PRIMARY KEY,
    hash       text NOT NULL UNIQUE,
    principal  text NOT NULL REFERENCES principals (name),
    created_at timestamptz NOT NULL,
    revoked_at timestamptz
);

CREATE INDEX tokens_by_principal ON tokens (principal);

-- The writes below are functions so that each is one round trip and one transaction.

-- Store a new pending request and its `created` event. With an idempotency key the same
-- requester used before, store nothing and return the first request (a concurrent insert
-- with the same key waits on the unique index, then finds it). Storing the same request
-- (id) again changes nothing and says it was created: a client may repeat a call whose
-- reply was lost with its connection.
CREATE FUNCTION interlock_insert(
    p_id text, p_kind text, p_recipient text, p_requester text, p_session text, p_channel text,
    p_agent text, p_run text, p_idempotency_key text, p_created_at timestamptz, p_expires_at timestamptz,
    p_doc json
) RETURNS TABLE (created boolean, status text, doc json, response json) LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
    INSERT INTO requests (id, kind, status, recipient, requester, session, channel, agent, run,
                          idempotency_key, created_at, expires_at, doc)
    VALUES (p_id, p_kind, 'pending', p_recipient, p_requester, p_session, p_channel, p_agent, p_run,
            p_idempotency_key, p_created_at, p_expires_at, p_doc)
    ON CONFLICT DO NOTHING;
    IF FOUND THEN
        INSERT INTO events (type, request_id, at) VALUES ('created', p_id, p_created_at);
        RETURN QUERY SELECT true, 'pending'::text, NULL::json, NULL::json;
        RETURN;
    END IF;
    IF EXISTS (SELECT 1 FROM requests r WHERE r.id = p_id) THEN
        RETURN QUERY SELECT true, 'pending'::text, NULL::json, NULL::json;
        RETURN;
    END IF;
    RETURN QUERY SELECT false, r.status, r.doc, r.response FROM requests r
        WHERE coalesce(r.requester, '') = coalesce(p_requester, '') AND r.idempotency_key = p_idempotency_key;
END
$$;

-- Settle one request if it is still pending (the first settlement wins: a conditional
-- update, never read-then-write) and append its event. The event id, or NULL.
CREATE FUNCTION interlock_settle(p_id text, p_status text, p_settled_at timestamptz, p_response json)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    event_id bigint;
BEGIN
    UPDATE requests SET status = p_status, settled_at = p_settled_at, response = p_response
    WHERE id = p_id AND status = 'pending';
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    INSERT INTO events (type, request_id, at) VALUES (p_status, p_id, p_settled_at) RETURNING id INTO event_id;
    RETURN event_id;
END
$$;

-- Settle the pending requests due by `p_due` (at most `p_limit` of them), or else those
-- in `p_channel`, or else all of them, with one event each; return what it settled.
-- Expiry runs on every node: SKIP LOCKED lets each node take rows no other node is
-- settling right now, and the status check settles each once, whoever gets there first.
-- The other two lock their rows in id order, so two of them never deadlock.
CREATE FUNCTION interlock_settle_pending(
    p_status text, p_settled_at timestamptz, p_response json, p_channel text, p_due timestamptz, p_limit integer
) RETURNS TABLE (id text, doc json) LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    ids text[];
    docs json[];
BEGIN
    IF p_due IS NOT NULL THEN
        WITH target AS (
            SELECT r.id FROM requests r
            WHERE r.status = 'pending' AND r.expires_at <= p_due
            ORDER BY r.expires_at LIMIT p_limit
            FOR UPDATE SKIP LOCKED
        ), settled AS (
            UPDATE requests r SET status = p_status, settled_at = p_settled_at, response = p_response
            FROM target WHERE r.id = target.id AND r.status = 'pending'
            RETURNING r.id, r.doc
        ) SELECT array_agg(s.id ORDER BY s.id), array_agg(s.doc ORDER BY s.id) INTO ids, docs FROM settled s;
    ELSIF p_channel IS NOT NULL THEN
        WITH target AS (
            SELECT r.id FROM requests r WHERE r.status = 'pending' AND r.channel = p_channel
            ORDER BY r.id FOR UPDATE
        ), settled AS (
            UPDATE requests r SET status = p_status, settled_at = p_settled_at, response = p_response
            FROM target WHERE r.id = target.id AND r.status = 'pending'
            RETURNING r.id, r.doc
        ) SELECT array_agg(s.id ORDER BY s.id), array_agg(s.doc ORDER BY s.id) INTO ids, docs FROM settled s;
    ELSE
        WITH target AS (
            SELECT r.id FROM requests r WHERE r.status = 'pending' ORDER BY r.id FOR UPDATE
        ), settled AS (
            UPDATE requests r SET status = p_status, settled_at = p_settled_at, response = p_response
            FROM target WHERE r.id = target.id AND r.status = 'pending'
            RETURNING r.id, r.doc
        ) SELECT array_agg(s.id ORDER BY s.id), array_agg(s.doc ORDER BY s.id) INTO ids, docs FROM settled s;
    END IF;
    IF ids IS NULL THEN
        RETURN;
    END IF;
    INSERT INTO events (type, request_id, at)
    SELECT p_status, t.id, p_settled_at FROM unnest(ids) WITH ORDINALITY AS t (id, n) ORDER BY t.n;
    RETURN QUERY SELECT t.id, t.doc FROM unnest(ids, docs) AS t (id, doc);
END
$$;
