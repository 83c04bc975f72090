-- The words of the search index, each once. A search's word is a prefix: FTS5 merges the
-- list of every indexed word it begins, whole, before the first match comes out (about
-- 5 ms for a word in 8% of a million requests), where one word's own list is read newest
-- first and stops at the page. So a search looks up here the words its prefix stands for
-- and, when they are few, asks for those words instead. Kept with the index itself, in
-- the same catch-up transaction (`_derive_chunk`); a word no text holds any more stays,
-- and matches nothing.
CREATE TABLE search_terms (term TEXT PRIMARY KEY) WITHOUT ROWID;

-- The words indexed so far (reading every word's list once: a few seconds a million requests).
CREATE VIRTUAL TABLE requests_text_words USING fts5vocab(requests_text, col);
INSERT INTO search_terms (term) SELECT DISTINCT term FROM requests_text_words WHERE col = 'body';
DROP TABLE requests_text_words;
