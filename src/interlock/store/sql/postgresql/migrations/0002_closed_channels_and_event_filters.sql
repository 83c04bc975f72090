-- Closed channels, kept in the database so that every process on every node refuses
-- creates there. `requester` is '' when the channel is closed for everyone, else the
-- requester it is closed for.
CREATE TABLE closed_channels (
    channel   text NOT NULL,
    requester text NOT NULL DEFAULT '',
    closed_at timestamptz NOT NULL,
    PRIMARY KEY (channel, requester)
);

-- Who an event concerns and where it belongs, copied onto the event when it is written
-- (from the request, or from an update's data: `recipient` is its `to`, `requester` its
-- `by`), so that a page of "the events I may see" or "the events of this session" is an
-- index range, not a scan of the log.
ALTER TABLE events ADD COLUMN recipient text, ADD COLUMN requester text, ADD COLUMN session text,
    ADD COLUMN run text;

UPDATE events e SET recipient = r.recipient, requester = r.requester, session = r.session, run = r.run
FROM requests r WHERE r.id = e.request_id;

UPDATE events SET recipient = data ->> 'to', requester = data ->> 'by', session = data ->> 'session',
    run = data ->> 'run'
WHERE request_id IS NULL AND json_typeof(data) = 'object';

CREATE INDEX events_by_recipient ON events (recipient, id) WHERE recipient IS NOT NULL;
CREATE INDEX events_by_requester ON events (requester, id) WHERE requester IS NOT NULL;
CREATE INDEX events_by_request ON events (request_id, id) WHERE request_id IS NOT NULL;
CREATE INDEX events_by_session ON events (session, id) WHERE session IS NOT NULL;
CREATE INDEX events_by_run ON events (run, id) WHERE run IS NOT NULL;

-- A create and a close of the same channel take this lock (shared and exclusive), keyed
-- by the channel's hash, so that they serialize: a close waits for the creates in flight
-- there and then withdraws them, and a create that comes after it sees the closure.
-- (Two int4 keys: a keyspace apart from the bigint keys of 0001.)

-- Store a new pending request and its `created` event, unless its channel is closed (then
-- the status `closed` and no row). The rest is as in 0001.
CREATE OR REPLACE FUNCTION interlock_insert(
    p_id text, p_kind text, p_recipient text, p_requester text, p_session text, p_channel text,
    p_agent text, p_run text, p_idempotency_key text, p_created_at timestamptz, p_expires_at timestamptz,
    p_doc json
) RETURNS TABLE (created boolean, status text, doc json, response json) LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
    IF p_channel IS NOT NULL THEN
        PERFORM pg_advisory_xact_lock_shared(759839071, hashtext(p_channel));
        IF EXISTS (SELECT 1 FROM closed_channels c
                   WHERE c.channel = p_channel AND c.requester IN ('', coalesce(p_requester, ''))) THEN
            RETURN QUERY SELECT false, 'closed'::text, NULL::json, NULL::json;
            RETURN;
        END IF;
    END IF;
    INSERT INTO requests (id, kind, status, recipient, requester, session, channel, agent, run,
                          idempotency_key, created_at, expires_at, doc)
    VALUES (p_id, p_kind, 'pending', p_recipient, p_requester, p_session, p_channel, p_agent, p_run,
            p_idempotency_key, p_created_at, p_expires_at, p_doc)
    ON CONFLICT DO NOTHING;
    IF FOUND THEN
        INSERT INTO events (type, request_id, at, recipient, requester, session, run)
        VALUES ('created', p_id, p_created_at, p_recipient, p_requester, p_session, p_run);
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

CREATE OR REPLACE FUNCTION interlock_settle(p_id text, p_status text, p_settled_at timestamptz, p_response json)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    event_id bigint;
    v_recipient text;
    v_requester text;
    v_session text;
    v_run text;
BEGIN
    UPDATE requests SET status = p_status, settled_at = p_settled_at, response = p_response
    WHERE id = p_id AND status = 'pending'
    RETURNING recipient, requester, session, run INTO v_recipient, v_requester, v_session, v_run;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    INSERT INTO events (type, request_id, at, recipient, requester, session, run)
    VALUES (p_status, p_id, p_settled_at, v_recipient, v_requester, v_session, v_run) RETURNING id INTO event_id;
    RETURN event_id;
END
$$;

CREATE OR REPLACE FUNCTION interlock_settle_pending(
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
    INSERT INTO events (type, request_id, at, recipient, requester, session, run)
    SELECT p_status, t.id, p_settled_at, r.recipient, r.requester, r.session, r.run
    FROM unnest(ids) WITH ORDINALITY AS t (id, n) JOIN requests r ON r.id = t.id ORDER BY t.n;
    RETURN QUERY SELECT t.id, t.doc FROM unnest(ids, docs) AS t (id, doc);
END
$$;

-- Close a channel (for everyone, or for `p_requester` only) and withdraw its pending
-- requests (theirs only) with one event each, in one transaction; return what it settled.
CREATE FUNCTION interlock_close_channel(
    p_channel text, p_requester text, p_settled_at timestamptz, p_response json
) RETURNS TABLE (id text, doc json) LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    ids text[];
    docs json[];
BEGIN
    PERFORM pg_advisory_xact_lock(759839071, hashtext(p_channel));
    INSERT INTO closed_channels (channel, requester, closed_at)
    VALUES (p_channel, coalesce(p_requester, ''), p_settled_at)
    ON CONFLICT DO NOTHING;
    WITH target AS (
        SELECT r.id FROM requests r
        WHERE r.status = 'pending' AND r.channel = p_channel AND (p_requester IS NULL OR r.requester = p_requester)
        ORDER BY r.id FOR UPDATE
    ), settled AS (
        UPDATE requests r SET status = 'cancelled', settled_at = p_settled_at, response = p_response
        FROM target WHERE r.id = target.id AND r.status = 'pending'
        RETURNING r.id, r.doc
    ) SELECT array_agg(s.id ORDER BY s.id), array_agg(s.doc ORDER BY s.id) INTO ids, docs FROM settled s;
    IF ids IS NULL THEN
        RETURN;
    END IF;
    INSERT INTO events (type, request_id, at, recipient, requester, session, run)
    SELECT 'cancelled', t.id, p_settled_at, r.recipient, r.requester, r.session, r.run
    FROM unnest(ids) WITH ORDINALITY AS t (id, n) JOIN requests r ON r.id = t.id ORDER BY t.n;
    RETURN QUERY SELECT t.id, t.doc FROM unnest(ids, docs) AS t (id, doc);
END
$$;
