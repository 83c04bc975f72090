-- A park-and-resume cycle with fewer writes and statements; its events, their order and
-- data are as before.
--
-- * An answer that hands its run to a waiting worker (`interlock_settle_claiming`) writes
--   the run's row once, straight from parked to running, instead of marking it ready
--   (the settle trigger) and then claiming it: each write of a run's row is a new version
--   in every one of its indexes. The trigger steps aside for it (`interlock.claiming`, set
--   for the settlement's statement only) and the function does the trigger's work itself,
--   in the same order: the request row, then the run's row, then the event log's lock.
-- * Ending a run is one conditional update, not a lock and then an update.
-- * A run started parked stores its run, requests and waits first and its events last:
--   the event log's lock is held for those inserts and the commit only (as every other
--   writer does), not while its requests are stored, and a channel's lock is taken
--   before the event log's, as closing a channel takes them.

DROP TRIGGER runs_ready_on_settle ON requests;
CREATE TRIGGER runs_ready_on_settle AFTER UPDATE OF status ON requests
    FOR EACH ROW WHEN (OLD.status = 'pending' AND NEW.status <> 'pending' AND NEW.run IS NOT NULL
                       AND current_setting('interlock.claiming', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION interlock_run_request_settled();

-- The requests a parked run waits on are read from its locked row (`waiting_on` holds
-- the ids `run_waits` has), each looked up by key, rather than by a join of `run_waits`
-- and `requests`: a function's plans are made at a session's first call, with the
-- tables' sizes then, and kept; a join planned on small tables scans them whole.
CREATE OR REPLACE FUNCTION interlock_run_request_settled() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    current runs;
    waits text[];
BEGIN
    SELECT * INTO current FROM runs WHERE id = NEW.run FOR UPDATE;
    IF NOT FOUND OR current.ready OR current.status NOT IN ('waiting_for_input', 'waiting_for_approval') THEN
        RETURN NULL;
    END IF;
    waits := ARRAY(SELECT json_array_elements_text(current.waiting_on));
    IF NEW.id = ANY(waits)
       AND NOT EXISTS (SELECT 1 FROM requests r WHERE r.id = ANY(waits) AND r.status = 'pending') THEN
        UPDATE runs SET ready = true WHERE id = NEW.run;
    END IF;
    RETURN NULL;
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

CREATE OR REPLACE FUNCTION interlock_finish_run(
    p_id text, p_status text, p_result json, p_error text, p_reason text, p_at timestamptz, p_worker text
) RETURNS SETOF runs LANGUAGE plpgsql AS $$
DECLARE
    ended runs;
BEGIN
    UPDATE runs SET status = p_status, result = p_result, error = p_error, terminal_reason = p_reason,
        updated_at = p_at, expires_at = NULL, ready = false, worker = NULL, lease_expires_at = NULL
    WHERE id = p_id AND status NOT IN ('completed', 'failed', 'cancelled')
      AND (p_worker IS NULL OR (status = 'running' AND worker = p_worker))
    RETURNING * INTO ended;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    INSERT INTO events (type, at, data, requester, session, run)
    VALUES ('run_' || p_status, p_at, interlock_run_data(ended), ended.requester, ended.session, ended.id);
    RETURN NEXT ended;
END
$$;

-- As `interlock_insert` for each request, inline: a closed channel is checked as for any
-- create, and a request id stored already is taken as created (a repeated call), without
-- its event.
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
    INSERT INTO run_waits (run_id, request_id) SELECT p_id, unnest(p_ids) ON CONFLICT DO NOTHING;
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

-- A settlement adds its response's words to the request's search text instead of
-- making the whole text again: `interlock_request_text(doc, response)` is the doc's
-- vector followed by the response's, and the stored one is the doc's (the response was
-- NULL when the request was stored), so appending gives the same vector without
-- reading and splitting the request's doc a second time.
CREATE OR REPLACE FUNCTION interlock_pending_settled() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM pending_requests WHERE id = NEW.id;
    IF NEW.response IS NOT NULL THEN
        UPDATE request_texts
        SET body = body || jsonb_to_tsvector('simple'::regconfig, NEW.response::jsonb, '["string"]')
        WHERE id = NEW.id;
    END IF;
    RETURN NULL;
END
$$;
