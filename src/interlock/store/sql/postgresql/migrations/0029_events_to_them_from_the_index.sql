-- A person's page of events (`find_events(involving=...)`) is mostly the events to them,
-- read in id order from `events_by_recipient`, each row then looked up by its id: four
-- pages for every event, 2,000 for a page of 500 (at a million requests, 2.1-2.3 ms of
-- the statement's 2.5 ms p50). Most of those events carry no data (a request's created,
-- answered, expired, ...), and for them an index now holds the columns the page reads,
-- so they are read from its entries alone (about 55 bytes more an entry). An event that
-- carries data (a follow-up's text, a policy: up to tens of kB, more than an index entry
-- may hold) is in an index of its own, of ids, and read by its id as before. Together the
-- two replace `events_by_recipient`: an event still writes one entry.
SET LOCAL maintenance_work_mem = '256MB';
CREATE INDEX events_to_plain ON events (recipient, id) INCLUDE (type, request_id, at)
    WHERE recipient IS NOT NULL AND data IS NULL;
CREATE INDEX events_to_with_data ON events (recipient, id) WHERE recipient IS NOT NULL AND data IS NOT NULL;
DROP INDEX events_by_recipient;
-- Events are only ever added: vacuum often enough that all but the newest pages are
-- marked all-visible, which a read from the index's entries alone needs.
ALTER TABLE events SET (autovacuum_vacuum_insert_scale_factor = 0.02);
