-- Start a run parked at once on new requests: the run, its requests (each through
-- `interlock_insert`, so a closed channel is checked as for any create) and the park, in
-- one round trip and one transaction. The requests come as arrays, one element a request.
-- No row when a run with this id exists (nothing is stored; the caller reads it). A
-- request in a closed channel raises `interlock_channel_closed` (its channel as the
-- detail), and the whole transaction rolls back.
CREATE FUNCTION interlock_start_parked(
    p_id text, p_agent text, p_session text, p_requester text, p_max_duration double precision,
    p_at timestamptz, p_run_data json,
    p_ids text[], p_kinds text[], p_recipients text[], p_requesters text[], p_sessions text[],
    p_channels text[], p_agents text[], p_created timestamptz[], p_expires timestamptz[], p_docs json[],
    p_status text, p_state json, p_expires_at timestamptz
) RETURNS SETOF runs LANGUAGE plpgsql AS $$
DECLARE
    i integer;
    made record;
BEGIN
    INSERT INTO runs (id, agent, session, requester, status, max_duration, created_at, updated_at)
    VALUES (p_id, p_agent, p_session, p_requester, 'running', p_max_duration, p_at, p_at)
    ON CONFLICT (id) DO NOTHING;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    INSERT INTO events (type, at, data, requester, session, run)
    VALUES ('run_started', p_at, p_run_data, p_requester, p_session, p_id);
    FOR i IN 1 .. coalesce(array_length(p_ids, 1), 0) LOOP
        SELECT * INTO made FROM interlock_insert(
            p_ids[i], p_kinds[i], p_recipients[i], p_requesters[i], p_sessions[i], p_channels[i],
            p_agents[i], p_id, NULL, p_created[i], p_expires[i], p_docs[i]
        );
        IF NOT made.created THEN
            RAISE EXCEPTION 'interlock_channel_closed' USING DETAIL = p_channels[i];
        END IF;
    END LOOP;
    RETURN QUERY SELECT * FROM interlock_park_run(p_id, p_ids, p_status, p_state, p_expires_at, p_at, NULL);
END
$$;

-- Settle a request and, if that made its run ready, hand the run to a waiting worker (of
-- `p_agents`, only `p_requester`'s runs when given) in the same transaction: the worker
-- waiting beside the person's answer resumes it without a claim of its own. The run row
-- is locked already (by `interlock_run_request_settled`), so nothing after the
-- settlement's event waits on another lock. `settled` false when the request was not
-- pending; `claimed` the run handed over, if any.
CREATE FUNCTION interlock_settle_claiming(
    p_id text, p_status text, p_settled_at timestamptz, p_response json,
    p_agents text[], p_worker text, p_lease_expires_at timestamptz, p_at timestamptz, p_requester text
) RETURNS TABLE (settled boolean, claimed runs) LANGUAGE plpgsql AS $$
DECLARE
    got runs;
BEGIN
    IF interlock_settle(p_id, p_status, p_settled_at, p_response) IS NULL THEN
        RETURN QUERY SELECT false, NULL::runs;
        RETURN;
    END IF;
    UPDATE runs r SET status = 'running', ready = false, expires_at = NULL, worker = p_worker,
        lease_expires_at = p_lease_expires_at, attempts = r.attempts + 1, updated_at = p_at
    WHERE r.id = (SELECT q.run FROM requests q WHERE q.id = p_id)
      AND r.ready AND r.status IN ('waiting_for_input', 'waiting_for_approval')
      AND (p_agents IS NULL OR r.agent = ANY(p_agents)) AND (p_requester IS NULL OR r.requester = p_requester)
    RETURNING r.* INTO got;
    IF NOT FOUND THEN
        RETURN QUERY SELECT true, NULL::runs;
        RETURN;
    END IF;
    INSERT INTO events (type, at, data, requester, session, run)
    VALUES ('run_claimed', p_at, interlock_run_data(got), got.requester, got.session, got.id);
    RETURN QUERY SELECT true, got;
END
$$;
