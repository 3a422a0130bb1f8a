#!/usr/bin/env python3
"""The terminal UI's weight (DESIGN.md §7): resident memory of `codeloop tui` with no session, and with a
session of about 10 000 parts opened in two shapes — 200 steps of 48 tool calls each plus text, and 4
steps of 2 500 tool calls each (a few very long messages) — measured from /proc/PID/status after the UI
has drawn, in a tmux pane of 120x40 as a person would see it.

Usage: bench_tui.py CODELOOP FAKE_PROVIDER   (needs tmux)"""
import json, os, re, shutil, subprocess, sys, tempfile, time

codeloop, fake = sys.argv[1], sys.argv[2]
if not shutil.which("tmux"):
    print("tui weight: skipped (no tmux)")
    sys.exit(0)
SHAPES = [(200, 48), (4, 2500)]


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def codeloop_pid(pane_pid):
    """The codeloop process in the pane (tmux runs it under a shell)."""
    out = subprocess.run(["ps", "-o", "pid=,comm=", "--ppid", str(pane_pid)], capture_output=True, text=True).stdout
    for line in out.splitlines():
        pid, comm = line.split(None, 1)
        if "codeloop" in comm:
            return int(pid)
    return pane_pid


def measure(env, args, wait_for, label):
    name = f"bench-tui-{os.getpid()}"
    cmd = " ".join([codeloop] + args)
    subprocess.run(["tmux", "new-session", "-d", "-s", name, "-x", "120", "-y", "40", f"exec {cmd}"], env=env, check=True)
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            screen = subprocess.run(["tmux", "capture-pane", "-p", "-t", name], capture_output=True, text=True).stdout
            if re.search(wait_for, screen):
                break
            time.sleep(0.2)
        else:
            print(f"warning: {label}: the UI never showed {wait_for!r}")
        time.sleep(1.0)  # let it settle after the first frames
        pane = int(subprocess.run(["tmux", "display", "-p", "-t", name, "#{pane_pid}"], capture_output=True, text=True).stdout)
        pid = codeloop_pid(pane)
        samples = []
        for _ in range(5):
            samples.append(rss_mib(pid))
            time.sleep(0.2)
        print(f"tui {label}: resident {max(samples):.1f} MiB")
    finally:
        subprocess.run(["tmux", "kill-session", "-t", name], capture_output=True)


def build(tmp, steps, calls):
    """A project and a session of `steps` answers of `calls` tool calls each; returns (env, project, session,
    parts)."""
    project = os.path.join(tmp, f"project-{steps}x{calls}")
    os.makedirs(project)
    with open(os.path.join(project, "a.txt"), "w") as f:
        f.write("hello\n")
    turns = [{"reply": {"text": f"step {n}", "tool_calls": [{"name": "read", "arguments": {"filePath": "a.txt"}}] * calls}}
             for n in range(steps)]
    turns.append({"reply": {"text": "all read"}})
    script = os.path.join(tmp, f"script-{steps}x{calls}.json")
    with open(script, "w") as f:
        json.dump({"turns": turns}, f)
    server = subprocess.Popen([fake, "--script", script], stdout=subprocess.PIPE, text=True)
    base_url = server.stdout.readline().strip()
    config = os.path.join(tmp, f"config-{steps}x{calls}.toml")
    with open(config, "w") as f:
        f.write(f'model = "fake/test"\n[provider.fake]\nbase_url = "{base_url}"\n'
                '[provider.fake.models.test]\ncontext = 100000000\noutput = 8000\n'
                f'[agent.build]\nsteps = {steps + 10}\n[compaction]\nauto = false\nprune = false\n'
                '[permission]\ndoom_loop = "allow"\n')
    env = dict(os.environ, CODELOOP_CONFIG=config, CODELOOP_DATA_DIR=os.path.join(tmp, "data"), HOME=tmp, TERM="xterm-256color")
    env.pop("XDG_CONFIG_HOME", None)
    started = time.time()
    run = subprocess.run([codeloop, "run", "--on-ask", "allow", "--dir", project, "--format", "json", "read it all"],
                         env=env, capture_output=True, text=True)
    server.terminate()
    session = None
    for line in run.stdout.splitlines():
        try:
            session = json.loads(line).get("properties", {}).get("session_id") or session
        except ValueError:
            pass
    parts = subprocess.run([codeloop, "session", "export", session], env=env, capture_output=True, text=True).stdout
    count = sum(len(m.get("parts", [])) for m in json.loads(parts).get("messages", [])) if parts else 0
    print(f"tui: built a session of {count} parts ({steps} steps of {calls} calls) in {time.time() - started:.1f} s "
          f"(exit {run.returncode})")
    if run.returncode != 0:
        print(run.stderr[-2000:])
    return env, project, session, count


with tempfile.TemporaryDirectory() as tmp:
    for n, (steps, calls) in enumerate(SHAPES):
        env, project, session, count = build(tmp, steps, calls)
        if n == 0:
            measure(env, ["tui", "--dir", project], r"codeloop|ses_|>", "empty")
        measure(env, ["tui", "--dir", project, "--session", session], r"all read",
                f"{count}-part session ({steps} messages of {calls} calls)")
