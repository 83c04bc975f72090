-- The dashboard counts up to a thousand settled requests of a person (and their teams)
-- by status, answerer and time taken. Read through `requests`, each of those requests was
-- a visit to its row for its status (no index of `requests` holds the status, so that a
-- settlement stays a HOT update): at a million requests, a person's page read a thousand
-- scattered rows. A settled request with a recipient now also has a narrow row in
-- `settled_requests`, written by the settlement's statement and never updated, whose
-- primary key holds every column the dashboard counts: that read is an index-only scan.
--
-- The pending requests it counts are read likewise: the index of a person's pending rows
-- now holds the columns counted (agent, requester, age), so a thousand pending requests,
-- each on a page of its own among everyone's, are no longer a thousand page visits.
CREATE TABLE settled_requests (
    recipient  text NOT NULL,
    id         text NOT NULL,
    status     text NOT NULL,
    agent      text,          -- the request's agent, or its requester when it names none
    created_at timestamptz NOT NULL,
    settled_at timestamptz,
    settled_by text,
    PRIMARY KEY (recipient, id) INCLUDE (status, agent, created_at, settled_at, settled_by)
) WITH (
    -- Rows are only ever added: vacuum often enough that the newest pages, the ones a
    -- dashboard reads, are marked all-visible and the scan stays index-only.
    autovacuum_vacuum_insert_scale_factor = 0.01
);

INSERT INTO settled_requests (recipient, id, status, agent, created_at, settled_at, settled_by)
SELECT recipient, id, status, coalesce(agent, requester), created_at, settled_at, response->>'by'
FROM requests WHERE status <> 'pending' AND recipient IS NOT NULL;

CREATE FUNCTION interlock_settled_row() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO settled_requests (recipient, id, status, agent, created_at, settled_at, settled_by)
    VALUES (NEW.recipient, NEW.id, NEW.status, coalesce(NEW.agent, NEW.requester), NEW.created_at,
            NEW.settled_at, NEW.response->>'by');
    RETURN NULL;
END
$$;

CREATE FUNCTION interlock_settled_row_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM settled_requests WHERE recipient = OLD.recipient AND id = OLD.id;
    RETURN NULL;
END
$$;

-- A request settles once (its one change of status); one stored already settled has its
-- row from the start.
CREATE TRIGGER requests_settled_row AFTER UPDATE OF status ON requests
    FOR EACH ROW WHEN (OLD.status = 'pending' AND NEW.status <> 'pending' AND NEW.recipient IS NOT NULL)
    EXECUTE FUNCTION interlock_settled_row();

CREATE TRIGGER requests_stored_settled_row AFTER INSERT ON requests
    FOR EACH ROW WHEN (NEW.status <> 'pending' AND NEW.recipient IS NOT NULL)
    EXECUTE FUNCTION interlock_settled_row();

CREATE TRIGGER requests_settled_row_deleted AFTER DELETE ON requests
    FOR EACH ROW WHEN (OLD.status <> 'pending' AND OLD.recipient IS NOT NULL)
    EXECUTE FUNCTION interlock_settled_row_deleted();

DROP INDEX pending_requests_to;
CREATE INDEX pending_requests_to ON pending_requests (recipient, id) INCLUDE (agent, requester, created_at)
    WHERE recipient IS NOT NULL;
-- Every settlement deletes a pending row, and a page with a deleted row is read again
-- (not index-only) until vacuumed: vacuum this small table more often than the default.
ALTER TABLE pending_requests SET (autovacuum_vacuum_scale_factor = 0.02, autovacuum_vacuum_insert_scale_factor = 0.02);

ANALYZE settled_requests;
