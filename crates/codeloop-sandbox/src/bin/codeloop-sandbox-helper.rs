//! A stand-alone helper for this crate's tests and benches; the codeloop binary calls `helper_main` itself.
fn main() -> std::process::ExitCode {
    codeloop_sandbox::helper_main(std::env::args_os().skip(2).collect())
}
