//! Configuration (DESIGN.md §5, §5a): TOML files merged in order — global `~/.config/codeloop/config.toml`,
//! then the project's `codeloop.toml` and `.codeloop/config.toml`, then the file named by
//! `CODELOOP_CONFIG`. Later files win; tables merge key by key.
//!
//! The user's files are trusted. A project's files are the repository's: until `codeloop trust` records
//! them (see [`crate::trust`]), only [`PROJECT_ALLOWED_KEYS`] count, and those can only narrow — its
//! permission rules become [`Config::project_rules`] (each call gets the stricter of them and the rest),
//! its instructions must lie inside the project. Everything else it sets is ignored and named in one
//! warning.
//!
//! Owns: the config schema, its defaults, merging, and clear errors (file and key) for invalid input.
//! Unknown keys are reported as warnings, not errors, so a newer config still loads.
//! Must not: read environment variables itself; the caller passes the paths (and, for `.mcp.json`'s
//! `${VAR}`, a lookup) in ([`ConfigSources`]).

//!
//! The parts: [`schema`] (the keys and their defaults), [`sources`] (finding, reading and layering the
//! files, and the trust record's hash), [`imports`] (Claude Code's and OpenCode's files: permissions,
//! `.mcp.json`, agents), [`narrowing`] (what an untrusted project's config may still do), [`lint`]
//! (rules for permissions nothing asks for).

mod imports;
mod lint;
mod narrowing;
mod schema;
mod sources;

pub use imports::{EnvLookup as ConfigEnv, claude_allow_rules};
pub use lint::known_permissions;
pub use schema::*;
pub use sources::{ConfigError, ConfigSources, LoadedConfig, ProjectConfig, ProjectConfigLoader};
