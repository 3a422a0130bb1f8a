//! x
use crate::policy::SandboxPolicy;
pub fn explain_failure(_policy: &SandboxPolicy, _output: &str) -> Option<String> {
    None
}
