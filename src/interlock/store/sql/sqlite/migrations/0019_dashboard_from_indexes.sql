-- The dashboard counts up to a thousand pending and a thousand settled requests of a
-- person; read row by row, those are a thousand pages scattered over the file. Its
-- columns are now in the indexes it reads, so it reads index entries only: the pending
-- indexes carry each request's age and agent, and a person's index also carries when and
-- by whom each request was settled (`settled_by`, written with the settlement; the
-- response keeps it too).
ALTER TABLE requests ADD COLUMN settled_by TEXT;
UPDATE requests SET settled_by = json_extract(response, '$.by') WHERE response IS NOT NULL;

DROP INDEX requests_pending;
DROP INDEX requests_pending_to;
DROP INDEX requests_by_recipient;
CREATE INDEX requests_pending ON requests (id, recipient, created_at, agent, requester, status)
    WHERE status = 'pending';
CREATE INDEX requests_pending_to ON requests (recipient, id, created_at, agent, requester, status)
    WHERE status = 'pending' AND recipient IS NOT NULL;
CREATE INDEX requests_by_recipient
    ON requests (recipient, id, status, created_at, settled_at, settled_by, agent, requester)
    WHERE recipient IS NOT NULL;
