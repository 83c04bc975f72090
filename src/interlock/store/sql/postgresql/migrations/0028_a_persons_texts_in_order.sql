-- A person's search for a common word reads their requests newest first and checks each
-- one's text until the page is full: for a word in 3% of the requests, about a thousand
-- requests for a page of 25. Each check was a visit to the request's row (is it settled?)
-- and a lookup of its text by id, five pages for every request read (at a million
-- requests, 3.8 ms p50 and up to 7 ms). The texts themselves hold whom each request is to
-- (its first word since migration 0026: ' to ' and the name, and a space sorts before
-- every character a word of the parser can begin with), so an index of that word and the
-- id gives a person's texts in id order: one page for each request read, and the request
-- itself read only for a match.
CREATE FUNCTION interlock_text_recipient(body tsvector) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN starts_with((tsvector_to_array(body))[1], ' to ') THEN (tsvector_to_array(body))[1] END
$$;

SET LOCAL maintenance_work_mem = '256MB';
CREATE INDEX request_texts_to ON request_texts (interlock_text_recipient(body), id);

-- The GIN index takes new texts into a pending list that every search through the index
-- reads whole, until it grows past this limit (4 MB by default, about 3,000 texts: 1 ms of
-- every search at a million requests) and is merged in. The catch-up that adds them now
-- merges them in smaller batches.
ALTER INDEX request_texts_body SET (gin_pending_list_limit = 256);

ANALYZE request_texts;  -- the statistics of the new index's expression
