"""A blocking ``Client`` for scripts and notebooks: every ``AsyncClient`` method, called from
ordinary code, with the same typed models and errors.

    with Client("http://127.0.0.1:8080", api_key) as client:
        for instance in client.iter_instances("android", state="ready"):
            print(instance.id)

It runs one ``AsyncClient`` on an event loop in a thread of its own (anyio's blocking portal,
asyncio by default), so it works in a program that has no loop and from any thread; calls
from several threads are serialized by the loop. Inside an async program use ``AsyncClient``
(trio or asyncio) instead.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, overload

from anyio.from_thread import BlockingPortal, start_blocking_portal

from .client import DEFAULT_TIMEOUT, AsyncClient, RetryPolicy

__all__ = ["Client"]

P = ParamSpec("P")
R = TypeVar("R")


class _Blocking(Generic[P, R]):
    """``Client.x(...)`` runs ``AsyncClient.x(...)`` on the portal and returns its result."""

    def __init__(self, method: Callable[Concatenate[AsyncClient, P], Awaitable[R]]) -> None:
        self._method = method
        functools.update_wrapper(self, method)  # type: ignore[arg-type]

    @overload
    def __get__(self, obj: None, owner: type[Client]) -> _Blocking[P, R]: ...
    @overload
    def __get__(self, obj: Client, owner: type[Client]) -> Callable[P, R]: ...
    def __get__(self, obj: Client | None, owner: type[Client]) -> _Blocking[P, R] | Callable[P, R]:
        if obj is None:
            return self
        method, client = self._method, obj

        def call(*args: P.args, **kwargs: P.kwargs) -> R:
            async def run() -> R:
                return await method(client.async_client, *args, **kwargs)

            return client.portal.call(run)

        return call


class _BlockingIter(Generic[P, R]):
    """``Client.iter_x(...)``: a plain iterator over ``AsyncClient.iter_x(...)``; the next
    page is fetched when the current one is used up."""

    def __init__(self, method: Callable[Concatenate[AsyncClient, P], AsyncIterator[R]]) -> None:
        self._method = method
        functools.update_wrapper(self, method)  # type: ignore[arg-type]

    @overload
    def __get__(self, obj: None, owner: type[Client]) -> _BlockingIter[P, R]: ...
    @overload
    def __get__(self, obj: Client, owner: type[Client]) -> Callable[P, Iterator[R]]: ...
    def __get__(
        self, obj: Client | None, owner: type[Client]
    ) -> _BlockingIter[P, R] | Callable[P, Iterator[R]]:
        if obj is None:
            return self
        method, client = self._method, obj

        def iterate(*args: P.args, **kwargs: P.kwargs) -> Iterator[R]:
            items = method(client.async_client, *args, **kwargs)
            try:
                while True:
                    try:
                        yield client.portal.call(items.__anext__)
                    except StopAsyncIteration:
                        return
            finally:
                aclose: Callable[[], Awaitable[Any]] | None = getattr(items, "aclose", None)
                if aclose is not None:
                    client.portal.call(aclose)

        return iterate


class Client:
    """The blocking twin of ``AsyncClient``; close it (or use ``with``) to stop its thread."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        retry: RetryPolicy | None = None,
        ca_file: Path | None = None,
        http2: bool = True,
        backend: str = "asyncio",
    ) -> None:
        self._portal_cm: AbstractContextManager[BlockingPortal] = start_blocking_portal(backend)
        self.portal: BlockingPortal = self._portal_cm.__enter__()

        async def make() -> AsyncClient:
            return AsyncClient(
                base_url,
                api_key,
                timeout=timeout,
                retry=retry or RetryPolicy(),
                ca_file=ca_file,
                http2=http2,
            )

        try:
            self.async_client: AsyncClient = self.portal.call(make)
        except BaseException:
            self._portal_cm.__exit__(None, None, None)
            raise
        self.base_url = self.async_client.base_url
        self._closed = False

    def __repr__(self) -> str:
        return f"<Client {self.base_url}>"

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self.portal.call(self.async_client.aclose)
        finally:
            self._portal_cm.__exit__(None, None, None)

    request = _Blocking(AsyncClient.request)
    livez = _Blocking(AsyncClient.livez)
    readyz = _Blocking(AsyncClient.readyz)
    list_regions = _Blocking(AsyncClient.list_regions)
    get_plan = _Blocking(AsyncClient.get_plan)
    send_feedback = _Blocking(AsyncClient.send_feedback)
    whoami = _Blocking(AsyncClient.whoami)
    get_user = _Blocking(AsyncClient.get_user)
    update_user = _Blocking(AsyncClient.update_user)
    list_user_memberships = _Blocking(AsyncClient.list_user_memberships)
    get_organization = _Blocking(AsyncClient.get_organization)
    update_organization = _Blocking(AsyncClient.update_organization)
    delete_organization = _Blocking(AsyncClient.delete_organization)
    list_members = _Blocking(AsyncClient.list_members)
    add_member = _Blocking(AsyncClient.add_member)
    get_member = _Blocking(AsyncClient.get_member)
    update_member = _Blocking(AsyncClient.update_member)
    remove_member = _Blocking(AsyncClient.remove_member)
    send_support_message = _Blocking(AsyncClient.send_support_message)
    list_api_keys = _Blocking(AsyncClient.list_api_keys)
    create_api_key = _Blocking(AsyncClient.create_api_key)
    get_api_key = _Blocking(AsyncClient.get_api_key)
    revoke_api_key = _Blocking(AsyncClient.revoke_api_key)
    upsert_asset = _Blocking(AsyncClient.upsert_asset)
    list_assets = _Blocking(AsyncClient.list_assets)
    get_asset = _Blocking(AsyncClient.get_asset)
    delete_asset = _Blocking(AsyncClient.delete_asset)
    create_scoped_token = _Blocking(AsyncClient.create_scoped_token)
    revoke_scoped_token = _Blocking(AsyncClient.revoke_scoped_token)
    analytics = _Blocking(AsyncClient.analytics)
    instance_analytics = _Blocking(AsyncClient.instance_analytics)
    create_instance = _Blocking(AsyncClient.create_instance)
    get_instance = _Blocking(AsyncClient.get_instance)
    delete_instance = _Blocking(AsyncClient.delete_instance)
    list_instances = _Blocking(AsyncClient.list_instances)
    iter_instances = _BlockingIter(AsyncClient.iter_instances)
    build_logs = _Blocking(AsyncClient.build_logs)
    create_tunnel = _Blocking(AsyncClient.create_tunnel)
    list_tunnels = _Blocking(AsyncClient.list_tunnels)
    get_tunnel = _Blocking(AsyncClient.get_tunnel)
    update_tunnel = _Blocking(AsyncClient.update_tunnel)
    rotate_tunnel_token = _Blocking(AsyncClient.rotate_tunnel_token)
    delete_tunnel = _Blocking(AsyncClient.delete_tunnel)
    usage = _Blocking(AsyncClient.usage)
    iter_instance_usage = _BlockingIter(AsyncClient.iter_instance_usage)
