-- A yes/no answer is found by the word a person reads in the history: `yes` or `no`. A
-- search read only the strings of the answers, so a confirm's `true` (shown as "Yes") and
-- an approval's were found by no word at all. The view of 0026 again, with each true or
-- false in the answers read as `yes` or `no`, and the index rebuilt from it (it is derived).
DROP VIEW search_texts;
CREATE VIEW search_texts (request_rowid, request_id, settled, doc_text, response_text, recipient) AS
SELECT r.rowid, r.id, r.response IS NOT NULL,
    CASE WHEN json_valid(r.doc)
        THEN ifnull(json_extract(r.doc, '$.title'), '') || ' ' || ifnull(json_extract(r.doc, '$.details'), '')
            || ' ' || ifnull((SELECT group_concat(value, ' ') FROM json_tree(r.doc, '$.asks')
                              WHERE type = 'text' AND key IN ('prompt', 'label', 'description', 'title')), '')
        ELSE r.doc END,
    CASE WHEN r.response IS NULL THEN ''
        WHEN json_valid(r.response)
        THEN ' ' || ifnull((SELECT group_concat(CASE type WHEN 'true' THEN 'yes' WHEN 'false' THEN 'no' ELSE value END, ' ')
                            FROM json_tree(r.response, '$.answers')
                            WHERE type IN ('text', 'true', 'false')), '')
            || ' ' || ifnull(json_extract(r.response, '$.reason'), '')
        ELSE ' ' || r.response END,
    CASE WHEN r.recipient IS NULL THEN '' ELSE 'x' || hex(r.recipient) END
FROM requests r;

INSERT INTO requests_text (requests_text) VALUES ('delete-all');
INSERT INTO requests_text (rowid, body, recipient)
SELECT request_rowid, doc_text || response_text, recipient FROM search_texts;

UPDATE derived SET event_id = (SELECT ifnull(max(id), 0) FROM events) WHERE name = 'search';

-- The words indexed now, each once (as 0026 made them).
DELETE FROM search_terms;
CREATE VIRTUAL TABLE requests_text_words USING fts5vocab(requests_text, col);
INSERT INTO search_terms (term) SELECT DISTINCT term FROM requests_text_words WHERE col = 'body';
DROP TABLE requests_text_words;
