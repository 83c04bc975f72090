-- Declarative approval policies: one per agent and tool server ('' for the agent's whole
-- toolset). `body` is the policy's rules and hook as JSON (the hook's secret included:
-- interlock signs the hook's calls with it); `version` counts the replacements from 1.
CREATE TABLE approval_policies (
    agent      text NOT NULL,
    server     text NOT NULL DEFAULT '',
    body       jsonb NOT NULL,
    version    integer NOT NULL,
    updated_at timestamptz NOT NULL,
    updated_by text,
    PRIMARY KEY (agent, server)
);
