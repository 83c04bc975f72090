-- An exclusive start looks for a run of its agent and requester on its session that has
-- not ended (`insert_sole_run`, `unended_run_on_session`): any run, exclusive or not, from
-- before too. The planner read that along `runs_by_session`, every run the session ever
-- had (one more on each turn of a chat thread), or scanned the whole table for the insert;
-- here it is one entry, whatever the session's history. Only the unended runs with a
-- session are in it: a run without one (a parked run of a worker, say) writes no entry,
-- and a run leaves it when it ends.
CREATE INDEX runs_unended_by_session ON runs (session, agent, coalesce(requester, ''), created_at, id)
    WHERE session IS NOT NULL AND status IN ('running', 'waiting_for_input', 'waiting_for_approval');
