"""moto's server, with AWS Glue's UpdateTable conditional on VersionId.

moto 5.2.5 ignores UpdateTable's VersionId: two writers that read the same version
both succeed, and the second silently replaces the first's table (a lost update).
AWS Glue refuses the second with ConcurrentModificationException; Iceberg catalogs
on Glue (Java's GlueCatalog, weir's) rely on that for their optimistic commits. This
wrapper adds only that check, under a lock, then runs moto's own server unchanged.
"""

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

if __name__ == "__main__":
    from moto.server import main

    sys.exit(main())
