-- Teams: a name and its members (people). A request to a team is visible to its members
-- and answered by any of them; one of them may claim it. A team's name is no principal's.
CREATE TABLE teams (
    name       TEXT PRIMARY KEY,
    created_at INTEGER NOT NULL
);

CREATE TABLE team_members (
    team   TEXT NOT NULL REFERENCES teams (name) ON DELETE CASCADE,
    member TEXT NOT NULL REFERENCES principals (name),
    PRIMARY KEY (team, member)
) WITHOUT ROWID;

CREATE INDEX team_members_by_member ON team_members (member, team);

-- Who has taken a request to a team, and since when (at most one member at a time; the
-- claim stays after the request settles, as a record of who took it).
CREATE TABLE claims (
    request_id TEXT PRIMARY KEY,
    claimed_by TEXT NOT NULL,
    claimed_at INTEGER NOT NULL
) WITHOUT ROWID;

-- The first time each person opened a request (its page, or read it through the API):
-- a `viewed` event is appended once per person, when its row here is inserted.
CREATE TABLE views (
    request_id TEXT NOT NULL,
    viewer     TEXT NOT NULL,
    viewed_at  INTEGER NOT NULL,
    PRIMARY KEY (request_id, viewer)
) WITHOUT ROWID;

-- Configuration documents shared by every node, by name: `routing` (the routing document
-- the delivery loops use, set from a file or through the API).
CREATE TABLE settings (
    name       TEXT PRIMARY KEY,
    value      TEXT NOT NULL,
    updated_at INTEGER NOT NULL
);
