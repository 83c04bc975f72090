-- Runs: one agent's piece of work, which may park on people and be resumed by any worker.
-- `state` is the framework's own state (JSON, opaque here); `waiting_on` the ids a parked
-- run waits on (JSON), also kept one per row in `run_waits` so that settling a request
-- can tell, in its own transaction, whether its run is now ready. `expires_at` is set
-- only while the run is parked; `worker` and `lease_expires_at` only while a worker
-- holds it. Times are integer microseconds since the Unix epoch (UTC).
CREATE TABLE runs (
    id               TEXT PRIMARY KEY,
    agent            TEXT NOT NULL,
    session          TEXT,
    requester        TEXT,
    status           TEXT NOT NULL,
    terminal_reason  TEXT,
    ready            INTEGER NOT NULL DEFAULT 0,
    worker           TEXT,
    lease_expires_at INTEGER,
    expires_at       INTEGER,
    attempts         INTEGER NOT NULL DEFAULT 0,
    max_duration     REAL,
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL,
    waiting_on       TEXT NOT NULL DEFAULT '[]',
    state            TEXT,
    result           TEXT,
    error            TEXT
);

CREATE INDEX runs_ready ON runs (agent, updated_at) WHERE ready = 1;
CREATE INDEX runs_leased ON runs (lease_expires_at) WHERE status = 'running' AND lease_expires_at IS NOT NULL;
CREATE INDEX runs_due ON runs (expires_at) WHERE expires_at IS NOT NULL;
CREATE INDEX runs_by_agent ON runs (agent, id);
CREATE INDEX runs_by_session ON runs (session, id) WHERE session IS NOT NULL;
CREATE INDEX runs_by_requester ON runs (requester, id) WHERE requester IS NOT NULL;
CREATE INDEX runs_by_status ON runs (status, id);

CREATE TABLE run_waits (
    run_id     TEXT NOT NULL,
    request_id TEXT NOT NULL,
    PRIMARY KEY (run_id, request_id)
) WITHOUT ROWID;

CREATE INDEX run_waits_by_request ON run_waits (request_id);

-- A request of a run settling makes its parked run ready when none of the requests it
-- waits on is pending any more: in the settling transaction itself, on every process.
CREATE TRIGGER runs_ready_on_settle AFTER UPDATE OF status ON requests
WHEN OLD.status = 'pending' AND NEW.status <> 'pending' AND NEW.run IS NOT NULL
BEGIN
    UPDATE runs SET ready = 1
    WHERE id = NEW.run
      AND status IN ('waiting_for_input', 'waiting_for_approval')
      AND ready = 0
      AND EXISTS (SELECT 1 FROM run_waits WHERE run_id = NEW.run AND request_id = NEW.id)
      AND NOT EXISTS (
          SELECT 1 FROM run_waits w JOIN requests r ON r.id = w.request_id
          WHERE w.run_id = NEW.run AND r.status = 'pending'
      );
END;
