-- An answered approval is spent once: the first consumer sets these two, and nobody can
-- after it, on any node.
ALTER TABLE requests ADD COLUMN consumed_at timestamptz;
ALTER TABLE requests ADD COLUMN consumed_by text;

-- Consume an answered request if no one has yet (a conditional update, never
-- read-then-write: the row lock makes one caller win) and append its `consumed` event,
-- which concerns the same people and places as its request.
-- The event id, or NULL.
CREATE FUNCTION interlock_consume(p_id text, p_by text, p_at timestamptz)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    event_id bigint;
BEGIN
    UPDATE requests SET consumed_at = p_at, consumed_by = p_by
    WHERE id = p_id AND status = 'answered' AND consumed_at IS NULL;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    INSERT INTO events (type, request_id, at, recipient, requester, session, run)
    SELECT 'consumed', r.id, p_at, r.recipient, r.requester, r.session, r.run FROM requests r WHERE r.id = p_id
    RETURNING id INTO event_id;
    RETURN event_id;
END
$$;
