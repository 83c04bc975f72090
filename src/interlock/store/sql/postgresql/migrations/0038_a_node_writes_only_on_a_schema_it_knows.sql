-- A node left running while a later version migrates the database writes nothing more:
-- the later schema may do itself what this version's writes do by hand (a trigger of its
-- own writing an event this version writes too), give its functions another meaning, or
-- no longer have what this version writes. Each connection of a store says the newest
-- migration its version knows (the setting `interlock.schema_version`, made with the
-- connection); a write on any table a store writes is refused, before its first row, when
-- that is older than the newest migration applied: SQLSTATE IL001, the unknown migrations
-- in its DETAIL. The statement fails and its transaction rolls back. A connection without
-- the setting (psql, an operator's tools, a version before this one) writes as before.

-- The guard, with the newest migration applied written into it as a constant (reading it
-- from `interlock_migrations` took several microseconds a statement; this, about one):
-- rewritten by `interlock_keep_schema_guard` whenever `interlock_migrations` changes, so
-- a later migration keeps it current without a word about it (its row is recorded in the
-- migration's own transaction).
CREATE FUNCTION interlock_keep_schema_guard() RETURNS void LANGUAGE plpgsql AS $keeper$
BEGIN
    EXECUTE replace($guard$
CREATE OR REPLACE FUNCTION interlock_refuse_unknown_schema() RETURNS trigger LANGUAGE plpgsql AS $body$
DECLARE
    known integer;
    unknown text;
BEGIN
    IF nullif(current_setting('interlock.schema_version', true), '')::integer < {newest} THEN
        known := current_setting('interlock.schema_version')::integer;
        SELECT string_agg(lpad(m.version::text, 4, '0') || '_' || m.name, ', ' ORDER BY m.version) INTO unknown
        FROM interlock_migrations m WHERE m.version > known;
        RAISE EXCEPTION 'a later version of interlock migrated this database: this connection''s version knows migrations 1 to %, not %', known, unknown
            USING ERRCODE = 'IL001', DETAIL = unknown,
                  HINT = 'The write was refused and changed nothing: restart the process on the later version.';
    END IF;
    RETURN NULL;
END
$body$
$guard$, '{newest}', (SELECT coalesce(max(version), 0) FROM interlock_migrations)::text);
END
$keeper$;

CREATE FUNCTION interlock_migrations_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM interlock_keep_schema_guard();
    RETURN NULL;
END
$$;

CREATE TRIGGER keep_schema_guard AFTER INSERT OR UPDATE OR DELETE ON interlock_migrations
    FOR EACH STATEMENT EXECUTE FUNCTION interlock_migrations_changed();

SELECT interlock_keep_schema_guard();

-- Every table a store's statement or server function writes. Those written only by the
-- triggers of these (pending_requests, settled_requests) or along with one of them
-- (request_texts, with `derived`) need none: the statement that writes them is refused.
-- The outbox gets its rows from the events' trigger; its claims update it.
DO $$
DECLARE
    written text;
BEGIN
    FOREACH written IN ARRAY ARRAY[
        'requests', 'events', 'runs', 'followups', 'closed_channels', 'claims', 'views',
        'grants', 'derived', 'deliveries', 'answer_link_uses', 'principals', 'teams',
        'team_members', 'tokens', 'sessions', 'signin_links', 'approval_policies',
        'settings', 'secret_key_fingerprint', 'note_key'
    ] LOOP
        EXECUTE format(
            'CREATE TRIGGER refuse_unknown_schema BEFORE INSERT OR UPDATE OR DELETE ON %I '
            'FOR EACH STATEMENT EXECUTE FUNCTION interlock_refuse_unknown_schema()',
            written
        );
    END LOOP;
END
$$;
CREATE TRIGGER refuse_unknown_schema BEFORE UPDATE OR DELETE ON outbox
    FOR EACH STATEMENT EXECUTE FUNCTION interlock_refuse_unknown_schema();
