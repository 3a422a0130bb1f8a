#!/usr/bin/env python3
"""The MCP conformance suite's client adapter: `client.py SERVER_URL`, with the scenario in
MCP_CONFORMANCE_SCENARIO (and its context in MCP_CONFORMANCE_CONTEXT), as the suite runs it.

It drives the real codeloop, not a library: a config naming the scenario's server as `[mcp.conf]`, a scripted
fake model (codeloop-fake-provider) that calls the scenario's tool, then `codeloop run`. A server that wants a
sign-in is signed in first with `codeloop mcp login`, whose browser is `browser.py` (it follows the
authorization server's redirect back to codeloop, as a person's browser would). A scenario where the server
asks the person something (elicitation) runs under `codeloop serve` instead, answered through its HTTP API as
a client would: the tool call's permission once, the elicitation accepted with nothing filled in (codeloop
fills the schema's defaults). Exit code: the run's.

CODELOOP_BIN and CODELOOP_FAKE_BIN name the two binaries."""
import json, os, socket, subprocess, sys, tempfile, threading, time, urllib.error, urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
SERVER = "conf"

# What the model asks of each scenario's server: (tool, arguments), or None to only list the tools.
CALLS = {
    "initialize": None,
    "tools_call": ("add_numbers", {"a": 5, "b": 3}),
    "elicitation-sep1034-client-defaults": ("test_client_elicitation_defaults", {}),
    "sse-retry": ("test_reconnection", {}),
}
AUTH_CALL = ("test-tool", {})
# Scenarios whose server refuses a call until the sign-in is widened: run under `serve`, where the person
# (this script) is shown the sign-in link as an elicitation and follows it.
STEP_UP = {"auth/scope-step-up", "auth/scope-retry-limit"}


def main():
    url = sys.argv[-1]
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    codeloop, fake = os.environ["CODELOOP_BIN"], os.environ["CODELOOP_FAKE_BIN"]
    call = CALLS.get(scenario, AUTH_CALL)
    auth = scenario.startswith("auth/")

    with tempfile.TemporaryDirectory() as tmp:
        project = os.path.join(tmp, "project")
        os.makedirs(project)
        turns = []
        if call:
            tool, args = call
            turns.append({"reply": {"tool_calls": [{"name": f"{SERVER}_{tool}", "arguments": args}]}})
        turns.append({"reply": {"text": "done"}})
        script = os.path.join(tmp, "script.json")
        with open(script, "w") as f:
            json.dump({"turns": turns}, f)
        provider = subprocess.Popen([fake, "--script", script], stdout=subprocess.PIPE, text=True)
        try:
            base_url = provider.stdout.readline().strip()
            config = os.path.join(tmp, "config.toml")
            with open(config, "w") as f:
                f.write(f'model = "fake/test"\n[provider.fake]\nbase_url = "{base_url}"\n'
                        '[provider.fake.models.test]\ncontext = 128000\noutput = 8000\n'
                        f'[mcp.{SERVER}]\nurl = {json.dumps(url)}\n')
                if "client_id" in context:
                    f.write(f'oauth = {{ client_id = {json.dumps(context["client_id"])}')
                    if "client_secret" in context:
                        f.write(', client_secret_env = "CONFORMANCE_CLIENT_SECRET"')
                    f.write(" }\n")
            env = dict(os.environ, CODELOOP_CONFIG=config, CODELOOP_DATA_DIR=os.path.join(tmp, "data"),
                       HOME=tmp, BROWSER=os.path.join(HERE, "browser.py"))
            env.pop("XDG_CONFIG_HOME", None)
            if "client_secret" in context:
                env["CONFORMANCE_CLIENT_SECRET"] = context["client_secret"]
            if auth:
                login = subprocess.run([codeloop, "mcp", "login", SERVER, "--timeout", "20"], env=env, cwd=project)
                if login.returncode != 0:
                    return login.returncode
            if scenario.startswith("elicitation") or scenario in STEP_UP:
                return through_server(codeloop, env, project, needs_answer=scenario.startswith("elicitation"))
            run = subprocess.run([codeloop, "run", "--on-ask", "allow", "--dir", project, "use the server"],
                                 env=env, cwd=project)
            return run.returncode
        finally:
            provider.kill()
            provider.wait()


def through_server(codeloop, env, project, needs_answer):
    """One prompt through `codeloop serve`, answering its permission asks and elicitations over HTTP."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    token = "conformance-token"
    env = dict(env, CODELOOP_SERVER_TOKEN=token)
    server = subprocess.Popen([codeloop, "serve", "--port", str(port)], env=env, cwd=project,
                              stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"

    def call(method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(base + path, data=data, method=method, headers={
            "Authorization": f"Bearer {token}", "Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read() or b"null")

    try:
        for line in server.stderr:
            if "listening on" in line:
                break
        threading.Thread(target=lambda: [None for _ in server.stderr], daemon=True).start()
        session = call("POST", "/session", {"directory": project})["id"]
        outcome = {}
        prompt = threading.Thread(target=lambda: outcome.update(
            call("POST", f"/session/{session}/prompt", {"parts": [{"type": "text", "text": "use the server"}]})))
        prompt.start()
        deadline = time.time() + 25
        answered = 0
        while prompt.is_alive() and time.time() < deadline:
            for ask in call("GET", f"/permission?session={session}"):
                call("POST", f"/permission/{ask['id']}/reply", {"reply": "once"})
            for ask in call("GET", f"/session/{session}/elicitation"):
                print(f"elicitation from {ask['server']}: {ask['message']}", file=sys.stderr)
                if ask["mode"] == "url":
                    subprocess.run([env["BROWSER"], ask["url"]], check=False)
                    reply = {"action": "accept"}
                else:
                    reply = {"action": "accept", "content": {}}
                try:
                    call("POST", f"/session/{session}/elicitation/{ask['id']}", reply)
                except urllib.error.HTTPError as gone:
                    # The sign-in came back first and withdrew it.
                    print(f"elicitation answer: HTTP {gone.code}", file=sys.stderr)
                answered += 1
            time.sleep(0.05)
        prompt.join(timeout=5)
        print(json.dumps(outcome), file=sys.stderr)
        return 0 if outcome and (answered or not needs_answer) else 1
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    sys.exit(main())
