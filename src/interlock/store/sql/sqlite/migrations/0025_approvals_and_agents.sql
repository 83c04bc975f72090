-- The two filters of the API's lists that had no index of their own: the approvals, and
-- one agent's requests (`kind=approval`, `agent=...`). Without one, a list of them read
-- along every request until its page was full, or to the end when few or none matched
-- (an admin's list of the approvals of a million requests that held none: 370-540 ms).
-- Partial: a question, or a request that names no agent, writes neither; a settlement
-- changes neither column, so it writes neither either. A list of questions still reads
-- along the ids (questions are most requests, so its page fills soon).
CREATE INDEX requests_approvals ON requests (id) WHERE kind = 'approval';
CREATE INDEX requests_by_agent ON requests (agent, id) WHERE agent IS NOT NULL;

-- A person's or an agent's approvals are read along their own index, and SQLite, which
-- keeps no statistics, cannot tell whether the approvals' index would be narrower: their
-- indexes carry the kind, so a request that is not an approval is passed over from its
-- index entry, its row unread (a person's approvals, none among 10,000 requests: 19 ->
-- 1 ms at a million requests).
DROP INDEX requests_by_recipient;
CREATE INDEX requests_by_recipient
    ON requests (recipient, id, status, created_at, settled_at, settled_by, agent, requester, kind)
    WHERE recipient IS NOT NULL;
DROP INDEX requests_by_requester;
CREATE INDEX requests_by_requester ON requests (requester, id, status, kind) WHERE requester IS NOT NULL;
