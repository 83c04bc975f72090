-- A search reads the words a person reads in a request, as the API says (`Query.text`):
-- its title and details, its asks' prompts and the labels, descriptions and titles in
-- them (options, form fields), and once answered every string of the answers and the
-- reason. The text held every string of the request's document and response: its id,
-- its times, its kind and status, the ask types and ids, the surface it was answered on.
-- So a search for `12` or `2026` found every request made in December 2026, one for
-- `question` nearly every request, and each request's times put words no one searches
-- for into the GIN index (a name like `person-10` shared its `-10` with every date).
-- The recipient's word stays (migration 0026).
CREATE OR REPLACE FUNCTION interlock_request_text(doc json, response json) RETURNS tsvector
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT jsonb_to_tsvector(
            'simple'::regconfig,
            jsonb_build_array(
                d -> 'title',
                d -> 'details',
                jsonb_path_query_array(
                    d,
                    'strict $.asks.** ? (@.type() == "object").keyvalue() ? (@.value.type() == "string"
                        && (@.key == "prompt" || @.key == "label" || @.key == "description" || @.key == "title")).value',
                    '{}', true),
                jsonb_path_query_array(r, 'strict $.answers.** ? (@.type() == "string")', '{}', true),
                r -> 'reason'),
            '["string"]')
        || interlock_recipient_word(d ->> 'to')
    FROM (SELECT doc::jsonb AS d, coalesce(response::jsonb, '{}'::jsonb) AS r) AS parsed
$$;

-- The texts made before, made again (under the catch-up's lock, so none is derived
-- meanwhile) from the requests as they are now, in id order, as a search in the page's
-- order reads them, with their indexes built whole (see migration 0026).
SELECT pg_advisory_xact_lock(7598390718262734182);
SET LOCAL maintenance_work_mem = '256MB';
CREATE TEMP TABLE request_texts_again ON COMMIT DROP AS
SELECT t.id, interlock_request_text(r.doc, r.response) AS body
FROM request_texts t JOIN requests r ON r.id = t.id;
DROP INDEX request_texts_to;
DROP INDEX request_texts_body;
TRUNCATE request_texts;
INSERT INTO request_texts (id, body) SELECT id, body FROM request_texts_again ORDER BY id;
CREATE INDEX request_texts_body ON request_texts USING gin (body) WITH (gin_pending_list_limit = 256);
CREATE INDEX request_texts_to ON request_texts (interlock_text_recipient(body), id);
ANALYZE request_texts;
