-- Web sessions: the cookie carries a random secret, only its SHA-256 is kept here, with
-- the token the person signed in with (revoking it ends the session) and the CSRF token
-- of the session's forms. `id` names the session in the event log (`signed_out`).
CREATE TABLE sessions (
    hash       TEXT PRIMARY KEY,
    id         TEXT NOT NULL UNIQUE,
    token      TEXT NOT NULL REFERENCES tokens (id),
    csrf       TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
);

CREATE INDEX sessions_by_token ON sessions (token);
CREATE INDEX sessions_by_expiry ON sessions (expires_at);
