-- The fingerprint of the INTERLOCK_SECRET_KEY the nodes on this store sign with (answer
-- links, grant tokens): HKDF-SHA256 of the key under a label of its own, never the key, and
-- of no use to sign anything. Recorded by the first node with a key; a node whose key gives
-- another refuses to start (`interlock secret-key rotate` records a new one on purpose).
CREATE TABLE secret_key_fingerprint (
    one         INTEGER PRIMARY KEY CHECK (one = 1),
    fingerprint TEXT NOT NULL,
    recorded_at INTEGER NOT NULL
);
