//! `skill`: loads a skill's `SKILL.md` (reference §8.3 skill) from the configured skill folders and
//! returns it with its base directory and a sample of its files.

use std::path::{Path, PathBuf};

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::io_failure;
use super::walk::{Hidden, walker};
use crate::schema::{decode, schema_for};
use crate::{PermissionAsk, Tool, ToolContext, ToolFailure, ToolOutput};

const SKILL_FILE: &str = "SKILL.md";
const SAMPLED_FILES: usize = 10;

const DESCRIPTION: &str = "Load a skill by name: specialised instructions (a SKILL.md folder) for a kind of task. \
Use it when a listed skill matches the task.";

#[derive(Deserialize, JsonSchema)]
struct Params {
    /// The skill's name (its folder name).
    name: String,
}

/// Loads skills.
pub struct SkillTool {
    parameters: Value,
    dirs: Vec<PathBuf>,
}

impl SkillTool {
    /// `dirs` are searched in order for `<name>/SKILL.md`; relative entries are resolved against the
    /// project root at call time.
    pub fn new(dirs: Vec<PathBuf>) -> Self {
        Self { parameters: schema_for::<Params>(), dirs }
    }

    /// The project's `.codeloop/skills`, then Claude Code's `.claude/skills` and OpenCode's
    /// `.opencode/skill(s)`; then the user's: `$XDG_CONFIG_HOME/codeloop/skills` (or
    /// `~/.config/codeloop/skills`), `~/.claude/skills`, `~/.config/opencode/skill(s)`. The first folder
    /// that has a name wins.
    pub fn default_dirs() -> Vec<PathBuf> {
        let mut dirs: Vec<PathBuf> =
            [".codeloop/skills", ".claude/skills", ".opencode/skill", ".opencode/skills"]
                .map(PathBuf::from)
                .into();
        let home = std::env::var_os("HOME").filter(|v| !v.is_empty()).map(PathBuf::from);
        let config = std::env::var_os("XDG_CONFIG_HOME")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .or_else(|| home.as_ref().map(|home| home.join(".config")));
        if let Some(config) = &config {
            dirs.push(config.join("codeloop").join("skills"));
        }
        if let Some(home) = &home {
            dirs.push(home.join(".claude").join("skills"));
        }
        if let Some(config) = &config {
            dirs.extend(["skill", "skills"].map(|name| config.join("opencode").join(name)));
        }
        dirs
    }

    fn search_dirs(&self, root: &Path) -> Vec<PathBuf> {
        resolved(&self.dirs, root)
    }
}

#[async_trait]
impl Tool for SkillTool {
    fn name(&self) -> &str {
        "skill"
    }

    fn effect(&self) -> crate::Effect {
        crate::Effect::ReadOnly
    }

    fn needs(&self) -> crate::Needs {
        crate::Needs::Skills
    }

    fn description(&self) -> &str {
        DESCRIPTION
    }

    fn parameters(&self) -> &Value {
        &self.parameters
    }

    async fn execute(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolFailure> {
        let params: Params = decode(self.name(), args)?;
        let name = params.name.trim();
        if name.is_empty() || name.contains(['/', '\\']) || name == "." || name == ".." {
            return Err(ToolFailure::Failed(format!("Invalid skill name: \"{}\"", params.name)));
        }
        let dirs = self.search_dirs(&ctx.project.root);
        let Some(file) = dirs.iter().find_map(|d| skill_file(d, name)) else {
            let available = available(&dirs);
            let list = if available.is_empty() { "none".to_string() } else { available.join(", ") };
            return Err(ToolFailure::Failed(format!("Skill \"{name}\" not found. Available skills: {list}")));
        };
        ctx.ask(PermissionAsk {
            grant: Default::default(),
            permission: "skill".to_string(),
            patterns: vec![name.to_string()],
            always: vec![name.to_string()],
            metadata: json!({}),
        })
        .await?;
        let raw = tokio::fs::read_to_string(&file).await.map_err(|e| io_failure("read", &file, &e))?;
        let base = file.parent().map(Path::to_path_buf).unwrap_or_default();
        let files = {
            let base = base.clone();
            tokio::task::spawn_blocking(move || sample_files(&base)).await.unwrap_or_default()
        };
        let file_list: String = files.iter().map(|f| format!("<file>{}</file>\n", f.display())).collect();
        let output = format!(
            "<skill_content name=\"{name}\">\n# Skill: {name}\n\n{}\n\nBase directory for this skill: {}\n\
             Relative paths in this skill (e.g., scripts/, reference/) are relative to this base directory.\n\
             Note: file list is sampled.\n\n<skill_files>\n{file_list}</skill_files>\n</skill_content>",
            strip_frontmatter(&raw).trim(),
            base.display(),
        );
        Ok(ToolOutput {
            title: format!("Loaded skill: {name}"),
            output,
            metadata: json!({"name": name, "dir": base.to_string_lossy()}),
            attachments: Vec::new(),
        })
    }
}

/// A skill offered to the model in the system prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkillInfo {
    pub name: String,
    /// The `description:` of the SKILL.md front matter, or its first non-empty line.
    pub description: String,
}

/// Every skill in `dirs` (relative entries resolved against `root`), sorted by name; the first folder
/// that has a name wins, as in the tool.
pub fn list_skills(dirs: &[PathBuf], root: &Path) -> Vec<SkillInfo> {
    let dirs = resolved(dirs, root);
    available(&dirs)
        .into_iter()
        .filter_map(|name| {
            let file = dirs.iter().find_map(|d| skill_file(d, &name))?;
            let text = std::fs::read_to_string(file).ok()?;
            Some(SkillInfo { description: skill_description(&text), name })
        })
        .collect()
}

fn skill_description(text: &str) -> String {
    let front = text.strip_prefix("---\n").or_else(|| text.strip_prefix("---\r\n")).and_then(|rest| {
        let end = rest.find("\n---")?;
        Some(&rest[..end])
    });
    let from_front = front.and_then(|front| {
        front
            .lines()
            .find_map(|line| line.strip_prefix("description:").map(|d| d.trim().trim_matches('"').to_owned()))
    });
    from_front
        .or_else(|| strip_frontmatter(text).lines().map(str::trim).find(|l| !l.is_empty()).map(str::to_owned))
        .unwrap_or_default()
        .chars()
        .take(200)
        .collect()
}

/// `dirs` with relative entries (the project's) resolved against `root`; a project's folder counts only
/// where its real path is inside the project (a `.claude/skills` that links out would read any folder's
/// files into the prompt). The user's own folders count wherever they are.
fn resolved(dirs: &[PathBuf], root: &Path) -> Vec<PathBuf> {
    let real_root = root.canonicalize().unwrap_or_else(|_| root.to_owned());
    dirs.iter()
        .filter_map(|dir| {
            if !dir.is_relative() {
                return Some(dir.clone());
            }
            let dir = root.join(dir);
            dir.canonicalize().is_ok_and(|real| real.starts_with(&real_root)).then_some(dir)
        })
        .collect()
}

/// The body of a Markdown file without its `---` front matter.
fn strip_frontmatter(text: &str) -> &str {
    let Some(rest) = text.strip_prefix("---\n").or_else(|| text.strip_prefix("---\r\n")) else { return text };
    match rest.find("\n---") {
        Some(end) => rest[end + 4..].trim_start_matches(['\r', '\n']),
        None => text,
    }
}

/// `dir/name/SKILL.md` when it is a file that really lies inside `dir`: a repository's skill that links
/// elsewhere (`SKILL.md -> ~/.ssh/id_rsa`) would read that file into the prompt, so it does not count.
fn skill_file(dir: &Path, name: &str) -> Option<PathBuf> {
    let file = dir.join(name).join(SKILL_FILE);
    let real = file.canonicalize().ok()?;
    let root = dir.canonicalize().ok()?;
    (real.is_file() && real.starts_with(&root)).then_some(real)
}

fn available(dirs: &[PathBuf]) -> Vec<String> {
    let mut names: Vec<String> = dirs
        .iter()
        .filter_map(|d| std::fs::read_dir(d).ok())
        .flat_map(|entries| entries.flatten())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let dir = e.path().parent().map(Path::to_path_buf)?;
            skill_file(&dir, &name).map(|_| name)
        })
        .collect();
    names.sort();
    names.dedup();
    names
}

fn sample_files(base: &Path) -> Vec<PathBuf> {
    let Ok(walk) = walker(base, None, Hidden::Skip) else { return Vec::new() };
    walk.flatten()
        .filter(|e| e.file_type().is_some_and(|t| t.is_file()) && e.file_name() != SKILL_FILE)
        .take(SAMPLED_FILES)
        .map(|e| e.into_path())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claude_codes_skill_folder_counts_but_not_where_it_links_out_of_the_project() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(outside.path().join("leak")).unwrap();
        std::fs::write(outside.path().join("leak/SKILL.md"), "---\ndescription: leaked\n---\nx").unwrap();
        let project = tempfile::tempdir().unwrap();
        let root = project.path();
        std::fs::create_dir_all(root.join(".claude/skills/pdf")).unwrap();
        std::fs::write(
            root.join(".claude/skills/pdf/SKILL.md"),
            "---\ndescription: Fill PDF forms\n---\nbody",
        )
        .unwrap();
        std::fs::create_dir_all(root.join(".opencode")).unwrap();
        std::os::unix::fs::symlink(outside.path(), root.join(".opencode/skill")).unwrap();
        let dirs = [".codeloop/skills", ".claude/skills", ".opencode/skill"].map(PathBuf::from);
        let skills = list_skills(&dirs, root);
        assert_eq!(skills, vec![SkillInfo { name: "pdf".into(), description: "Fill PDF forms".into() }]);
    }

    #[test]
    fn frontmatter_is_removed() {
        assert_eq!(strip_frontmatter("---\nname: x\n---\n\n# Body\n"), "# Body\n");
        assert_eq!(strip_frontmatter("# No front matter"), "# No front matter");
    }
}
