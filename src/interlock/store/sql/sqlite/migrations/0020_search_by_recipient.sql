-- A person's search of their history read every request with the word, everyone's, and
-- then kept theirs: a common word cost its matches across the whole store. The index now
-- holds whom each request is to, in a column of its own (`recipient`: `x` and the name in
-- hex, one token whatever the name), so a person's search is the index's intersection of
-- the word and the person. Rebuilt here from the requests, as the index is derived: every
-- request's texts, then its response's (the same expression as the catch-up's `take_texts`).
DROP TABLE requests_text;

CREATE VIRTUAL TABLE requests_text USING fts5 (
    body, recipient, tokenize = 'unicode61 remove_diacritics 2', content = '', columnsize = 0
);

INSERT INTO requests_text (rowid, body, recipient)
SELECT r.rowid,
    CASE WHEN json_valid(r.doc)
        THEN (SELECT group_concat(value, ' ') FROM json_tree(r.doc) WHERE type = 'text')
        ELSE r.doc END ||
    CASE WHEN r.response IS NULL THEN ''
        WHEN json_valid(r.response)
        THEN ' ' || coalesce((SELECT group_concat(value, ' ') FROM json_tree(r.response) WHERE type = 'text'), '')
        ELSE ' ' || r.response END,
    CASE WHEN r.recipient IS NULL THEN '' ELSE 'x' || hex(r.recipient) END
FROM requests r;

UPDATE derived SET event_id = (SELECT ifnull(max(id), 0) FROM events) WHERE name = 'search';
