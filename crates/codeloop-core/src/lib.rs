//! codeloop-core
