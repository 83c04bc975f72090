-- The two filters of the API's lists that had no index of their own: the approvals, and
-- one agent's requests (`kind=approval`, `agent=...`). Without one, a list of them read
-- along every request until its page was full, or to the end when few or none matched
-- (an admin's list of the approvals of a million requests that held none: 370-390 ms).
-- Partial: a question, or a request that names no agent, writes neither; a settlement
-- changes neither column, so it writes neither either. A list of questions still reads
-- along the ids (questions are most requests, so its page fills soon).
CREATE INDEX requests_approvals ON requests (id) WHERE kind = 'approval';
CREATE INDEX requests_by_agent ON requests (agent, id) WHERE agent IS NOT NULL;
