-- Runs are listed newest first by when they were made, then by id: a run id given by the
-- agent (a thread id, say) says nothing of its age, so ordering by id listed such runs
-- alphabetically. Each list reads its page from one index in that order; the one for
-- every run (an admin's) is new, and replaces the primary key's order.
DROP INDEX IF EXISTS runs_by_agent;
DROP INDEX IF EXISTS runs_by_session;
DROP INDEX IF EXISTS runs_by_requester;
DROP INDEX IF EXISTS runs_by_status;
CREATE INDEX runs_by_agent ON runs (agent, created_at, id);
CREATE INDEX runs_by_session ON runs (session, created_at, id) WHERE session IS NOT NULL;
CREATE INDEX runs_by_requester ON runs (requester, created_at, id) WHERE requester IS NOT NULL;
CREATE INDEX runs_by_status ON runs (status, created_at, id);
CREATE INDEX runs_by_created ON runs (created_at, id);
