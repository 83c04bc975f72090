-- A create and a settlement are each one statement, their events written by SQLite in
-- the same statement: a lone create or answer then needs no BEGIN and COMMIT of its own
-- (SQLite makes the one statement its own transaction), and binds one row of values
-- instead of two. The events are the same rows, in the same order, as the store wrote
-- them itself until now.
--
-- A process of an earlier version still writes these events itself, so it would write
-- them twice on this file: the store refuses to open a database with a migration it does
-- not know (upgrade every process sharing a file before it opens the file again).

-- A new request: INSERT INTO new_requests makes its row and its `created` event.
CREATE VIEW new_requests AS
SELECT id, kind, status, recipient, requester, session, channel, agent, run,
       idempotency_key, created_at, expires_at, doc
FROM requests WHERE 0;

CREATE TRIGGER new_requests_insert INSTEAD OF INSERT ON new_requests
BEGIN
    INSERT INTO requests (id, kind, status, recipient, requester, session, channel, agent, run,
                          idempotency_key, created_at, expires_at, settled_at, doc)
    VALUES (NEW.id, NEW.kind, NEW.status, NEW.recipient, NEW.requester, NEW.session, NEW.channel,
            NEW.agent, NEW.run, NEW.idempotency_key, NEW.created_at, NEW.expires_at, NULL, NEW.doc);
    INSERT INTO events (type, request_id, at, data, recipient, requester, session, run)
    VALUES ('created', NEW.id, NEW.created_at, NULL, NEW.recipient, NEW.requester, NEW.session, NEW.run);
END;

-- A settlement (the one change of status a request has) appends its event, named after
-- the status it settled in, at the time it settled.
CREATE TRIGGER requests_settled_event AFTER UPDATE OF status ON requests
WHEN OLD.status = 'pending' AND NEW.status <> 'pending'
BEGIN
    INSERT INTO events (type, request_id, at, data, recipient, requester, session, run)
    VALUES (NEW.status, NEW.id, NEW.settled_at, NULL, NEW.recipient, NEW.requester, NEW.session, NEW.run);
END;
