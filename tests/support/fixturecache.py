"""Where the tests keep what they make from Debian's packages alone.

The GRUB guest's disk image (guestimage.py) and the arm64 Debian root
(armchroot.py) take minutes each to make and hold nothing of rtforge:
each is keyed by its recipe, so a changed recipe makes it again.  The
test kernels' build trees (testkernels.py) are keyed by everything that
decides their bytes, rtforge's build code among it.  They live in the
checkout's .cache/ unless RTFORGE_FIXTURE_CACHE names a folder:
.ci/cleanroot keeps them there between clean runs, as it keeps
downloaded packages and ccache (none is installed state of the root
under test).
"""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def fixture_cache(name: str) -> Path:
    base = os.environ.get("RTFORGE_FIXTURE_CACHE") or os.environ.get("RTFORGE_CACHE_DIR") \
        or REPO / ".cache" / "rtforge"
    return Path(base) / name
