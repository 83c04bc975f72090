"""The Swagger UI the server's /docs runs on is what its README says: one exact 5.x release
of swagger-ui-dist, every file listed with its sha256 (no file added, changed or left
unlisted), its licence and notice beside it."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

VENDORED = Path(__file__).resolve().parents[2] / "src" / "interlock" / "server" / "static" / "swagger-ui"


def test_the_vendored_files_are_the_release_the_readme_names() -> None:
    readme = (VENDORED / "README.md").read_text()
    (version,) = set(re.findall(r"swagger-ui-dist@(\d+\.\d+\.\d+)", readme))
    assert version.startswith("5."), "5.x renders OpenAPI 3.1"
    assert f'PACKAGE_VERSION:"{version}"' in (VENDORED / "swagger-ui-bundle.js").read_text()
    listed = {name: digest for digest, name in re.findall(r"^([0-9a-f]{64})  (\S+)$", readme, re.MULTILINE)}
    present = {path.name for path in VENDORED.iterdir()} - {"README.md"}
    assert set(listed) == present
    assert {"LICENSE", "NOTICE", "swagger-ui-bundle.js.LICENSE.txt"} <= present
    for name, digest in listed.items():
        assert hashlib.sha256((VENDORED / name).read_bytes()).hexdigest() == digest, name
