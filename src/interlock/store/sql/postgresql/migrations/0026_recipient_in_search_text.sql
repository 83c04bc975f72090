-- A request's search text also holds its recipient, whole, as one word no search can
-- type: ' to ' and the name (a search's words never begin with a space). A person's
-- search for a rare word then reads, from the GIN index, only the matches that are
-- theirs (the word's and their name's entries intersected) instead of every match,
-- each one's request read to see whom it is for. Before, it was narrowed by a word of
-- the name, when one was rare enough: a name like `person-10` is the words `person` and
-- `-10`, which the dates in every request's text hold too, so a search of theirs for a
-- word in 0.3% of a million requests read the word's every match (17.9 ms at p99).
--
-- The word is added where the text is made, from the request's document as the catch-up
-- reads it.

-- A name longer than a word may be (2,047 bytes) is held by its MD5 instead.
CREATE FUNCTION interlock_recipient_word(recipient text) RETURNS tsvector
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN recipient IS NULL THEN ''::tsvector
        WHEN octet_length(recipient) > 2000 THEN array_to_tsvector(ARRAY[' to md5 ' || md5(recipient)])
        ELSE array_to_tsvector(ARRAY[' to ' || recipient])
    END
$$;

-- A request's search text: the words of its document and response, and its recipient's
-- (the document's `to`). The catch-up (`interlock_derive_search`) makes each text with it.
CREATE OR REPLACE FUNCTION interlock_request_text(doc json, response json) RETURNS tsvector
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT jsonb_to_tsvector('simple'::regconfig, d, '["string"]')
        || jsonb_to_tsvector('simple'::regconfig, coalesce(response::jsonb, '{}'::jsonb), '["string"]')
        || interlock_recipient_word(d ->> 'to')
    FROM (SELECT doc::jsonb AS d) AS parsed
$$;

-- The texts made before, each with its request's recipient added: the table is made
-- again (under the catch-up's lock, so none is derived meanwhile), in id order, as a
-- search in the page's order reads it, and its GIN index built whole, which is faster and
-- smaller than updating every row (at a million requests: an update in place left the
-- rows in the join's order, and a search checking requests in order 1.6x slower).
SELECT pg_advisory_xact_lock(7598390718262734182);
SET LOCAL maintenance_work_mem = '256MB';
ALTER TABLE request_texts RENAME TO request_texts_before;
ALTER INDEX request_texts_pkey RENAME TO request_texts_before_pkey;
ALTER INDEX request_texts_body RENAME TO request_texts_before_body;
CREATE TABLE request_texts (
    id   text PRIMARY KEY,
    body tsvector NOT NULL
);
INSERT INTO request_texts (id, body)
SELECT t.id, t.body || interlock_recipient_word(r.recipient)
FROM request_texts_before t LEFT JOIN requests r ON r.id = t.id
ORDER BY t.id;
CREATE INDEX request_texts_body ON request_texts USING gin (body);
DROP TABLE request_texts_before;
-- A search is read as the words' shares say (`pg_stats`): sampled now, not at autovacuum's
-- next turn.
ANALYZE request_texts;
