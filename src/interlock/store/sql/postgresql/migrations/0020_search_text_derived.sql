-- A request's search text (`request_texts`) is derived from the event log after the
-- write, as SQLite's search index is, instead of in the write's own transaction: a
-- create no longer makes the text, nor an answer add its words (a new version of the row
-- and of its GIN entries). A catch-up (`interlock_derive_search`) stores the text of
-- every request an event names since the last one, each once, from the request's row as
-- it is then; a search runs one first, so it sees every change committed before it, and
-- a store runs one shortly after its own writes.
--
-- Event ids are handed out in commit order, so every event up to the newest one a
-- catch-up sees is committed (or rolled back) already: `derived.upto` passes none by.

CREATE TABLE derived (
    name text PRIMARY KEY,
    upto bigint NOT NULL  -- the last event taken in
);

-- Every request stored so far has its text: the catch-up starts after the events seen now
-- (one committed meanwhile with the earlier triggers is taken in once more, the same text).
INSERT INTO derived (name, upto) SELECT 'search', coalesce(max(id), 0) FROM events;

CREATE OR REPLACE FUNCTION interlock_pending_created() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.status = 'pending' THEN
        INSERT INTO pending_requests (id, recipient, requester, channel, expires_at, agent, created_at)
        VALUES (NEW.id, NEW.recipient, NEW.requester, NEW.channel, NEW.expires_at, NEW.agent, NEW.created_at);
    END IF;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION interlock_pending_settled() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM pending_requests WHERE id = NEW.id;
    RETURN NULL;
END
$$;

-- Takes in the events after `derived.upto` (none yet: 0), up to `p_chunk` of them, and
-- returns how far it got and the newest event it saw (a caller that wants everything calls
-- again until the two meet). Nothing is written, nor locked, when there is nothing new;
-- concurrent catch-ups wait for each other on an advisory lock.
CREATE FUNCTION interlock_derive_search(p_chunk integer) RETURNS TABLE (upto bigint, last bigint)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_after bigint;
    v_upto bigint;
    v_last bigint;
BEGIN
    SELECT coalesce(max(e.id), 0) INTO v_last FROM events e;
    SELECT coalesce(max(d.upto), 0) INTO v_after FROM derived d WHERE d.name = 'search';
    IF v_last > v_after THEN
        PERFORM pg_advisory_xact_lock(7598390718262734182);  -- 'interlock search text'
        SELECT coalesce(max(d.upto), 0) INTO v_after FROM derived d WHERE d.name = 'search';
    END IF;
    IF v_last <= v_after THEN
        RETURN QUERY SELECT v_after, v_after;
        RETURN;
    END IF;
    v_upto := least(v_last, v_after + p_chunk);
    INSERT INTO request_texts AS t (id, body)
    SELECT r.id, interlock_request_text(r.doc, r.response) FROM requests r
    WHERE r.id IN (SELECT e.request_id FROM events e
                   WHERE e.id > v_after AND e.id <= v_upto AND e.request_id IS NOT NULL)
    ON CONFLICT (id) DO UPDATE SET body = EXCLUDED.body WHERE t.body IS DISTINCT FROM EXCLUDED.body;
    INSERT INTO derived AS d (name, upto) VALUES ('search', v_upto)
    ON CONFLICT (name) DO UPDATE SET upto = EXCLUDED.upto;
    RETURN QUERY SELECT v_upto, v_last;
END
$$;
