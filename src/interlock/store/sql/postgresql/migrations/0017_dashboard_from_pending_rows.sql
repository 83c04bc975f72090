-- The dashboard counts up to a thousand pending requests of a person (or of everyone) by
-- agent and age. A pending row now carries both, so that count reads `pending_requests`
-- alone instead of fetching each request's row.
ALTER TABLE pending_requests ADD COLUMN agent text, ADD COLUMN created_at timestamptz;

UPDATE pending_requests p SET agent = r.agent, created_at = r.created_at FROM requests r WHERE r.id = p.id;

CREATE OR REPLACE FUNCTION interlock_pending_created() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.status = 'pending' THEN
        INSERT INTO pending_requests (id, recipient, requester, channel, expires_at, agent, created_at)
        VALUES (NEW.id, NEW.recipient, NEW.requester, NEW.channel, NEW.expires_at, NEW.agent, NEW.created_at);
    END IF;
    INSERT INTO request_texts (id, body) VALUES (NEW.id, interlock_request_text(NEW.doc, NEW.response));
    RETURN NULL;
END
$$;
