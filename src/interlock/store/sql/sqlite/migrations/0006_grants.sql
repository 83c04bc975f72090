-- Capability grants as issued: by an answer that chose and echoed them (`request_id`,
-- `ask_id`, `option_id` say which choice), or given directly (a delegation, no request).
-- `issuer` is the person who consented, `audience` who may use it; `resource` and
-- `ability` are the grant's `with` and `can`. Times are microseconds since the epoch.
CREATE TABLE grants (
    id         TEXT PRIMARY KEY,
    resource   TEXT NOT NULL,
    ability    TEXT NOT NULL,
    issuer     TEXT,
    audience   TEXT,
    issued_at  INTEGER NOT NULL,
    expires_at INTEGER,
    request_id TEXT REFERENCES requests (id),
    ask_id     TEXT,
    option_id  TEXT,
    revoked_at INTEGER,
    revoked_by TEXT
);

CREATE INDEX grants_by_audience ON grants (audience, ability, resource);
CREATE INDEX grants_by_issuer ON grants (issuer, id);
CREATE INDEX grants_by_request ON grants (request_id);
