//! codeloop-server
