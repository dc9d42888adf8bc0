"""The host's data directory: private to hostd's user, and no sandbox outliving its host.

``DATA_DIR`` and ``DATA_DIR/instances`` are made (or made again) mode 0700 at every start, so
other local users can read no instance's files (apps, pulled files, screenshots, the virtual
device's state) whatever the umask; everything below inherits that protection. A host that
crashed (kill -9, power loss) left its instances' sandboxes behind: instances do not survive
their host (the server ends them when the link is lost), so at the next start on the same
data directory every leftover sandbox is removed. One hostd per data directory.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

__all__ = ["prepare_data_dir"]

log = logging.getLogger(__name__)


def prepare_data_dir(data_dir: Path) -> list[str]:
    """Make *data_dir* and its ``instances`` private, remove leftover sandboxes, and return
    their names (blocking: run it in a thread)."""
    instances = data_dir / "instances"
    for path in (data_dir, instances):
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        path.chmod(0o700)
    removed = []
    for leftover in sorted(instances.iterdir()):
        if leftover.is_dir() and not leftover.is_symlink():
            shutil.rmtree(leftover, ignore_errors=True)
        else:
            leftover.unlink(missing_ok=True)
        removed.append(leftover.name)
    if removed:
        log.info("removed %d sandbox(es) left by a previous run: %s", len(removed), removed)
    return removed
