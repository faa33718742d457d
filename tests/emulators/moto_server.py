"""moto's server, where it differs from AWS in what Iceberg catalogs rely on.

- Glue: moto 5.2.5 ignores UpdateTable's VersionId: two writers that read the same
  version both succeed, and the second silently replaces the first's table (a lost
  update). AWS Glue refuses the second with ConcurrentModificationException; Iceberg
  catalogs on Glue (Java's GlueCatalog, weir's) rely on that for their optimistic
  commits. Added here, under a lock.
- S3 Tables: UpdateTableMetadataLocation answers `namespace` as a string where AWS
  answers a list (the AWS SDKs fail to read the answer of a commit that was stored),
  and checks the version token without a lock (two racing commits can both pass).
  Both fixed here.

Everything else is moto's own server, unchanged.
"""

import json
import sys
import threading

from moto.glue import responses
from moto.glue.exceptions import GlueClientError


class ConcurrentModificationException(GlueClientError):
    def __init__(self, message: str):
        super().__init__("ConcurrentModificationException", message)


_lock = threading.Lock()
_update_table = responses.GlueResponse.update_table


def update_table(self):
    version = self.parameters.get("VersionId")
    with _lock:
        if version is not None:
            database = self.parameters.get("DatabaseName")
            name = self.parameters.get("TableInput", {}).get("Name")
            current = str(self.glue_backend.get_table(database, name)._current_version)
            if version != current:
                raise ConcurrentModificationException(
                    f"Update table failed due to concurrent modifications: version {version} is not {current}"
                )
        return _update_table(self)


responses.GlueResponse.update_table = update_table

from moto.s3tables import responses as s3tables_responses  # noqa: E402

_update_metadata_location = s3tables_responses.S3TablesResponse.update_table_metadata_location


def update_table_metadata_location(self):
    with _lock:
        status, headers, body = _update_metadata_location(self)
    answer = json.loads(body)
    if isinstance(answer.get("namespace"), str):
        answer["namespace"] = [answer["namespace"]]
    return status, headers, json.dumps(answer)


s3tables_responses.S3TablesResponse.update_table_metadata_location = update_table_metadata_location

if __name__ == "__main__":
    from moto.server import main

    sys.exit(main())
