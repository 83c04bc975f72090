-- A request is released once: the first `release` sets this (a conditional update), in
-- whichever process it runs, so a second release anywhere says nothing was dropped.
ALTER TABLE requests ADD COLUMN released_at INTEGER;
