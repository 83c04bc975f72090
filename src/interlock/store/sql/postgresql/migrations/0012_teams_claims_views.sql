-- Teams: a name and its members (people). A request to a team is visible to its members
-- and answered by any of them; one of them may claim it. A team's name is no principal's.
CREATE TABLE teams (
    name       text PRIMARY KEY,
    created_at timestamptz NOT NULL
);

CREATE TABLE team_members (
    team   text NOT NULL REFERENCES teams (name) ON DELETE CASCADE,
    member text NOT NULL REFERENCES principals (name),
    PRIMARY KEY (team, member)
);

CREATE INDEX team_members_by_member ON team_members (member, team);

-- Who has taken a request to a team, and since when (at most one member at a time; the
-- claim stays after the request settles, as a record of who took it).
CREATE TABLE claims (
    request_id text PRIMARY KEY,
    claimed_by text NOT NULL,
    claimed_at timestamptz NOT NULL
);

-- The first time each person opened a request (its page, or read it through the API):
-- a `viewed` event is appended once per person, when its row here is inserted.
CREATE TABLE views (
    request_id text NOT NULL,
    viewer     text NOT NULL,
    viewed_at  timestamptz NOT NULL,
    PRIMARY KEY (request_id, viewer)
);

-- Configuration documents shared by every node, by name: `routing` (the routing document
-- the delivery loops use, set from a file or through the API).
CREATE TABLE settings (
    name       text PRIMARY KEY,
    value      jsonb NOT NULL,
    updated_at timestamptz NOT NULL
);
