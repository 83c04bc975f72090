-- Full-text search over requests (the web inbox's history): every text of a request
-- (title, details, prompts, options) and of its response (answers, reason, who), as a
-- tsvector of the 'simple' configuration (no stemming: any language) in a GIN index on
-- the same expression the search uses (`interlock_request_text`).
CREATE FUNCTION interlock_request_text(doc json, response json) RETURNS tsvector
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT jsonb_to_tsvector('simple'::regconfig, doc::jsonb, '["string"]')
        || jsonb_to_tsvector('simple'::regconfig, coalesce(response::jsonb, '{}'::jsonb), '["string"]')
$$;

CREATE INDEX requests_text ON requests USING gin (interlock_request_text(doc, response));

-- The history lists settled requests newest first, often between two dates.
CREATE INDEX requests_by_created ON requests (created_at);
