//! What an untrusted project's config may still do (DESIGN.md §5a): the allow-listed keys, instructions
//! inside the project, and permission rules that only narrow; everything else is named in one warning.
//! Trust itself (records, hashes) is [`crate::trust`]'s.

use std::path::Path;

use codeloop_types::PermissionRule;

use super::schema::PermissionConfig;
use super::sources::{ConfigError, ConfigSources, ProjectConfig};
use crate::trust::TrustState;

impl ConfigSources {
    /// The part of an untrusted project's config that counts: the allow-listed keys, its instructions
    /// that lie inside the project, and its permission rules moved aside into `rules`.
    pub(super) fn narrow(
        &self,
        project: &ProjectConfig,
        table: &toml::Table,
        rules: &mut Vec<PermissionRule>,
        warnings: &mut Vec<String>,
    ) -> Result<toml::Table, ConfigError> {
        let mut kept = toml::Table::new();
        let mut ignored = project.wants.clone();
        for key in ["model", "small_model", "default_agent"] {
            if let Some(value) = table.get(key) {
                kept.insert(key.to_owned(), value.clone());
            }
        }
        if let Some(toml::Value::Array(entries)) = table.get("instructions") {
            let mut inside = Vec::new();
            for entry in entries {
                match entry.as_str() {
                    Some(path) if inside_project(&project.root, path) => inside.push(entry.clone()),
                    Some(path) => ignored.push(format!("instructions from outside the project (`{path}`)")),
                    None => {}
                }
            }
            kept.insert("instructions".to_owned(), toml::Value::Array(inside));
        }
        if let Some(permission) = table.get("permission") {
            let path = project.files.last().cloned().unwrap_or_default();
            let parsed = PermissionConfig::try_from(permission.clone())
                .map_err(|message| ConfigError::Invalid { path, message })?;
            rules.extend(parsed.0);
        }
        if !ignored.is_empty() {
            let what = match project.trust {
                TrustState::Changed => "changed since you trusted it, so until you trust it again",
                _ => "not trusted, so",
            };
            warnings.push(format!(
                "the project config ({}) is {what} codeloop ignored: {}. Its permission rules only narrow yours. \
                 Review the file, then run `codeloop trust {}` to use it.",
                project.files.iter().map(|f| f.display().to_string()).collect::<Vec<_>>().join(", "),
                ignored.join("; "),
                project.root.display()
            ));
        } else if project.trust == TrustState::Changed {
            // Nothing beyond the allow-list, but the trust record no longer covers these files: say so
            // once, since a trusted project would have applied every key in full.
            warnings.push(format!(
                "the project config ({}) changed since you trusted it: until you trust it again it may only \
                 narrow yours (its permission rules are the stricter of yours and its). Review the file, then \
                 run `codeloop trust {}`.",
                project.files.iter().map(|f| f.display().to_string()).collect::<Vec<_>>().join(", "),
                project.root.display()
            ));
        }
        Ok(kept)
    }
}

/// Whether an instructions entry of a project config names a file inside the project, after resolving
/// `..` and symlinks.
fn inside_project(root: &Path, entry: &str) -> bool {
    let path = Path::new(entry);
    let path = if path.is_absolute() { path.to_owned() } else { root.join(path) };
    let root = crate::trust::canonical(root);
    match path.canonicalize() {
        Ok(real) => real.starts_with(&root),
        // A missing file is read as nothing; its text path must still stay inside.
        Err(_) => !entry.contains("..") && path.starts_with(&root),
    }
}
