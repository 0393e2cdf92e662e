"""The two processes of one sandboxed run, `program` and `judge` (see `tasks.sandbox`).

Each starts as `python -I -B launcher.py ROLE` in its own bubblewrap jail, reads one JSON job from
stdin, makes its working directory (its own, so the code may remove it), applies its rlimits, and
talks to the other over two pipes (fds named in the job), one JSON message a line:

- program: runs the model-written code, then answers the judge's requests (look up names, call an
  object, get or set an attribute). Values cross as plain data tagged by their exact type; any other
  object stays in the program and crosses as a numbered reference.
- judge: runs the trusted tests with the names they take from the program bound to the decoded plain
  data (genuine builtin objects) or to `Remote` stand-ins, so every comparison, builtin and assert
  runs in a process the program cannot reach. It writes `pass` to fd 1 and exits 0 only if the tests
  ran to completion.

Kept free of project imports so that it starts fast and runs from one read-only file.
"""

import builtins
import importlib
import json
import os
import resource
import sys
import types
from typing import Any  # already loaded by the imports above: no start-up cost

MAX_REPLY = 16 << 20  # bytes of one reply the judge reads; longer is a protocol error
BIG_INT = 1 << 63  # ints past this cross as hex: JSON digits hit Python's 4300-digit cap
PLAIN = (int, float, str, bytes, complex, list, tuple, set, frozenset, dict)
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
PROCESS_EVENTS = {
    "os.fork",
    "os.forkpty",
    "os.exec",
    "os.posix_spawn",
    "os.spawn",
    "os.system",
    "os.startfile",
    "subprocess.Popen",
    "pty.spawn",
    "resource.setrlimit",
    "resource.prlimit",
    "sys.settrace",
    "sys.setprofile",
    "os.chroot",
    "cpython.PyInterpreterState_New",
}
# Modules that reach below the audit hooks (raw fork+exec, memory access, hook-free interpreters).
REFUSED_IMPORTS = {
    "_posixsubprocess",
    "_xxsubinterpreters",
    "_testcapi",
    "_testinternalcapi",
    "_testmultiphase",
    "_testbuffer",
    "_testimportmultiple",
}
PATH_EVENTS = {  # event -> indexes of the path arguments that must stay inside /tmp
    "os.remove": (0,),
    "os.rmdir": (0,),
    "os.rename": (0, 1),
    "os.link": (0, 1),
    "os.symlink": (1,),
    "os.mkdir": (0,),
    "os.truncate": (0,),
    "os.chmod": (0,),
    "os.chown": (0,),
    "os.utime": (0,),
    "os.chflags": (0,),
    "os.setxattr": (0,),
    "os.removexattr": (0,),
    "os.mkfifo": (0,),
    "os.mknod": (0,),
    "shutil.rmtree": (0,),
    "os.chdir": (0,),
    "shutil.chown": (0,),
}
READABLE_DEVICES = ("/dev/null", "/dev/zero", "/dev/urandom", "/dev/random")


def set_limits(limits: dict) -> None:
    """Apply the rlimits, hard = soft so that the code cannot raise them back (CPU: hard one second
    later, so SIGXCPU comes first and the run reads as a timeout). Set inside the jail, whose uid
    is unprivileged, so the kernel enforces RLIMIT_NPROC (it exempts root) on that uid's tasks."""
    for name, soft, hard in (
        ("RLIMIT_CPU", limits["cpu_s"], limits["cpu_s"] + 1),
        ("RLIMIT_AS", limits["memory_bytes"], limits["memory_bytes"]),
        ("RLIMIT_FSIZE", limits["file_bytes"], limits["file_bytes"]),
        ("RLIMIT_NPROC", limits["processes"], limits["processes"]),
        ("RLIMIT_CORE", 0, 0),
        ("RLIMIT_NOFILE", 256, 256),
    ):
        resource.setrlimit(getattr(resource, name), (soft, hard))


def read_job() -> dict:
    """The job from stdin; stdin is then /dev/null, so the code cannot read anything more there."""
    job = json.loads(sys.stdin.buffer.read())
    devnull = os.open("/dev/null", os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    return job


def enter_work_dir(job: dict) -> None:
    """Make the job's working directory as the jailed uid and move into it."""
    os.mkdir(job["work_dir"], 0o700)
    os.chdir(job["work_dir"])


def write_all(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data) :]


def encode(value: Any, ref) -> object:  # Any: dispatched on its exact type, which a checker does not follow
    """`value` as JSON, every container tagged by its exact type; an instance of a subclass of a
    builtin (a Counter, a namedtuple, an int whose __eq__ is always True) crosses as the builtin
    value it holds, so its own methods never reach the judge; `ref(value)` for anything else."""
    kind = type(value)
    if value is None or kind in (bool, str, float):
        return value
    if kind is int:
        return value if -BIG_INT < value < BIG_INT else {"int": hex(value)}
    if kind is list:
        return [encode(item, ref) for item in value]
    if kind in (tuple, set, frozenset):
        return {kind.__name__: [encode(item, ref) for item in value]}
    if kind is dict:
        return {"dict": [[encode(k, ref), encode(v, ref)] for k, v in value.items()]}
    if kind is bytes:
        return {"bytes": value.hex()}
    if kind is complex:
        return {"complex": [value.real, value.imag]}
    if kind is types.ModuleType and value.__name__.partition(".")[0] in sys.stdlib_module_names:
        return {"module": value.__name__}  # each side imports its own
    if kind is type:
        name = value.__name__
        if getattr(builtins, name, None) is value:
            return {"type": name}
    for base in PLAIN:
        if issubclass(kind, base):
            return encode(base(value), ref)
    return ref(value)


def decode(data: Any, resolve) -> Any:  # Any: JSON, dispatched on its exact type
    """The inverse of `encode`, building only builtin objects and `resolve(tag, body)` for a
    reference or a module; raises on anything malformed."""
    if data is None or type(data) in (bool, int, float, str):
        return data
    if type(data) is list:
        return [decode(item, resolve) for item in data]
    ((tag, body),) = data.items()
    if tag in ("tuple", "set", "frozenset"):
        return {"tuple": tuple, "set": set, "frozenset": frozenset}[tag](decode(item, resolve) for item in body)
    if tag == "dict":
        return {decode(k, resolve): decode(v, resolve) for k, v in body}
    if tag == "bytes":
        return bytes.fromhex(body)
    if tag == "int":
        return int(body, 16)
    if tag == "complex":
        return complex(float(body[0]), float(body[1]))
    if tag == "type" and isinstance(getattr(builtins, body), type):
        return getattr(builtins, body)
    if tag in ("ref", "module"):
        return resolve(tag, body)
    raise ValueError(f"malformed value {tag!r}")


# ---- program: runs the model-written code and answers the judge ----


def disarm_subprocess() -> None:
    """`subprocess` forks in C without an `os.fork` audit event; keep the module importable (plenty
    of code imports it) but make its fork+exec primitive refuse. ctypes is imported here, before the
    hook, because numpy needs it importable; every use of it that touches memory or calls C raises a
    refused `ctypes.*` event."""
    import _posixsubprocess
    import ctypes  # noqa: F401

    def fork_exec(*args, **kwargs):
        raise PermissionError("sandbox: creating processes is not allowed")

    _posixsubprocess.fork_exec = fork_exec


def make_audit_hook(root: str, readable: tuple[str, ...]):
    """Defence in depth inside the jail: refuse process creation, sockets, ctypes, signals to other
    processes, tracing, refused modules under any dotted name, and file changes or reads outside the
    allowed trees. A Python-level guard, not the boundary: the jail holds without it."""
    realpath, fspath, isdir, getpid = os.path.realpath, os.fspath, os.path.isdir, os.getpid

    def under(path: str, trees) -> bool:
        return any(path == tree or path.startswith(tree.rstrip("/") + "/") for tree in trees)

    def refuse(event: str, detail="") -> None:
        raise PermissionError(f"sandbox: {event} {detail} is not allowed")

    def hook(event: str, args: tuple) -> None:
        if event in PROCESS_EVENTS or event.startswith(("socket.", "ctypes.")):
            refuse(event)
        elif event == "import":
            if REFUSED_IMPORTS.intersection(str(args[0]).split(".")):
                refuse("import", args[0])
        elif event in ("os.kill", "os.killpg"):
            if event == "os.killpg" or args[0] != getpid():
                refuse(event, args[0])
        elif event == "open":
            path, mode, flags = args
            if isinstance(path, int):
                return  # an already open descriptor: it was checked when it was opened
            resolved = realpath(os.fsdecode(fspath(path)))
            if under(resolved, (root,)):
                return
            if (flags & WRITE_FLAGS or any(c in (mode or "") for c in "wax+")) and (resolved != "/dev/null"):
                refuse("writing", resolved)
            if isdir(resolved) or not (under(resolved, readable) or resolved in READABLE_DEVICES):
                refuse("reading", resolved)
        elif event in PATH_EVENTS:
            for index in PATH_EVENTS[event]:
                if isinstance(args[index], int):
                    refuse(event, "on a descriptor")
                resolved = realpath(os.fsdecode(fspath(args[index])))
                if not under(resolved, (root,)):
                    refuse(event, resolved)

    return hook


def answer(request: dict, namespace: dict, objects: list) -> object:
    """One judge request: look up names, or call / get / set an attribute of a referenced object."""
    if request["op"] == "lookup":
        return {name: namespace[name] for name in request["names"] if name in namespace}

    def resolve(tag: str, body):
        return objects[body] if tag == "ref" else importlib.import_module(body)

    target = objects[request["ref"]]
    if request["op"] == "call":
        return target(*decode(request["args"], resolve), **decode(request["kwargs"], resolve))
    if request["op"] == "getattr":
        return getattr(target, request["name"])
    setattr(target, request["name"], decode(request["value"], resolve))
    return None


def serve(namespace: dict, channel: list[int]) -> None:
    """Answer the judge until it closes the channel. Anything the code raises goes back by name."""
    objects: list = []

    def ref(value: object) -> dict:
        objects.append(value)
        return {"ref": len(objects) - 1}

    for line in os.fdopen(channel[0], "rb"):
        try:
            reply = {"ok": encode(answer(json.loads(line), namespace, objects), ref)}
        except BaseException as error:  # noqa: BLE001 - SystemExit inside a call is an answer too
            try:
                message = str(error)[:1000]
            except BaseException:  # noqa: BLE001 - a hostile __str__
                message = ""
            reply = {"raise": [type(error).__name__, message]}
        sys.stdout.flush()
        write_all(channel[1], (json.dumps(reply) + "\n").encode())


def program(job: dict) -> None:
    write, exit_now, exec_ = os.write, os._exit, exec
    root = os.path.realpath(job["tmp_dir"])
    readable = tuple({os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, *sys.path) if p})
    set_limits(job["limits"])
    try:
        codes = [
            compile(source, f"<{name}>", "exec", dont_inherit=True, optimize=0) for name, source in job["segments"]
        ]
    except SyntaxError as error:
        write(2, f"SyntaxError: {error}\n".encode(errors="replace"))
        exit_now(1)
    if job["audit_hook"]:
        disarm_subprocess()
        sys.addaudithook(make_audit_hook(root, readable))
    namespace = {"__name__": "__main__", "__builtins__": __builtins__}
    try:
        for code in codes:
            exec_(code, namespace)
        sys.stdout.flush()
    except BaseException as error:  # noqa: BLE001 - SystemExit before the tests is a failure too
        write(2, f"{type(error).__name__}: {error}"[:2000].encode(errors="replace") + b"\n")
        exit_now(1)
    serve(namespace, job["channel"])
    exit_now(0)


# ---- judge: runs the trusted tests against the program ----


class Unscorable(BaseException):
    """The program died, broke the protocol, raised SystemExit-like, or was handed something that
    cannot cross. A BaseException, so no `except Exception` in the tests turns it into a pass."""


class ProgramError(Exception):
    """An exception of a type that is not a builtin, raised by the program."""


def rebuild(name: str, message: str) -> BaseException:
    """The exception the program raised, as a builtin of the same name where there is one."""
    kind = getattr(builtins, name, None)
    if isinstance(kind, type) and issubclass(kind, Exception):
        try:
            return kind(message)
        except Exception:  # noqa: BLE001 - a type whose constructor wants other arguments
            return ProgramError(f"{name}: {message}")
    if isinstance(kind, type) and issubclass(kind, BaseException):
        return Unscorable(f"the program raised {name}")
    return ProgramError(f"{name}: {message}")


class Remote:
    """An object that stays in the program: calls and attribute access run there. Here it equals
    only itself, hashes by identity and has no truth value, so it never stands in for a value."""

    __slots__ = ("_channel", "_ref")

    def __init__(self, ref: int, channel: "Channel") -> None:
        object.__setattr__(self, "_ref", ref)
        object.__setattr__(self, "_channel", channel)

    def __call__(self, *args, **kwargs):
        return self._channel.ask(op="call", ref=self._ref, args=list(args), kwargs=kwargs)

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return self._channel.ask(op="getattr", ref=self._ref, name=name)

    def __setattr__(self, name: str, value) -> None:
        self._channel.ask(op="setattr", ref=self._ref, name=name, value=value)

    def __bool__(self) -> bool:
        raise TypeError("an object of the program has no truth value in the tests")

    def __repr__(self) -> str:
        return f"<program object #{self._ref}>"


class Channel:
    """The judge's end: requests out, replies in; every reply is decoded strictly."""

    def __init__(self, fds: list[int], names: set[str]) -> None:
        self.replies = os.fdopen(fds[0], "rb")
        self.requests = fds[1]
        self.names = names
        self.remotes: dict[int, Remote] = {}

    def resolve(self, tag: str, body: object) -> object:
        """A reference as its `Remote`; a module only if it is a standard-library module the tests
        name as a global (the program's `import math` behind the tests' `math.isclose`), imported
        here, so the program never picks what the judge imports."""
        if tag == "ref" and type(body) is int:
            return self.remotes.setdefault(body, Remote(body, self))
        if body in self.names and body in sys.stdlib_module_names:
            return importlib.import_module(body)
        raise ValueError(f"unexpected {tag} {body!r}")

    def send_ref(self, value: object) -> dict:
        if type(value) is not Remote:
            raise Unscorable(f"a {type(value).__name__} cannot be passed to the program")
        return {"ref": value._ref}

    def ask(self, **request) -> object:
        for key in ("args", "kwargs", "value"):
            if key in request:
                request[key] = encode(request[key], self.send_ref)
        try:
            write_all(self.requests, (json.dumps(request) + "\n").encode())
        except BrokenPipeError:
            raise Unscorable("the program died") from None
        line = self.replies.readline(MAX_REPLY + 1)
        if not line.endswith(b"\n"):
            raise Unscorable("the program died or sent an overlong reply")
        try:
            ((kind, body),) = json.loads(line).items()
            if kind == "ok":
                return decode(body, self.resolve)
            name, message = body
            if kind != "raise" or type(name) is not str or type(message) is not str:
                raise ValueError(kind)
        except Exception as error:  # noqa: BLE001 - anything malformed fails the run
            raise Unscorable(f"malformed reply from the program: {error!r}"[:500]) from None
        raise rebuild(name, message)


def global_names(code: types.CodeType) -> set[str]:
    """Every name the code (and the functions in it) may read as a global."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= global_names(const)
    return names


def judge(job: dict) -> None:
    """Bind the names the tests use that the program defines, run the tests, and give the verdict
    on fd 1. The program's version of a builtin name (`abs`, `set`) is bound only when it is all
    the tests take from the program (MBPP/126 tests a function named `sum`), so a rigged builtin
    next to the function under test changes nothing."""
    set_limits(job["limits"])
    sys.stdout = sys.stderr  # fd 1 carries only the verdict
    builtin_names = set(dir(builtins))
    try:
        code = compile(job["tests"], "<tests>", "exec", dont_inherit=True, optimize=0)
        wanted = sorted(n for n in global_names(code) if not n.startswith("__"))
        channel = Channel(job["channel"], set(wanted))
        found = channel.ask(op="lookup", names=wanted)
        if type(found) is not dict:
            raise Unscorable("malformed lookup reply")
        namespace = {name: found[name] for name in wanted if name in found}
        if namespace.keys() - builtin_names:
            namespace = {n: v for n, v in namespace.items() if n not in builtin_names}
        namespace["__name__"] = "__main__"
        exec(code, namespace)
    except BaseException as error:  # noqa: BLE001 - whatever stopped the tests, it is not a pass
        write_all(2, f"{type(error).__name__}: {error}"[:2000].encode(errors="replace") + b"\n")
        os._exit(1)
    write_all(1, b"pass\n")
    os._exit(0)


if __name__ == "__main__":

    def main() -> None:
        job = read_job()
        enter_work_dir(job)
        {"program": program, "judge": judge}[sys.argv[1]](job)

    main()
