//! Cost of the walls' walk around every bash call (`codeloop_tools::guard::scan`, run before and after
//! each call): a project of 1 000 files in 100 directories, and one of 20 000 files in 2 000.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};

fn tree(dirs: usize, files_per_dir: usize) -> tempfile::TempDir {
    let root = tempfile::tempdir().expect("tempdir");
    for d in 0..dirs {
        let dir = root.path().join(format!("pkg{}/src/mod{d}", d % 10));
        std::fs::create_dir_all(&dir).expect("dir");
        for f in 0..files_per_dir {
            std::fs::write(dir.join(format!("file{f}.rs")), "").expect("file");
        }
    }
    std::fs::create_dir_all(root.path().join(".git/objects")).expect("git");
    std::fs::write(root.path().join(".env"), "K=V").expect("env");
    root
}

fn bench(c: &mut Criterion) {
    let small = tree(100, 10);
    let large = tree(2_000, 10);
    let mut group = c.benchmark_group("guard_scan");
    group.bench_function("1k_files", |b| b.iter(|| black_box(codeloop_tools::guard::scan(small.path()))));
    group.bench_function("20k_files", |b| b.iter(|| black_box(codeloop_tools::guard::scan(large.path()))));
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
