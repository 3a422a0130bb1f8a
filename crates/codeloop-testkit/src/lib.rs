//! codeloop-testkit
