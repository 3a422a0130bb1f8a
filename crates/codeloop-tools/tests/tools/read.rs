//! read: numbered lines, offset/limit, long lines, binary refusal, directories, missing files, images and
//! its permission asks.

use pretty_assertions::assert_eq;
use serde_json::json;

use crate::common::Env;

fn numbered(n: usize) -> String {
    (1..=n).map(|i| format!("line {i}\n")).collect()
}

#[tokio::test]
async fn read_numbers_lines_and_reports_the_end() {
    let env = Env::new();
    let path = env.write("a.txt", "alpha\r\nbeta\n");
    let out = env.ok("read", json!({"filePath": "a.txt"})).await;
    assert_eq!(
        out.output,
        format!(
            "<path>{}</path>\n<type>file</type>\n<content>\n1: alpha\n2: beta\n\n(End of file - total 2 lines)\n</content>",
            path.display()
        )
    );
    assert_eq!(out.title, "a.txt");
    assert_eq!(out.metadata, json!({"preview": "alpha\nbeta", "truncated": false}));
}

#[tokio::test]
async fn read_pages_with_offset_and_limit() {
    let env = Env::new();
    env.write("n.txt", numbered(10));
    let out = env.ok("read", json!({"filePath": "n.txt", "offset": 3, "limit": 2})).await;
    assert!(
        out.output.contains(
            "<content>\n3: line 3\n4: line 4\n\n(Showing lines 3-4 of 10. Use offset=5 to continue.)"
        ),
        "{}",
        out.output
    );
    assert_eq!(out.metadata["truncated"], json!(true));
}

#[tokio::test]
async fn read_offset_past_the_end_fails() {
    let env = Env::new();
    env.write("n.txt", numbered(3));
    let message = env.fail("read", json!({"filePath": "n.txt", "offset": 10})).await;
    assert_eq!(message, "Offset 10 is out of range for this file (3 lines)");
}

#[tokio::test]
async fn read_cuts_long_lines() {
    let env = Env::new();
    env.write("long.txt", format!("{}\nshort\n", "x".repeat(2500)));
    let out = env.ok("read", json!({"filePath": "long.txt"})).await;
    assert!(
        out.output.contains(&format!("1: {}... (line truncated to 2000 chars)\n2: short", "x".repeat(2000)))
    );
}

#[tokio::test]
async fn read_caps_output_at_50_kib() {
    let env = Env::new();
    env.write("big.txt", format!("{}\n", "y".repeat(1000)).repeat(100));
    let out = env.ok("read", json!({"filePath": "big.txt"})).await;
    assert!(
        out.output.contains("(Output capped at 50 KB. Showing lines 1-51. Use offset=52 to continue.)"),
        "{}",
        &out.output[out.output.len() - 200..]
    );
}

#[tokio::test]
async fn read_refuses_binary_files() {
    let env = Env::new();
    let path = env.write("blob.dat2", b"abc\0def");
    let message = env.fail("read", json!({"filePath": "blob.dat2"})).await;
    assert_eq!(message, format!("Cannot read binary file: {}", path.display()));
    env.write("archive.zip", "looks like text");
    assert!(
        env.fail("read", json!({"filePath": "archive.zip"})).await.starts_with("Cannot read binary file")
    );
}

#[tokio::test]
async fn read_lists_directories_sorted_with_slashes() {
    let env = Env::new();
    env.write("dir/b.txt", "");
    env.write("dir/a.txt", "");
    env.write("dir/sub/c.txt", "");
    let out = env.ok("read", json!({"filePath": "dir"})).await;
    assert!(
        out.output
            .contains("<type>directory</type>\n<entries>\na.txt\nb.txt\nsub/\n\n(3 entries)\n</entries>"),
        "{}",
        out.output
    );
    let page = env.ok("read", json!({"filePath": "dir", "offset": 2, "limit": 1})).await;
    assert!(
        page.output.contains("<entries>\nb.txt\n\n(Showing entries 2-2 of 3. Use offset=3 to continue.)"),
        "{}",
        page.output
    );
}

#[tokio::test]
async fn read_suggests_similar_names_for_missing_files() {
    let env = Env::new();
    env.write("config.json", "{}");
    env.write("unrelated.rs", "");
    let message = env.fail("read", json!({"filePath": "config.jsn"})).await;
    assert_eq!(
        message,
        format!(
            "File not found: {}\n\nDid you mean one of these?\n{}",
            env.path("config.jsn").display(),
            env.path("config.json").display()
        )
    );
}

#[tokio::test]
async fn read_returns_images_as_attachments() {
    let env = Env::new();
    env.write("pic.png", b"\x89PNG\r\n\x1a\n\0\0rest");
    let out = env.ok("read", json!({"filePath": "pic.png"})).await;
    assert_eq!(out.output, "Image read successfully");
    assert_eq!(out.attachments.len(), 1);
    assert_eq!(out.attachments[0].mime, "image/png");
    assert!(out.attachments[0].url.starts_with("data:image/png;base64,iVBORw0KGgo"));
}

#[tokio::test]
async fn read_asks_with_the_relative_path() {
    let env = Env::new();
    env.write("src/main.rs", "fn main() {}\n");
    env.ok("read", json!({"filePath": env.path("src/main.rs").display().to_string()})).await;
    let asks = env.asks();
    assert_eq!(asks.len(), 1);
    assert_eq!(asks[0].permission, "read");
    assert_eq!(asks[0].patterns, vec!["src/main.rs"]);
    assert_eq!(asks[0].always, vec!["*"]);
}

#[tokio::test]
async fn read_outside_the_project_asks_external_directory_first() {
    let env = Env::new();
    let outside = tempfile::tempdir().unwrap();
    let file = outside.path().join("notes.txt");
    std::fs::write(&file, "hi").unwrap();
    env.deny("external_directory");
    let result = env.run("read", json!({"filePath": file.display().to_string()})).await;
    assert!(result.is_err());
    let asks = env.asks();
    assert_eq!(asks.len(), 1);
    assert_eq!(asks[0].permission, "external_directory");
    assert_eq!(asks[0].patterns, vec![format!("{}/*", outside.path().display())]);
}

/// A safety net for the calls below: today's code blocked on them or read for many seconds.
const PATIENCE: std::time::Duration = std::time::Duration::from_secs(20);

async fn bounded<T>(what: &str, call: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(PATIENCE, call)
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer within {PATIENCE:?}"))
}

/// Peak resident memory of this process so far, in KiB.
fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_refuses_fifos_devices_and_sockets_instead_of_hanging() {
    let env = Env::new();
    let fifo = env.path("pipe");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    // Whenever a reader opens the pipe (the old code did, then waited forever for a writer), this
    // writer opens and closes it, so the reader gets an end of file instead of hanging the test. With
    // nobody reading, the thread waits in `open` until the process exits.
    let writer_side = fifo.clone();
    std::thread::spawn(move || {
        while let Ok(file) = std::fs::OpenOptions::new().write(true).open(&writer_side) {
            drop(file);
        }
    });
    let socket = env.path("agent.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    let cases = [
        (fifo.display().to_string(), "a named pipe (FIFO)"),
        ("/dev/zero".to_owned(), "a character device"),
        (socket.display().to_string(), "a socket"),
    ];
    for (path, what) in cases {
        let message = bounded(&path, env.fail("read", json!({"filePath": path}))).await;
        assert_eq!(
            message,
            format!(
                "Cannot read {path}: it is {what}, not a regular file (reading it could block forever or never end)"
            )
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_of_a_huge_sparse_file_reads_only_what_it_returns() {
    let env = Env::new();
    // Ten thousand lines of text (well past the 4 KiB binary sniff), then a 2 GiB hole: NUL bytes
    // without a newline that cost no disk.
    let text: String = (1..=10_000).map(|i| format!("entry {i}\n")).collect();
    let path = env.write("huge.log", &text);
    std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(2 << 30).unwrap();

    let out = bounded("read of a 2 GiB sparse file", env.ok("read", json!({"filePath": "huge.log"}))).await;
    assert!(out.output.contains("<content>\n1: entry 1\n2: entry 2\n"), "{}", &out.output[..200]);
    assert!(
        out.output.ends_with(
            "\n2000: entry 2000\n\n(Showing lines 1-2000. Use offset=2001 to continue.)\n</content>"
        ),
        "{}",
        &out.output[out.output.len() - 200..]
    );
    assert_eq!(out.metadata["truncated"], json!(true));
    let out =
        bounded("a later page", env.ok("read", json!({"filePath": "huge.log", "offset": 9998, "limit": 2})))
            .await;
    assert!(
        out.output.contains("<content>\n9998: entry 9998\n9999: entry 9999\n\n(Showing lines 9998-9999.")
    );

    // Fewer lines than a page: the hole is the next line. It is shown cut and ends the page; nothing
    // of it past the cut is read.
    let text: String = (1..=500).map(|i| format!("entry {i}\n")).collect();
    let path = env.write("short.log", &text);
    std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(2 << 30).unwrap();
    let out = bounded("a page that reaches the hole", env.ok("read", json!({"filePath": "short.log"}))).await;
    assert!(out.output.contains("\n500: entry 500\n501: \0\0\0"), "{}", &out.output[..200]);
    assert!(
        out.output.ends_with(
            "... (line truncated to 2000 chars)\n\n(Showing lines 1-501. Use offset=502 to continue.)\n</content>"
        ),
        "{}",
        &out.output[out.output.len() - 200..]
    );
    // The old code read the hole into memory as one line; streaming keeps the peak far below its size.
    let peak_mib = peak_rss_kib() / 1024;
    assert!(peak_mib < 1024, "peak memory {peak_mib} MiB while reading a 2 GiB file");
}

#[tokio::test]
async fn read_skips_the_rest_of_a_long_line_and_goes_on() {
    let env = Env::new();
    // A minified line of 100 KB between two short ones.
    env.write("min.js", format!("a\n{}\nb\n", "x".repeat(100_000)));
    let out = env.ok("read", json!({"filePath": "min.js"})).await;
    assert!(
        out.output.ends_with(&format!(
            "1: a\n2: {}... (line truncated to 2000 chars)\n3: b\n\n(End of file - total 3 lines)\n</content>",
            "x".repeat(2000)
        )),
        "{}",
        &out.output[out.output.len() - 200..]
    );
}
