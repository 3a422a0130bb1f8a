//! codeloop-provider
