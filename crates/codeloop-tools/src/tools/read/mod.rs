//! `read`: a file with line numbers, a directory listing, or an image/PDF as an attachment (reference §8.3
//! read). Asks `external_directory` outside the project, then `read` with the project-relative path.
//! Refuses FIFOs, devices and sockets (they can block or never end) and reads no more of a file than
//! it returns.

mod content;
pub(crate) mod sniff;

use std::path::Path;

use async_trait::async_trait;
use codeloop_types::FilePart;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::io::AsyncReadExt;

use super::io_failure;
use crate::paths::{self, PathKind};
use crate::schema::{decode, schema_for};
use crate::{PermissionAsk, Tool, ToolContext, ToolFailure, ToolOutput};

pub(crate) const DEFAULT_LIMIT: usize = 2000;
/// Largest image or PDF returned as an attachment.
const MAX_ATTACHMENT_BYTES: u64 = 10 * 1024 * 1024;
const SNIFF_BYTES: usize = 4096;

const DESCRIPTION: &str = "Read a file or list a directory. Output lines are prefixed with their line number (`N: `). \
By default returns up to 2000 lines from the start; use offset (1-based line) and limit for large files. \
Lines over 2000 chars are cut. Images and PDFs are returned as attachments. Read several files in parallel when useful.";

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct Params {
    /// Absolute path, or relative to the project directory.
    file_path: String,
    /// Line (or entry) number to start from, 1-based.
    #[serde(default, deserialize_with = "crate::lenient::opt_usize")]
    #[schemars(range(min = 1))]
    offset: Option<usize>,
    /// Maximum number of lines (or entries) to return (default 2000).
    #[serde(default, deserialize_with = "crate::lenient::opt_usize")]
    #[schemars(range(min = 1))]
    limit: Option<usize>,
}

/// Reads files and directories.
pub struct ReadTool {
    parameters: Value,
}

impl ReadTool {
    pub fn new() -> Self {
        Self { parameters: schema_for::<Params>() }
    }
}

impl Default for ReadTool {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait]
impl Tool for ReadTool {
    fn name(&self) -> &str {
        "read"
    }

    fn effect(&self) -> crate::Effect {
        crate::Effect::ReadOnly
    }

    fn description(&self) -> &str {
        DESCRIPTION
    }

    fn parameters(&self) -> &Value {
        &self.parameters
    }

    async fn execute(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolFailure> {
        let params: Params = decode(self.name(), args)?;
        if params.offset == Some(0) {
            return Err(ToolFailure::Failed("offset must be greater than or equal to 1".into()));
        }
        let offset = params.offset.unwrap_or(1);
        let limit = params.limit.unwrap_or(DEFAULT_LIMIT).max(1);
        let path = paths::resolve(ctx, &params.file_path);
        let meta = tokio::fs::metadata(&path).await.ok();
        let kind =
            if meta.as_ref().is_some_and(|m| m.is_dir()) { PathKind::Directory } else { PathKind::File };
        paths::check_external(ctx, &path, kind).await?;
        let title = paths::relative(ctx, &path);
        ctx.ask(PermissionAsk {
            grant: Default::default(),
            permission: "read".to_string(),
            patterns: vec![title.clone()],
            always: vec!["*".to_string()],
            metadata: json!({}),
        })
        .await?;

        let Some(meta) = meta else { return Err(not_found(&path).await) };
        if meta.is_dir() {
            let listing = content::list_directory(&path, offset, limit).await?;
            return Ok(output(title, listing.text, listing.preview, listing.truncated));
        }
        if let Some(what) = special_file(&meta) {
            return Err(ToolFailure::Failed(format!(
                "Cannot read {}: it is {what}, not a regular file (reading it could block forever or never end)",
                path.display()
            )));
        }
        let head = read_head(&path).await?;
        if let Some(mime) = sniff::media_type(&head) {
            return attachment(title, &path, mime, meta.len()).await;
        }
        if sniff::is_binary(&path, &head) {
            return Err(ToolFailure::Failed(format!("Cannot read binary file: {}", path.display())));
        }
        let text = content::read_lines(&path, offset, limit).await?;
        ctx.saw(&path);
        Ok(output(title, text.text, text.preview, text.truncated))
    }
}

fn output(title: String, text: String, preview: String, truncated: bool) -> ToolOutput {
    ToolOutput {
        title,
        output: text,
        metadata: json!({"preview": preview, "truncated": truncated}),
        attachments: Vec::new(),
    }
}

/// What a path is when it is none of the things `read` can return: opening a FIFO waits for a writer,
/// a device or socket may never end.
#[cfg(unix)]
fn special_file(meta: &std::fs::Metadata) -> Option<&'static str> {
    use std::os::unix::fs::FileTypeExt;
    let kind = meta.file_type();
    if kind.is_fifo() {
        Some("a named pipe (FIFO)")
    } else if kind.is_char_device() {
        Some("a character device")
    } else if kind.is_block_device() {
        Some("a block device")
    } else if kind.is_socket() {
        Some("a socket")
    } else {
        None
    }
}

#[cfg(not(unix))]
fn special_file(meta: &std::fs::Metadata) -> Option<&'static str> {
    (!meta.is_file()).then_some("a special file")
}

/// The first [`SNIFF_BYTES`] of the file, for the binary and media sniff (never more).
async fn read_head(path: &Path) -> Result<Vec<u8>, ToolFailure> {
    let mut file = tokio::fs::File::open(path).await.map_err(|e| io_failure("read", path, &e))?;
    let mut head = vec![0u8; SNIFF_BYTES];
    let mut filled = 0;
    while filled < head.len() {
        match file.read(&mut head[filled..]).await {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) => return Err(io_failure("read", path, &e)),
        }
    }
    head.truncate(filled);
    Ok(head)
}

async fn attachment(title: String, path: &Path, mime: &str, size: u64) -> Result<ToolOutput, ToolFailure> {
    if size > MAX_ATTACHMENT_BYTES {
        return Err(ToolFailure::Failed(format!(
            "File is too large to attach ({size} bytes, limit {MAX_ATTACHMENT_BYTES}): {}",
            path.display()
        )));
    }
    let bytes = tokio::fs::read(path).await.map_err(|e| io_failure("read", path, &e))?;
    let what = if mime == "application/pdf" { "PDF" } else { "Image" };
    let message = format!("{what} read successfully");
    Ok(ToolOutput {
        title,
        output: message.clone(),
        metadata: json!({"preview": message, "truncated": false}),
        attachments: vec![FilePart {
            mime: mime.to_string(),
            filename: path.file_name().map(|n| n.to_string_lossy().into_owned()),
            url: format!("data:{mime};base64,{}", sniff::base64(&bytes)),
            source: None,
        }],
    })
}

/// "File not found" with up to three existing paths of similar names.
async fn not_found(path: &Path) -> ToolFailure {
    let message = format!("File not found: {}", path.display());
    let nearest = paths::nearest(path).await;
    if nearest.is_empty() {
        ToolFailure::Failed(message)
    } else {
        ToolFailure::Failed(format!("{message}\n\nDid you mean one of these?\n{}", nearest.join("\n")))
    }
}
