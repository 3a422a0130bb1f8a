//! `codeloop web [--port N] [--no-open]` (DESIGN.md §5i): `serve` on 127.0.0.1 with a token, and the web
//! page opened in a browser with that token in the address's fragment (which a browser never sends to
//! a server, so it reaches no log; the page moves it into the tab's session storage).
//!
//! Owns: choosing the token (`CODELOOP_SERVER_TOKEN`, else a fresh one), printing the page's address,
//! and opening a browser.
//! Must not: start the server any other way than `serve` does ([`crate::serve::run_server`]).

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

use clap::Args;

use crate::env;
use crate::serve::{Launch, Listening, PortTaken, ServeArgs, TOKEN_ENV, TokenChoice, run_server};

/// The port `web` tries first (`serve`'s default); when it is taken, any free one.
const DEFAULT_PORT: u16 = 4096;

#[derive(Args, Debug)]
pub struct WebArgs {
    /// Port to listen on (default 4096, or a free one when it is taken; 0 picks a free one).
    #[arg(long)]
    pub port: Option<u16>,
    /// Print the page's address but do not open a browser.
    #[arg(long)]
    pub no_open: bool,
}

pub async fn web(args: WebArgs) -> anyhow::Result<ExitCode> {
    let token = match std::env::var(TOKEN_ENV).ok().filter(|t| !t.is_empty()) {
        Some(token) => TokenChoice::Given(token),
        None => TokenChoice::Generate,
    };
    let serve = ServeArgs {
        hostname: "127.0.0.1".into(),
        port: args.port.unwrap_or(DEFAULT_PORT),
        token: None,
        cors: Vec::new(),
        store: None,
    };
    let port_taken = if args.port.is_some() { PortTaken::Fail } else { PortTaken::AnyFree };
    let launch = Launch { args: serve, token, port_taken };
    let mut opened: Option<PathBuf> = None;
    let result = run_server(launch, |listening| {
        let page = page_url(listening);
        println!("codeloop web page: {page}");
        if !args.no_open {
            match open_browser(&page, listening) {
                Ok(Some(file)) => opened = Some(file),
                Ok(None) => eprintln!("no browser to open here (set $BROWSER): open the address above"),
                Err(e) => eprintln!("warning: could not open a browser ({e}): open the address above"),
            }
        }
    })
    .await;
    if let Some(file) = opened {
        // It holds the token; the server it points to is gone.
        let _ = std::fs::remove_file(file);
    }
    result
}

/// `http://ADDR/#token=TOKEN` (the fragment stays in the browser).
fn page_url(listening: &Listening<'_>) -> String {
    match listening.token {
        Some(token) => format!("{}/#token={token}", listening.url),
        None => format!("{}/", listening.url),
    }
}

/// Opens the page in a browser: `$BROWSER` (a `:`-separated list of commands, `%s` standing for the
/// address), else the desktop's opener. The browser is given a small file that forwards to the page,
/// not the address itself: a command line is readable by every local process, and the address carries
/// the token. Returns the file (to delete when the server stops), or `None` when no browser is available.
fn open_browser(page: &str, listening: &Listening<'_>) -> anyhow::Result<Option<PathBuf>> {
    let commands = browser_commands();
    if commands.is_empty() {
        return Ok(None);
    }
    let port = listening.url.rsplit(':').next().unwrap_or("0");
    let file = env::data_dir()?.join("server").join(format!("web-{port}.html"));
    write_private(&file, &forwarding_page(page))?;
    let target = format!("file://{}", file.display());
    let mut last_error = None;
    for command in commands {
        match spawn(&command, &target) {
            Ok(()) => return Ok(Some(file)),
            Err(e) => last_error = Some(e),
        }
    }
    let _ = std::fs::remove_file(&file);
    match last_error {
        Some(e) => Err(e.into()),
        None => Ok(None),
    }
}

/// The commands to try, each as its words.
fn browser_commands() -> Vec<Vec<String>> {
    if let Some(list) = std::env::var_os("BROWSER").filter(|b| !b.is_empty()) {
        return list
            .to_string_lossy()
            .split(':')
            .map(|command| command.split_whitespace().map(str::to_owned).collect::<Vec<_>>())
            .filter(|words| !words.is_empty())
            .collect();
    }
    let desktop = std::env::var_os("DISPLAY").is_some() || std::env::var_os("WAYLAND_DISPLAY").is_some();
    let opener = if cfg!(target_os = "macos") { "open" } else { "xdg-open" };
    if (desktop || cfg!(target_os = "macos")) && on_path(opener) {
        return vec![vec![opener.to_owned()]];
    }
    Vec::new()
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
}

/// Starts `command` on `target` without waiting for it (a thread reaps it).
fn spawn(command: &[String], target: &str) -> std::io::Result<()> {
    let (program, rest) = command.split_first().ok_or(std::io::ErrorKind::InvalidInput)?;
    let mut args: Vec<String> = rest.iter().map(|a| a.replace("%s", target)).collect();
    if !command.iter().any(|word| word.contains("%s")) {
        args.push(target.to_owned());
    }
    let mut child = Command::new(program)
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    std::thread::spawn(move || child.wait());
    Ok(())
}

/// A page that forwards to `url` at once (the fragment with the token goes along).
fn forwarding_page(url: &str) -> String {
    let escaped = url.replace('&', "&amp;").replace('"', "&quot;").replace('<', "&lt;");
    format!(
        "<!doctype html>\n<meta charset=\"utf-8\">\n<meta http-equiv=\"refresh\" content=\"0;url={escaped}\">\n\
         <title>codeloop</title>\n<p>Opening codeloop… if nothing happens, go to <a href=\"{escaped}\">the page</a>.</p>\n"
    )
}

/// Writes a file only its owner can read (its directory made 0700 when created).
fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    if let Some(dir) = path.parent() {
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
    }
    let _ = std::fs::remove_file(path);
    let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path)?;
    file.write_all(text.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_address_carries_the_token_in_the_fragment_only() {
        let listening = Listening { url: "http://127.0.0.1:4096".into(), token: Some("abc123") };
        assert_eq!(page_url(&listening), "http://127.0.0.1:4096/#token=abc123");
        let open = Listening { url: "http://127.0.0.1:4096".into(), token: None };
        assert_eq!(page_url(&open), "http://127.0.0.1:4096/");
    }

    #[test]
    fn the_forwarding_page_escapes_the_address() {
        let page = forwarding_page("http://127.0.0.1:1/#token=a\"b<c&d");
        assert!(page.contains("url=http://127.0.0.1:1/#token=a&quot;b&lt;c&amp;d\""), "{page}");
    }
}
