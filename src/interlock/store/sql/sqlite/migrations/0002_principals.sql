-- Humans and agents, and their bearer tokens (only a SHA-256 of each secret is kept).
CREATE TABLE principals (
    name       TEXT PRIMARY KEY,
    kind       TEXT NOT NULL CHECK (kind IN ('human', 'agent')),
    owner      TEXT REFERENCES principals (name),
    created_at INTEGER NOT NULL
);

CREATE TABLE tokens (
    id         TEXT PRIMARY KEY,
    hash       TEXT NOT NULL UNIQUE,
    principal  TEXT NOT NULL REFERENCES principals (name),
    created_at INTEGER NOT NULL,
    revoked_at INTEGER
);

CREATE INDEX tokens_by_principal ON tokens (principal);
