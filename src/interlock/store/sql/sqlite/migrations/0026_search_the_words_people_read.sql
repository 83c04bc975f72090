-- A search reads the words a person reads in a request, as the API says (`Query.text`):
-- its title and details, its asks' prompts and the labels, descriptions and titles in
-- them (options, form fields), and once answered every string of the answers and the
-- reason. The index held every string of the request's document and response: its id,
-- its times, its kind and status, the ask types and ids, the surface it was answered on.
-- So a search for `12` or `2026` found every request made in December 2026, one for
-- `pending` every request ever made (the document is kept as created), and each request
-- added words no one searches for (its times' microseconds) to the index and to
-- `search_terms`, where a short prefix then stood for too many words to be read one by
-- one. Rebuilt here from the requests, as the index is derived: every event so far taken in.

-- What a search reads of each request, in one place: the catch-up's `take_texts` and
-- `unindex_settled` read it, as the rebuild below does. `doc_text` is what a request is
-- indexed with while pending (its document does not change), `settled` whether it has a
-- response, `response_text` what that adds (with a space before it; '' while it has
-- none), `recipient` whom it is to (`x` and the name in hex: one token, whatever the
-- name). A document or response that is not JSON SQLite reads (a NaN, stored by an
-- earlier version) is indexed as its raw text.
CREATE VIEW search_texts (request_rowid, request_id, settled, doc_text, response_text, recipient) AS
SELECT r.rowid, r.id, r.response IS NOT NULL,
    CASE WHEN json_valid(r.doc)
        THEN ifnull(json_extract(r.doc, '$.title'), '') || ' ' || ifnull(json_extract(r.doc, '$.details'), '')
            || ' ' || ifnull((SELECT group_concat(value, ' ') FROM json_tree(r.doc, '$.asks')
                              WHERE type = 'text' AND key IN ('prompt', 'label', 'description', 'title')), '')
        ELSE r.doc END,
    CASE WHEN r.response IS NULL THEN ''
        WHEN json_valid(r.response)
        THEN ' ' || ifnull((SELECT group_concat(value, ' ') FROM json_tree(r.response, '$.answers')
                            WHERE type = 'text'), '')
            || ' ' || ifnull(json_extract(r.response, '$.reason'), '')
        ELSE ' ' || r.response END,
    CASE WHEN r.recipient IS NULL THEN '' ELSE 'x' || hex(r.recipient) END
FROM requests r;

INSERT INTO requests_text (requests_text) VALUES ('delete-all');
INSERT INTO requests_text (rowid, body, recipient)
SELECT request_rowid, doc_text || response_text, recipient FROM search_texts;

UPDATE derived SET event_id = (SELECT ifnull(max(id), 0) FROM events) WHERE name = 'search';

-- The words indexed now, each once (as migration 0023 first made them).
DELETE FROM search_terms;
CREATE VIRTUAL TABLE requests_text_words USING fts5vocab(requests_text, col);
INSERT INTO search_terms (term) SELECT DISTINCT term FROM requests_text_words WHERE col = 'body';
DROP TABLE requests_text_words;
