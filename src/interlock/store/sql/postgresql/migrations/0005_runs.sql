-- Runs: one agent's piece of work, which may park on people and be resumed by any worker.
-- As in the SQLite schema: `state` is the framework's own state (JSON, opaque here);
-- `waiting_on` the ids a parked run waits on, also kept one per row in `run_waits` so
-- that settling a request can tell, in its own transaction, whether its run is ready.
-- `expires_at` is set only while the run is parked; `worker` and `lease_expires_at`
-- only while a worker holds it.
CREATE TABLE runs (
    id               text PRIMARY KEY,
    agent            text NOT NULL,
    session          text,
    requester        text,
    status           text NOT NULL,
    terminal_reason  text,
    ready            boolean NOT NULL DEFAULT false,
    worker           text,
    lease_expires_at timestamptz,
    expires_at       timestamptz,
    attempts         integer NOT NULL DEFAULT 0,
    max_duration     double precision,
    created_at       timestamptz NOT NULL,
    updated_at       timestamptz NOT NULL,
    waiting_on       json NOT NULL DEFAULT '[]',
    state            json,
    result           json,
    error            text
);

CREATE INDEX runs_ready ON runs (agent, updated_at) WHERE ready;
CREATE INDEX runs_leased ON runs (lease_expires_at) WHERE status = 'running' AND lease_expires_at IS NOT NULL;
CREATE INDEX runs_due ON runs (expires_at) WHERE expires_at IS NOT NULL;
CREATE INDEX runs_by_agent ON runs (agent, id);
CREATE INDEX runs_by_session ON runs (session, id) WHERE session IS NOT NULL;
CREATE INDEX runs_by_requester ON runs (requester, id) WHERE requester IS NOT NULL;
CREATE INDEX runs_by_status ON runs (status, id);

CREATE TABLE run_waits (
    run_id     text NOT NULL,
    request_id text NOT NULL,
    PRIMARY KEY (run_id, request_id)
);

CREATE INDEX run_waits_by_request ON run_waits (request_id);

-- A request of a run settling makes its parked run ready when none of the requests it
-- waits on is pending any more, in the settling transaction. The run row is locked
-- first, and each statement of the function reads afresh: two requests of one run
-- settling at once are looked at one after the other, and the second sees the first
-- (without the lock, each would see the other still pending and neither would make the
-- run ready). A park locks the same row, so a settlement and a park never miss each
-- other either. Lock order everywhere: requests, then runs, then the event log's lock.
CREATE FUNCTION interlock_run_request_settled() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM runs WHERE id = NEW.run FOR UPDATE;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    UPDATE runs SET ready = true
    WHERE id = NEW.run
      AND status IN ('waiting_for_input', 'waiting_for_approval')
      AND NOT ready
      AND EXISTS (SELECT 1 FROM run_waits WHERE run_id = NEW.run AND request_id = NEW.id)
      AND NOT EXISTS (
          SELECT 1 FROM run_waits w JOIN requests r ON r.id = w.request_id
          WHERE w.run_id = NEW.run AND r.status = 'pending'
      );
    RETURN NULL;
END
$$;

CREATE TRIGGER runs_ready_on_settle AFTER UPDATE OF status ON requests
    FOR EACH ROW WHEN (OLD.status = 'pending' AND NEW.status <> 'pending' AND NEW.run IS NOT NULL)
    EXECUTE FUNCTION interlock_run_request_settled();
