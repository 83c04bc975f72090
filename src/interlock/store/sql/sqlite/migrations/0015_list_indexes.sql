-- Every list pages by id, so each filter's index ends in `id`: a page is then one index
-- range read in order and cut at the page's size, never a sort of every row the filter
-- matches (with `(requester, status, id)`, an agent's list without a status sorted all
-- of that agent's requests). The pending requests to a person or from an agent have
-- partial indexes of their own, so an inbox reads only the few pending among many
-- settled. The other statuses, and the history's dates, are filtered along the
-- (recipient, id) range from the index itself (its `status` and `created_at`), so the
-- rows passed over are never read; a settlement rewrites the entry, as it did the
-- entries of the indexes these replace.
DROP INDEX requests_by_recipient;
DROP INDEX requests_by_requester;
DROP INDEX requests_by_channel;
CREATE INDEX requests_by_recipient ON requests (recipient, id, status, created_at) WHERE recipient IS NOT NULL;
CREATE INDEX requests_by_requester ON requests (requester, id, status) WHERE requester IS NOT NULL;
CREATE INDEX requests_by_channel ON requests (channel, id) WHERE channel IS NOT NULL;
CREATE INDEX requests_pending_to ON requests (recipient, id) WHERE status = 'pending' AND recipient IS NOT NULL;
CREATE INDEX requests_pending_from ON requests (requester, id) WHERE status = 'pending' AND requester IS NOT NULL;

-- The runs a person is asked about (the runs list of someone who asked nothing).
CREATE INDEX requests_runs_to ON requests (recipient, run) WHERE run IS NOT NULL AND recipient IS NOT NULL;

-- A person's deliveries of one status (their dead letters), in id order.
CREATE INDEX deliveries_by_recipient_status ON deliveries (recipient, status, id);
