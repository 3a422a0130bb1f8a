//! codeloop-tools
