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

    /// `.codeloop/skills` (project) and `$XDG_CONFIG_HOME/codeloop/skills` or `~/.config/codeloop/skills`.
    pub fn default_dirs() -> Vec<PathBuf> {
        let mut dirs = vec![PathBuf::from(".codeloop/skills")];
        let config = std::env::var_os("XDG_CONFIG_HOME")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".config")));
        if let Some(config) = config {
            dirs.push(config.join("codeloop").join("skills"));
        }
        dirs
    }

    fn search_dirs(&self, root: &Path) -> Vec<PathBuf> {
        self.dirs.iter().map(|d| if d.is_relative() { root.join(d) } else { d.clone() }).collect()
    }
}

#[async_trait]
impl Tool for SkillTool {
    fn name(&self) -> &str {
        "skill"
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
    let dirs: Vec<PathBuf> =
        dirs.iter().map(|d| if d.is_relative() { root.join(d) } else { d.clone() }).collect();
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
    fn frontmatter_is_removed() {
        assert_eq!(strip_frontmatter("---\nname: x\n---\n\n# Body\n"), "# Body\n");
        assert_eq!(strip_frontmatter("# No front matter"), "# No front matter");
    }
}
