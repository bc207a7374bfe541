"""What the tracing tools' transports share: one HTTP client to the tool's API, and what
its answers mean for a delivery (:class:`~ragpulse.exporters.support.delivery.Transport`).

A tool's transport subclasses :class:`HttpTransport` and gives :meth:`~HttpTransport.requests`
(a batch of its items -> API calls); where the tool answers in its own way it overrides
:meth:`~HttpTransport.reply`, and where one call is more than a POST,
:meth:`~HttpTransport.exchange`. Request headers (credentials) and URLs are never logged.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Generic, TypeVar

import httpx

from ragpulse.exporters.support.delivery import ApiRequest, DeliveryOptions, Outcome, Reply

ItemT = TypeVar("ItemT")


@dataclass(frozen=True)
class Endpoint:
    """Where a tool's API is and how to authenticate to it."""

    base_url: str
    headers: Mapping[str, str] = field(default_factory=dict)
    auth: httpx.Auth | None = None


def retry_after(response: httpx.Response) -> float | None:
    """The seconds ``Retry-After`` asks for; None without one (or with an HTTP date: the
    backoff applies instead)."""
    value = response.headers.get("retry-after")
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


class HttpTransport(ABC, Generic[ItemT]):
    """A tool's HTTP API as a delivery's transport: ``send`` makes the call
    (:meth:`exchange`) and reads the answer (:meth:`reply`); an httpx error is a retry."""

    def __init__(
        self,
        endpoint: Endpoint,
        options: DeliveryOptions,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        """``transport``: httpx's, for a test's stand-in of the tool (default: the network)."""
        self.client = httpx.Client(
            base_url=endpoint.base_url.rstrip("/"),
            headers={**options.headers, **endpoint.headers},
            auth=endpoint.auth,
            timeout=options.timeout_s,
            transport=transport,
        )

    @abstractmethod
    def requests(self, batch: Sequence[ItemT]) -> list[ApiRequest]:
        """The calls that carry ``batch`` (several items per call where the API batches)."""

    def send(self, request: ApiRequest) -> Reply:
        try:
            response = self.exchange(request)
            reply = self.reply(request, response)
        except httpx.HTTPError as exc:
            # The exception's text can hold the URL (and credentials put in it): name only.
            return Reply(Outcome.RETRY, reason=type(exc).__name__)
        return replace(reply, retry_after_s=retry_after(response))

    def exchange(self, request: ApiRequest) -> httpx.Response:
        """One call: a POST of the request's body. A tool without upserts overrides this to
        find and replace what ragpulse wrote before."""
        return self.client.post(request.path, params=request.params, json=request.body)

    def reply(self, request: ApiRequest, response: httpx.Response) -> Reply:
        """2xx: delivered; 408, 425, 429, 5xx: retry; anything else: failed."""
        status = response.status_code
        if 200 <= status < 300:
            return Reply(Outcome.DELIVERED)
        if status in (408, 425, 429) or status >= 500:
            return Reply(Outcome.RETRY, reason=f"HTTP {status}")
        return Reply(Outcome.FAILED, reason=f"HTTP {status}: {response.text[:200]}")

    def close(self) -> None:
        self.client.close()
