-- One-time sign-in links (`interlock serve` prints one for the local person; email sends
-- them): only the SHA-256 of each link's secret is kept, with whom it signs in, until
-- when, and when it was used (a link opens one session, once).
CREATE TABLE signin_links (
    hash       text PRIMARY KEY,
    principal  text NOT NULL REFERENCES principals (name),
    created_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL,
    used_at    timestamptz
);

CREATE INDEX signin_links_by_expiry ON signin_links (expires_at);
