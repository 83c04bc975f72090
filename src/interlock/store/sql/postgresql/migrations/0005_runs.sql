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

-- The data of an event about a run: its public fields, never its state (the shape
-- `model.run_event_data` makes; the store suite checks the two agree).
CREATE FUNCTION interlock_run_data(r runs) RETURNS json LANGUAGE sql IMMUTABLE AS $$
    SELECT json_build_object(
        'run', r.id, 'agent', r.agent, 'session', r.session, 'by', r.requester, 'status', r.status,
        'terminal_reason', r.terminal_reason, 'waiting_on', r.waiting_on, 'ready', r.ready,
        'worker', r.worker, 'attempts', r.attempts, 'error', r.error
    )
$$;

-- Park a running run (held by `p_worker`, when given) on `p_ids`: one round trip. The run
-- is locked first, and whether its requests are all settled is read after the lock, so a
-- settlement committed meanwhile is seen (see `interlock_run_request_settled`). No row
-- when the run is not running, or another worker holds it.
CREATE FUNCTION interlock_park_run(
    p_id text, p_ids text[], p_status text, p_state json, p_expires_at timestamptz, p_at timestamptz, p_worker text
) RETURNS SETOF runs LANGUAGE plpgsql AS $$
DECLARE
    current runs;
    parked runs;
BEGIN
    SELECT * INTO current FROM runs WHERE id = p_id FOR UPDATE;
    IF NOT FOUND OR current.status <> 'running' OR (p_worker IS NOT NULL AND current.worker IS DISTINCT FROM p_worker) THEN
        RETURN;
    END IF;
    DELETE FROM run_waits WHERE run_id = p_id;
    INSERT INTO run_waits (run_id, request_id) SELECT p_id, unnest(p_ids) ON CONFLICT DO NOTHING;
    UPDATE runs SET status = p_status, state = p_state, waiting_on = to_json(p_ids), expires_at = p_expires_at,
        updated_at = p_at, worker = NULL, lease_expires_at = NULL,
        ready = NOT EXISTS (SELECT 1 FROM requests WHERE id = ANY(p_ids) AND status = 'pending')
    WHERE id = p_id RETURNING * INTO parked;
    INSERT INTO events (type, at, data, requester, session, run)
    VALUES ('input_requested', p_at, interlock_run_data(parked), parked.requester, parked.session, parked.id);
    RETURN NEXT parked;
END
$$;

-- Claim one run for `p_worker`: a ready parked run, else one whose worker's lease ran out;
-- one round trip, and an idle worker's call writes nothing. SKIP LOCKED: racing workers
-- each take a different run (or none), never the same one.
CREATE FUNCTION interlock_claim_run(
    p_agents text[], p_worker text, p_lease_expires_at timestamptz, p_at timestamptz, p_requester text
) RETURNS SETOF runs LANGUAGE plpgsql AS $$
DECLARE
    claimed runs;
BEGIN
    UPDATE runs SET status = 'running', ready = false, expires_at = NULL, worker = p_worker,
        lease_expires_at = p_lease_expires_at, attempts = runs.attempts + 1, updated_at = p_at
    FROM (SELECT r.id FROM runs r
          WHERE r.ready AND r.status IN ('waiting_for_input', 'waiting_for_approval')
            AND (p_agents IS NULL OR r.agent = ANY(p_agents)) AND (p_requester IS NULL OR r.requester = p_requester)
          ORDER BY r.updated_at LIMIT 1 FOR UPDATE SKIP LOCKED) AS found
    WHERE runs.id = found.id
    RETURNING runs.* INTO claimed;
    IF NOT FOUND THEN
        UPDATE runs SET status = 'running', ready = false, expires_at = NULL, worker = p_worker,
            lease_expires_at = p_lease_expires_at, attempts = runs.attempts + 1, updated_at = p_at
        FROM (SELECT r.id FROM runs r
              WHERE r.status = 'running' AND r.lease_expires_at IS NOT NULL AND r.lease_expires_at <= p_at
                AND (p_agents IS NULL OR r.agent = ANY(p_agents)) AND (p_requester IS NULL OR r.requester = p_requester)
              ORDER BY r.lease_expires_at LIMIT 1 FOR UPDATE SKIP LOCKED) AS found
        WHERE runs.id = found.id
        RETURNING runs.* INTO claimed;
        IF NOT FOUND THEN
            RETURN;
        END IF;
    END IF;
    INSERT INTO events (type, at, data, requester, session, run)
    VALUES ('run_claimed', p_at, interlock_run_data(claimed), claimed.requester, claimed.session, claimed.id);
    RETURN NEXT claimed;
END
$$;

-- End a running run held by `p_worker` (any run not ended, when NULL) with no request to
-- withdraw: completing or failing it, one round trip. No row when it may not end.
CREATE FUNCTION interlock_finish_run(
    p_id text, p_status text, p_result json, p_error text, p_reason text, p_at timestamptz, p_worker text
) RETURNS SETOF runs LANGUAGE plpgsql AS $$
DECLARE
    current runs;
    ended runs;
BEGIN
    SELECT * INTO current FROM runs WHERE id = p_id FOR UPDATE;
    IF NOT FOUND OR current.status IN ('completed', 'failed', 'cancelled')
       OR (p_worker IS NOT NULL AND (current.status <> 'running' OR current.worker IS DISTINCT FROM p_worker)) THEN
        RETURN;
    END IF;
    UPDATE runs SET status = p_status, result = p_result, error = p_error, terminal_reason = p_reason,
        updated_at = p_at, expires_at = NULL, ready = false, worker = NULL, lease_expires_at = NULL
    WHERE id = p_id RETURNING * INTO ended;
    INSERT INTO events (type, at, data, requester, session, run)
    VALUES ('run_' || p_status, p_at, interlock_run_data(ended), ended.requester, ended.session, ended.id);
    RETURN NEXT ended;
END
$$;
