-- Everyone's requests in a time window are read along the primary key, from the id the
-- window's first moment begins and down to its last (an id begins with the time it was
-- made), so the index of creation times reads nothing any more. Each request made no
-- longer writes it, and PostgreSQL's plan for a window's prepared statement, made for any
-- values, can no longer read the whole window through it and sort it by id.
DROP INDEX IF EXISTS requests_by_created;
