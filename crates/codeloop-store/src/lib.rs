//! codeloop-store
