//! `codeloop gc` through the real binary: old sessions go by `[storage] max_age_days`, the oldest ones
//! by `max_bytes`, a fresh one never, and `doctor` says when the data dir is over its bound.

use codeloop_testkit::{FakeProvider, Reply, Script, Turn};
use serde_json::Value;

use super::Env;

const DAY_MS: i64 = 86_400_000;

/// Three sessions answered through `codeloop run`, their ids oldest first.
async fn three_sessions(env: &Env) -> (std::path::PathBuf, Vec<String>) {
    let fake =
        FakeProvider::start(Script::new((0..3).map(|i| Turn::from(Reply::text(format!("answer {i}"))))))
            .await
            .unwrap();
    let config = env.config(&fake.base_url(), "");
    for word in ["one", "two", "three"] {
        let out = tokio::task::block_in_place(|| env.codeloop(Some(&config), &["run", word]));
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    let mut ids = list(env, &config);
    ids.reverse();
    (config, ids)
}

fn list(env: &Env, config: &std::path::Path) -> Vec<String> {
    let out = env.codeloop(Some(config), &["session", "list", "--format", "json"]);
    let sessions: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    sessions.iter().map(|s| s["id"].as_str().unwrap().to_owned()).collect()
}

/// Makes session `id` look last updated `days` ago (in its row and its JSON).
fn age(env: &Env, id: &str, days: i64) {
    let db = rusqlite::Connection::open(env.data.path().join("codeloop.db")).unwrap();
    let updated = codeloop_types::now_ms() - days * DAY_MS;
    db.execute(
        "UPDATE session SET time_updated = ?1, data = json_set(data, '$.time.updated', ?1) WHERE id = ?2",
        rusqlite::params![updated, id],
    )
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gc_removes_sessions_past_max_age_and_keeps_fresh_ones() {
    let env = Env::new();
    let (config, ids) = three_sessions(&env).await;
    age(&env, &ids[0], 40);
    age(&env, &ids[1], 10);
    // A dry run lists, removes nothing.
    let dry = env.codeloop(Some(&config), &["gc", "--max-age-days", "30", "--dry-run", "--format", "json"]);
    assert!(dry.status.success(), "{}", String::from_utf8_lossy(&dry.stderr));
    let report: Value = serde_json::from_slice(&dry.stdout).unwrap();
    assert_eq!(report["sessions"], serde_json::json!([ids[0]]));
    assert_eq!(list(&env, &config).len(), 3);

    std::fs::write(
        &config,
        format!("{}\n[storage]\nmax_age_days = 5\n", std::fs::read_to_string(&config).unwrap()),
    )
    .unwrap();
    let out = env.codeloop(Some(&config), &["gc"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("removed 2 session(s)"), "{text}");
    assert_eq!(list(&env, &config), vec![ids[2].clone()], "the fresh session stays");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gc_over_max_bytes_removes_the_oldest_first_but_never_one_touched_today() {
    let env = Env::new();
    let (config, ids) = three_sessions(&env).await;
    age(&env, &ids[0], 3);
    age(&env, &ids[1], 2);
    // Over any bound: doctor says so and names the fix.
    std::fs::write(
        &config,
        format!("{}\n[storage]\nmax_bytes = 1\n", std::fs::read_to_string(&config).unwrap()),
    )
    .unwrap();
    let doctor = env.codeloop(Some(&config), &["doctor"]);
    let text = String::from_utf8_lossy(&doctor.stdout);
    assert!(text.contains("✗ storage:") && text.contains("codeloop gc"), "{text}");

    let out = env.codeloop(Some(&config), &["gc", "--format", "json"]);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["sessions"], serde_json::json!([ids[0], ids[1]]), "oldest first: {report}");
    assert_eq!(list(&env, &config), vec![ids[2].clone()], "a session of today is never removed");
}
