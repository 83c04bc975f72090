-- The public id of the key the nodes on this store sign grant tokens with: its kid (a hash
-- of the Ed25519 public key, named in every token and served at /api/v1/grants/keys), never
-- the private key; and whether the key is derived from INTERLOCK_SECRET_KEY (1) or given in
-- a --grant-key file (0). Recorded by the first node with a stable grant key; a node whose
-- key has another id, or that makes one at start, refuses to start. A database from before
-- records none: the first node started on this version records its own.
CREATE TABLE grant_key_id (
    one         INTEGER PRIMARY KEY CHECK (one = 1),
    kid         TEXT NOT NULL,
    derived     INTEGER NOT NULL CHECK (derived IN (0, 1)),
    recorded_at INTEGER NOT NULL
);
