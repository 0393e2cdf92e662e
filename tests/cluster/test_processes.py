"""The runner as a separate process: a killed driver, and a Ray head given by --address.

Every Ray instance here belongs to a process group this test starts, and the group is killed at the
end, so nothing outlives the test (a SIGKILLed driver cannot stop its own local instance)."""

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest

pytestmark = pytest.mark.slow  # Ray clusters and processes: CI runs it, the fast lane skips it


SPOTBENCH = str(Path(sys.executable).with_name("spotbench"))
ENV = os.environ | {"OMP_NUM_THREADS": "1"}
HANG_GUARD_S = 600
"""Timeouts here only stop a hung subprocess from hanging CI; generous, so a busy machine passes."""
SMALL = [
    "--models",
    "tiny-random:sdar",
    "--proposers",
    "confidence",
    "--temperatures",
    "0",
    "--budgets",
    "0,4",
    "--gen-length",
    "16",
    "--block-length",
    "8",
    "--no-progress",
]


def start(args: list[str]) -> subprocess.Popen:
    # SIGINT back to its default: a test run started in the background of a non-interactive shell
    # (`bash .ci/run &`) inherits SIGINT ignored, and then Python raises no KeyboardInterrupt.
    return subprocess.Popen(
        [SPOTBENCH, *args],
        env=ENV,
        start_new_session=True,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def wait_for_files(samples: Path, count: int, process: subprocess.Popen, timeout: float = HANG_GUARD_S) -> None:
    deadline = time.monotonic() + timeout
    while len(list(samples.glob("*.parquet"))) < count:
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "no progress"
        time.sleep(0.2)


def kill_group(process: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def test_a_killed_driver_leaves_a_run_the_next_invocation_completes(tmp_path) -> None:
    # Enough samples that the interrupted run cannot finish them all between the file it is
    # interrupted after and the signal (10 tiny samples sometimes did, on a loaded machine).
    limit = 60
    out = tmp_path / "run"
    args = ["run", *SMALL, "--limit", str(limit), "--workers", "1", "--output", str(out)]
    first = start(args)
    try:
        wait_for_files(out / "samples", 2, first)
        os.kill(first.pid, signal.SIGKILL)
        first.wait(timeout=HANG_GUARD_S)
    finally:
        kill_group(first)
    assert json.loads((out / "manifest.json").read_text())["status"] == "running"
    after_kill = len(list((out / "samples").glob("*.parquet")))

    second = start(args)
    try:
        wait_for_files(out / "samples", after_kill + 1, second)
        second.send_signal(signal.SIGINT)
        out_text, err = second.communicate(timeout=HANG_GUARD_S)
    finally:
        kill_group(second)
    finished = len(list((out / "samples").glob("*.parquet")))
    assert second.returncode == 130 and "run the same command again to resume" in err, (
        f"exit {second.returncode}; files {after_kill} after the kill, {finished} after SIGINT of {2 * limit}; "
        f"stdout {out_text[-400:]!r}; stderr {err[-400:]!r}"
    )
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "failed" and "KeyboardInterrupt" in manifest["error"]
    done = len(list((out / "samples").glob("*.parquet")))
    assert after_kill < done < limit

    final = subprocess.run([SPOTBENCH, *args], env=ENV, capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert final.returncode == 0, final.stderr
    assert f"groups written {limit - done}, already done {done}" in final.stdout
    rows = pq.read_table(out / "samples").to_pylist()
    assert Counter((r["sample_id"], r["budget"]) for r in rows) == Counter(
        {(f"test/{i}", b): 1 for i in range(limit) for b in (0, 4)}
    )
    assert json.loads((out / "manifest.json").read_text())["status"] == "complete"
    assert not list(out.rglob(".tmp-*"))
    assert (out / "summary.parquet").exists() and "<svg" in (out / "report.html").read_text()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ray_cli() -> list[str]:
    """This environment's `ray`. Ray starts some of a head's processes through a shell without quoting
    their paths, so a head cannot start from a folder whose path has a space in it (a clone in "my
    projects/"): there the environment is reached through a symlink without one."""
    prefix = Path(sys.prefix)
    if not any(character.isspace() for character in str(prefix)):
        return [str(Path(sys.executable).with_name("ray"))]
    link = Path(tempfile.mkdtemp(prefix="env", dir="/tmp")) / "env"
    link.symlink_to(prefix)
    return [str(link / "bin" / "python"), "-m", "ray.scripts.scripts"]


def start_head(
    env: dict[str, str], temp_dir: str | None = None, ready: Path | None = None
) -> tuple[subprocess.Popen, int]:
    """A Ray head in a process group of its own (killed by `kill_group`), once its port answers (and
    `ready` exists)."""
    port = free_port()
    head = subprocess.Popen(
        [
            *ray_cli(),
            "start",
            "--head",
            f"--port={port}",
            "--node-ip-address=127.0.0.1",
            "--num-cpus=1",
            "--include-dashboard=false",
            "--block",
            *([f"--temp-dir={temp_dir}"] if temp_dir else []),
        ],
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 120
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            if ready is None or ready.exists():
                return head, port
            raise OSError("not ready")
        except OSError:
            assert head.poll() is None and time.monotonic() < deadline, "the Ray head did not start"
            time.sleep(0.5)


def test_address_runs_on_an_existing_ray_head_and_names_token_failures(tmp_path) -> None:
    # A head with token authentication, its token in a home of its own (`ray start` needs one there)
    home = tmp_path / "home"
    (home / ".ray").mkdir(parents=True)
    (home / ".ray" / "auth_token").write_text(secrets.token_hex(32))
    env = ENV | {"RAY_AUTH_MODE": "token", "HOME": str(home)}
    temp_dir = tempfile.mkdtemp(prefix="rh", dir="/tmp")  # short: Ray's socket paths live under it
    head, port = start_head(env, temp_dir)
    try:
        out = tmp_path / "run"
        args = [SPOTBENCH, "run", *SMALL, "--limit", "2", "--output", str(out), "--address", f"127.0.0.1:{port}"]
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        refusals = {
            "requires token authentication (RAY_AUTH_MODE is unset): set RAY_AUTH_MODE=token": {
                k: v for k, v in env.items() if k != "RAY_AUTH_MODE"
            },
            f"RAY_AUTH_MODE=token is set but there is no Ray token ({elsewhere}/.ray/auth_token is missing": env
            | {"HOME": str(elsewhere)},
            "rejected the token from RAY_AUTH_TOKEN": env | {"RAY_AUTH_TOKEN": "not-the-token"},
        }
        for message, bad_env in refusals.items():
            refused = subprocess.run(args, env=bad_env, capture_output=True, text=True, timeout=HANG_GUARD_S)
            err = refused.stderr.strip()
            assert refused.returncode == 2 and err.startswith("spotbench: error: ") and message in err, err
            assert "\n" not in err and not out.exists()
        result = subprocess.run(args, env=env, capture_output=True, text=True, timeout=HANG_GUARD_S)
        assert result.returncode == 0, result.stderr
        manifest = json.loads((out / "manifest.json").read_text())
        assert manifest["status"] == "complete" and manifest["hardware"]["ray_cpus"] == 1
        assert pq.read_table(out / "samples").num_rows == 4
    finally:
        kill_group(head)
        shutil.rmtree(temp_dir, ignore_errors=True)


def test_a_token_driver_is_refused_by_a_cluster_without_authentication(tmp_path) -> None:
    """Ray joins it and then every worker actor dies (three deaths per unit, a traceback): refused first."""
    home = tmp_path / "home"
    (home / ".ray").mkdir(parents=True)
    (home / ".ray" / "auth_token").write_text(secrets.token_hex(32))
    temp_dir = tempfile.mkdtemp(prefix="rn", dir="/tmp")
    head, port = start_head(ENV | {"RAY_AUTH_MODE": "disabled", "HOME": str(tmp_path)}, temp_dir)
    try:
        out = tmp_path / "run"
        args = [SPOTBENCH, "run", *SMALL, "--limit", "1", "--output", str(out), "--address", f"127.0.0.1:{port}"]
        refused = subprocess.run(
            args,
            env=ENV | {"RAY_AUTH_MODE": "token", "HOME": str(home)},
            capture_output=True,
            text=True,
            timeout=HANG_GUARD_S,
        )
        err = refused.stderr.strip()
        assert refused.returncode == 2 and err.startswith(
            "spotbench: error: RAY_AUTH_MODE=token is set, but the "
            f"Ray cluster at --address 127.0.0.1:{port} runs without "
            "token authentication"
        ), err
        assert "\n" not in err and not out.exists()
    finally:
        kill_group(head)
        shutil.rmtree(temp_dir, ignore_errors=True)


def test_a_local_run_is_isolated_from_stray_ray_clusters(tmp_path) -> None:
    # A stray head started the usual way (default temp dir, here a private one via RAY_TMPDIR), and
    # RAY_ADDRESS pointing at it: a plain ray.init() would join it.
    ray_tmp = tempfile.mkdtemp(prefix="rt", dir="/tmp")
    env = ENV | {"RAY_TMPDIR": ray_tmp, "HOME": str(tmp_path)}
    head, port = start_head(env, ready=Path(ray_tmp) / "ray" / "ray_current_cluster")  # what ray.init() reads
    try:
        # negative control: the stray cluster is there to be joined, and joining it fails as it used to
        probe = "import ray; ray.init(object_store_memory=256 * 2**20)"
        joined = subprocess.run(
            [sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=HANG_GUARD_S
        )
        assert joined.returncode != 0 and "When connecting to an existing cluster" in joined.stderr
        out = tmp_path / "run"
        result = subprocess.run(
            [SPOTBENCH, "run", *SMALL, "--limit", "2", "--output", str(out)],
            env=env | {"RAY_ADDRESS": f"127.0.0.1:{port}"},
            capture_output=True,
            text=True,
            timeout=HANG_GUARD_S,
        )
        assert result.returncode == 0, result.stderr
        assert "Traceback" not in result.stderr and result.stdout.startswith("run directory: ")
        # its own instance (all of this machine's CPUs), not the one-CPU stray, which is still up
        assert json.loads((out / "manifest.json").read_text())["hardware"]["ray_cpus"] == os.cpu_count()
        socket.create_connection(("127.0.0.1", port), timeout=3).close()
        assert head.poll() is None
    finally:
        kill_group(head)
        shutil.rmtree(ray_tmp, ignore_errors=True)


def test_ray_messages_stay_off_stdout_when_a_worker_dies(tmp_path) -> None:
    out = tmp_path / "run"
    process = start(["run", *SMALL, "--limit", "30", "--workers", "1", "--output", str(out)])
    try:
        wait_for_files(out / "samples", 1, process)
        path = sorted((out / "samples").glob("*.parquet"))[0]
        os.kill(int(pq.read_table(path).column("worker")[0].as_py().rsplit(":", 1)[1]), signal.SIGKILL)
        stdout, stderr = process.communicate(timeout=HANG_GUARD_S)
    finally:
        kill_group(process)
    assert process.returncode == 0, stderr
    assert "a worker died; replaced it" in stderr  # the death happened and was reported, on stderr
    assert stdout.startswith("run directory: ") and "worker died" not in stdout.lower() and "(raylet)" not in stdout
