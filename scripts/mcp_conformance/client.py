#!/usr/bin/env python3
"""The MCP conformance suite's client adapter: `client.py SERVER_URL`, with the scenario in
MCP_CONFORMANCE_SCENARIO (and its context in MCP_CONFORMANCE_CONTEXT), as the suite runs it.

It drives the real codeloop, not a library: a config naming the scenario's server as `[mcp.conf]`, a scripted
fake model (codeloop-fake-provider) that calls the scenario's tool, then `codeloop run`. A server that wants a
sign-in is signed in first with `codeloop mcp login`, whose browser is `browser.py` (it follows the
authorization server's redirect back to codeloop, as a person's browser would). Exit code: run's.

CODELOOP_BIN and CODELOOP_FAKE_BIN name the two binaries."""
import json, os, subprocess, sys, tempfile

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
            run = subprocess.run([codeloop, "run", "--on-ask", "allow", "--dir", project, "use the server"],
                                 env=env, cwd=project)
            return run.returncode
        finally:
            provider.kill()
            provider.wait()


if __name__ == "__main__":
    sys.exit(main())
