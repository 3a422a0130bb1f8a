//! Language-server clients (DESIGN.md §5n): JSON-RPC over a server's stdio ([`rpc`]), one running server
//! with its documents and diagnostics ([`Server`]), and what the model reads of the answers ([`render`]).
//!
//! Owns: talking LSP. Must not: choose servers for files, start processes outside the command it is
//! given (the engine walls it like `bash`), touch sessions, tools or permissions.

mod incoming;
pub mod render;
pub mod rpc;
mod server;
pub mod uri;

pub use lsp_types;
pub use server::{LspError, Server, ServerSpec, Waited};

/// The `languageId` LSP expects for a file extension (what `didOpen` sends).
pub fn language_id(extension: &str) -> &'static str {
    match extension.to_ascii_lowercase().as_str() {
        "py" | "pyi" => "python",
        "ts" | "mts" | "cts" => "typescript",
        "tsx" => "typescriptreact",
        "js" | "mjs" | "cjs" => "javascript",
        "jsx" => "javascriptreact",
        "rs" => "rust",
        "go" => "go",
        "c" | "h" => "c",
        "cc" | "cpp" | "cxx" | "hpp" | "hh" | "hxx" => "cpp",
        "sh" | "bash" => "shellscript",
        "json" => "json",
        "java" => "java",
        "rb" => "ruby",
        "lua" => "lua",
        _ => "plaintext",
    }
}
