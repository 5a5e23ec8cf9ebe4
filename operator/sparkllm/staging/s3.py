"""Files from an S3-compatible bucket: list a prefix, get each object from an offset.

Why the MinIO client (``minio``, pinned in pyproject.toml) and not hand-written SigV4:
request signing, path- and virtual-host-style addressing, pagination and error
decoding are easy to get subtly wrong and well kept there. Not boto3: botocore pins
``python-dateutil<3`` and the pinned kubernetes client needs ``>=3``, so the two cannot
be installed together (seen when installing it, issue 31).

Checks: every object's size from the listing; a single-part object's ETag is its MD5,
checked too (a multipart ETag, with a ``-``, is not a content hash and is skipped).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import urllib3
from minio import Minio
from minio.error import InvalidResponseError, MinioException, S3Error

from sparkllm.api.model_staging import S3Source
from sparkllm.staging.errors import StageError
from sparkllm.staging.plan import StageReason
from sparkllm.staging.transfer import ConnectionLostError, Expected, Opener, Stream

CHUNK = 1024 * 1024
# XAdminUserNotFound: versitygw's answer (HTTP 404) to an access key it does not know
_UNAUTHORIZED = {
    "AccessDenied",
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "XAdminUserNotFound",
}
_NOT_FOUND = {"NoSuchBucket", "NoSuchKey"}
_ERROR_CODE = re.compile(r"<Code>([A-Za-z]+)</Code>")


@dataclass(frozen=True, slots=True)
class S3Object:
    """One object under the prefix and its path in the model directory."""

    key: str
    path: str
    expected: Expected


def s3_client(
    source: S3Source,
    *,
    access_key: str | None,
    secret_key: str | None,
    ca_file: Path | None = None,
) -> Minio:
    url = urlsplit(source.endpoint)
    http = None
    if ca_file is not None:
        http = urllib3.PoolManager(cert_reqs="CERT_REQUIRED", ca_certs=str(ca_file))
    return Minio(
        url.netloc,
        access_key=access_key,
        secret_key=secret_key,
        secure=url.scheme == "https",
        region=source.region,
        http_client=http,
    )


def _error(exc: Exception, *, what: str) -> StageError:
    code: str | None = None
    if isinstance(exc, S3Error):
        code = exc.code
    elif isinstance(exc, InvalidResponseError):
        # an error body the client did not take for XML (a wrong Content-Type): its code
        found = _ERROR_CODE.search(str(exc))
        code = found.group(1) if found else None
    if code in _UNAUTHORIZED:
        return StageError(StageReason.UNAUTHORIZED, f"{what}: {code}")
    if code in _NOT_FOUND:
        return StageError(StageReason.NOT_FOUND, f"{what}: {code}")
    if code is not None:
        return StageError(StageReason.INVALID_SOURCE, f"{what}: {code}")
    return StageError(StageReason.CONNECTION_LOST, f"{what}: {type(exc).__name__}: {exc}")


def list_objects(client: Minio, source: S3Source) -> list[S3Object]:
    """Every object under the prefix (directory markers skipped), by key."""
    where = f"s3 bucket {source.bucket} prefix '{source.prefix}'"
    try:
        found = list(client.list_objects(source.bucket, prefix=source.prefix, recursive=True))
    except (MinioException, urllib3.exceptions.HTTPError) as exc:
        raise _error(exc, what=where) from exc
    objects = []
    for obj in found:
        key = obj.object_name or ""
        path = key.removeprefix(source.prefix).lstrip("/")
        if not path or key.endswith("/"):
            continue
        if ".." in path.split("/"):
            raise StageError(StageReason.INVALID_SOURCE, f"{where}: key {key} leaves the prefix")
        etag = (obj.etag or "").strip('"')
        md5 = etag if len(etag) == 32 and "-" not in etag else None
        objects.append(S3Object(key=key, path=path, expected=Expected(size=obj.size, md5=md5)))
    if not objects:
        raise StageError(StageReason.NOT_FOUND, f"{where}: no objects")
    return sorted(objects, key=lambda o: o.key)


def s3_opener(client: Minio, bucket: str, key: str) -> Opener:
    what = f"s3://{bucket}/{key}"

    @contextlib.contextmanager
    def open_from(offset: int) -> Iterator[Stream | None]:
        try:
            response = client.get_object(bucket, key, offset=offset)
        except S3Error as exc:
            if exc.code == "InvalidRange":  # nothing from offset: already complete
                yield None
                return
            raise _error(exc, what=what) from exc
        except (MinioException, urllib3.exceptions.HTTPError) as exc:
            error = _error(exc, what=what)
            if error.reason is not StageReason.CONNECTION_LOST:
                raise error from exc
            raise ConnectionLostError(f"{what}: {type(exc).__name__}") from exc
        try:
            yield Stream(chunks=_chunks(response, what), from_start=False, total=None)
        finally:
            response.close()
            response.release_conn()

    return open_from


def _chunks(response: urllib3.BaseHTTPResponse, what: str) -> Iterator[bytes]:
    try:
        # read1: what has arrived (up to CHUNK); a cut keeps every byte received
        while chunk := response.read1(CHUNK):
            yield chunk
    except urllib3.exceptions.HTTPError as exc:
        raise ConnectionLostError(f"{what}: {type(exc).__name__}") from exc
