"""A local S3-compatible server for the object-store tests and the bench: moto in server
mode (as s3fs's own tests use it), in its own process, on 127.0.0.1 and a free port.

It is real HTTP with the S3 API, conditional PUTs (``If-None-Match: *``) included. With
``auth=True`` it checks signatures against its own IAM users, so made-up credentials are
refused as a real S3 would refuse them.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from types import TracebackType

ACCESS_KEY = "AKIAMMINATESTKEY0001"
SECRET_KEY = "mmina-test-secret-9f8e7d6c5b4a"
"""Distinctive on purpose: a test searches every stored byte for them."""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class S3Server:
    """``with S3Server() as s3:`` a fresh, empty S3 at ``s3.endpoint``; ``s3.env`` points clients at it."""

    def __init__(self, auth: bool = False) -> None:
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.auth = auth
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def env(self) -> dict[str, str]:
        """What a client needs: the endpoint, a region and credentials (never a real ~/.aws)."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_CONFIG_FILE": os.devnull,
            "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        }

    def __enter__(self) -> S3Server:
        env = {**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": "0" if self.auth else "inf"}
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(f"{self.endpoint}/moto-api/data.json", timeout=1).close()
                return self
            except OSError:
                time.sleep(0.1)
        self.__exit__(None, None, None)
        raise RuntimeError("the moto S3 server did not start")

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if self._proc is not None:
            self._proc.terminate()
            self._proc.wait(timeout=10)

    def client(self):  # noqa: ANN201 - an s3fs.S3FileSystem (s3fs is imported only when used)
        """A filesystem on this server that does not go through mmina."""
        import s3fs

        return s3fs.S3FileSystem(
            skip_instance_cache=True,
            use_listings_cache=False,
            key=ACCESS_KEY,
            secret=SECRET_KEY,
            client_kwargs={"endpoint_url": self.endpoint, "region_name": "us-east-1"},
        )

    def make_bucket(self, name: str) -> None:
        """Create a bucket (mmina never creates buckets: that is the owner's decision)."""
        self.client().call_s3("create_bucket", Bucket=name)

    def objects(self, bucket: str) -> dict[str, bytes]:
        """Every object in the bucket, by key, read straight from the server."""
        fs = self.client()
        return {key: fs.cat_file(key) for key in fs.find(bucket)}
