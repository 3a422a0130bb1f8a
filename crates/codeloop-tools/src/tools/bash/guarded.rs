//! The walls of one bash call on disk (DESIGN.md §5c): before it runs, nested repositories become
//! read-only and secret files the rules do not let this call read are hidden; after it, what it created
//! where only the `write` tool may is moved out of the project, and the model is told.

use std::path::PathBuf;

use codeloop_sandbox::SandboxMode;

use crate::guard::{self, Scan};
use crate::{ToolContext, Walls};

/// What was on disk before the call, to compare with after it.
pub(crate) struct Before {
    /// Protected paths that did not exist (codeloop's and Claude's config).
    missing: Vec<PathBuf>,
    /// The project's `.git` entries, `None` when `.git` may be written (`git_write`).
    git: Option<Scan>,
    /// Secret files hidden from this call.
    pub hidden: Vec<PathBuf>,
}

/// Looks at the project before a call and returns the walls the call runs in: the session's, with this
/// call's nested repositories protected and secrets masked. `None` walls stay `None` (escalated).
pub(super) fn before(
    ctx: &ToolContext,
    walls: Option<&Walls>,
    granted_reads: &[String],
) -> (Before, Option<Walls>) {
    let Some(session) = ctx.walls.as_deref() else {
        return (Before { missing: Vec::new(), git: None, hidden: Vec::new() }, walls.cloned());
    };
    let git_write = session.git_write;
    let missing: Vec<PathBuf> = guard::protected_candidates(&ctx.project, git_write)
        .into_iter()
        .filter(|p| p.symlink_metadata().is_err())
        .collect();
    let scan = guard::scan(&crate::paths::real_path(&ctx.project.root));
    let mut call_walls = walls.cloned();
    let mut hidden = Vec::new();
    if let Some(walls) = call_walls.as_mut().filter(|w| w.policy.mode != SandboxMode::Off) {
        if !git_write {
            for git in &scan.git {
                if !walls.policy.protected.contains(git) {
                    walls.policy.protected.push(git.clone());
                }
            }
        }
        for secret in &scan.secrets {
            let pattern = relative(ctx, secret);
            let allowed = granted_reads.contains(&pattern) || ctx.host.allows(&ctx.call, "read", &pattern);
            if !allowed {
                hidden.push(secret.clone());
            }
        }
        walls.policy.masked.extend(hidden.iter().cloned());
    }
    let git = (!git_write).then_some(scan);
    (Before { missing, git, hidden }, call_walls)
}

impl Before {
    /// Whether there is anything to sweep: protected paths that did not exist, or nested repositories
    /// to watch for (not with `git_write`, nor without walls).
    pub(super) fn watches(&self) -> bool {
        !self.missing.is_empty() || self.git.is_some()
    }

    /// Moves out what the call created where it may not have, and says so for the model.
    pub(super) fn after(&self, ctx: &ToolContext) -> Option<String> {
        let lines = self.sweep(ctx);
        (!lines.is_empty()).then(|| model_note(&lines))
    }

    /// Moves out of the project what was created since this look where only the `write` tool may (a
    /// path the file tools wrote with a grant stays): one line per path, saying where it went. Also
    /// run again and again while a background job lives (DESIGN.md §5j).
    pub(super) fn sweep(&self, ctx: &ToolContext) -> Vec<String> {
        let mut created: Vec<PathBuf> =
            self.missing.iter().filter(|p| p.symlink_metadata().is_ok()).cloned().collect();
        if let Some(before) = &self.git {
            let now = guard::scan(&crate::paths::real_path(&ctx.project.root));
            let new: Vec<PathBuf> =
                now.git.difference(&before.git).filter(|p| !created.contains(p)).cloned().collect();
            created.extend(new);
        }
        created.retain(|p| !guard::was_granted(p));
        if created.is_empty() {
            return Vec::new();
        }
        let temp = ctx.project.temp_dir.clone().unwrap_or_else(std::env::temp_dir);
        let lines: Vec<String> = guard::move_out(&created, &temp)
            .into_iter()
            .map(|moved| {
                let what = relative(ctx, &moved.from);
                match (moved.to, moved.error) {
                    (Some(to), _) => format!("- {what} was moved to {}", to.display()),
                    (None, error) => {
                        format!("- {what} could not be moved ({}); remove it", error.unwrap_or_default())
                    }
                }
            })
            .collect();
        tracing::warn!("a command created protected paths, moved out of the project: {}", lines.join("; "));
        lines
    }

    /// A note for a failed call that had secrets hidden: what and how to open them.
    pub(super) fn hidden_note(&self, ctx: &ToolContext) -> Option<String> {
        if self.hidden.is_empty() {
            return None;
        }
        let mut names: Vec<String> = self.hidden.iter().take(5).map(|p| relative(ctx, p)).collect();
        if self.hidden.len() > 5 {
            names.push(format!("{} more", self.hidden.len() - 5));
        }
        Some(format!(
            "<sandbox>\nSecret files were hidden from this command (they read as empty): {}. Read one with the \
             read tool (the user is asked), or a [permission] read rule naming it opens it for commands.\n</sandbox>",
            names.join(", ")
        ))
    }
}

/// What the model is told of protected paths a command created: each moved one, and how to create them.
pub(super) fn model_note(lines: &[String]) -> String {
    format!(
        "<sandbox>\nThis command created paths that commands may not create: codeloop's and Claude's \
         configuration and git repositories are protected (a nested repository's config runs at the \
         user's next `git` there).\n{}\nTo create codeloop.toml, .codeloop/ or .claude/settings*.json, use \
         the write tool, which asks the user. A git repository needs `[sandbox] git_write = true`.\n</sandbox>",
        lines.join("\n")
    )
}

fn relative(ctx: &ToolContext, path: &std::path::Path) -> String {
    let root = crate::paths::real_path(&ctx.project.root);
    path.strip_prefix(&root)
        .or_else(|_| path.strip_prefix(&ctx.project.root))
        .map_or_else(|_| path.display().to_string(), |rel| rel.to_string_lossy().replace('\\', "/"))
}
