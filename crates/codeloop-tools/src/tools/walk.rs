//! The directory walk shared by `grep` and `glob`: `.gitignore`/`.ignore` honoured (even outside a git
//! repository), `.git` never entered, an optional ripgrep-style `--glob` filter, stable name order.

use std::path::Path;

use ignore::overrides::OverrideBuilder;
use ignore::{Walk, WalkBuilder};

/// Whether dot-files are walked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hidden {
    Include,
    Skip,
}

/// A walker over `root`, keeping only paths that match `glob` when one is given.
pub(crate) fn walker(root: &Path, glob: Option<&str>, hidden: Hidden) -> Result<Walk, String> {
    let mut builder = WalkBuilder::new(root);
    builder
        .hidden(hidden == Hidden::Skip)
        .require_git(false)
        .follow_links(false)
        .sort_by_file_name(|a, b| a.cmp(b))
        .filter_entry(|entry| entry.file_name() != ".git");
    if let Some(glob) = glob {
        let mut overrides = OverrideBuilder::new(root);
        overrides.add(glob).map_err(|e| format!("Invalid glob pattern '{glob}': {e}"))?;
        builder.overrides(overrides.build().map_err(|e| format!("Invalid glob pattern '{glob}': {e}"))?);
    }
    Ok(builder.build())
}
