#!/usr/bin/env python3
"""What the sandbox adds to a bash call seen from outside (DESIGN.md §7: <= 5 ms with every wall): a headless
run of 20 `bash` calls (`true`) against the fake provider, with `[sandbox] mode = "workspace-write"` and with
`mode = "off"`, runs alternating; the per-call figure is the difference of the medians over 20. With
`--loaded`, both cores are kept busy by two spinning processes while it runs.
Usage: scripts/bench_bash_calls.py CODELOOP FAKE_PROVIDER [--loaded]"""
import json, os, statistics, subprocess, sys, tempfile, time

codeloop, fake = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
loaded = "--loaded" in sys.argv[3:]
RUNS, CALLS = int(os.environ.get("BENCH_RUNS", "15")), 20

turns = [{"reply": {"tool_calls": [{"name": "bash", "arguments": {"command": "true", "description": f"call {i}"}}]}}
         for i in range(CALLS)]
turns.append({"reply": {"text": "done"}})

with tempfile.TemporaryDirectory() as tmp:
    project, home, data = (os.path.join(tmp, d) for d in ("project", "home", "data"))
    for d in (project, home, data):
        os.makedirs(d)
    script = os.path.join(tmp, "script.json")
    with open(script, "w") as f:
        json.dump({"repeat": True, "turns": turns}, f)
    server = subprocess.Popen([fake, "--script", script, "--repeat"], stdout=subprocess.PIPE, text=True)
    base_url = server.stdout.readline().strip()
    spinners = [subprocess.Popen(["sh", "-c", "while :; do :; done"]) for _ in range(2)] if loaded else []
    try:
        def config(mode):
            path = os.path.join(tmp, f"{mode}.toml")
            with open(path, "w") as f:
                f.write(f'model = "fake/test"\n[provider.fake]\nbase_url = "{base_url}"\n'
                        '[provider.fake.models.test]\ncontext = 128000\noutput = 8000\n'
                        f'[sandbox]\nmode = "{mode}"\n')
            return path

        def run(mode):
            env = dict(os.environ, HOME=home, CODELOOP_DATA_DIR=data, CODELOOP_CONFIG=config(mode))
            start = time.perf_counter()
            done = subprocess.run([codeloop, "run", "--on-ask", "allow", "go"], cwd=project, env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            if done.returncode != 0:
                sys.exit(f"codeloop run failed ({mode}): {done.stderr.decode(errors='replace')[-500:]}")
            return time.perf_counter() - start

        walls = {"workspace-write": [], "off": []}
        run("off")
        for _ in range(RUNS):
            for mode in walls:
                walls[mode].append(run(mode))
        on, off = (statistics.median(walls[m]) for m in ("workspace-write", "off"))
        label = "both cores busy" if loaded else "idle"
        print(f"{CALLS} bash calls, {label}: walled {on * 1000:.0f} ms, off {off * 1000:.0f} ms (medians of {RUNS})")
        print(f"sandbox added per bash call, {label}: {(on - off) / CALLS * 1000:.2f} ms")
    finally:
        for spinner in spinners:
            spinner.kill()
        server.kill()
