-- A token the web inbox makes for one session (a sign-in link's; nobody holds its secret)
-- is deleted once that session is signed out or has run out: each sign-in had left one
-- more live token behind.
ALTER TABLE tokens ADD COLUMN for_session boolean NOT NULL DEFAULT false;

-- Ending a session (signing out) deletes the token made for it, as running out does when
-- the next session starts (`delete_expired_sessions`).
CREATE OR REPLACE FUNCTION interlock_end_session(p_hash text, p_at timestamptz)
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
    DELETE FROM tokens t
    WHERE t.id = ended.token AND t.for_session AND NOT EXISTS (SELECT 1 FROM sessions s WHERE s.token = t.id);
END
$$;
