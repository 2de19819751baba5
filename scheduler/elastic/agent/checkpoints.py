"""Progress a job reports: the time of its last complete checkpoint, read from a mark file.

Contract: a training script reports progress by writing the Unix time (seconds, a decimal number) of its
last complete checkpoint to ``$TIDE_CHECKPOINT_DIR/tide-checkpointed-at`` once that checkpoint is in place
(a temporary file renamed over the mark, so a reader never sees half of one; ``write_mark`` does that).
``read_mark(directory)`` returns that time, or None when there is no mark or it holds no finite number. The
local executor reports the mark with its observations of the job's master replica; a job run elsewhere
reports through ``POST /api/v1/projects/{p}/jobs/{name}/checkpointed``.
"""

from __future__ import annotations

import math
import os
from contextlib import suppress
from pathlib import Path

MARK_FILE = "tide-checkpointed-at"


def read_mark(directory: str | Path) -> float | None:
    with suppress(OSError, ValueError):
        value = float((Path(directory) / MARK_FILE).read_text().strip())
        return value if math.isfinite(value) else None
    return None


def write_mark(directory: str | Path, when: float) -> None:
    path = Path(directory) / MARK_FILE
    tmp = path.with_name(f"{MARK_FILE}.tmp.{os.getpid()}")
    tmp.write_text(f"{when:.3f}\n")
    os.replace(tmp, path)
