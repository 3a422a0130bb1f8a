//! The servers codeloop knows without config (DESIGN.md §5n "presets for servers on `PATH`"), and the
//! servers a config makes of them and of its own `[lsp.NAME]` tables.
//!
//! A preset counts when its program is on `PATH`; of the presets for one language only the first found
//! runs (basedpyright before pyright before pylsp), so a Python file is not checked three times. A
//! `[lsp.NAME]` of a preset's name changes it (or, `enabled = false`, switches it off and lets the next
//! one of its language run); any other name adds a server of its own.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use codeloop_lsp::ServerSpec;

use super::settings::LspConfig;

pub struct Preset {
    pub name: &'static str,
    pub command: &'static [&'static str],
    pub extensions: &'static [&'static str],
    pub root_markers: &'static [&'static str],
    /// Presets of one language: only the first available runs.
    pub language: &'static str,
}

const PYTHON_ROOTS: &[&str] =
    &["pyproject.toml", "setup.py", "setup.cfg", "requirements.txt", "pyrightconfig.json"];

pub const PRESETS: &[Preset] = &[
    Preset {
        name: "basedpyright",
        command: &["basedpyright-langserver", "--stdio"],
        extensions: &["py", "pyi"],
        root_markers: PYTHON_ROOTS,
        language: "python",
    },
    Preset {
        name: "pyright",
        command: &["pyright-langserver", "--stdio"],
        extensions: &["py", "pyi"],
        root_markers: PYTHON_ROOTS,
        language: "python",
    },
    Preset {
        name: "pylsp",
        command: &["pylsp"],
        extensions: &["py"],
        root_markers: PYTHON_ROOTS,
        language: "python",
    },
    Preset {
        name: "typescript",
        command: &["typescript-language-server", "--stdio"],
        extensions: &["ts", "tsx", "mts", "cts", "js", "jsx", "mjs", "cjs"],
        root_markers: &["tsconfig.json", "jsconfig.json", "package.json"],
        language: "typescript",
    },
    Preset {
        name: "rust-analyzer",
        command: &["rust-analyzer"],
        extensions: &["rs"],
        root_markers: &["Cargo.toml"],
        language: "rust",
    },
    Preset {
        name: "gopls",
        command: &["gopls"],
        extensions: &["go"],
        root_markers: &["go.mod", "go.work"],
        language: "go",
    },
    Preset {
        name: "clangd",
        command: &["clangd"],
        extensions: &["c", "h", "cc", "cpp", "cxx", "hpp", "hh", "hxx"],
        root_markers: &["compile_commands.json", "CMakeLists.txt", ".clangd"],
        language: "c",
    },
    Preset {
        name: "bash-language-server",
        command: &["bash-language-server", "start"],
        extensions: &["sh", "bash"],
        root_markers: &[],
        language: "bash",
    },
];

/// A server the config makes, with whether its program was found.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    pub spec: ServerSpec,
    /// The program's full path; `None`: not found on `PATH`.
    pub program: Option<PathBuf>,
    pub preset: bool,
}

/// The servers that run for `config` (none when `[lsp] enabled = false`), and the presets that do not
/// (not found, switched off, or another of their language came first) for `doctor` and `lsp status`.
pub fn resolve(config: &LspConfig, path_var: Option<&str>) -> (Vec<Candidate>, Vec<Candidate>) {
    let mut active = Vec::new();
    let mut inactive = Vec::new();
    let mut languages = HashSet::new();
    for preset in PRESETS {
        let settings = config.servers.get(preset.name);
        let mut spec = ServerSpec {
            name: preset.name.to_owned(),
            command: preset.command.iter().map(|s| s.to_string()).collect(),
            extensions: preset.extensions.iter().map(|s| s.to_string()).collect(),
            root_markers: preset.root_markers.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        };
        if let Some(settings) = settings {
            override_with(&mut spec, settings);
        }
        let program = find_program(&spec.command, path_var);
        let candidate = Candidate { spec, program, preset: true };
        let on = config.enabled() && settings.is_none_or(|s| s.enabled);
        if on && candidate.program.is_some() && languages.insert(preset.language) {
            active.push(candidate);
        } else {
            inactive.push(candidate);
        }
    }
    for (name, settings) in &config.servers {
        if PRESETS.iter().any(|p| p.name == name) {
            continue;
        }
        let mut spec = ServerSpec { name: name.clone(), ..Default::default() };
        override_with(&mut spec, settings);
        let program = find_program(&spec.command, path_var);
        let candidate = Candidate { spec, program, preset: false };
        if config.enabled() && settings.enabled && !candidate.spec.extensions.is_empty() {
            // A configured server whose program is missing stays listed: its first use says so.
            active.push(candidate);
        } else {
            inactive.push(candidate);
        }
    }
    (active, inactive)
}

fn override_with(spec: &mut ServerSpec, settings: &super::settings::LspServerSettings) {
    if !settings.command.is_empty() {
        spec.command = settings.command.clone();
    }
    if !settings.extensions.is_empty() {
        spec.extensions = settings.extensions.iter().map(|e| e.trim_start_matches('.').to_owned()).collect();
    }
    if !settings.root_markers.is_empty() {
        spec.root_markers = settings.root_markers.clone();
    }
    spec.env.extend(settings.env.clone());
    if settings.initialization.is_some() {
        spec.initialization = settings.initialization.clone();
    }
}

/// The program of `command` as an executable path: an absolute or relative path as it is, a bare name
/// looked up in `path_var`.
pub fn find_program(command: &[String], path_var: Option<&str>) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt as _;
    let program = command.first()?;
    let executable =
        |p: &Path| std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
    if program.contains('/') {
        let path = PathBuf::from(crate::config::expand_home(program));
        return executable(&path).then_some(path);
    }
    std::env::split_paths(path_var?).map(|dir| dir.join(program)).find(|p| executable(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bin_with(names: &[&str]) -> tempfile::TempDir {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        for name in names {
            let path = dir.path().join(name);
            std::fs::write(&path, "#!/bin/sh\n").unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        dir
    }

    fn names(found: &[Candidate]) -> Vec<&str> {
        found.iter().map(|c| c.spec.name.as_str()).collect()
    }

    #[test]
    fn one_python_server_runs_and_config_switches_presets() {
        let bin = bin_with(&["pylsp", "basedpyright-langserver", "typescript-language-server"]);
        let path = bin.path().to_str().unwrap();
        let (active, _) = resolve(&LspConfig::default(), Some(path));
        assert_eq!(names(&active), vec!["basedpyright", "typescript"]);

        let config: LspConfig = toml::from_str(
            "[basedpyright]\nenabled = false\n[mine]\ncommand = [\"my-ls\"]\nextensions = [\".foo\"]\n",
        )
        .unwrap();
        let (active, inactive) = resolve(&config, Some(path));
        assert_eq!(names(&active), vec!["pylsp", "typescript", "mine"]);
        assert_eq!(active[2].spec.extensions, vec!["foo"]);
        assert!(active[2].program.is_none());
        assert!(names(&inactive).contains(&"basedpyright"));

        let off: LspConfig = toml::from_str("enabled = false").unwrap();
        assert!(resolve(&off, Some(path)).0.is_empty());
    }
}
