-- Web sessions: the cookie carries a random secret, only its SHA-256 is kept here, with
-- the token the person signed in with (revoking it ends the session) and the CSRF token
-- of the session's forms. `id` names the session in the event log (`signed_out`).
CREATE TABLE sessions (
    hash       text PRIMARY KEY,
    id         text NOT NULL UNIQUE,
    token      text NOT NULL REFERENCES tokens (id),
    csrf       text NOT NULL,
    created_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL
);

CREATE INDEX sessions_by_token ON sessions (token);
CREATE INDEX sessions_by_expiry ON sessions (expires_at);

-- Revoke one token (`p_id`) or every token of a principal (`p_principal`), end the web
-- sessions opened with them, and append a `token_revoked` event naming them, so every
-- node ends the streams they opened. How many tokens it revoked.
CREATE FUNCTION interlock_revoke_tokens(p_id text, p_principal text, p_at timestamptz)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    ids text[];
    holder text;
BEGIN
    WITH revoked AS (
        UPDATE tokens t SET revoked_at = p_at
        WHERE t.revoked_at IS NULL AND (t.id = p_id OR t.principal = p_principal)
        RETURNING t.id, t.principal
    ) SELECT array_agg(r.id ORDER BY r.id), min(r.principal) INTO ids, holder FROM revoked r;
    IF ids IS NULL THEN
        RETURN 0;
    END IF;
    DELETE FROM sessions s WHERE s.token = ANY (ids);
    INSERT INTO events (type, at, data) VALUES (
        'token_revoked', p_at,
        json_build_object('principal', holder, 'tokens', to_json(ids), 'all', p_principal IS NOT NULL)
    );
    RETURN cardinality(ids);
END
$$;

-- End a web session (sign-out): delete it and append a `signed_out` event naming it, so
-- every node ends the streams it opened. The session's id and principal, or no row.
CREATE FUNCTION interlock_end_session(p_hash text, p_at timestamptz)
RETURNS TABLE (id text, principal text, kind text, owner text, token text, csrf text, expires_at timestamptz)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    ended record;
BEGIN
    DELETE FROM sessions s WHERE s.hash = p_hash
    RETURNING s.id, s.token, s.csrf, s.expires_at INTO ended;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    RETURN QUERY SELECT ended.id, p.name, p.kind, p.owner, ended.token, ended.csrf, ended.expires_at
        FROM tokens t JOIN principals p ON p.name = t.principal
        WHERE t.id = ended.token AND t.revoked_at IS NULL;
    IF FOUND THEN
        INSERT INTO events (type, at, data)
        SELECT 'signed_out', p_at, json_build_object('principal', t.principal, 'session', ended.id)
        FROM tokens t WHERE t.id = ended.token;
    END IF;
END
$$;
