-- A run a worker holds (claimed, being resumed) is completed or failed only by that worker:
-- an end without a worker (an agent's) ends only a running run no worker holds, so an agent
-- never ends a run under the worker resuming it. A cancellation without a worker still ends
-- any run not ended.
CREATE OR REPLACE FUNCTION interlock_finish_run(
    p_id text, p_status text, p_result json, p_error text, p_reason text, p_at timestamptz, p_worker text
) RETURNS SETOF runs LANGUAGE plpgsql AS $$
DECLARE
    ended runs;
BEGIN
    UPDATE runs SET status = p_status, result = p_result, error = p_error, terminal_reason = p_reason,
        updated_at = p_at, expires_at = NULL, ready = false, worker = NULL, lease_expires_at = NULL
    WHERE id = p_id AND status NOT IN ('completed', 'failed', 'cancelled')
      AND ((p_worker IS NULL AND p_status = 'cancelled')
           OR (status = 'running' AND worker IS NOT DISTINCT FROM p_worker))
    RETURNING * INTO ended;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    INSERT INTO events (type, at, data, requester, session, run)
    VALUES ('run_' || p_status, p_at, interlock_run_data(ended), ended.requester, ended.session, ended.id);
    RETURN NEXT ended;
END
$$;
