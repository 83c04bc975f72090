-- The dead letters are listed newest first, by when each became one (due_at), then by id,
-- a page at a time: everyone's (an admin's) and a person's each read one range of an index
-- in that order, however many deliveries there are. (The status leads the index of
-- everyone's, so that a planner without statistics prefers it to `deliveries_by_status`.)
CREATE INDEX deliveries_dead ON deliveries (status, due_at, id) WHERE status = 'dead';
CREATE INDEX deliveries_dead_to ON deliveries (recipient, due_at, id) WHERE status = 'dead';
