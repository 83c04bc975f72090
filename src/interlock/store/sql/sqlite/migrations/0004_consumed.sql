-- An answered approval is spent once: the first consumer sets these two (a conditional
-- update, with a `consumed` event in the same transaction), and nobody can after it.
ALTER TABLE requests ADD COLUMN consumed_at INTEGER;
ALTER TABLE requests ADD COLUMN consumed_by TEXT;
