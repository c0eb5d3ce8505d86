"""Shared steps of the sync tests: a sync through the real server, the bucket's keys and objects."""

from __future__ import annotations

import json

from retained import Store


def sync(store: Store, seaweed, remote: str, **options):
    return store.sync(remote, client=seaweed.client(), machine=options.pop("machine", "laptop"), **options)


def bucket_of(remote: str) -> tuple[str, str]:
    bucket, _, prefix = remote[5:].partition("/")
    return bucket, prefix + "/"


def keys(seaweed, remote: str) -> list[str]:
    bucket, prefix = bucket_of(remote)
    out = seaweed.client().list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", [])
    return sorted(o["Key"] for o in out)


def get(seaweed, remote: str, key: str) -> bytes:
    return seaweed.client().get_object(Bucket=bucket_of(remote)[0], Key=key)["Body"].read()


def put(seaweed, remote: str, key: str, data: bytes) -> None:
    seaweed.client().put_object(Bucket=bucket_of(remote)[0], Key=key, Body=data)


def head(seaweed, remote: str, sid: str) -> dict:
    return json.loads(get(seaweed, remote, f"{bucket_of(remote)[1]}stores/{sid}/head.json"))


def kinds(report: dict) -> list[str]:
    return [f["kind"] for f in report["findings"]]
