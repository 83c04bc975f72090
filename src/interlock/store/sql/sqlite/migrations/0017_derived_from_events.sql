-- The outbox's notices and the history's full-text index are derived from the event log
-- instead of being written by triggers in every create and settlement. The event is the
-- durable record, appended in the transaction of the change; what is derived from it is
-- brought up to date later, many events a transaction, where a trigger wrote it one
-- event a transaction (the two triggers were more than half of a create and answer
-- cycle's time: 17 of its 28 WAL pages).
--
-- `derived` says how far each is up to date: every event up to `event_id` is reflected.
-- The store brings the search index up to date before a search reads it (so a search
-- sees every committed change) and shortly after its own writes; the delivery loop
-- derives the notices before it claims them. Event ids only grow, in commit order (one
-- writer at a time), so nothing is passed over.
DROP TRIGGER outbox_of_events;
DROP TRIGGER requests_text_created;
DROP TRIGGER requests_text_settled;
DROP TRIGGER requests_text_deleted;  -- requests are never deleted

CREATE TABLE derived (
    name     TEXT PRIMARY KEY,
    event_id INTEGER NOT NULL
) WITHOUT ROWID;

-- The triggers kept both up to date until now.
INSERT INTO derived (name, event_id) SELECT 'outbox', ifnull(max(id), 0) FROM events;
INSERT INTO derived (name, event_id) SELECT 'search', ifnull(max(id), 0) FROM events;
