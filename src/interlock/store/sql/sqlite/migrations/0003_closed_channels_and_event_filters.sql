-- Closed channels, kept in the store so that every process refuses creates there (the
-- insert checks this table in its own transaction). `requester` is '' when the channel
-- is closed for everyone, else the requester it is closed for.
CREATE TABLE closed_channels (
    channel   TEXT NOT NULL,
    requester TEXT NOT NULL DEFAULT '',
    closed_at INTEGER NOT NULL,
    PRIMARY KEY (channel, requester)
) WITHOUT ROWID;

-- Who an event concerns and where it belongs, copied onto the event when it is written
-- (from the request, or from an update's data: `recipient` is its `to`, `requester` its
-- `by`), so that a page of "the events I may see" or "the events of this session" is an
-- index range, not a scan of the log.
ALTER TABLE events ADD COLUMN recipient TEXT;
ALTER TABLE events ADD COLUMN requester TEXT;
ALTER TABLE events ADD COLUMN session TEXT;
ALTER TABLE events ADD COLUMN run TEXT;

UPDATE events SET (recipient, requester, session, run) = (
    SELECT r.recipient, r.requester, r.session, r.run FROM requests r WHERE r.id = events.request_id
) WHERE request_id IS NOT NULL;

UPDATE events SET
    recipient = json_extract(data, '$.to'),
    requester = json_extract(data, '$.by'),
    session = json_extract(data, '$.session'),
    run = json_extract(data, '$.run')
WHERE request_id IS NULL AND json_valid(data);

CREATE INDEX events_by_recipient ON events (recipient, id) WHERE recipient IS NOT NULL;
CREATE INDEX events_by_requester ON events (requester, id) WHERE requester IS NOT NULL;
CREATE INDEX events_by_request ON events (request_id, id) WHERE request_id IS NOT NULL;
CREATE INDEX events_by_session ON events (session, id) WHERE session IS NOT NULL;
CREATE INDEX events_by_run ON events (run, id) WHERE run IS NOT NULL;
