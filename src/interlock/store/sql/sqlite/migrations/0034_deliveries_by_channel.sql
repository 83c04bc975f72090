-- A claim of deliveries takes no more of one channel than a loop's share of its sends
-- (`claim_deliveries`' per_channel): it reads the pending ones channel by channel, each
-- channel's in the order they fall due, and counts those the loop holds from the leased
-- ones (a few: the sends under way), so that a channel with thousands waiting costs it no
-- more than one with none. (The status leads the first index, so that a planner without
-- statistics prefers it to `deliveries_by_status`.)
CREATE INDEX deliveries_pending_by_channel ON deliveries (status, channel, due_at, id) WHERE status = 'pending';
CREATE INDEX deliveries_leased ON deliveries (lease_owner, channel) WHERE lease_owner IS NOT NULL;
