-- A park-and-resume cycle with fewer writes; its events, their order and data are as
-- before.
--
-- * `run_waits` is gone: since 0019 nothing reads it (whether a run is ready is read from
--   its `waiting_on`, which holds the same ids), yet each park wrote a row and two index
--   entries.
-- * An answer to the only request a run waits on claims the run in one conditional
--   update, without locking its row first and reading whether any other request it waits
--   on is pending (there is none). The lock first is kept for a run that waits on several
--   requests: two of them answered at once must not both see the other pending.

DROP TABLE run_waits;

CREATE OR REPLACE FUNCTION interlock_start_parked(
    p_id text, p_agent text, p_session text, p_requester text, p_max_duration double precision,
    p_at timestamptz, p_run_data json,
    p_ids text[], p_kinds text[], p_recipients text[], p_requesters text[], p_sessions text[],
    p_channels text[], p_agents text[], p_created timestamptz[], p_expires timestamptz[], p_docs json[],
    p_status text, p_state json, p_expires_at timestamptz
) RETURNS SETOF runs LANGUAGE plpgsql AS $$
DECLARE
    i integer;
    n integer := coalesce(array_length(p_ids, 1), 0);
    made boolean[] := '{}';
    parked runs;
BEGIN
    INSERT INTO runs (id, agent, session, requester, status, max_duration, created_at, updated_at,
                      state, waiting_on, expires_at, ready)
    VALUES (p_id, p_agent, p_session, p_requester, p_status, p_max_duration, p_at, p_at,
            p_state, to_json(p_ids), p_expires_at, n = 0)
    ON CONFLICT (id) DO NOTHING
    RETURNING * INTO parked;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    FOR i IN 1 .. n LOOP
        IF p_channels[i] IS NOT NULL THEN
            PERFORM pg_advisory_xact_lock_shared(759839071, hashtext(p_channels[i]));
            IF EXISTS (SELECT 1 FROM closed_channels c
                       WHERE c.channel = p_channels[i] AND c.requester IN ('', coalesce(p_requesters[i], ''))) THEN
                RAISE EXCEPTION 'interlock_channel_closed' USING DETAIL = p_channels[i];
            END IF;
        END IF;
        INSERT INTO requests (id, kind, status, recipient, requester, session, channel, agent, run,
                              created_at, expires_at, doc)
        VALUES (p_ids[i], p_kinds[i], 'pending', p_recipients[i], p_requesters[i], p_sessions[i], p_channels[i],
                p_agents[i], p_id, p_created[i], p_expires[i], p_docs[i])
        ON CONFLICT DO NOTHING;
        made := made || FOUND;
    END LOOP;
    INSERT INTO events (type, at, data, requester, session, run)
    VALUES ('run_started', p_at, p_run_data, p_requester, p_session, p_id);
    FOR i IN 1 .. n LOOP
        IF made[i] THEN
            INSERT INTO events (type, request_id, at, recipient, requester, session, run)
            VALUES ('created', p_ids[i], p_created[i], p_recipients[i], p_requesters[i], p_sessions[i], p_id);
        END IF;
    END LOOP;
    INSERT INTO events (type, at, data, requester, session, run)
    VALUES ('input_requested', p_at, interlock_run_data(parked), parked.requester, parked.session, parked.id);
    RETURN NEXT parked;
END
$$;

CREATE OR REPLACE FUNCTION interlock_park_run(p_id text, p_ids text[], p_status text, p_state json, p_expires_at timestamp with time zone, p_at timestamp with time zone, p_worker text) RETURNS SETOF runs
    LANGUAGE plpgsql
    AS $$
DECLARE
    current runs;
    parked runs;
BEGIN
    SELECT * INTO current FROM runs WHERE id = p_id FOR UPDATE;
    IF NOT FOUND OR current.status <> 'running' OR (p_worker IS NOT NULL AND current.worker IS DISTINCT FROM p_worker) THEN
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

CREATE OR REPLACE FUNCTION interlock_settle_claiming(
    p_id text, p_status text, p_settled_at timestamptz, p_response json,
    p_agents text[], p_worker text, p_lease_expires_at timestamptz, p_at timestamptz, p_requester text
) RETURNS TABLE (settled boolean, claimed runs) LANGUAGE plpgsql AS $$
DECLARE
    v_recipient text;
    v_requester text;
    v_session text;
    v_run text;
    current runs;
    got runs;
    now_ready boolean;
    done boolean;
    waits text[];
BEGIN
    PERFORM set_config('interlock.claiming', 'on', true);
    UPDATE requests SET status = p_status, settled_at = p_settled_at, response = p_response
    WHERE id = p_id AND status = 'pending'
    RETURNING recipient, requester, session, run INTO v_recipient, v_requester, v_session, v_run;
    done := FOUND;
    PERFORM set_config('interlock.claiming', '', true);
    IF NOT done THEN
        RETURN QUERY SELECT false, NULL::runs;
        RETURN;
    END IF;
    IF v_run IS NOT NULL THEN
        -- A run that waits on this request alone is ready now: claimed in one update.
        UPDATE runs r SET status = 'running', ready = false, expires_at = NULL, worker = p_worker,
            lease_expires_at = p_lease_expires_at, attempts = r.attempts + 1, updated_at = p_at
        WHERE r.id = v_run AND r.status IN ('waiting_for_input', 'waiting_for_approval')
          AND json_array_length(r.waiting_on) = 1 AND r.waiting_on ->> 0 = p_id
          AND (p_agents IS NULL OR r.agent = ANY(p_agents))
          AND (p_requester IS NULL OR r.requester = p_requester)
        RETURNING r.* INTO got;
    END IF;
    IF v_run IS NOT NULL AND got.id IS NULL THEN
        -- What `interlock_run_request_settled` does: the run row locked first, then read
        -- afresh whether any request it waits on is still pending.
        SELECT * INTO current FROM runs WHERE id = v_run FOR UPDATE;
        IF FOUND AND current.status IN ('waiting_for_input', 'waiting_for_approval') THEN
            waits := ARRAY(SELECT json_array_elements_text(current.waiting_on));
            now_ready := NOT current.ready AND p_id = ANY(waits)
                AND NOT EXISTS (SELECT 1 FROM requests r WHERE r.id = ANY(waits) AND r.status = 'pending');
            IF (current.ready OR now_ready)
               AND (p_agents IS NULL OR current.agent = ANY(p_agents))
               AND (p_requester IS NULL OR current.requester = p_requester) THEN
                UPDATE runs r SET status = 'running', ready = false, expires_at = NULL, worker = p_worker,
                    lease_expires_at = p_lease_expires_at, attempts = r.attempts + 1, updated_at = p_at
                WHERE r.id = v_run
                RETURNING r.* INTO got;
            ELSIF now_ready THEN
                UPDATE runs SET ready = true WHERE id = v_run;
            END IF;
        END IF;
    END IF;
    INSERT INTO events (type, request_id, at, recipient, requester, session, run)
    VALUES (p_status, p_id, p_settled_at, v_recipient, v_requester, v_session, v_run);
    IF got.id IS NULL THEN
        RETURN QUERY SELECT true, NULL::runs;
        RETURN;
    END IF;
    INSERT INTO events (type, at, data, requester, session, run)
    VALUES ('run_claimed', p_at, interlock_run_data(got), got.requester, got.session, got.id);
    RETURN QUERY SELECT true, got;
END
$$;
