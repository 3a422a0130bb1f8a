#!/usr/bin/env python3
"""Figures for several `codeloop serve` workers on one PostgreSQL store (DESIGN.md §5b, issue 14):

1. runs per second with N workers (default 3) and M sessions (default 100) against the scripted fake provider:
   one prompt per session, posted concurrently and spread over the workers; every run is checked to have
   completed exactly once (one user message, the expected answers, no overlapping assistant messages);
2. failover time after a SIGKILL of the worker running a slowly streamed answer: until another worker has
   settled the run (answer marked aborted and completed) and until the session is idle again (the run
   continued and finished), for each lease length asked for;
3. the added cost per step versus SQLite: one session, one worker, a 5-step run (4 tool steps + text),
   median of several runs, SQLite vs PostgreSQL.

PostgreSQL is a throw-away cluster like the tests' (crates/codeloop-testkit/src/postgres.rs): `initdb` in a
temp dir, run as the `postgres` user when we are root, `pg_ctl` on a free 127.0.0.1 port. Everything listens
on loopback only; every process started here and the cluster are stopped at the end, however it ends.

Usage: scripts/bench_workers.py [--codeloop target/release/codeloop] [--fake target/release/codeloop-fake-provider]
           [--workers 3] [--sessions 100] [--leases 5,15] [--failover-trials 3] [--step-runs 21]
           [--pg-sync off|on] [--only throughput,failover,steps]
(build first: cargo build --release -p codeloop-cli -p codeloop-testkit)
"""
import argparse, atexit, glob, json, os, shutil, signal, socket, statistics, subprocess, sys, tempfile
import threading, time, urllib.error, urllib.request
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--codeloop", default=os.path.join(ROOT, "target/release/codeloop"))
ap.add_argument("--fake", default=os.path.join(ROOT, "target/release/codeloop-fake-provider"))
ap.add_argument("--workers", type=int, default=3)
ap.add_argument("--sessions", type=int, default=100)
ap.add_argument("--rounds", type=int, default=3, help="throughput rounds (new sessions each)")
ap.add_argument("--clients", type=int, default=100, help="concurrent HTTP clients posting prompts")
ap.add_argument("--leases", default="5,15", help="lease lengths (s) to measure failover with")
ap.add_argument("--failover-trials", type=int, default=3, help="kills per lease length")
ap.add_argument("--step-runs", type=int, default=21, help="5-step runs per store (median)")
ap.add_argument("--pg-sync", choices=["off", "on"], default="off",
                help="synchronous_commit of the cluster; off (default) is what SQLite's WAL + synchronous=NORMAL "
                     "gives (no fsync per commit); on fsyncs every commit")
ap.add_argument("--only", default="throughput,failover,steps")
args = ap.parse_args()
PARTS = set(args.only.split(","))

for binary in (args.codeloop, args.fake):
    if not os.access(binary, os.X_OK):
        sys.exit(f"missing {binary}: cargo build --release -p codeloop-cli -p codeloop-testkit")

TMP = tempfile.mkdtemp(prefix="codeloop-bench-workers-")
PROCS = []  # every process we started, stopped at exit
PG = {}     # bin, data, root, port when the cluster runs


def is_root():
    return os.geteuid() == 0


def server_cmd(program, *rest):
    cmd = [os.path.join(PG["bin"], program), *rest]
    return (["runuser", "-u", "postgres", "--"] + cmd) if PG["root"] else cmd


def cleanup():
    for proc in PROCS:
        if proc.poll() is None:
            proc.kill()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
    if PG.get("started"):
        subprocess.run(server_cmd("pg_ctl", "-D", PG["data"], "-m", "immediate", "stop"), cwd="/",
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    shutil.rmtree(TMP, ignore_errors=True)


atexit.register(cleanup)
signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def find_pg_bin():
    found = []
    for path in glob.glob("/usr/lib/postgresql/*/bin/initdb"):
        try:
            found.append((int(path.split("/")[4]), os.path.dirname(path)))
        except ValueError:
            pass
    if found:
        return max(found)[1]
    initdb = shutil.which("initdb")
    return os.path.dirname(initdb) if initdb else None


def start_postgres():
    PG["bin"] = find_pg_bin()
    if not PG["bin"]:
        sys.exit("no PostgreSQL (initdb under /usr/lib/postgresql/*/bin or on PATH): apt-get install -y postgresql")
    PG["root"] = is_root()
    pgdir = os.path.join(TMP, "pg")
    os.makedirs(pgdir)
    os.chmod(TMP, 0o755)
    if PG["root"]:
        subprocess.run(["chown", "postgres:", pgdir], check=True)
    PG["data"] = os.path.join(pgdir, "data")
    subprocess.run(server_cmd("initdb", "-D", PG["data"], "-U", "postgres", "--auth=trust", "-E", "UTF8"),
                   check=True, stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL, cwd=pgdir)
    PG["port"] = free_port()
    options = (f"-p {PG['port']} -k {pgdir} -c listen_addresses=127.0.0.1 -c max_connections=300 "
               f"-c synchronous_commit={args.pg_sync}")
    PG["started"] = True
    subprocess.run(server_cmd("pg_ctl", "-D", PG["data"], "-l", os.path.join(pgdir, "log"), "-w", "-t", "60",
                              "-o", options, "start"), check=True, stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                   cwd=pgdir)
    version = subprocess.run([os.path.join(PG["bin"], "postgres"), "--version"], capture_output=True, text=True)
    print(f"PostgreSQL: {version.stdout.strip()} on 127.0.0.1:{PG['port']} (synchronous_commit={args.pg_sync}, fsync on)")


DB_COUNT = [0]


def new_database():
    DB_COUNT[0] += 1
    name = f"bench{DB_COUNT[0]}"
    subprocess.run([os.path.join(PG["bin"], "createdb"), "-h", "127.0.0.1", "-p", str(PG["port"]), "-U",
                    "postgres", name], check=True, stdin=subprocess.DEVNULL)
    return f"postgres://postgres@127.0.0.1:{PG['port']}/{name}"


def psql(url, sql):
    out = subprocess.run([os.path.join(PG["bin"], "psql"), "-At", "-d", url, "-c", sql],
                         capture_output=True, text=True, stdin=subprocess.DEVNULL)
    return out.stdout.strip()


def drain(stream):
    threading.Thread(target=lambda: [None for _ in stream], daemon=True).start()


def fake_provider(turns):
    path = os.path.join(TMP, f"script-{len(PROCS)}.json")
    with open(path, "w") as f:
        json.dump({"repeat": True, "turns": turns}, f)
    proc = subprocess.Popen([args.fake, "--script", path], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            stdin=subprocess.DEVNULL, text=True)
    PROCS.append(proc)
    url = proc.stdout.readline().strip()
    if not url.startswith("http://127.0.0.1"):
        sys.exit(f"the fake provider did not start: {url!r}")
    drain(proc.stdout)
    return proc, url


def write_config(name, provider_url, extra=""):
    path = os.path.join(TMP, f"{name}.toml")
    with open(path, "w") as f:
        f.write(f'model = "fake/test"\n[provider.fake]\nbase_url = "{provider_url}"\n'
                '[provider.fake.models.test]\ncontext = 128000\noutput = 8000\n'
                '[permission]\nread = "allow"\n' + extra)
    return path


PROJECT = os.path.join(TMP, "project")
HOME = os.path.join(TMP, "home")
os.makedirs(PROJECT)
os.makedirs(HOME)
for name in "abcd":  # four files: four identical calls in a row would trip the doom-loop guard (an ask)
    with open(os.path.join(PROJECT, f"{name}.txt"), "w") as f:
        f.write(f"hello from {name}\n")


class Worker:
    """`codeloop serve --port 0 [--store URL]` with its own data dir (another machine)."""
    count = 0

    def __init__(self, config, store=None):
        Worker.count += 1
        self.data = os.path.join(TMP, f"data{Worker.count}")
        cmd = [args.codeloop, "serve", "--hostname", "127.0.0.1", "--port", "0"]
        if store:
            cmd += ["--store", store]
        env = dict(os.environ, CODELOOP_DATA_DIR=self.data, HOME=HOME, CODELOOP_CONFIG=config)
        for var in ("XDG_CONFIG_HOME", "CODELOOP_DATABASE_URL", "CODELOOP_LOG", "RUST_LOG"):
            env.pop(var, None)
        self.proc = subprocess.Popen(cmd, cwd=PROJECT, env=env, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        PROCS.append(self.proc)
        deadline = time.monotonic() + 30
        self.url = None
        while time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                break
            at = line.find("http://")
            if at >= 0:
                self.url = line[at:].split()[0].rstrip("/")
                break
        if not self.url:
            sys.exit(f"worker did not start: {' '.join(cmd)} (exit {self.proc.poll()})")
        drain(self.proc.stderr)

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()


def http(method, url, body=None, timeout=120):
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method, headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            raw = response.read()
            return response.status, (json.loads(raw) if raw else None)
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")


def create_session(worker):
    status, session = http("POST", f"{worker.url}/session", {})
    assert status == 200, (status, session)
    return session["id"]


def prompt_body(text, delivery=None):
    body = {"parts": [{"type": "text", "text": text}]}
    if delivery:
        body["delivery"] = delivery
    return body


def messages(worker, session):
    status, page = http("GET", f"{worker.url}/session/{session}/message?limit=1000")
    assert status == 200, (status, page)
    return list(reversed(page))  # oldest first


def text_of(message):
    return "".join(p.get("text", "") for p in message["parts"] if p["type"] == "text")


def check_run(history, answers):
    """None when `history` is one user message and `answers` assistant messages, each completed without
    error and none starting before the previous one completed; else what is wrong."""
    if len(history) != 1 + answers:
        return f"{len(history)} messages"
    if history[0]["info"]["role"] != "user":
        return "first message is not the user's"
    previous_end = None
    for m in history[1:]:
        info = m["info"]
        if info["role"] != "assistant":
            return "a user message among the answers"
        if info.get("error"):
            return f"error {info['error']}"
        t = info["time"]
        if t.get("completed") is None:
            return "an answer not completed"
        if previous_end is not None and t["created"] < previous_end:
            return "overlapping answers"
        previous_end = t["completed"]
    return None


def load_note():
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} CPUs"


def median_line(name, values, unit, fmt="{:.1f}"):
    v = sorted(values)
    return (f"{name}: median {fmt.format(statistics.median(v))} {unit}, min {fmt.format(v[0])}, "
            f"max {fmt.format(v[-1])} ({len(v)} runs)")


def tool_turn(name="a", limit=2000):
    call = {"name": "read", "arguments": {"filePath": f"{name}.txt", "limit": limit}}
    return {"reply": {"text": "Reading it.", "tool_calls": [call], "usage": {"input": 1500, "output": 20}}}


TEXT_TURN = {"reply": {"text": "a.txt says hello.", "usage": {"input": 1600, "output": 10}}}

print(f"machine: {load_note()} before the bench")
start_postgres()


# 1. Throughput: N workers, M sessions, one prompt each, posted concurrently.
def throughput():
    fake, url = fake_provider([TEXT_TURN])
    store = new_database()
    config = write_config("throughput", url)
    workers = [Worker(config, store) for _ in range(args.workers)]
    # Warm-up: one run per worker (connections, caches), not counted.
    for w in workers:
        s = create_session(w)
        status, result = http("POST", f"{w.url}/session/{s}/prompt", prompt_body("warm up"))
        assert status == 200, (status, result)
    clients = min(args.clients, args.sessions)
    print(f"\n== 1. throughput: {args.workers} workers, {args.sessions} sessions, one prompt each (sync /prompt), "
          f"{clients} concurrent clients, short text answers; {args.rounds} rounds of new sessions")
    rates, all_ok = [], True
    for round_ in range(args.rounds):
        sessions = [create_session(workers[i % len(workers)]) for i in range(args.sessions)]
        before = os.times()

        def post(i):
            # Posted to another worker than the one that created the session.
            w = workers[(i + 1) % len(workers)]
            status, result = http("POST", f"{w.url}/session/{sessions[i]}/prompt", prompt_body(f"prompt {i}"))
            return status, result, time.perf_counter()

        start = time.perf_counter()
        with ThreadPoolExecutor(max_workers=clients) as pool:
            results = list(pool.map(post, range(args.sessions)))
        wall = time.perf_counter() - start
        after = os.times()
        failures = [(i, r[0], str(r[1])[:200]) for i, r in enumerate(results)
                    if r[0] != 200 or (isinstance(r[1], dict) and r[1].get("info") is None)]
        bad = {}
        for i, s in enumerate(sessions):
            problem = check_run(messages(workers[i % len(workers)], s), 1)
            if problem:
                bad[s] = problem
        leases = psql(store, "SELECT count(*) FROM run_lease")
        queued = psql(store, "SELECT count(*) FROM queued_input")
        lat = sorted(r[2] - start for r in results)
        rates.append(args.sessions / wall)
        print(f"round {round_ + 1}: all {args.sessions} runs done in {wall:.2f} s -> {args.sessions / wall:.1f} runs/s "
              f"(completions: first {lat[0] * 1000:.0f} ms, median {statistics.median(lat) * 1000:.0f} ms, "
              f"last {lat[-1] * 1000:.0f} ms; bench client CPU "
              f"{after.user - before.user + after.system - before.system:.2f} s)")
        print(f"  checks: {args.sessions - len(bad)}/{args.sessions} sessions ran exactly once (1 user message + "
              f"1 completed answer, no overlap); HTTP failures {len(failures)}; leases left {leases}, "
              f"queued inputs left {queued}")
        for s, problem in list(bad.items())[:5]:
            print(f"  BAD {s}: {problem}")
        for f in failures[:5]:
            print(f"  FAILED {f}")
        all_ok = all_ok and not bad and not failures
    print(median_line("runs per second", rates, "runs/s") + f"; {load_note()}")
    for w in workers:
        w.stop()
    fake.terminate()
    return all_ok


def throughput_tools():
    """Same with one tool call + text per run; the script's turns are global, so a run may take more than one
    tool step: the total number of steps is counted from the histories."""
    # 16 different calls: a run that draws several tool turns in a row must not trip the doom-loop guard.
    fake, url = fake_provider([turn for i in range(16) for turn in (tool_turn("abcd"[i % 4], 100 + i), TEXT_TURN)])
    store = new_database()
    config = write_config("throughput-tools", url)
    workers = [Worker(config, store) for _ in range(args.workers)]
    for w in workers:
        s = create_session(w)
        http("POST", f"{w.url}/session/{s}/prompt", prompt_body("warm up"))
    sessions = [create_session(workers[i % len(workers)]) for i in range(args.sessions)]

    def post(i):
        w = workers[(i + 1) % len(workers)]
        return http("POST", f"{w.url}/session/{sessions[i]}/prompt", prompt_body(f"prompt {i}"))[0]

    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=min(args.clients, args.sessions)) as pool:
        statuses = list(pool.map(post, range(args.sessions)))
    wall = time.perf_counter() - start
    steps, bad = 0, 0
    for i, s in enumerate(sessions):
        history = messages(workers[i % len(workers)], s)
        answers = len(history) - 1
        steps += answers
        if check_run(history, answers) or answers < 1 or text_of(history[-1]) != "a.txt says hello.":
            bad += 1
    print(f"\n== 1b. throughput with tool calls: {args.workers} workers, {args.sessions} sessions "
          f"(scripted answers alternate tool call / text)")
    print(f"wall time: {wall:.2f} s -> {args.sessions / wall:.1f} runs/s, {steps / wall:.1f} steps/s "
          f"({steps} model steps, {steps / args.sessions:.2f} per run)")
    print(f"checks: {args.sessions - bad}/{args.sessions} runs completed once with ordered, non-overlapping "
          f"steps; HTTP non-200: {sum(1 for s in statuses if s != 200)}; {load_note()}")
    for w in workers:
        w.stop()
    fake.terminate()


# 2. Failover: kill the worker running a slowly streamed answer.
def failover(lease):
    chunks = lease * 12 + 100  # 100 ms each: still streaming at the latest kill
    slow = {"reply": {"text": "never finished " * chunks, "text_chunks": chunks, "chunk_delay_ms": 100}}
    fast = {"reply": {"text": "continued by another worker"}}
    fake, url = fake_provider([slow, fast])
    store = new_database()
    config = write_config(f"failover{lease}", url, f"[store]\nlease_secs = {lease}\n")
    workers = [Worker(config, store) for _ in range(3)]
    settled_times, idle_times = [], []
    for trial in range(args.failover_trials):
        victim, watcher = workers[0], workers[1]
        session = create_session(watcher)
        status, _ = http("POST", f"{victim.url}/session/{session}/prompt_async", prompt_body("one", "queue"))
        assert status == 202, status
        deadline = time.monotonic() + 30
        while True:
            history = messages(watcher, session)
            if len(history) > 1 and text_of(history[1]):
                break
            assert time.monotonic() < deadline, "the victim never started answering"
            time.sleep(0.05)
        # Kills spread over the lease, so they fall at different points of the renewal cycle.
        into_run = (trial + 0.5) / args.failover_trials * lease
        time.sleep(into_run)
        victim.kill()
        killed = time.perf_counter()
        settled = idle = None
        deadline = time.monotonic() + 4 * lease + 30
        while idle is None:
            assert time.monotonic() < deadline, f"no worker took over within {4 * lease + 30} s"
            history = messages(watcher, session)
            now = time.perf_counter()
            first = history[1]["info"] if len(history) > 1 else {}
            if settled is None and first.get("error") and first["time"].get("completed"):
                settled = now - killed
            if (settled is not None and len(history) == 3 and history[2]["info"]["time"].get("completed")
                    and text_of(history[2]) == "continued by another worker"):
                busy = [w for w in workers[1:] if session in (http("GET", f"{w.url}/session/status")[1] or {})]
                if not busy:
                    idle = now - killed
            time.sleep(0.05)
        settled_times.append(settled)
        idle_times.append(idle)
        print(f"  lease {lease} s, kill {trial + 1} ({into_run:.1f} s into the answer): settled after {settled:.2f} s, "
              f"idle after {idle:.2f} s")
        # Replace the dead worker, so the next kill again has two survivors.
        workers = workers[1:] + [Worker(config, store)]
    for w in workers:
        w.stop()
    fake.terminate()
    return settled_times, idle_times


# 3. Cost per step: SQLite vs PostgreSQL, one worker, one session, 4 tool steps + text.
def steps():
    fake, url = fake_provider([tool_turn(n) for n in "abcd"] + [TEXT_TURN])
    config = write_config("steps", url)
    results = {}
    for name, store in (("SQLite", None), ("PostgreSQL", new_database()),
                        ("SQLite", None), ("PostgreSQL", new_database())):
        # Each store measured twice, alternating, so drift of the machine's load hits both.
        w = Worker(config, store)
        times = results.setdefault(name, [])
        runs = (args.step_runs + 1) // 2 + 1  # the first of each batch warms up and is not counted
        for r in range(runs):
            session = create_session(w)
            start = time.perf_counter()
            status, result = http("POST", f"{w.url}/session/{session}/prompt", prompt_body("read a.txt to d.txt"))
            elapsed = time.perf_counter() - start
            assert status == 200, (status, result)
            history = messages(w, session)
            problem = check_run(history, 5)
            assert problem is None and text_of(history[-1]) == "a.txt says hello.", problem
            if r > 0:
                times.append(elapsed * 1000)
        w.stop()
    fake.terminate()
    print(f"\n== 3. cost per step: one worker, one session, 5 steps (4 read tool calls + text), prompt -> answer")
    for name in ("SQLite", "PostgreSQL"):
        print(median_line(f"{name:10} run", results[name], "ms") +
              f" = {statistics.median(results[name]) / 5:.1f} ms per step")
    added = (statistics.median(results["PostgreSQL"]) - statistics.median(results["SQLite"])) / 5
    print(f"added cost of PostgreSQL: {added:+.1f} ms per step; {load_note()}")


ok = True
if "throughput" in PARTS:
    ok = throughput()
    throughput_tools()
if "failover" in PARTS:
    print(f"\n== 2. failover after SIGKILL of the worker streaming an answer (3 workers; time from the kill)")
    for lease in [int(x) for x in args.leases.split(",") if x]:
        settled, idle = failover(lease)
        print(median_line(f"lease {lease} s: run settled by another worker", settled, "s", "{:.2f}"))
        print(median_line(f"lease {lease} s: session idle again (run continued and done)", idle, "s", "{:.2f}"))
    print(f"({load_note()})")
if "steps" in PARTS:
    steps()
sys.exit(0 if ok else 1)
