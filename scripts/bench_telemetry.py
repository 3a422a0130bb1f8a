#!/usr/bin/env python3
"""What OpenTelemetry export costs a run (DESIGN.md §5h, §7): the headless two-turn tool round trip and the
20 000-delta stream, each with telemetry off, with a live collector (a tiny OTLP/HTTP receiver here that
answers every export), with a refused endpoint and with a collector that accepts and never answers.
Runs are interleaved so load on the machine falls on every variant alike.

Usage: bench_telemetry.py CODELOOP FAKE_PROVIDER"""
import json, os, socket, statistics, subprocess, sys, tempfile, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

codeloop, fake = sys.argv[1], sys.argv[2]
RUNS = int(os.environ.get("BENCH_RUNS", "20"))
received = {"bytes": 0, "requests": 0}


class Collector(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        received["bytes"] += len(body)
        received["requests"] += 1
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


live = ThreadingHTTPServer(("127.0.0.1", 0), Collector)
threading.Thread(target=live.serve_forever, daemon=True).start()
silent = socket.socket()
silent.bind(("127.0.0.1", 0))
silent.listen(64)  # accepted by the kernel, never read or answered
held = []
threading.Thread(target=lambda: [held.append(silent.accept()) for _ in iter(int, 1)], daemon=True).start()
closed = socket.socket()
closed.bind(("127.0.0.1", 0))
refused_port = closed.getsockname()[1]
closed.close()

VARIANTS = {
    "off": None,
    "live collector": f"http://127.0.0.1:{live.server_address[1]}",
    "refused": f"http://127.0.0.1:{refused_port}",
    "silent collector": f"http://127.0.0.1:{silent.getsockname()[1]}",
}


def timed(cmd, env, out):
    start = time.perf_counter()
    proc = subprocess.run(["/usr/bin/time", "-f", "%U %S"] + cmd, env=env, stdout=out, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - start
    user, system = proc.stderr.strip().splitlines()[-1].split()
    return wall, float(user) + float(system), proc.returncode


def bench(name, script_turns, prompt, runs):
    with tempfile.TemporaryDirectory() as tmp:
        project = os.path.join(tmp, "project")
        os.makedirs(project)
        with open(os.path.join(project, "a.txt"), "w") as f:
            f.write("hello\n")
        script = os.path.join(tmp, "script.json")
        with open(script, "w") as f:
            json.dump({"repeat": True, "turns": script_turns}, f)
        server = subprocess.Popen([fake, "--script", script], stdout=subprocess.PIPE, text=True)
        base_url = server.stdout.readline().strip()
        envs = {}
        for variant, endpoint in VARIANTS.items():
            config = os.path.join(tmp, f"config-{len(envs)}.toml")
            with open(config, "w") as f:
                f.write(f'model = "fake/test"\n[provider.fake]\nbase_url = "{base_url}"\n'
                        '[provider.fake.models.test]\ncontext = 128000\noutput = 8000\n')
                if endpoint:
                    f.write(f'[telemetry]\notlp_endpoint = "{endpoint}"\n')
            envs[variant] = dict(os.environ, CODELOOP_CONFIG=config, HOME=tmp,
                                 CODELOOP_DATA_DIR=os.path.join(tmp, f"data-{len(envs)}"),
                                 OTEL_EXPORTER_OTLP_TIMEOUT="10000")
        cmd = [codeloop, "run", "--on-ask", "allow", "--dir", project, prompt]
        figures = {v: [] for v in VARIANTS}
        with open(os.path.join(tmp, "out.txt"), "w") as out:
            for env in envs.values():
                timed(cmd, env, out)  # warm up, create the store
            for _ in range(runs):
                for variant, env in envs.items():
                    wall, cpu, code = timed(cmd, env, out)
                    if code != 0:
                        print(f"warning: a {variant} run exited {code}")
                    figures[variant].append((wall, cpu))
        server.terminate()
        base_wall = statistics.median(w for w, _ in figures["off"])
        for variant, values in figures.items():
            wall = statistics.median(w for w, _ in values)
            cpu = statistics.median(c for _, c in values)
            print(f"{name}, telemetry {variant}: wall median {wall * 1000:.1f} ms "
                  f"({(wall / base_wall - 1) * 100:+.1f} % vs off), CPU median {cpu * 1000:.1f} ms ({len(values)} runs)")


bench("two-turn tool round trip", [
    {"reply": {"text": "Reading it.", "tool_calls": [{"name": "read", "arguments": {"filePath": "a.txt"}}],
               "usage": {"input": 1500, "output": 20}}},
    {"reply": {"text": "a.txt says hello.", "usage": {"input": 1600, "output": 10}}},
], "what does a.txt say?", RUNS)
bench("20000-delta stream", [{"reply": {"text": "word " * 20_000, "text_chunks": 20_000}}], "stream", max(3, RUNS // 4))
print(f"live collector received {received['requests']} exports, {received['bytes'] / 1024:.1f} KiB")
