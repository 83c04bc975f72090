-- A run a worker holds (claimed, being resumed) is parked only by that worker: a park
-- without a worker (an agent's, restarted and going through its steps again) no longer
-- takes the run from the worker and hands it, ready, to another one.
CREATE OR REPLACE FUNCTION interlock_park_run(p_id text, p_ids text[], p_status text, p_state json, p_expires_at timestamp with time zone, p_at timestamp with time zone, p_worker text) RETURNS SETOF runs
    LANGUAGE plpgsql
    AS $$
DECLARE
    current runs;
    parked runs;
BEGIN
    SELECT * INTO current FROM runs WHERE id = p_id FOR UPDATE;
    IF NOT FOUND OR current.status <> 'running' OR current.worker IS DISTINCT FROM p_worker THEN
        RETURN;
    END IF;
    UPDATE runs SET status = p_status, state = p_state, waiting_on = to_json(p_ids), expires_at = p_expires_at,
        updated_at = p_at, worker = NULL, lease_expires_at = NULL,
        ready = NOT EXISTS (SELECT 1 FROM requests WHERE id = ANY(p_ids) AND status = 'pending')
    WHERE id = p_id RETURNING * INTO parked;
    INSERT INTO events (type, at, data, requester, session, run)
    VALUES ('input_requested', p_at, interlock_run_data(parked), parked.requester, parked.session, parked.id);
    RETURN NEXT parked;
END
$$;
