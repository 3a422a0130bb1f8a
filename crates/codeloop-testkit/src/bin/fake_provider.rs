//! `codeloop-fake-provider`: serves a JSON script over HTTP for the demo and the benchmarks.
//! Prints the base URL as its first stdout line, then serves until killed (or Ctrl-C).

use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::ExitCode;

use codeloop_testkit::{FakeProvider, Recording, Script};

const HELP: &str = "\
codeloop-fake-provider: a scripted fake model provider (OpenAI Chat, OpenAI Responses, Anthropic Messages)

USAGE:
    codeloop-fake-provider --script FILE.json [--port N] [--host ADDR] [--repeat]

OPTIONS:
    --script FILE   JSON script: {\"turns\": [{\"reply\": {...}} | {\"fault\": {\"kind\": ...}}], \"repeat\": false}
                    or a bare array of turns
    --port N        port to listen on (default 0: a free port)
    --host ADDR     address to bind (default 127.0.0.1)
    --repeat        restart the script from the first turn when it runs out
    -h, --help      print this help

Prints the base URL (http://HOST:PORT/v1) as the first line on stdout, then serves until killed.
Endpoints: POST /v1/chat/completions, /v1/responses, /v1/messages (also without /v1).
Requests are counted, not recorded, so long benchmark runs stay flat in memory.";

struct Args {
    script: String,
    host: IpAddr,
    port: u16,
    repeat: bool,
}

enum Parsed {
    Run(Args),
    Help,
}

fn parse_args(mut args: impl Iterator<Item = String>) -> Result<Parsed, String> {
    let mut script = None;
    let mut host = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let mut port = 0;
    let mut repeat = false;
    while let Some(arg) = args.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((flag, value)) if flag.starts_with("--") => (flag.to_owned(), Some(value.to_owned())),
            _ => (arg, None),
        };
        let mut value = |name: &str| {
            inline.clone().or_else(|| args.next()).ok_or_else(|| format!("{name} needs a value"))
        };
        match flag.as_str() {
            "-h" | "--help" => return Ok(Parsed::Help),
            "--script" => script = Some(value("--script")?),
            "--port" => {
                let text = value("--port")?;
                port = text.parse().map_err(|_| format!("invalid --port {text:?}"))?;
            }
            "--host" => {
                let text = value("--host")?;
                host = text.parse().map_err(|_| format!("invalid --host {text:?} (an IP address)"))?;
            }
            "--repeat" => repeat = true,
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    let script = script.ok_or("missing --script FILE.json")?;
    Ok(Parsed::Run(Args { script, host, port, repeat }))
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let args = match parse_args(std::env::args().skip(1)) {
        Ok(Parsed::Run(args)) => args,
        Ok(Parsed::Help) => {
            println!("{HELP}");
            return ExitCode::SUCCESS;
        }
        Err(problem) => {
            eprintln!("codeloop-fake-provider: {problem}\n\n{HELP}");
            return ExitCode::from(2);
        }
    };
    let mut script = match Script::load(&args.script) {
        Ok(script) => script,
        Err(err) => {
            eprintln!("codeloop-fake-provider: {err}");
            return ExitCode::FAILURE;
        }
    };
    script.repeat |= args.repeat;
    let addr = SocketAddr::new(args.host, args.port);
    let provider = match FakeProvider::start_with(addr, script, Recording::CountOnly).await {
        Ok(provider) => provider,
        Err(err) => {
            eprintln!("codeloop-fake-provider: cannot listen on {addr}: {err}");
            return ExitCode::FAILURE;
        }
    };
    let mut stdout = std::io::stdout().lock();
    if writeln!(stdout, "{}", provider.base_url()).and_then(|()| stdout.flush()).is_err() {
        return ExitCode::FAILURE;
    }
    drop(stdout);
    let _ = tokio::signal::ctrl_c().await;
    provider.shutdown();
    ExitCode::SUCCESS
}
