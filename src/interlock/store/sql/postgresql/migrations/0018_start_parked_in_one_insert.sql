-- A run started parked on new requests is inserted in its parked state: no running row
-- to lock, empty of its waits and update a moment later. Its events are as before:
-- `run_started`, each request's `created`, then `input_requested`.
CREATE OR REPLACE FUNCTION interlock_start_parked(
    p_id text, p_agent text, p_session text, p_requester text, p_max_duration double precision,
    p_at timestamptz, p_run_data json,
    p_ids text[], p_kinds text[], p_recipients text[], p_requesters text[], p_sessions text[],
    p_channels text[], p_agents text[], p_created timestamptz[], p_expires timestamptz[], p_docs json[],
    p_status text, p_state json, p_expires_at timestamptz
) RETURNS SETOF runs LANGUAGE plpgsql AS $$
DECLARE
    i integer;
    made record;
    parked runs;
BEGIN
    INSERT INTO runs (id, agent, session, requester, status, max_duration, created_at, updated_at,
                      state, waiting_on, expires_at, ready)
    VALUES (p_id, p_agent, p_session, p_requester, p_status, p_max_duration, p_at, p_at,
            p_state, to_json(p_ids), p_expires_at, coalesce(array_length(p_ids, 1), 0) = 0)
    ON CONFLICT (id) DO NOTHING
    RETURNING * INTO parked;
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
    INSERT INTO run_waits (run_id, request_id) SELECT p_id, unnest(p_ids) ON CONFLICT DO NOTHING;
    INSERT INTO events (type, at, data, requester, session, run)
    VALUES ('input_requested', p_at, interlock_run_data(parked), parked.requester, parked.session, parked.id);
    RETURN NEXT parked;
END
$$;

-- The data of a run's events: json_build_object is stable, not immutable, and a function
-- declared immutable over it is planned anew at every call instead of inlined.
ALTER FUNCTION interlock_run_data(runs) STABLE;
