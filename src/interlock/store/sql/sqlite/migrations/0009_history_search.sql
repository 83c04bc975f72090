-- Full-text search over requests (the web inbox's history): every text of a request
-- (title, details, prompts, options) and, once it settles, of its response (answers,
-- reason, who), in an FTS5 index kept by triggers. Its rows share the requests' rowids:
-- requests are never deleted (a deletion would take its row along) nor vacuumed. A
-- document that is not valid JSON (a row written by hand, say) is indexed as it is.
CREATE VIRTUAL TABLE requests_text USING fts5 (body, tokenize = 'unicode61 remove_diacritics 2');

CREATE TRIGGER requests_text_created AFTER INSERT ON requests BEGIN
    INSERT INTO requests_text (rowid, body) VALUES (new.rowid,
        CASE WHEN json_valid(new.doc)
            THEN (SELECT group_concat(value, ' ') FROM json_tree(new.doc) WHERE type = 'text')
            ELSE new.doc END);
END;

CREATE TRIGGER requests_text_settled AFTER UPDATE OF response ON requests WHEN new.response IS NOT NULL BEGIN
    UPDATE requests_text SET body =
        CASE WHEN json_valid(new.doc)
            THEN (SELECT group_concat(value, ' ') FROM json_tree(new.doc) WHERE type = 'text')
            ELSE new.doc END || ' ' ||
        CASE WHEN json_valid(new.response)
            THEN coalesce((SELECT group_concat(value, ' ') FROM json_tree(new.response) WHERE type = 'text'), '')
            ELSE new.response END
    WHERE rowid = new.rowid;
END;

CREATE TRIGGER requests_text_deleted AFTER DELETE ON requests BEGIN
    DELETE FROM requests_text WHERE rowid = old.rowid;
END;

INSERT INTO requests_text (rowid, body)
SELECT r.rowid,
    CASE WHEN json_valid(r.doc)
        THEN (SELECT group_concat(value, ' ') FROM json_tree(r.doc) WHERE type = 'text')
        ELSE r.doc END || ' ' ||
    CASE WHEN r.response IS NULL THEN ''
        WHEN json_valid(r.response)
        THEN coalesce((SELECT group_concat(value, ' ') FROM json_tree(r.response) WHERE type = 'text'), '')
        ELSE r.response END
FROM requests r;

-- The history lists settled requests newest first, often between two dates.
CREATE INDEX requests_by_created ON requests (created_at);
