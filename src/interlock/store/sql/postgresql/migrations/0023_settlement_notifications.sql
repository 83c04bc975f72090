-- A settlement's notification carries the settlement: `[id, status, response]` as JSON,
-- on the same `interlock` channel as the bare notification every other write sends. A
-- process that waits on the request and holds its pending copy wakes its waiters from
-- that, without first reading the event log and the row (a round trip after the commit;
-- the event log is still read afterwards, in order, for everything else).
--
-- A transaction still sends one notification when it settles one request: the event's
-- bare one is left out once a settlement has sent its own (`interlock.notified`, a
-- setting of the transaction alone). One that settles several sends one each. A
-- settlement whose note would not fit in a notification (PostgreSQL takes under 8000
-- bytes) sends none: its event's bare notification, and the read after it, wake its
-- waiters as before.
--
-- What a notification carries can be heard by any role that may connect to this
-- database (LISTEN needs no privilege on the tables): keep interlock in a database of
-- its own, or its roles apart from ones that must not read the answers.
CREATE OR REPLACE FUNCTION interlock_pending_settled() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    v_note text;
BEGIN
    DELETE FROM pending_requests WHERE id = NEW.id;
    v_note := json_build_array(NEW.id, NEW.status, NEW.response)::text;
    IF octet_length(v_note) < 7900 THEN
        PERFORM pg_notify('interlock', v_note);
        PERFORM set_config('interlock.notified', 'yes', true);
    END IF;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION interlock_event_id() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(7598390718262734181);  -- 'interlock events'
    NEW.id := nextval('events_id_seq');
    IF current_setting('interlock.notified', true) IS DISTINCT FROM 'yes' THEN
        PERFORM pg_notify('interlock', '');  -- once per transaction: equal payloads fold
    END IF;
    RETURN NEW;
END
$$;
