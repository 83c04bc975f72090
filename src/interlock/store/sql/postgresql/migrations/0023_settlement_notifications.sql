-- A settlement's notification carries the settlement: `[id, status, response]` as JSON,
-- signed, on the same `interlock` channel as the bare notification every other write
-- sends. A process that waits on the request and holds its pending copy wakes its
-- waiters from that, without first reading the event log and the row (a round trip after
-- the commit; the event log is still read afterwards, in order, for everything else).
--
-- Any role that may connect to the database may NOTIFY on any channel, so a note is
-- believed only with its signature: the note's JSON is followed by the 64 hex digits of
-- sha256(key || sha256(key || note)), `key` the secret in `note_key`, which the store
-- makes when it opens (a fresh random key when the table is empty) and which only the
-- roles interlock runs as may read. Such a role can still LISTEN and read the answers:
-- keep interlock in a database of its own, or its roles apart from ones that must not.
--
-- A transaction still sends one notification when it settles one request: the event's
-- bare one is left out once a settlement has sent its note (`interlock.notified`, a
-- setting of the transaction alone). One that settles several sends one each. A
-- settlement whose note would not fit in a notification (PostgreSQL takes under 8000
-- bytes), or made while no key is stored, sends none: its event's bare notification,
-- and the read after it, wake its waiters as before.
CREATE TABLE note_key (
    one boolean PRIMARY KEY DEFAULT true CHECK (one),
    key bytea NOT NULL
);

REVOKE ALL ON note_key FROM PUBLIC;

CREATE OR REPLACE FUNCTION interlock_pending_settled() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    v_key bytea;
    v_note text;
BEGIN
    DELETE FROM pending_requests WHERE id = NEW.id;
    SELECT k.key INTO v_key FROM note_key k;
    IF v_key IS NOT NULL THEN
        v_note := json_build_array(NEW.id, NEW.status, NEW.response)::text;
        IF octet_length(v_note) < 7800 THEN
            PERFORM pg_notify('interlock', v_note || encode(
                sha256(v_key || sha256(v_key || convert_to(v_note, 'UTF8'))), 'hex'));
            PERFORM set_config('interlock.notified', 'yes', true);
        END IF;
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
