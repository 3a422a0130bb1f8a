#!/usr/bin/env python3
"""Process-level figures for scripts/bench.sh: `codeloop --version`, and a headless two-turn tool round trip
(process start -> exit) with its peak RSS, time to first request and first request size.

The round trip runs against the Rust fake provider binary; time-to-first-request and request size are taken
from a tiny Python SSE server (it records arrival times and bodies), run separately so its overhead does not
count in the round-trip figures."""
import json, os, resource, statistics, subprocess, sys, tempfile, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

codeloop, fake = sys.argv[1], sys.argv[2]
RUNS = int(os.environ.get("BENCH_RUNS", "20"))


def run_measured(cmd, env=None, cwd=None):
    """Runs a command; returns (seconds, peak RSS in MiB, exit code). The peak RSS comes from GNU time when
    installed: a child forked from Python inherits Python's RSS before exec, which would be counted."""
    timed = ["/usr/bin/time", "-f", "%M"] + cmd if os.path.exists("/usr/bin/time") else cmd
    start = time.perf_counter()
    proc = subprocess.Popen(timed, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, err = proc.communicate()
    elapsed = time.perf_counter() - start
    rss = float("nan")
    if timed is not cmd:
        lines = err.decode(errors="replace").strip().splitlines()
        rss = int(lines[-1]) / 1024 if lines and lines[-1].isdigit() else rss
    return elapsed, rss, proc.returncode


def summary(name, values, unit, fmt="{:.1f}"):
    values = sorted(values)
    print(f"{name}: median {fmt.format(statistics.median(values))} {unit}, "
          f"min {fmt.format(values[0])}, max {fmt.format(values[-1])} ({len(values)} runs)")


versions = [run_measured([codeloop, "--version"]) for _ in range(RUNS)]
summary("codeloop --version wall", [v[0] * 1000 for v in versions], "ms", "{:.2f}")
summary("codeloop --version peak RSS", [v[1] for v in versions], "MiB")

SCRIPT = {"repeat": True, "turns": [
    {"reply": {"text": "Reading it.", "tool_calls": [{"name": "read", "arguments": {"filePath": "a.txt"}}],
               "usage": {"input": 1500, "output": 20}}},
    {"reply": {"text": "a.txt says hello.", "usage": {"input": 1600, "output": 10}}},
]}

with tempfile.TemporaryDirectory() as tmp:
    project = os.path.join(tmp, "project")
    os.makedirs(project)
    with open(os.path.join(project, "a.txt"), "w") as f:
        f.write("hello\n")
    script = os.path.join(tmp, "script.json")
    with open(script, "w") as f:
        json.dump(SCRIPT, f)
    server = subprocess.Popen([fake, "--script", script], stdout=subprocess.PIPE, text=True)
    base_url = server.stdout.readline().strip()

    def env_for(url, data):
        config = os.path.join(tmp, f"config-{abs(hash(url))}.toml")
        with open(config, "w") as f:
            f.write(f'model = "fake/test"\n[provider.fake]\nbase_url = "{url}"\n'
                    '[provider.fake.models.test]\ncontext = 128000\noutput = 8000\n')
        env = dict(os.environ, CODELOOP_CONFIG=config, CODELOOP_DATA_DIR=data, HOME=tmp)
        env.pop("XDG_CONFIG_HOME", None)
        return env

    data = os.path.join(tmp, "data")
    env = env_for(base_url, data)
    cmd = [codeloop, "run", "--on-ask", "allow", "--dir", project, "what does a.txt say?"]
    run_measured(cmd, env=env)  # warm the page cache and create the database
    trips = [run_measured(cmd, env=env) for _ in range(RUNS)]
    failed = [t for t in trips if t[2] != 0]
    if failed:
        print(f"warning: {len(failed)} runs failed")
    summary("two-turn tool round trip (start -> exit)", [t[0] * 1000 for t in trips], "ms")
    summary("two-turn tool round trip peak RSS", [t[1] for t in trips], "MiB")
    server.terminate()

    # Time to first request and request sizes, from a recording server.
    arrivals = []

    class Handler(BaseHTTPRequestHandler):
        turn = 0

        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("content-length", 0)))
            arrivals.append((time.perf_counter(), len(body)))
            Handler.turn += 1
            chunks = []
            if Handler.turn % 2 == 1:
                chunks.append({"choices": [{"index": 0, "delta": {"role": "assistant", "tool_calls": [
                    {"index": 0, "id": "call_1", "type": "function",
                     "function": {"name": "read", "arguments": "{\"filePath\": \"a.txt\"}"}}]}}]})
                chunks.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
            else:
                chunks.append({"choices": [{"index": 0, "delta": {"role": "assistant", "content": "hello"}}]})
                chunks.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
            chunks.append({"choices": [], "usage": {"prompt_tokens": 100, "completion_tokens": 5, "total_tokens": 105}})
            out = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
            payload = out.encode()
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("content-length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    env = env_for(url, os.path.join(tmp, "data2"))
    cmd = [codeloop, "run", "--on-ask", "allow", "--dir", project, "what does a.txt say?"]
    run_measured(cmd, env=env)
    firsts, sizes = [], []
    for _ in range(RUNS):
        arrivals.clear()
        start = time.perf_counter()
        run_measured(cmd, env=env)
        if arrivals:
            firsts.append((arrivals[0][0] - start) * 1000)
            sizes.append(arrivals[0][1])
    httpd.shutdown()
    summary("time from process start to first request", firsts, "ms")
    print(f"first request size (system prompt + all tool schemas + message): {statistics.median(sizes) / 1000:.1f} kB")

# A 20 000-delta answer end to end: HTTP -> SSE decode -> processor -> store -> bus -> stdout (a file). CPU
# (user + system) of the codeloop process per delta, and its peak RSS.
DELTAS = 20_000
with tempfile.TemporaryDirectory() as tmp:
    project = os.path.join(tmp, "project")
    os.makedirs(project)
    script = os.path.join(tmp, "stream.json")
    with open(script, "w") as f:
        json.dump({"repeat": True, "turns": [{"reply": {"text": "word " * DELTAS, "text_chunks": DELTAS}}]}, f)
    server = subprocess.Popen([fake, "--script", script], stdout=subprocess.PIPE, text=True)
    base_url = server.stdout.readline().strip()
    config = os.path.join(tmp, "config.toml")
    with open(config, "w") as f:
        f.write(f'model = "fake/test"\n[provider.fake]\nbase_url = "{base_url}"\n'
                '[provider.fake.models.test]\ncontext = 128000\noutput = 8000\n')
    cpu, rss = [], []
    for i in range(max(3, RUNS // 4)):
        env = dict(os.environ, CODELOOP_CONFIG=config, CODELOOP_DATA_DIR=os.path.join(tmp, f"data{i}"))
        timed = ["/usr/bin/time", "-f", "%U %S %M", codeloop, "run", "--dir", project, "stream"]
        with open(os.path.join(tmp, "out.txt"), "w") as out:
            proc = subprocess.run(timed, env=env, stdout=out, stderr=subprocess.PIPE, text=True)
        user, system, peak = proc.stderr.strip().splitlines()[-1].split()
        cpu.append((float(user) + float(system)) / DELTAS * 1e6)
        rss.append(int(peak) / 1024)
    server.terminate()
    summary(f"{DELTAS}-delta stream end to end, CPU per delta (whole process, start-up included)", cpu, "µs", "{:.2f}")
    summary(f"{DELTAS}-delta stream end to end, peak RSS", rss, "MiB")
