//! `codeloop config init`: writes a commented user config — a model for the API keys found, the
//! permission defaults spelled out, the sandbox keys — and never overwrites an existing file.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Subcommand;

use crate::env;

#[derive(Subcommand, Debug)]
pub enum ConfigCommand {
    /// Write a commented user config (~/.config/codeloop/config.toml) to start from. An existing file is
    /// never overwritten.
    Init {
        /// Write here instead of the user config path.
        #[arg(long)]
        path: Option<PathBuf>,
    },
}

pub fn config(command: ConfigCommand) -> anyhow::Result<ExitCode> {
    let ConfigCommand::Init { path } = command;
    let path = match path {
        Some(path) => path,
        None => env::config_dir()
            .context("cannot find the config directory: set HOME or XDG_CONFIG_HOME, or pass --path")?
            .join("config.toml"),
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    // create_new: an existing file (even one created a moment ago by someone else) is never replaced.
    let mut file = match std::fs::OpenOptions::new().write(true).create_new(true).open(&path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            anyhow::bail!("{} already exists; not overwriting it (edit it, or pass --path)", path.display())
        }
        Err(e) => return Err(e).with_context(|| format!("cannot write {}", path.display())),
    };
    file.write_all(template().as_bytes()).with_context(|| format!("cannot write {}", path.display()))?;
    eprintln!("wrote {}", path.display());
    Ok(ExitCode::SUCCESS)
}

fn template() -> String {
    let found: Vec<(&str, &str, &str)> = codeloop_core::models::providers_by_key()
        .iter()
        .filter_map(|(provider, variables, model)| {
            let variable = variables.iter().find(|v| std::env::var(v).is_ok_and(|k| !k.is_empty()))?;
            Some((*provider, *variable, *model))
        })
        .collect();
    let mut out = String::from(
        "# codeloop user config, written by `codeloop config init`. This file is yours and trusted; a\n\
         # project's own codeloop.toml only counts after `codeloop trust` (README: Security model).\n\n",
    );
    match found.split_first() {
        Some(((provider, variable, model), others)) => {
            out.push_str(&format!("# ${variable} is set:\nmodel = \"{provider}/{model}\"\n"));
            for (provider, variable, model) in others {
                out.push_str(&format!("# ${variable} is set too: model = \"{provider}/{model}\"\n"));
            }
        }
        None => out.push_str(
            "# No API key found in the environment. Export one (ANTHROPIC_API_KEY, OPENAI_API_KEY, GEMINI_API_KEY,\n\
             # OPENROUTER_API_KEY…) or name a model and, for your own server, a provider:\n\
             # model = \"openai/gpt-4.1\"\n",
        ),
    }
    out.push_str(
        r#"
# A local or OpenAI-compatible server:
# [provider.local]
# api = "openai-chat"                 # or "openai-responses", "anthropic", "gemini"
# base_url = "http://127.0.0.1:8080/v1"
# api_key_env = "LOCAL_API_KEY"
# [provider.local.models.qwen3-coder]
# context = 131072
# output = 8192
# tools = "edit"                      # or "patch" (apply_patch); default by family, see `codeloop models --help`
# temperature = 0.55                  # and top_p: the family's defaults unless set here
# tool_call_text = "parse"            # "off" | "warn" (default) | "parse": for a server without a tool-call parser

# Permissions: the last matching rule wins; a script runs unasked only if every command in it is allowed.
# These are the built-in defaults, spelled out:
[permission]
"*" = "allow"
doom_loop = "ask"
external_directory = "ask"            # paths outside the project
read = { "*.env" = "ask", "*.env.*" = "ask", "*.env.example" = "allow", "*.pem" = "ask", "*.key" = "ask" }
# Ask before commands, allow some, forbid others:
# bash = { "*" = "ask", "git status *" = "allow", "git diff *" = "allow", "rm *" = "deny" }
# Writes to codeloop.toml, .codeloop/ and .git/ always ask unless a rule names them:
# edit = { ".codeloop/skills/*" = "allow" }

# The OS walls around every command the model runs (Linux):
# [sandbox]
# mode = "workspace-write"            # or "read-only", "off"
# network = true
# writable_roots = ["~/scratch"]
# git_write = false                   # true lets commands commit
# env_keep = []                       # variables kept although they look secret or lead to an agent
# cache_dirs = []                     # package caches written through (the usual ones are overlays)
# allow_unix_sockets = []             # sockets outside the project commands may still reach
# max_processes = 1024                # at most this many processes at once per command

# [tool_output]
# max_saved_bytes = 67108864          # the most of one output saved to a file (64 MiB)

# MCP servers (`codeloop mcp add|list|login` edit and check these):
# [mcp.fs]                            # local, over stdio
# command = ["npx", "-y", "@modelcontextprotocol/server-filesystem", "."]
# [mcp.tracker]                       # remote, Streamable HTTP; `codeloop mcp login tracker` signs in
# url = "https://mcp.example.com/mcp"
# headers = { "X-Api-Key" = "${TRACKER_KEY}" }
# enabled_tools = ["search"]          # the server's own tool names; disabled_tools = [...] removes
# timeout_ms = 30000                  # bounds its start and each call
# oauth = false                       # or { client_id = "…", client_secret_env = "…", scopes = […] }

# Azure OpenAI (key in $AZURE_OPENAI_API_KEY unless api_key_env says otherwise):
# [provider.azure]
# api = "azure"
# resource = "my-resource"            # https://my-resource.openai.azure.com (or base_url = "…")
# deployment = "gpt-4o-prod"          # without one: the v1 path, model in the body
# api_version = "2024-10-21"

# Language servers (`codeloop lsp status` shows them): presets run when found on PATH (basedpyright,
# pyright or pylsp; typescript-language-server; rust-analyzer; gopls; clangd; bash-language-server).
# [lsp]
# enabled = true                      # false: none runs
# wait_ms = 2000                      # how long an edit waits for a running server's diagnostics
# warnings = false                    # true: warnings too, not only errors
# [lsp.pylsp]
# enabled = false                     # this preset off (the next one of its language runs)
# [lsp.mine]
# command = ["my-language-server", "--stdio"]
# extensions = ["foo"]
# root_markers = ["foo.toml"]

# [compaction]
# auto = true
# [retry]
# max_attempts = 8
"#,
    );
    out
}
