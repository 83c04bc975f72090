-- A person's list of runs holds the runs of the agents they own (as a run's page is theirs
-- to open): the agents one owns are read from an index, not from every principal.
CREATE INDEX principals_by_owner ON principals (owner) WHERE owner IS NOT NULL;
