-- A yes/no answer is found by the word a person reads in the history: `yes` or `no`. A
-- search read only the strings of the answers, so a confirm's `true` (shown as "Yes") and
-- an approval's were found by no word at all. The text of 0031 again, with each true or
-- false in the answers read as `yes` or `no`, and the texts made again from it.
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
                (SELECT coalesce(jsonb_agg(CASE WHEN b = 'true'::jsonb THEN 'yes' ELSE 'no' END), '[]'::jsonb)
                 FROM jsonb_path_query(r, 'strict $.answers.** ? (@.type() == "boolean")', '{}', true) AS b),
                r -> 'reason'),
            '["string"]')
        || interlock_recipient_word(d ->> 'to')
    FROM (SELECT doc::jsonb AS d, coalesce(response::jsonb, '{}'::jsonb) AS r) AS parsed
$$;

-- The texts made before, made again (as in 0031).
SELECT pg_advisory_xact_lock(7598390718262734182);
SET LOCAL maintenance_work_mem = '256MB';
CREATE TEMP TABLE request_texts_remade ON COMMIT DROP AS
SELECT t.id, interlock_request_text(r.doc, r.response) AS body
FROM request_texts t JOIN requests r ON r.id = t.id;
DROP INDEX request_texts_to;
DROP INDEX request_texts_body;
TRUNCATE request_texts;
INSERT INTO request_texts (id, body) SELECT id, body FROM request_texts_remade ORDER BY id;
CREATE INDEX request_texts_body ON request_texts USING gin (body) WITH (gin_pending_list_limit = 256);
CREATE INDEX request_texts_to ON request_texts (interlock_text_recipient(body), id);
ANALYZE request_texts;
