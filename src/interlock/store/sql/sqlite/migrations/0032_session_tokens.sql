-- A token the web inbox makes for one session (a sign-in link's; nobody holds its secret)
-- is deleted once that session is signed out or has run out: each sign-in had left one
-- more live token behind.
ALTER TABLE tokens ADD COLUMN for_session INTEGER NOT NULL DEFAULT 0;
