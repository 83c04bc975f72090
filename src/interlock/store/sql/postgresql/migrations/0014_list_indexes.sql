-- Every list pages by id, so each filter's index ends in `id`: a page is then one index
-- range read in order and cut at the page's size, never a sort of every row the filter
-- matches. Pending requests are read from `pending_requests` (below); the other
-- statuses are filtered along the (recipient, id) or (requester, id) range, and the
-- history's dates within the index (`created_at`, which never changes, so a settlement
-- stays a HOT update), the rows passed over unread.
DROP INDEX requests_by_recipient;
DROP INDEX requests_by_requester;
DROP INDEX requests_by_channel;
CREATE INDEX requests_by_recipient ON requests (recipient, id, created_at) WHERE recipient IS NOT NULL;
CREATE INDEX requests_by_requester ON requests (requester, id) WHERE requester IS NOT NULL;
CREATE INDEX requests_by_channel ON requests (channel, id) WHERE channel IS NOT NULL;

-- The runs a person is asked about (the runs list of someone who asked nothing).
CREATE INDEX requests_runs_to ON requests (recipient, run) WHERE run IS NOT NULL AND recipient IS NOT NULL;

-- A person's deliveries of one status (their dead letters), in id order.
CREATE INDEX deliveries_by_recipient_status ON deliveries (recipient, status, id);

-- A settlement is a HOT update: it changes no column any index of `requests` reads, so
-- PostgreSQL writes the new version of the row on the same page and no index entry at
-- all, and the old version is pruned as the page is next read (no dead index entries,
-- far less for VACUUM). That needs three things:
--
-- * No index of `requests` names `status`, `settled_at` or `response`, not even in a
--   partial index's WHERE (PostgreSQL counts those columns too). The pending requests
--   are kept in a small table of their own instead, written by triggers in the same
--   transaction (a row on create, kept in step while pending, deleted on settlement):
--   an inbox of pending requests, the due ones and a channel's are index ranges there.
-- * The text search reads a tsvector kept in `request_texts` (by triggers: the
--   request's texts on create, its response's added on settlement), not an expression
--   index over `doc` and `response`.
-- * Room on the page for the new version: `fillfactor` leaves a fifth of each new page
--   free for the settlements of the rows inserted there.
--
-- Lock order stays: the request row first, then its pending row (the trigger's delete).

CREATE TABLE pending_requests (
    id         text PRIMARY KEY,
    recipient  text,
    requester  text,
    channel    text,
    expires_at timestamptz
);

CREATE INDEX pending_requests_to ON pending_requests (recipient, id) WHERE recipient IS NOT NULL;
CREATE INDEX pending_requests_from ON pending_requests (requester, id) WHERE requester IS NOT NULL;
CREATE INDEX pending_requests_in_channel ON pending_requests (channel, id) WHERE channel IS NOT NULL;
CREATE INDEX pending_requests_due ON pending_requests (expires_at) WHERE expires_at IS NOT NULL;

INSERT INTO pending_requests (id, recipient, requester, channel, expires_at)
SELECT id, recipient, requester, channel, expires_at FROM requests WHERE status = 'pending';

CREATE FUNCTION interlock_pending_created() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.status = 'pending' THEN
        INSERT INTO pending_requests (id, recipient, requester, channel, expires_at)
        VALUES (NEW.id, NEW.recipient, NEW.requester, NEW.channel, NEW.expires_at);
    END IF;
    INSERT INTO request_texts (id, body) VALUES (NEW.id, interlock_request_text(NEW.doc, NEW.response));
    RETURN NULL;
END
$$;

CREATE FUNCTION interlock_pending_settled() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM pending_requests WHERE id = NEW.id;
    IF NEW.response IS NOT NULL THEN
        UPDATE request_texts SET body = interlock_request_text(NEW.doc, NEW.response) WHERE id = NEW.id;
    END IF;
    RETURN NULL;
END
$$;

CREATE FUNCTION interlock_pending_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE pending_requests
    SET recipient = NEW.recipient, requester = NEW.requester, channel = NEW.channel, expires_at = NEW.expires_at
    WHERE id = NEW.id;
    RETURN NULL;
END
$$;

CREATE FUNCTION interlock_request_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM pending_requests WHERE id = OLD.id;
    DELETE FROM request_texts WHERE id = OLD.id;
    RETURN NULL;
END
$$;

CREATE TABLE request_texts (
    id   text PRIMARY KEY,
    body tsvector NOT NULL
);

INSERT INTO request_texts (id, body) SELECT id, interlock_request_text(doc, response) FROM requests;

CREATE INDEX request_texts_body ON request_texts USING gin (body);

CREATE TRIGGER requests_created AFTER INSERT ON requests FOR EACH ROW
    EXECUTE FUNCTION interlock_pending_created();

CREATE TRIGGER requests_settled AFTER UPDATE OF status ON requests FOR EACH ROW
    WHEN (OLD.status = 'pending' AND NEW.status <> 'pending')
    EXECUTE FUNCTION interlock_pending_settled();

CREATE TRIGGER requests_pending_changed AFTER UPDATE OF recipient, requester, channel, expires_at ON requests
    FOR EACH ROW WHEN (NEW.status = 'pending')
    EXECUTE FUNCTION interlock_pending_changed();

CREATE TRIGGER requests_deleted AFTER DELETE ON requests FOR EACH ROW
    EXECUTE FUNCTION interlock_request_deleted();

DROP INDEX requests_pending;
DROP INDEX requests_due;
DROP INDEX requests_text;

ALTER TABLE requests SET (fillfactor = 80);

-- The pending requests a settlement of many takes: found in `pending_requests`, locked
-- in `requests` (the request row first, as every settlement does).
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
            SELECT r.id FROM pending_requests p JOIN requests r ON r.id = p.id
            WHERE p.expires_at <= p_due
            ORDER BY p.expires_at LIMIT p_limit
            FOR UPDATE OF r SKIP LOCKED
        ), settled AS (
            UPDATE requests r SET status = p_status, settled_at = p_settled_at, response = p_response
            FROM target WHERE r.id = target.id AND r.status = 'pending'
            RETURNING r.id, r.doc
        ) SELECT array_agg(s.id ORDER BY s.id), array_agg(s.doc ORDER BY s.id) INTO ids, docs FROM settled s;
    ELSIF p_channel IS NOT NULL THEN
        WITH target AS (
            SELECT r.id FROM pending_requests p JOIN requests r ON r.id = p.id
            WHERE p.channel = p_channel
            ORDER BY r.id FOR UPDATE OF r
        ), settled AS (
            UPDATE requests r SET status = p_status, settled_at = p_settled_at, response = p_response
            FROM target WHERE r.id = target.id AND r.status = 'pending'
            RETURNING r.id, r.doc
        ) SELECT array_agg(s.id ORDER BY s.id), array_agg(s.doc ORDER BY s.id) INTO ids, docs FROM settled s;
    ELSE
        WITH target AS (
            SELECT r.id FROM pending_requests p JOIN requests r ON r.id = p.id ORDER BY r.id FOR UPDATE OF r
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

CREATE OR REPLACE FUNCTION interlock_close_channel(
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
        SELECT r.id FROM pending_requests p JOIN requests r ON r.id = p.id
        WHERE p.channel = p_channel AND (p_requester IS NULL OR p.requester = p_requester)
        ORDER BY r.id FOR UPDATE OF r
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
