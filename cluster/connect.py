"""Joining Ray: a private local instance by default, an existing cluster only when --address names it.

- **Local runs are isolated.** `ray.init()` with no address joins whatever `RAY_ADDRESS` or the last
  `ray start` on the machine (its address file in the default temp dir) points at, and then refuses
  our local-only options with a raw ValueError. A run without --address therefore starts its own
  instance (`address="local"`) in a temp dir of its own, in its own namespace, and removes the dir
  after a clean finish; a stray cluster is neither joined nor disturbed.
- **Failures before Ray's retries.** An address is checked with a TCP connect (seconds, not Ray's
  minute of retries), and the cluster is asked once, directly, whether it accepts us: Ray itself
  reports a missing token as a failed connection after 15 s of log lines.
- **Token authentication as Ray decides it** (ray 2.60, `ray._private.worker.init`): a driver sends
  its token when `RAY_AUTH_MODE=token`, or, with `RAY_AUTH_MODE` unset, when it joins an address
  found automatically (`auto`) and a token is available (`RAY_AUTH_TOKEN`, `RAY_AUTH_TOKEN_PATH` or
  `~/.ray/auth_token`); an explicit host:port never turns it on. A cluster with authentication
  refuses a driver without the token; a token driver on a cluster without authentication joins, but
  every actor it starts there dies (its workers cannot answer it), so both are refused here.
- **stdout is the command's.** Ray prints worker deaths (`(raylet) A worker died ...`) to stdout from
  a background thread; while a run decodes, stdout goes to stderr (`quiet_stdout`), so what `spotbench
  run` prints after it (the summary table) is all that stdout holds.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import socket
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from harness.errors import UserError

NAMESPACE = "spotbench"
LOCAL_OBJECT_STORE = 256 * 2**20
TOKEN_HELP = (
    "set RAY_AUTH_MODE=token and make the cluster's token available here: copy ~/.ray/auth_token from "
    "the head node, or set RAY_AUTH_TOKEN (or RAY_AUTH_TOKEN_PATH)"
)


def check_address(address: str) -> None:
    """Fail fast (and before anything is written) on an address that is not host:port (or auto), where
    nothing listens, or whose cluster would refuse our token: `ray.init` would retry for a long time."""
    given = address
    if address == "auto":  # where ray.init("auto") goes: RAY_ADDRESS, else the last `ray start` here
        from ray._private.services import canonicalize_bootstrap_address_or_die

        try:
            address = canonicalize_bootstrap_address_or_die("auto")
        except ConnectionError as error:
            raise UserError(
                f"--address auto found no Ray cluster ({str(error).splitlines()[0]}); start one with "
                "ray start --head, or give its host:port"
            ) from None
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit():
        raise UserError(f"--address {address} is not host:port; give the Ray head's host:port, or auto")
    try:
        socket.create_connection((host or "127.0.0.1", int(port)), timeout=3).close()
    except OSError as error:
        raise UserError(f"no Ray cluster at --address {address}: {error.strerror or error}") from None
    if not address.startswith("ray://"):
        check_token(f"{host or '127.0.0.1'}:{port}", given)


def auth_token() -> tuple[str | None, str]:
    """The token Ray would send and where it comes from (Ray's order: variable, path, default file)."""
    if os.environ.get("RAY_AUTH_TOKEN"):
        return os.environ["RAY_AUTH_TOKEN"].strip(), "RAY_AUTH_TOKEN"
    path = Path(os.environ.get("RAY_AUTH_TOKEN_PATH") or Path.home() / ".ray" / "auth_token").expanduser()
    try:
        return path.read_text().strip() or None, str(path)
    except OSError:
        return None, str(path)


def uses_token(address: str) -> bool:
    """Whether `ray.init(address)` joins with token authentication (see the module docstring): Ray's
    rule, so that spotbench refuses exactly what Ray would fail on."""
    mode = os.environ.get("RAY_AUTH_MODE")
    if mode is not None:  # set, even to "": Ray respects it as it is
        return mode.lower() == "token"
    return address == "auto" and auth_token()[0] is not None


def check_token(target: str, address: str) -> None:
    """Ask the cluster's GCS once whether it accepts this driver; a one-line UserError naming
    RAY_AUTH_MODE or the token file when it does not. Other failures are left to `ray.init`."""
    import grpc
    from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc

    token_mode = uses_token(address)
    token, source = auth_token()
    why = (
        "RAY_AUTH_MODE=token is set"
        if os.environ.get("RAY_AUTH_MODE") is not None
        else f"RAY_AUTH_MODE is unset and a Ray token is available ({source}), so Ray joins --address auto with it"
    )

    def refusal(metadata: list[tuple[str, str]]) -> grpc.StatusCode | None:
        with grpc.insecure_channel(target) as channel:
            try:
                gcs_service_pb2_grpc.NodeInfoGcsServiceStub(channel).GetClusterId(
                    # protobuf builds its message classes at import: the generated module declares none
                    gcs_service_pb2.GetClusterIdRequest(),  # type: ignore[attr-defined]
                    timeout=10,
                    metadata=metadata,
                )
            except grpc.RpcError as error:
                return error.code()
        return None

    unauthenticated = refusal([])
    if unauthenticated is None:  # the cluster has no authentication
        if token_mode:
            raise UserError(
                f"{why}, but the Ray cluster at --address {address} runs without token "
                "authentication, where every worker a token driver starts dies: set "
                "RAY_AUTH_MODE=disabled, or restart the cluster with RAY_AUTH_MODE=token"
            )
        return
    if unauthenticated != grpc.StatusCode.UNAUTHENTICATED:
        return
    if not token_mode:
        raise UserError(
            f"the Ray cluster at --address {address} requires token authentication "
            f"(RAY_AUTH_MODE is {os.environ.get('RAY_AUTH_MODE') or 'unset'}): {TOKEN_HELP}"
        )
    if token is None:
        raise UserError(
            f"RAY_AUTH_MODE=token is set but there is no Ray token ({source} is missing or empty, "
            "RAY_AUTH_TOKEN is unset): copy ~/.ray/auth_token from the head node of --address "
            f"{address}, or set RAY_AUTH_TOKEN"
        )
    if refusal([("authorization", f"Bearer {token}")]) == grpc.StatusCode.UNAUTHENTICATED:
        raise UserError(
            f"the Ray cluster at --address {address} rejected the token from {source}: "
            "copy ~/.ray/auth_token from its head node (or set RAY_AUTH_TOKEN)"
        )


@contextlib.contextmanager
def ray_session(address: str | None) -> Iterator[None]:
    """Ray for the length of a block: joins `address`, or starts a private local instance; keeps one
    already started in this process (a test, a notebook) and leaves it running."""
    import ray

    if ray.is_initialized():
        yield
        return
    temp_dir = None if address else tempfile.mkdtemp(prefix="spotbench-ray-", dir="/tmp")
    _init(address, temp_dir)
    clean = False
    try:
        yield
        clean = True
    finally:
        ray.shutdown()
        if temp_dir and clean:  # kept after a failure: Ray's worker logs are in it
            shutil.rmtree(temp_dir, ignore_errors=True)


def quiet_stdout() -> contextlib.AbstractContextManager:
    """stdout to stderr for a block: Ray prints worker deaths to stdout from a background thread."""
    return contextlib.redirect_stdout(sys.stderr)


def _init(address: str | None, temp_dir: str | None) -> None:
    import ray

    options: dict[str, Any] = {"logging_level": logging.WARNING, "log_to_driver": False, "namespace": NAMESPACE}
    try:
        if address:
            ray.init(address=address, **options)
        else:  # "local": never RAY_ADDRESS nor the address file of a `ray start` on this machine
            ray.init(
                address="local",
                _temp_dir=temp_dir,
                include_dashboard=False,
                object_store_memory=LOCAL_OBJECT_STORE,
                **options,
            )
    except ConnectionError as error:
        raise UserError(f"no Ray cluster at --address {address}: {error}") from None
