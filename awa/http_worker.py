"""The HTTP worker: a kind whose jobs are POSTed to an endpoint (e.g. a serverless function).

In the default ``callback`` mode each attempt registers a callback, then
POSTs ``{job, callback_id, callback_url, callback_urls, callback_signature,
callback_timeout_seconds}`` to the configured URL with ``X-Awa-Signature``
(the signature also authenticates the request to the endpoint; the endpoint
presents it again when it calls back the receiver, ``awa callbacks serve``).

The response decides the attempt:

* 2xx -- ``callback`` mode: parked in ``waiting_external`` until the endpoint
  calls back (a callback that arrives before the response still wins);
  ``sync`` mode: completed.
* 5xx, 408, 429, timeouts and connection errors -- retryable (429/503 with a
  numeric ``Retry-After`` retry after that many seconds).
* any other status (4xx, 3xx) -- terminal: failed at once.
"""

from __future__ import annotations

import asyncio
import enum
import json
from dataclasses import dataclass, field
from typing import Any, cast
from urllib.parse import urlparse

import httpx

from awa import callback_contract, config
from awa.job import AwaError, Job, RetryAfter, TerminalError, ValidationError, WaitForCallback

# Statuses that say "try again later" rather than "this request is wrong".
_RETRYABLE_CLIENT_STATUSES = frozenset({408, 429})
_ERROR_BODY_CHARS = 200
LAST_RESPONSE_KEY = "http_worker_last_response"  # metadata: why a Retry-After retry happened


class HttpWorkerMode(str, enum.Enum):
    CALLBACK = "callback"  # 2xx parks the job until the endpoint calls back
    SYNC = "sync"  # 2xx completes the job


class HttpWorkerError(AwaError):
    """The endpoint could not take the job now (5xx, timeout, unreachable): retried."""


@dataclass(frozen=True)
class HttpWorkerConfig:
    url: str
    callback_base_url: str | None = None  # where the endpoint reaches `awa callbacks serve`
    secret: bytes | str | None = None  # the receiver's 32-byte secret
    mode: HttpWorkerMode = HttpWorkerMode.CALLBACK
    path_prefix: str = callback_contract.DEFAULT_PATH_PREFIX
    request_timeout_seconds: float = config.HTTP_WORKER_TIMEOUT_SECONDS
    callback_timeout_seconds: float = callback_contract.DEFAULT_HEARTBEAT_TIMEOUT_SECS
    headers: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "mode", HttpWorkerMode(self.mode))
        _check_url(self.url, "url")
        if self.mode is HttpWorkerMode.CALLBACK:
            if not self.callback_base_url:
                raise ValidationError("HttpWorkerConfig: callback mode needs callback_base_url "
                                      "(the address of `awa callbacks serve`)")
            _check_url(self.callback_base_url, "callback_base_url")
            if self.secret is None:
                raise ValidationError("HttpWorkerConfig: callback mode needs the receiver's "
                                      "secret to sign callback URLs")
        if self.secret is not None:
            object.__setattr__(self, "secret", callback_contract.coerce_secret(self.secret))
        if not self.request_timeout_seconds > 0:
            raise ValidationError("HttpWorkerConfig: request_timeout_seconds must be positive")


def _check_url(url: str, what: str) -> None:
    parsed = urlparse(url or "")
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise ValidationError(f"HttpWorkerConfig: {what} must be an http(s) URL, got {url!r}")


class HttpWorker:
    """Register with ``HttpWorker(cfg).register(client, kind="...", queue="...")``."""

    def __init__(self, cfg: HttpWorkerConfig) -> None:
        self.config = cfg
        self._http: httpx.AsyncClient | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def register(self, client: Any, *, kind: str,
                 queue: str = config.DEFAULT_QUEUE) -> HttpWorker:
        client.task(dict, kind=kind, queue=queue)(self.handle)
        return self

    def _client(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        if self._http is None or self._loop is not loop:
            self._http = httpx.AsyncClient(timeout=self.config.request_timeout_seconds)
            self._loop = loop
        return self._http

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    def request_body(self, job: Job[Any], callback_id: str | None) -> dict[str, Any]:
        body: dict[str, Any] = {"job": {
            "id": job.id, "kind": job.kind, "queue": job.queue, "args": job.args,
            "attempt": job.attempt, "max_attempts": job.max_attempts,
            "priority": job.priority, "metadata": job.metadata, "tags": job.tags}}
        if callback_id is not None:
            cfg = self.config
            # Callback mode, validated in HttpWorkerConfig: both the base URL and the secret.
            base_url, secret = cast(str, cfg.callback_base_url), cast(bytes, cfg.secret)
            urls = {action: callback_contract.build_callback_url(
                base_url, cfg.path_prefix, callback_id, action)
                for action in callback_contract.ACTIONS}
            body.update(callback_id=callback_id, callback_url=urls["complete"],
                        callback_urls=urls,
                        callback_signature=callback_contract.sign(secret, callback_id),
                        callback_timeout_seconds=cfg.callback_timeout_seconds)
        return body

    async def handle(self, job: Job[Any]) -> Any:
        cfg = self.config
        token = None
        if cfg.mode is HttpWorkerMode.CALLBACK:
            token = await job.register_callback(timeout_seconds=cfg.callback_timeout_seconds)
        callback_id = token.id if token is not None else None
        headers = {"content-type": "application/json", **cfg.headers,
                   "x-awa-job-id": str(job.id)}
        if callback_id is not None:
            # A callback id only exists in callback mode, which requires the secret.
            headers[callback_contract.SIGNATURE_HEADER] = callback_contract.sign(
                cast(bytes, cfg.secret), callback_id)
            headers["x-awa-callback-id"] = callback_id
        content = json.dumps(self.request_body(job, callback_id), default=str)
        try:
            response = await self._client().post(cfg.url, content=content, headers=headers)
        except httpx.TimeoutException:
            raise HttpWorkerError(f"POST {cfg.url} timed out after "
                                  f"{cfg.request_timeout_seconds:g}s") from None
        except httpx.TransportError as exc:
            raise HttpWorkerError(f"POST {cfg.url} failed: {type(exc).__name__}: "
                                  f"{str(exc) or 'connection error'}") from None
        status = response.status_code
        if 200 <= status < 300:
            return WaitForCallback(token) if token is not None else None
        summary = f"POST {cfg.url} returned HTTP {status}: {_excerpt(response.text)}"
        if status >= 500 or status in _RETRYABLE_CLIENT_STATUSES:
            delay = _retry_after(response)
            if delay is not None:  # RetryAfter records no error: keep the reason visible
                job.update_metadata({LAST_RESPONSE_KEY: summary})
                return RetryAfter(delay)
            raise HttpWorkerError(summary)
        raise TerminalError(summary)


def _excerpt(text: str) -> str:
    flat = " ".join(text.split())
    return flat[:_ERROR_BODY_CHARS] + ("..." if len(flat) > _ERROR_BODY_CHARS else "") or "(empty)"


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after", "").strip()
    if value.isdigit():
        return float(min(int(value), config.BACKOFF_CAP.total_seconds()))
    return None
