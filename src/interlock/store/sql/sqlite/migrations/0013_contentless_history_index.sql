-- The history's full-text index keeps no copy of the text it indexes (a contentless FTS5
-- table) and no per-row sizes (nothing ranks by them): each create and settlement writes
-- about four pages fewer. A contentless index forgets a row's words when told the text
-- they came from, so the triggers compute the old text again from the row as it was,
-- with the same expression that indexed it: the request's texts, then its response's.
DROP TRIGGER requests_text_created;
DROP TRIGGER requests_text_settled;
DROP TRIGGER requests_text_deleted;
DROP TABLE requests_text;

CREATE VIRTUAL TABLE requests_text USING fts5 (
    body, tokenize = 'unicode61 remove_diacritics 2', content = '', columnsize = 0
);

CREATE TRIGGER requests_text_created AFTER INSERT ON requests BEGIN
    INSERT INTO requests_text (rowid, body) VALUES (new.rowid,
        CASE WHEN json_valid(new.doc)
            THEN (SELECT group_concat(value, ' ') FROM json_tree(new.doc) WHERE type = 'text')
            ELSE new.doc END ||
        CASE WHEN new.response IS NULL THEN ''
            WHEN json_valid(new.response)
            THEN ' ' || coalesce((SELECT group_concat(value, ' ') FROM json_tree(new.response) WHERE type = 'text'), '')
            ELSE ' ' || new.response END);
END;

CREATE TRIGGER requests_text_settled AFTER UPDATE OF response ON requests WHEN new.response IS NOT NULL BEGIN
    INSERT INTO requests_text (requests_text, rowid, body) VALUES ('delete', old.rowid,
        CASE WHEN json_valid(old.doc)
            THEN (SELECT group_concat(value, ' ') FROM json_tree(old.doc) WHERE type = 'text')
            ELSE old.doc END ||
        CASE WHEN old.response IS NULL THEN ''
            WHEN json_valid(old.response)
            THEN ' ' || coalesce((SELECT group_concat(value, ' ') FROM json_tree(old.response) WHERE type = 'text'), '')
            ELSE ' ' || old.response END);
    INSERT INTO requests_text (rowid, body) VALUES (new.rowid,
        CASE WHEN json_valid(new.doc)
            THEN (SELECT group_concat(value, ' ') FROM json_tree(new.doc) WHERE type = 'text')
            ELSE new.doc END || ' ' ||
        CASE WHEN json_valid(new.response)
            THEN coalesce((SELECT group_concat(value, ' ') FROM json_tree(new.response) WHERE type = 'text'), '')
            ELSE new.response END);
END;

CREATE TRIGGER requests_text_deleted AFTER DELETE ON requests BEGIN
    INSERT INTO requests_text (requests_text, rowid, body) VALUES ('delete', old.rowid,
        CASE WHEN json_valid(old.doc)
            THEN (SELECT group_concat(value, ' ') FROM json_tree(old.doc) WHERE type = 'text')
            ELSE old.doc END ||
        CASE WHEN old.response IS NULL THEN ''
            WHEN json_valid(old.response)
            THEN ' ' || coalesce((SELECT group_concat(value, ' ') FROM json_tree(old.response) WHERE type = 'text'), '')
            ELSE ' ' || old.response END);
END;

INSERT INTO requests_text (rowid, body)
SELECT r.rowid,
    CASE WHEN json_valid(r.doc)
        THEN (SELECT group_concat(value, ' ') FROM json_tree(r.doc) WHERE type = 'text')
        ELSE r.doc END ||
    CASE WHEN r.response IS NULL THEN ''
        WHEN json_valid(r.response)
        THEN ' ' || coalesce((SELECT group_concat(value, ' ') FROM json_tree(r.response) WHERE type = 'text'), '')
        ELSE ' ' || r.response END
FROM requests r;
