-- A run started `exclusive` holds its session (a LangGraph thread, say): while it has not
-- ended, no other exclusive run of its agent (started by the same requester: through a
-- server, each caller's names are its own) is stored on that session. Two runs of one
-- graph on one thread at once write their checkpoints over each other's. The start looks
-- for a run there that has not ended (any run, from before too) in its insert; this index
-- decides between two starts at once, which both find none: the second insert waits for
-- the first to commit, then stores nothing. Runs from before hold no session, so the
-- index starts empty whatever they are.
ALTER TABLE runs ADD COLUMN sole boolean NOT NULL DEFAULT false;

CREATE UNIQUE INDEX runs_one_unended_per_session ON runs (agent, session, coalesce(requester, ''))
    WHERE sole AND status IN ('running', 'waiting_for_input', 'waiting_for_approval');
