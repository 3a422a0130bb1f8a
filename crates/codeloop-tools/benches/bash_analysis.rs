//! Cost of the bash permission analysis per tool call: parse (tree-sitter-bash) and walk a script into
//! its normalised command patterns.

use std::hint::black_box;

use codeloop_tools::BashTool;
use criterion::{Criterion, criterion_group, criterion_main};

const PIPELINE: &str = "git log --oneline -n 50 | grep -v Merge | sed 's/^[0-9a-f]* //' | sort | uniq -c \
| sort -rn | head -20 | awk '{print $2}' | tr a-z A-Z | tee /dev/null";

/// About 2 KB of a typical build-and-check script.
fn two_kb_script() -> String {
    let block = r#"set -euo pipefail
cd crates/app && cargo build --release 2>&1 | tail -n 20
if [ -f "$HOME/.cargo/env" ]; then . "$HOME/.cargo/env"; fi
for f in $(git diff --name-only HEAD~1 -- '*.rs'); do
  rustfmt --check "$f" || echo "needs fmt: $f" >> fmt.log
done
RUST_LOG=debug cargo test -p app -- --nocapture > test.log 2>&1 || { cat test.log; exit 1; }
find target -name '*.tmp' -delete
"#;
    let mut script = String::new();
    while script.len() < 2048 {
        script.push_str(block);
    }
    script
}

fn bench(c: &mut Criterion) {
    let script = two_kb_script();
    c.bench_function("bash_analysis/git_status", |b| {
        b.iter(|| BashTool::permission_ask(black_box("git status")))
    });
    c.bench_function("bash_analysis/pipeline_10", |b| {
        b.iter(|| BashTool::permission_ask(black_box(PIPELINE)))
    });
    c.bench_function("bash_analysis/script_2kb", |b| b.iter(|| BashTool::permission_ask(black_box(&script))));
}

criterion_group!(benches, bench);
criterion_main!(benches);
