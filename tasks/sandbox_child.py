"""The launcher that runs inside a sandbox process (see `tasks.sandbox` for the guarantees).

It is started as `python -I -B sandbox_child.py`, reads one JSON job from stdin (limits, the pass
nonce and the code segments), locks itself down, runs the segments in order in one namespace and, only
if all of them finished without an exception, writes the nonce to fd 1.

Kept free of project imports so that it starts fast and nothing the user code could monkeypatch is
shared with the harness.
"""

import json
import os
import resource
import sys

WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
PROCESS_EVENTS = {
    "os.fork", "os.forkpty", "os.exec", "os.posix_spawn", "os.spawn", "os.system", "os.startfile",
    "subprocess.Popen", "pty.spawn", "resource.setrlimit", "resource.prlimit", "sys.settrace",
    "sys.setprofile", "os.chroot", "cpython.PyInterpreterState_New",
}
# Modules that reach below the audit hooks (raw fork+exec, memory access, hook-free interpreters).
REFUSED_IMPORTS = ("_posixsubprocess", "_xxsubinterpreters", "_testcapi",
                   "_testinternalcapi", "_testmultiphase", "_testbuffer", "_testimportmultiple")
PATH_EVENTS = {  # event -> indexes of the path arguments that must stay inside the sandbox dir
    "os.remove": (0,), "os.rmdir": (0,), "os.rename": (0, 1), "os.link": (0, 1), "os.symlink": (1,),
    "os.mkdir": (0,), "os.truncate": (0,), "os.chmod": (0,), "os.chown": (0,), "os.utime": (0,),
    "os.chflags": (0,), "os.setxattr": (0,), "os.removexattr": (0,), "os.mkfifo": (0,),
    "os.mknod": (0,), "shutil.rmtree": (0,), "os.chdir": (0,), "shutil.chown": (0,),
}
READABLE_DEVICES = ("/dev/null", "/dev/zero", "/dev/urandom", "/dev/random")


def set_limits(limits: dict) -> None:
    """Apply the resource limits (hard = soft, so the program cannot raise them back)."""
    for name, value in (
        ("RLIMIT_CPU", limits["cpu_s"]),
        ("RLIMIT_AS", limits["memory_bytes"]),
        ("RLIMIT_FSIZE", limits["file_bytes"]),
        ("RLIMIT_CORE", 0),
        ("RLIMIT_NOFILE", 256),
    ):
        resource.setrlimit(getattr(resource, name), (value, value))
    if limits["processes"]:  # counted per user (threads included) and ignored for root
        resource.setrlimit(resource.RLIMIT_NPROC, (limits["processes"], limits["processes"]))


def disarm_subprocess() -> None:
    """`subprocess` forks in C without an `os.fork` audit event; keep the module importable (plenty
    of code imports it) but make its fork+exec primitive refuse, and refuse re-importing it. ctypes
    is imported here, before the hook, because numpy needs it importable; every use of it that
    touches memory or calls C (dlopen, dlsym, calls, from_address, string_at) raises a refused
    `ctypes.*` event."""
    import _posixsubprocess
    import ctypes  # noqa: F401

    def fork_exec(*args, **kwargs):
        raise PermissionError("sandbox: creating processes is not allowed")

    _posixsubprocess.fork_exec = fork_exec


def make_audit_hook(root: str, readable: tuple[str, ...]):
    """An audit hook that refuses process creation, sockets, ctypes, signals to other processes,
    tracing, and file system changes or reads outside the allowed trees."""
    realpath, fspath, isdir, getpid = os.path.realpath, os.fspath, os.path.isdir, os.getpid

    def resolve(path) -> str | None:
        if isinstance(path, int):
            return None  # an already open descriptor: it was checked when it was opened
        return realpath(os.fsdecode(fspath(path)))

    def under(path: str, trees) -> bool:
        return any(path == tree or path.startswith(tree.rstrip("/") + "/") for tree in trees)

    def refuse(event: str, detail="") -> None:
        raise PermissionError(f"sandbox: {event} {detail} is not allowed")

    def hook(event: str, args: tuple) -> None:
        if event in PROCESS_EVENTS or event.startswith(("socket.", "ctypes.")):
            refuse(event)
        elif event == "import":
            if args[0].partition(".")[0] in REFUSED_IMPORTS:
                refuse("import", args[0])
        elif event in ("os.kill", "os.killpg"):
            if event == "os.killpg" or args[0] != getpid():
                refuse(event, args[0])
        elif event == "open":
            path, mode, flags = args
            resolved = resolve(path)
            if resolved is None or under(resolved, (root,)):
                return
            writing = bool(flags & WRITE_FLAGS) or any(c in (mode or "") for c in "wax+")
            if writing and resolved != "/dev/null":
                refuse("writing", resolved)
            if isdir(resolved) or not (under(resolved, readable) or resolved in READABLE_DEVICES):
                refuse("reading", resolved)
        elif event in PATH_EVENTS:
            for index in PATH_EVENTS[event]:
                resolved = resolve(args[index])
                if resolved is not None and not under(resolved, (root,)):
                    refuse(event, resolved)

    return hook


def main() -> None:
    job = json.loads(sys.stdin.buffer.read())
    devnull = os.open("/dev/null", os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    write, exit_now, exec_, compile_ = os.write, os._exit, exec, compile
    nonce = job["nonce"].encode()
    root = os.path.realpath(os.getcwd())
    readable = tuple(
        {os.path.realpath(p)
         for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, *sys.path) if p}
        | {"/usr/share/zoneinfo", "/etc/localtime"}
    )
    try:
        codes = [compile_(source, f"<{name}>", "exec", dont_inherit=True, optimize=0)
                 for name, source in job["segments"]]
    except SyntaxError as error:
        write(2, f"SyntaxError: {error}".encode(errors="replace"))
        exit_now(1)
    set_limits(job["limits"])
    disarm_subprocess()
    sys.addaudithook(make_audit_hook(root, readable))
    del job
    namespace = {"__name__": "__main__", "__builtins__": __builtins__}
    try:
        for code in codes:
            exec_(code, namespace)
    except BaseException as error:  # noqa: BLE001 - SystemExit before the tests is a failure too
        try:
            write(2, f"{type(error).__name__}: {error}"[:2000].encode(errors="replace"))
        finally:
            exit_now(1)
    try:
        sys.stdout.flush()
    finally:
        write(1, b"\n" + nonce + b"\n")
        exit_now(0)


if __name__ == "__main__":
    main()
