-- One-click answer links (email) are single-use: the first use of each is kept here, by the
-- link's id (the SHA-256 of its signed claim, never the link itself), with who used it and
-- when, so a second click says so. Kept until the link would have expired anyway.
CREATE TABLE answer_link_uses (
    link       text PRIMARY KEY,
    request_id text NOT NULL,
    used_by    text NOT NULL,
    used_at    timestamptz NOT NULL,
    expires_at timestamptz NOT NULL
);

CREATE INDEX answer_link_uses_by_expiry ON answer_link_uses (expires_at);
