"""What the AWS sinks (S3, SQS, Kinesis) share: a boto3 client made from the action's own
settings, and AWS's errors as words.

The credentials are the action's (`access_key_id`, `secret_access_key`), never the platform's:
an action without them makes anonymous (unsigned) requests, so a tenant can never write with
the platform's own role (into its archive bucket, say). `endpoint_url` points at any
S3-compatible service (MinIO, moto, another cloud); it is vetted like a webhook's URL before
every send (`endpoints`); AWS's own endpoints (no `endpoint_url`) are public and not vetted.
"""

from __future__ import annotations

from typing import Any

from common.sinks.base import optional
from common.sinks.endpoints import RefusedDestination, url_host_port, vetted

DEFAULT_REGION = "us-east-1"


class Aws:
    """One boto3 client for one action, made on first use."""

    def __init__(self, service: str, action: dict[str, Any], endpoint_url: str | None) -> None:
        self.service = service
        self.endpoint_url = endpoint_url
        if endpoint_url is not None:
            url_host_port(endpoint_url)  # ValueError in words for a bad URL
        self.region = optional(action, "region") or DEFAULT_REGION
        self.key_id = optional(action, "access_key_id")
        self.secret = optional(action, "secret_access_key")
        if (self.key_id is None) != (self.secret is None):
            raise ValueError("give both 'access_key_id' and 'secret_access_key', or neither")
        self._client: Any = None  # boto3's clients are untyped

    def client(self) -> Any:
        """The client, after vetting the endpoint (RefusedDestination in words)."""
        if self.endpoint_url is not None:
            vetted(*url_host_port(self.endpoint_url))
        if self._client is None:
            import boto3
            from botocore import UNSIGNED
            from botocore.config import Config

            config = Config(
                connect_timeout=3,
                read_timeout=15,
                # One request per attempt: the outbox retries (with back-off, counted as
                # resent), so the client's own retry would only add uncounted copies.
                # (`max_attempts` counts retries after the first request: 1 still made two.)
                retries={"total_max_attempts": 1, "mode": "standard"},
                s3={"addressing_style": "path"} if self.endpoint_url else {},
                **({} if self.key_id else {"signature_version": UNSIGNED}),
            )
            self._client = boto3.session.Session().client(
                self.service,
                region_name=self.region,
                endpoint_url=self.endpoint_url,
                aws_access_key_id=self.key_id,
                aws_secret_access_key=self.secret,
                config=config,
            )
        return self._client

    def words(self, exc: BaseException, refused: dict[str, str] | None = None) -> str:
        """An exception from a call as words: `refused` maps AWS error codes to sentences."""
        return self.scrub(_words(exc, refused or {}))

    def scrub(self, text: str) -> str:
        for secret in (self.secret, self.key_id):
            if secret and len(secret) >= 4:
                text = text.replace(secret, "***")
        return text[:500]

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


def error_code(exc: BaseException) -> str:
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        return str(response.get("Error", {}).get("Code", ""))
    return ""


def _words(exc: BaseException, refused: dict[str, str]) -> str:
    from botocore.exceptions import (
        ClientError,
        ConnectTimeoutError,
        EndpointConnectionError,
        NoCredentialsError,
        ReadTimeoutError,
    )

    if isinstance(exc, RefusedDestination):
        return str(exc)
    if isinstance(exc, ClientError):
        code = error_code(exc)
        if code in refused:
            return refused[code]
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        message = str(exc.response.get("Error", {}).get("Message", "")).strip()
        if code in ("InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidClientTokenId",
                    "UnrecognizedClientException", "AccessDenied", "AccessDeniedException"):  # fmt: skip
            return f"the credentials were refused ({code})" + (f": {message}" if message else "")
        return f"refused ({code or f'HTTP {status}'})" + (f": {message}" if message else "")
    if isinstance(exc, (EndpointConnectionError, ConnectionError)):
        return "could not connect to the endpoint"
    if isinstance(exc, ConnectTimeoutError):
        return "no connection to the endpoint within 3 s"
    if isinstance(exc, ReadTimeoutError):
        return "no answer from the endpoint within 15 s"
    if isinstance(exc, NoCredentialsError):
        return "no credentials"
    return f"the request failed ({type(exc).__name__})"
