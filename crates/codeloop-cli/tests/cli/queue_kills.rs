//! No accepted prompt is lost or answered twice (DESIGN.md §5b, issue 26): a `codeloop serve` on SQLite
//! is SIGKILLed at each point of a queued prompt's way — accepted (the 202), dequeued into the history,
//! sent to the model, its answer streaming — and at random moments; a restarted server on the same data
//! dir then answers what was accepted, exactly once.

use std::time::{Duration, Instant};

use codeloop_testkit::{FakeProvider, Reply, Script, Turn};
use serde_json::{Value, json};

use super::Env;
use super::workers::{eventually, messages, serve_in, text_of};

/// The prompt whose fate the tests follow: distinctive, so it is found in request bodies.
const QUEUED: &str = "the queued prompt 7f3a";

#[derive(Debug, Clone, Copy)]
enum Point {
    /// Right after `prompt_async` answered 202.
    Accepted,
    /// Once the prompt is a user message in the history.
    Dequeued,
    /// Once the model has been sent the request that carries it.
    Requested,
    /// Once its answer is streaming.
    Answering,
    /// This long after the 202.
    After(Duration),
}

/// A slow first answer, then slower-than-instant answers, so every kill point can be hit.
fn script() -> Script {
    let slow = |text: &str, chunks: usize| {
        Turn::from(
            Reply::text(format!("{text} ").repeat(chunks)).with_text_chunks(chunks).with_chunk_delay_ms(100),
        )
    };
    Script::new([
        slow("first", 25),
        slow("next", 10),
        slow("next", 10),
        slow("next", 10),
        slow("next", 10),
        slow("next", 10),
    ])
}

fn sent_the_queued_prompt(fake: &FakeProvider) -> bool {
    fake.requests().iter().any(|r| r.body.to_string().contains(QUEUED))
}

async fn kill_at(point: Point, delivery: &str) {
    let fake = FakeProvider::start(script()).await.unwrap();
    let env = Env::new();
    let config = env.config(&fake.base_url(), "");
    let data = tempfile::tempdir().unwrap();
    let (mut first, url) = serve_in(&env, &config, None, data.path());
    let http = super::http_client();
    let session: Value =
        http.post(format!("{url}/session")).json(&json!({})).send().await.unwrap().json().await.unwrap();
    let id = session["id"].as_str().unwrap().to_owned();
    let prompt = |text: &str| json!({"parts": [{"type": "text", "text": text}], "delivery": delivery});
    let one =
        http.post(format!("{url}/session/{id}/prompt_async")).json(&prompt("one")).send().await.unwrap();
    assert_eq!(one.status(), 202);
    eventually("the first answer never started streaming", || async {
        messages(&http, &url, &id).await.get(1).filter(|m| !text_of(m).is_empty()).map(drop)
    })
    .await;
    let queued =
        http.post(format!("{url}/session/{id}/prompt_async")).json(&prompt(QUEUED)).send().await.unwrap();
    assert_eq!(queued.status(), 202, "{point:?}");
    let accepted = Instant::now();
    match point {
        Point::Accepted => {}
        Point::Dequeued => {
            eventually("the queued prompt never reached the history", || async {
                let history = messages(&http, &url, &id).await;
                history.iter().any(|m| m["info"]["role"] == "user" && text_of(m) == QUEUED).then_some(())
            })
            .await;
        }
        Point::Requested => {
            eventually("the queued prompt was never sent", || async {
                sent_the_queued_prompt(&fake).then_some(())
            })
            .await;
        }
        Point::Answering => {
            eventually("the queued prompt's answer never streamed", || async {
                let history = messages(&http, &url, &id).await;
                let at = history.iter().position(|m| m["info"]["role"] == "user" && text_of(m) == QUEUED)?;
                history[at + 1..]
                    .iter()
                    .any(|m| m["info"]["role"] == "assistant" && !text_of(m).is_empty())
                    .then_some(())
            })
            .await;
        }
        Point::After(delay) => tokio::time::sleep_until((accepted + delay).into()).await,
    }
    first.0.kill().unwrap(); // SIGKILL: nothing is cleaned up
    first.0.wait().unwrap();

    let (_second, url) = serve_in(&env, &config, None, data.path());
    let deadline = Instant::now() + Duration::from_secs(40);
    let history = loop {
        let history = messages(&http, &url, &id).await;
        let statuses: Value =
            http.get(format!("{url}/session/status")).send().await.unwrap().json().await.unwrap();
        let idle = statuses.get(&id).is_none_or(|s| s["type"] == "idle");
        let done = history.last().is_some_and(|m| {
            m["info"]["role"] == "assistant"
                && !m["info"]["time"]["completed"].is_null()
                && m["info"]["error"].is_null()
        });
        let has_queued = history.iter().any(|m| text_of(m) == QUEUED);
        if idle && done && has_queued {
            break history;
        }
        assert!(
            Instant::now() < deadline,
            "{point:?}/{delivery}: the accepted prompt was never answered: {history:#?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let users: Vec<String> = history.iter().filter(|m| m["info"]["role"] == "user").map(text_of).collect();
    assert_eq!(
        users.iter().filter(|t| *t == QUEUED).count(),
        1,
        "{point:?}/{delivery}: recorded once: {users:?}"
    );
    assert_eq!(users.first().map(String::as_str), Some("one"), "{point:?}/{delivery}: {users:?}");
    let at = history.iter().position(|m| text_of(m) == QUEUED).unwrap_or_default();
    let answers = history[at + 1..]
        .iter()
        .filter(|m| {
            m["info"]["role"] == "assistant"
                && m["info"]["error"].is_null()
                && !m["info"]["time"]["completed"].is_null()
        })
        .count();
    assert_eq!(answers, 1, "{point:?}/{delivery}: answered exactly once: {history:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_prompt_survives_a_kill_right_after_it_was_accepted() {
    kill_at(Point::Accepted, "queue").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_prompt_survives_a_kill_once_it_is_in_the_history() {
    kill_at(Point::Dequeued, "queue").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_prompt_survives_a_kill_once_it_was_sent_to_the_model() {
    kill_at(Point::Requested, "queue").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_prompt_survives_a_kill_while_its_answer_streams() {
    kill_at(Point::Answering, "queue").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_steered_prompt_survives_a_kill_once_it_was_sent_to_the_model() {
    kill_at(Point::Requested, "steer").await;
}

/// Kills at moments drawn at random over the whole way (the seed is printed, so a failure can be run
/// again with `CODELOOP_KILL_SEED`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accepted_prompts_survive_kills_at_random_moments() {
    let seed = std::env::var("CODELOOP_KILL_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(7, |d| d.subsec_nanos().into())
    });
    println!("CODELOOP_KILL_SEED={seed}");
    let mut state: u64 = seed | 1;
    for trial in 0..3 {
        // xorshift: enough spread for three draws.
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let delay = Duration::from_millis(state % 4_000);
        let delivery = if trial % 2 == 0 { "queue" } else { "steer" };
        println!("trial {trial}: kill {delay:?} after the 202 ({delivery})");
        kill_at(Point::After(delay), delivery).await;
    }
}
