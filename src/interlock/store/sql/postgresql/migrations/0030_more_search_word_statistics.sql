-- How a search is read is chosen from the shares of its words that ANALYZE lists
-- (`pg_stats.most_common_elems` of the search texts, read by `PostgresStore._text_plan`).
-- At the default statistics target it lists about 450 words, down to about 0.2% of the
-- requests: a prefix that begins ten words of 0.2-0.3% each (`approve`: approves,
-- approved, ...) was summed from however many of them the sample happened to list, as
-- little as 0.7%, taken for rare and read from the GIN index (6 ms at a million
-- requests) instead of in order (2 ms). At 1,000 it lists about 2,000 words, down to
-- about 0.07%; ANALYZE of a million texts takes about 3 s instead of 0.7 s.
ALTER TABLE request_texts ALTER COLUMN body SET STATISTICS 1000;
ANALYZE request_texts;
