"""What the sink reads from, and keeps in, the streaming query's checkpoint directory.

- **The offset log.** Spark writes the end offsets of micro-batch N to
  ``<checkpoint>/offsets/N`` before running it and replays exactly those offsets after a crash.
  The sink reads it to learn which barrier batch N is: the checkpoint, not the service's current
  state, says it.
- **The query id** (``<checkpoint>/metadata``), stable across restarts; it tags the sink's
  commits and names the query in the lifecycle state.
- **Staged output** (``<checkpoint>/metaservice/staged/<job>/<N>.json``). Spark asks a query's
  sources for their offsets one after the other; a barrier the service pins between two of those
  calls reaches only the later sources, so a micro-batch may end with the sources of one job at
  different barriers. Such a batch is not a barrier: its output (append mode) is staged here, and
  committed with the next micro-batch that ends with every source at the same barrier (the
  sources that lagged catch up in the very next batch, since the pin holds). Replaying a staged
  batch replaces its entry (the earlier attempt's files are deleted).

Local paths and ``file:`` URIs are read with plain I/O; other schemes (``hdfs://``,
``s3://``/``s3a://``, ``gs://``, ``abfs://``) through pyarrow's filesystems.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import pickle
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlparse

from spark_plugin.streaming.offsets import BarrierOffset

logger = logging.getLogger(__name__)


# -- files of the checkpoint ------------------------------------------------------------------


def _local_path(location: str) -> str | None:
    parsed = urlparse(location)
    if parsed.scheme in ("", "file"):
        return os.path.abspath(unquote(parsed.path) if parsed.scheme else location)
    return None


def _remote(location: str) -> tuple[Any, str]:
    from pyarrow import fs

    uri = location.replace("s3a://", "s3://", 1).replace("s3n://", "s3://", 1)
    return fs.FileSystem.from_uri(uri)


def join(root: str, *parts: str) -> str:
    return "/".join([root.rstrip("/"), *parts])


def read_text(location: str) -> str | None:
    """A small file's text; ``None`` when it does not exist."""
    local = _local_path(location)
    try:
        if local is not None:
            with open(local, encoding="utf-8") as f:
                return f.read()
        filesystem, path = _remote(location)
        with filesystem.open_input_stream(path) as stream:
            return stream.read().decode("utf-8")
    except FileNotFoundError:
        return None


def write_text(location: str, text: str) -> None:
    """Write a small file atomically where the filesystem allows (local: write then rename)."""
    local = _local_path(location)
    if local is not None:
        os.makedirs(os.path.dirname(local), exist_ok=True)
        tmp = f"{local}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, local)
        return
    filesystem, path = _remote(location)
    with filesystem.open_output_stream(path) as stream:
        stream.write(text.encode("utf-8"))


def list_names(location: str) -> list[str]:
    local = _local_path(location)
    if local is not None:
        try:
            return sorted(os.listdir(local))
        except FileNotFoundError:
            return []
    from pyarrow import fs

    filesystem, path = _remote(location)
    infos = filesystem.get_file_info(fs.FileSelector(path, allow_not_found=True))
    return sorted(i.base_name for i in infos)


def delete(location: str) -> None:
    local = _local_path(location)
    try:
        if local is not None:
            os.remove(local)
        else:
            filesystem, path = _remote(location)
            filesystem.delete_file(path)
    except FileNotFoundError:
        pass


# -- the offset log and the query id ----------------------------------------------------------


def query_id(checkpoint: str) -> str | None:
    """The streaming query id Spark keeps in ``<checkpoint>/metadata``."""
    text = read_text(join(checkpoint, "metadata"))
    if not text:
        return None
    try:
        return str(json.loads(text.splitlines()[0])["id"])
    except (ValueError, KeyError, IndexError):
        return None


def logged_offsets(checkpoint: str, batch_id: int) -> list[BarrierOffset] | None:
    """The ``metaservice`` end offsets Spark logged for micro-batch ``batch_id`` (every source of
    every job in the query), or ``None`` when the batch is not in the log.

    The file is ``v1``, a line of batch metadata, then one line per source (JSON, or ``-`` for a
    source without an offset).
    """
    if batch_id < 0:
        return None
    text = read_text(join(checkpoint, "offsets", str(batch_id)))
    if text is None:
        return None
    out = []
    for line in text.splitlines()[2:]:
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if BarrierOffset.is_offset(data):
            out.append(BarrierOffset.from_json(data))
    return out


@dataclass(frozen=True)
class JobBatch:
    """Where the sources of one job ended one micro-batch."""

    job: str
    offsets: tuple[BarrierOffset, ...]

    @property
    def aligned(self) -> bool:
        """Every source of the job ended at the same barrier: the batch completes it."""
        return len({o.barrier for o in self.offsets}) == 1

    @property
    def barrier(self) -> int | None:
        """The barrier every source ended at (``None`` before the first, or when not
        aligned)."""
        return self.offsets[0].barrier if self.aligned else None

    @property
    def registration(self) -> bool:
        return all(o.registration for o in self.offsets)

    @property
    def snapshots(self) -> dict[str, int]:
        """Per source table, the snapshot it ended at."""
        out: dict[str, int] = {}
        for o in self.offsets:
            out.update(o.snapshots)
        return out

    def same_position(self, other: JobBatch | None) -> bool:
        return other is not None and sorted(
            (o.barrier or -1, sorted(o.snapshots.items())) for o in self.offsets) == sorted(
            (o.barrier or -1, sorted(o.snapshots.items())) for o in other.offsets)


def job_batch(offsets: list[BarrierOffset] | None, job: str) -> JobBatch | None:
    mine = tuple(o for o in offsets or () if o.job == job)
    return JobBatch(job, mine) if mine else None


# -- staged output ------------------------------------------------------------------------------


def _staged_dir(checkpoint: str, job: str) -> str:
    return join(checkpoint, "metaservice", "staged", job)


def stage_output(checkpoint: str, job: str, batch_id: int, data_files: list[Any]) -> list[str]:
    """Record the data files of micro-batch ``batch_id`` to be committed with the next aligned
    barrier. Returns the paths of files an earlier attempt of the same batch had staged (to be
    deleted: they will never be committed)."""
    location = join(_staged_dir(checkpoint, job), f"{batch_id}.json")
    earlier = read_text(location)
    replaced = json.loads(earlier)["paths"] if earlier else []
    write_text(location, json.dumps({
        "batch_id": batch_id,
        "paths": [f.file_path for f in data_files],
        "data_files": base64.b64encode(pickle.dumps(list(data_files))).decode("ascii"),
    }))
    keep = {f.file_path for f in data_files}
    return [p for p in replaced if p not in keep]


def staged_output(checkpoint: str, job: str, before_batch: int) -> list[tuple[int, list[Any]]]:
    """Staged ``(batch_id, data_files)`` of batches before ``before_batch``, oldest first."""
    out = []
    directory = _staged_dir(checkpoint, job)
    for name in list_names(directory):
        if not name.endswith(".json"):
            continue
        batch_id = int(name[:-5])
        if batch_id >= before_batch:
            continue
        text = read_text(join(directory, name))
        if text:
            out.append((batch_id, pickle.loads(base64.b64decode(json.loads(text)["data_files"]))))
    return sorted(out, key=lambda x: x[0])


def clear_staged(checkpoint: str, job: str, up_to_batch: int) -> None:
    """Forget staged entries up to ``up_to_batch`` (their files were committed: kept)."""
    directory = _staged_dir(checkpoint, job)
    for name in list_names(directory):
        if name.endswith(".json") and int(name[:-5]) <= up_to_batch:
            delete(join(directory, name))
