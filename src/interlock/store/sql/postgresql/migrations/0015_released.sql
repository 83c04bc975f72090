-- A request is released once: the first `release` sets this (a conditional update, the
-- row lock making one caller win), on whichever node it runs, so a second release
-- anywhere says nothing was dropped. No index reads it: setting it stays a HOT update.
ALTER TABLE requests ADD COLUMN released_at timestamptz;
