#!/usr/bin/env python3
"""Soak figures for one long-running `codeloop serve` (issue 26): N short runs (a session, a prompt, a
one-turn answer each) against the fake provider; after 1 000 and after 3 000 it prints the server's
resident memory, open descriptors, threads and the store's bytes per session. Flat from 1 000 on means
the bounded buffers filled and nothing else grows.

Usage: scripts/bench_soak.py target/release/codeloop target/release/codeloop-fake-provider [RUNS]"""
import json, os, subprocess, sys, tempfile, threading, urllib.request

codeloop, fake = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
RUNS = int(sys.argv[3]) if len(sys.argv) > 3 else 3000
CHECKPOINTS = {n for n in (100, 500) if n < RUNS} | {n for n in range(1000, RUNS + 1, 1000)} | {RUNS}
TOKEN = "soak-token"


def proc_figures(pid):
    with open(f"/proc/{pid}/status") as f:
        fields = dict(line.split(":", 1) for line in f if ":" in line)
    rss = int(fields["VmRSS"].split()[0]) / 1024
    threads = int(fields["Threads"])
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    return rss, fds, threads


def store_bytes(data):
    return sum(os.path.getsize(os.path.join(data, f)) for f in os.listdir(data) if f.startswith("codeloop.db"))


def call(url, path, body=None):
    request = urllib.request.Request(url + path, data=json.dumps(body).encode() if body is not None else None,
                                     method="POST" if body is not None else "GET",
                                     headers={"content-type": "application/json", "authorization": f"Bearer {TOKEN}"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read() or b"null")


with tempfile.TemporaryDirectory() as tmp:
    project, data = os.path.join(tmp, "project"), os.path.join(tmp, "data")
    os.makedirs(project)
    script = os.path.join(tmp, "script.json")
    with open(script, "w") as f:
        json.dump({"repeat": True, "turns": [{"reply": {"text": "done.", "usage": {"input": 900, "output": 3}}}]}, f)
    provider = subprocess.Popen([fake, "--script", script], stdout=subprocess.PIPE, text=True)
    base_url = provider.stdout.readline().strip()
    config = os.path.join(tmp, "config.toml")
    with open(config, "w") as f:
        f.write(f'model = "fake/test"\nsnapshot = false\n[provider.fake]\nbase_url = "{base_url}"\n'
                '[provider.fake.models.test]\ncontext = 128000\noutput = 8000\n')
    env = dict(os.environ, CODELOOP_DATA_DIR=data, HOME=tmp, CODELOOP_CONFIG=config, CODELOOP_SERVER_TOKEN=TOKEN)
    for var in ("XDG_CONFIG_HOME", "CODELOOP_DATABASE_URL", "CODELOOP_LOG", "RUST_LOG"):
        env.pop(var, None)
    server = subprocess.Popen([codeloop, "serve", "--port", "0"], cwd=project, env=env,
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = None
    for line in server.stderr:
        if "http://" in line:
            url = line[line.find("http://"):].split()[0].rstrip("/")
            break
    threading.Thread(target=lambda: [None for _ in server.stderr], daemon=True).start()
    try:
        print(f"{'runs':>6} {'RSS MiB':>8} {'fds':>5} {'threads':>8} {'store B/session':>16}")
        for run in range(1, RUNS + 1):
            session = call(url, "/session", {})["id"]
            call(url, f"/session/{session}/prompt", {"parts": [{"type": "text", "text": f"run {run}"}]})
            if run in CHECKPOINTS:
                rss, fds, threads = proc_figures(server.pid)
                print(f"{run:>6} {rss:>8.1f} {fds:>5} {threads:>8} {store_bytes(data) / run:>16.0f}", flush=True)
    finally:
        server.terminate()
        server.wait(timeout=10)
        provider.terminate()
