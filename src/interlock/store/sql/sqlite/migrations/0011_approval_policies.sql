-- Declarative approval policies: one per agent and tool server ('' for the agent's whole
-- toolset). `body` is the policy's rules and hook as JSON (the hook's secret included:
-- interlock signs the hook's calls with it); `version` counts the replacements from 1.
-- `updated_at` is microseconds since the epoch.
CREATE TABLE approval_policies (
    agent      TEXT NOT NULL,
    server     TEXT NOT NULL DEFAULT '',
    body       TEXT NOT NULL,
    version    INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    updated_by TEXT,
    PRIMARY KEY (agent, server)
);
