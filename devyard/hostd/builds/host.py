"""A build instance's data plane: its workspace, its execs and the sandbox they run in.

One exec at a time per instance (they share the workspace), and no sync while it runs (a
second one, or a sync, is a `BuildError` CONFLICT). The last `MAX_KEPT` finished execs keep
their events, log and artifacts; an older one is expired: its files go, and its event stream
answers "closed for good" (HTTP 204). Closing the host cancels every exec (their process
trees are killed) before the driver removes the instance's directory.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import shutil
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, Final

import attrs
import trio

from . import server_cache
from .cas import MAX_CACHE_BYTES, BlobStore, BuildCache
from .commands import ExecPlan, plan_exec
from .errors import BuildError, BuildReason
from .execs import Exec, ExecStatus, run_exec
from .gradlew import wrapper_distribution
from .sandbox import WORKSPACE, SandboxConfig, sandbox_argv
from .sync import FileSpec, Workspace, parse_files
from .warm import DAEMON_REGISTRY, WarmSandbox
from .webhook import WebhookPolicy, WebhookSpec, deliver

__all__ = ["MAX_KEPT", "BuildConfig", "BuildHost", "ExecEnded"]

log = logging.getLogger(__name__)

MAX_KEPT: Final = 16
_KEPT_MANIFESTS: Final = 4
_MAX_EXPIRED: Final = 4096

#: Called with each exec when it ends (for reporting it upstream).
ExecEnded = Callable[[Exec], None]
#: Sends an ended exec's record and log to the server (the supervisor's, over the link).
Reporter = Callable[[dict[str, Any], Path], Awaitable[None]]
_REPORT_GRACE_S: Final = 10.0
#: Unreferenced sync blobs older than this go (cas.py); the sweep runs this often.
BLOB_GRACE_S: Final = 24 * 3600.0
SWEEP_EVERY_S: Final = 3600.0


@attrs.frozen
class BuildConfig:
    """*gradle_home*: the organization's Gradle user home on this host (shared by its
    instances, kept after them). *keepalive_s* / *retry_ms*: the event stream's keep-alive
    comment period and ``retry:`` hint. *blobs*: the organization's content-addressed sync
    blobs on this host (cas.py)."""

    sandbox: SandboxConfig
    gradle_home: Path
    blobs: Path | None = None  # the organization's sync blobs (None: the instance's own)
    gradle: str = "gradle"
    xdelta3: str = "xdelta3"
    keepalive_s: float = 15.0
    retry_ms: int = 2000
    webhook: WebhookPolicy = attrs.field(factory=WebhookPolicy)
    android_sdk_root: str | None = None  # as the sandbox sees it (docs/builds.md)
    #: Gradle builds join the instance's warm sandbox, where the Gradle daemon stays between
    #: execs (warm.py); False: ``--no-daemon`` in a sandbox of their own, as ``run`` execs.
    warm_daemons: bool = True
    blob_grace_s: float = BLOB_GRACE_S
    cache_max_bytes: int = MAX_CACHE_BYTES
    #: A driver's own exec kinds (the xcode driver's ``xcodebuild``): their plan, or None to
    #: leave the body to `plan_exec`.
    planner: Callable[[dict[str, Any]], ExecPlan | None] | None = None


class BuildHost:
    def __init__(
        self,
        directory: Path,
        config: BuildConfig,
        nursery: trio.Nursery,
        *,
        on_end: ExecEnded | None = None,
    ) -> None:
        self.directory = directory
        self.config = config
        self._nursery = nursery
        self._on_end = on_end
        sandbox = config.sandbox
        owner = None
        if sandbox.build_uid is not None:
            gid = sandbox.build_gid if sandbox.build_gid is not None else sandbox.build_uid
            owner = (sandbox.build_uid, gid)
        self.owner = owner
        self.workspace = Workspace(
            directory / "workspace", directory / "sync", owner=owner, xdelta3=config.xdelta3
        )
        self.execs_dir = directory / "execs"
        self.blobs = BlobStore(config.blobs or directory / "blobs")
        self.cache = BuildCache(config.gradle_home, owner=owner, max_bytes=config.cache_max_bytes)
        self._execs: OrderedDict[str, Exec] = OrderedDict()
        self._expired: set[str] = set()
        self._running: Exec | None = None
        self._closed = False
        self.reporter: Reporter | None = None
        self._reports = 0
        self._reported = trio.Event()
        self._webhooks: set[trio.CancelScope] = set()
        self._manifests: OrderedDict[str, list[FileSpec]] = OrderedDict()
        self.warm: WarmSandbox | None = None
        self._sweeper = trio.CancelScope()
        if config.warm_daemons and config.sandbox.bwrap is not None:
            self.warm = WarmSandbox(
                lambda: self.config.sandbox,
                directory=directory / "agent",
                workspace=self.workspace.root,
                gradle_home=config.gradle_home,
                on_line=self._sandbox_said,
            )

    def create(self) -> None:
        """The workspace, the exec records' directory and the Gradle home (blocking)."""
        self.workspace.create()
        self.blobs.create()
        self.execs_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        home = self.config.gradle_home
        home.mkdir(mode=0o700, parents=True, exist_ok=True)
        if self.owner is not None:
            os.chown(home, *self.owner)

    # ---- sync -----------------------------------------------------------------------------

    async def sync(self, chunks: AsyncIterator[bytes], encoding: str) -> dict[str, Any]:
        self.check_open()
        if self._running is not None:
            raise BuildError(BuildReason.CONFLICT, f"exec {self._running.id} is running")
        try:
            return await self.workspace.sync(chunks, encoding)
        finally:
            await trio.to_thread.run_sync(self._pin_quietly)

    async def missing(self, body: dict[str, Any]) -> dict[str, Any]:
        """``POST /sync/missing``: which blobs a commit of the manifest would lack, and the
        manifest's id (a commit may name it instead of sending the manifest again)."""
        self.check_open()
        files = list(parse_files(body.get("files")).values())
        lacking, complete = await self.workspace.missing(files, self.blobs)
        manifest_id = _manifest_id(files)
        self._manifests[manifest_id] = files
        self._manifests.move_to_end(manifest_id)
        while len(self._manifests) > _KEPT_MANIFESTS:
            self._manifests.popitem(last=False)
        await trio.to_thread.run_sync(self._pin_quietly)
        return {"missing": lacking, "complete": complete, "manifestId": manifest_id}

    async def commit(self, body: dict[str, Any]) -> dict[str, Any]:
        """``POST /sync/commit``: the manifest's tree (``files``, or the ``manifestId`` of a
        recent ``/sync/missing``) from the blobs, or nothing."""
        self.check_open()
        if "files" in body:
            files = list(parse_files(body.get("files")).values())
        else:
            known = self._manifests.get(str(body.get("manifestId", "")))
            if known is None:
                raise BuildError(
                    BuildReason.NOT_FOUND, "unknown manifestId: send the manifest as 'files'"
                )
            files = known
        if self._running is not None:
            raise BuildError(BuildReason.CONFLICT, f"exec {self._running.id} is running")
        try:
            return await self.workspace.commit_tree(files, self.blobs)
        finally:
            await trio.to_thread.run_sync(self._pin_quietly)

    # ---- cleanup --------------------------------------------------------------------------

    def pin(self) -> None:
        """Tell the organization's blob store which blobs this instance still refers to: its
        recent manifests, its tree, its kept execs' artifacts (blocking)."""
        if self._closed:
            return
        shas = self.workspace.known_shas()
        for files in self._manifests.values():
            shas.update(f.sha256 for f in files if f.link is None)
        for run in self._execs.values():
            shas.update(str(a.get("sha256")) for a in run.artifacts)
        self.blobs.pin(self.directory, shas)

    def _pin_quietly(self) -> None:
        try:
            self.pin()
        except OSError as exc:  # bookkeeping: the sync or exec itself went well
            log.warning("could not pin the blobs of %s: %r", self.directory, exc)

    def sweep(self) -> tuple[int, int]:
        """Remove the organization's unreferenced blobs past their grace and its build cache's
        long-unused entries (blocking); how many of each."""
        return self.blobs.sweep(self.config.blob_grace_s), self.cache.sweep()

    async def run_sweeper(self, every: float = SWEEP_EVERY_S) -> None:
        """`sweep` now and every *every* seconds while the instance lives (the driver's
        nursery runs it; every instance of the organization sweeps the same stores)."""
        with self._sweeper:
            while not self._closed:
                try:
                    blobs, entries = await trio.to_thread.run_sync(self.sweep)
                except OSError as exc:
                    log.warning("sweeping the build stores failed, retrying later: %r", exc)
                else:
                    if blobs or entries:
                        log.info("removed %d sync blob(s), %d cache entries", blobs, entries)
                await trio.sleep(every)

    # ---- execs ----------------------------------------------------------------------------

    def start(self, body: dict[str, Any]) -> Exec:
        self.check_open()
        plan = None if self.config.planner is None else self.config.planner(body)
        plan = plan or plan_exec(
            body, gradle=self.config.gradle, webhook_http=self.config.webhook.allow_http
        )
        if self._running is not None:
            raise BuildError(BuildReason.CONFLICT, f"exec {self._running.id} is running")
        if self.workspace.lock.locked():
            raise BuildError(BuildReason.CONFLICT, "a sync is being applied")
        plan = self._gradle_of(plan, body.get("useWrapper", True))
        exec_id = f"build-{time.time_ns()}"
        while exec_id in self._execs or exec_id in self._expired:
            exec_id = f"build-{time.time_ns()}"
        directory = self.execs_dir / exec_id
        directory.mkdir(mode=0o700)
        (directory / "log.txt").touch(mode=0o600)
        run = Exec(exec_id, plan, directory)
        argv = functools.partial(
            sandbox_argv,
            self.config.sandbox,
            plan.argv,
            workspace=self.workspace.root,
            gradle_home=self.config.gradle_home,
            cwd=plan.cwd,
            network=plan.network,
            env=plan.env,
        )
        warm = None
        if self.warm is not None and plan.kind == "gradlebuild":
            warm = functools.partial(self.warm.spawn, self._nursery, plan.argv, plan.env, plan.cwd)
        self._execs[exec_id] = run
        self._running = run
        runner = functools.partial(
            run_exec, workspace=self.workspace.root, on_end=self._ended, warm=warm
        )
        if plan.kind == "gradlebuild" and self.cache.upstream is not None:
            self._nursery.start_soon(self._with_server_cache, runner, run, argv)
        else:
            self._nursery.start_soon(runner, run, argv)
        return run

    async def _with_server_cache(
        self, runner: Callable[[Exec, Any], Awaitable[None]], run: Exec, argv: Any
    ) -> None:
        """A Gradle exec between the server cache's pull and push (server_cache.py)."""
        since = time.time() - 1.0  # the directory's mtimes are the file system's clock
        await server_cache.pull(self.cache)
        await runner(run, argv)
        self._nursery.start_soon(server_cache.push_since, self.cache, since)

    def _sandbox_said(self, line: str) -> None:
        """A line of the warm sandbox's keeper or agent (a limit it enforced): the running
        exec's, else the log's."""
        if self._running is not None and self._running.status is ExecStatus.RUNNING:
            self._running.emit("stderr", line)
        else:
            log.info("warm sandbox of %s: %s", self.directory, line)

    def _gradle_of(self, plan: ExecPlan, use_wrapper: object) -> ExecPlan:
        """The project's ``gradlew`` when its distribution is cached (gradlew.py), and the
        Android SDK's location unless the request set it."""
        if not isinstance(use_wrapper, bool):
            raise BuildError(BuildReason.BAD_REQUEST, "useWrapper must be true or false")
        if plan.kind != "gradlebuild":
            return plan
        env = dict(plan.env)
        sdk = self.config.android_sdk_root
        if sdk is not None and "ANDROID_SDK_ROOT" not in env:
            env |= {"ANDROID_SDK_ROOT": sdk, "ANDROID_HOME": env.get("ANDROID_HOME", sdk)}
        plan = attrs.evolve(plan, env=env)
        if self.warm is not None:  # the instance's warm daemon, its registry its own
            registry = f"-Dorg.gradle.daemon.registry.base={DAEMON_REGISTRY}"
            daemon = [registry if a == "--no-daemon" else a for a in plan.argv]
            daemon.insert(1, "--daemon")
            plan = attrs.evolve(plan, argv=tuple(daemon), display="gradle " + " ".join(daemon[1:]))
        project = plan.cwd.removeprefix(WORKSPACE).strip("/")
        if use_wrapper and wrapper_distribution(
            self.workspace.root, project, self.config.gradle_home
        ):
            argv = ("/bin/sh", "gradlew", *plan.argv[1:])
            plan = attrs.evolve(plan, argv=argv, display="./gradlew " + " ".join(argv[2:]))
        return plan

    def lookup(self, exec_id: str) -> Exec | None:
        return self._execs.get(exec_id)

    def expired(self, exec_id: str) -> bool:
        return exec_id in self._expired

    def list(self) -> list[Exec]:
        return list(self._execs.values())

    def cancel(self, exec_id: str) -> Exec:
        run = self._execs.get(exec_id)
        if run is None:
            raise BuildError(BuildReason.NOT_FOUND, f"no exec {exec_id} on this instance")
        run.cancel()
        return run

    def close(self) -> None:
        """Cancel every exec; the driver's nursery waits for their trees to be gone."""
        self._closed = True
        for run in self._execs.values():
            run.cancel()
        self._sweeper.cancel()
        self.blobs.unpin(self.directory)
        if self.warm is not None:
            self.warm.close()

    def check_open(self) -> None:
        if self._closed:
            raise BuildError(BuildReason.GONE, "the instance is stopping")

    def _ended(self, run: Exec) -> None:
        if self._running is run:
            self._running = None
        finished = [r for r in self._execs.values() if r.status is not ExecStatus.RUNNING]
        for old in finished[: max(0, len(finished) - MAX_KEPT)]:
            del self._execs[old.id]
            if len(self._expired) < _MAX_EXPIRED:
                self._expired.add(old.id)
            shutil.rmtree(old.directory, ignore_errors=True)
        self._pin_quietly()  # its artifacts, and no more those of expired execs
        if self._on_end is not None:
            self._on_end(run)
        if self.reporter is not None:
            self._reports += 1
            self._nursery.start_soon(self._report, self.reporter, run)
        if run.plan.webhook is not None:
            self._reports += 1
            self._nursery.start_soon(self._notify, run.plan.webhook, run)

    async def _notify(self, spec: WebhookSpec, run: Exec) -> None:
        scope = trio.CancelScope()
        self._webhooks.add(scope)
        try:
            with scope:
                run.webhook = {"delivered": False, "attempts": 0}
                run.webhook = await deliver(spec, run.describe(), self.config.webhook)
        finally:
            self._webhooks.discard(scope)
            self._reports -= 1
            self._reported.set()
            self._reported = trio.Event()

    def drop_webhooks(self) -> None:
        """Give up the deliveries still retrying (the instance is gone)."""
        for scope in self._webhooks:
            scope.cancel()

    async def _report(self, reporter: Reporter, run: Exec) -> None:
        """The record and log; then the artifact to upload as an asset, if the exec asked
        (the same stream kind with an ``upload`` in the record: docs/builds.md)."""
        try:
            await reporter(run.describe(), run.log_path)
            upload = run.plan.upload
            if upload is not None and run.status is ExecStatus.SUCCEEDED:
                wanted = [a for a in run.artifacts if upload.path in (None, a["path"])]
                if wanted:
                    artifact = wanted[0]
                    record = {**run.describe(), "upload": {"assetName": upload.asset_name}}
                    record["upload"] |= {k: artifact[k] for k in ("path", "size", "sha256")}
                    await reporter(record, run.directory / "artifacts" / artifact["path"])
        finally:
            self._reports -= 1
            self._reported.set()
            self._reported = trio.Event()

    async def wait_reports(self) -> None:
        """Until every ended exec has been reported and its webhook delivered (or given up
        on), at most a grace."""
        with trio.move_on_after(_REPORT_GRACE_S):
            while self._reports:
                await self._reported.wait()


def _manifest_id(files: list[FileSpec]) -> str:
    digest = hashlib.sha256()
    for entry in files:
        line = f"{entry.path}\0{entry.sha256}\0{entry.mode}\0{entry.link}\n"
        digest.update(line.encode("utf-8", "surrogatepass"))
    return digest.hexdigest()
