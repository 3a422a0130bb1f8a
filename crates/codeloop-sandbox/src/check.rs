//! x
pub struct CheckReport;
pub struct CheckLine;
pub fn check(_h: &std::path::Path, _p: &crate::SandboxPolicy) -> CheckReport {
    CheckReport
}
