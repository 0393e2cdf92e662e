"""When a driver joins a Ray cluster with token authentication: spotbench decides as Ray does
(`cluster.connect.uses_token`), so it refuses exactly the joins Ray would fail on."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from cluster.connect import uses_token

TOKEN = "0123456789abcdef" * 4
CASES = {
    # (RAY_AUTH_MODE or None for unset, a token in ~/.ray/auth_token, address) -> whether the token is sent
    "token mode, explicit address": ("token", True, "10.0.0.1:6379", True),
    "token mode, no token file": ("token", False, "10.0.0.1:6379", True),
    "disabled, token file": ("disabled", True, "auto", False),
    "unset, token file, explicit address": (None, True, "10.0.0.1:6379", False),
    "unset, token file, auto": (None, True, "auto", True),
    "unset, no token, auto": (None, False, "auto", False),
    "empty, token file, auto": ("", True, "auto", False),
}


def _environment(tmp_path, mode: str | None, token: bool) -> dict[str, str]:
    home = tmp_path / "home"
    (home / ".ray").mkdir(parents=True, exist_ok=True)
    if token:
        (home / ".ray" / "auth_token").write_text(TOKEN)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")} | {"HOME": str(home)}
    return env if mode is None else env | {"RAY_AUTH_MODE": mode}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_spotbench_sends_the_token_when_ray_does(case, tmp_path, monkeypatch) -> None:
    mode, token, address, expected = case
    env = _environment(tmp_path, mode, token)
    monkeypatch.setattr(os, "environ", env)
    assert uses_token(address) == expected


@pytest.mark.slow  # a Python process per case, importing Ray
@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_the_rule_is_ray_s_own(case, tmp_path) -> None:
    """Ray's own code on the same environment: ray.init(address) turns token mode on from a found token
    only for an address it finds itself (None or auto; ray/_private/worker.py), then asks the mode."""
    mode, token, address, expected = case
    probe = (
        "from ray._private.authentication.authentication_token_setup import "
        "maybe_enable_token_auth_if_token_available as enable\n"
        "from ray._raylet import AuthenticationMode, get_authentication_mode\n"
        f"if {address!r} in (None, 'auto'):\n"
        "    enable(warn_if_disabled=False)\n"
        "print(get_authentication_mode() == AuthenticationMode.TOKEN)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe],
        env=_environment(tmp_path, mode, token),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.stdout.strip() == str(expected), result.stderr
