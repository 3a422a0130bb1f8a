//! Which failures are retried, end to end (DESIGN.md §4 "Retry": 408/409/429/5xx/529, resets, idle
//! timeouts and "overloaded"/"rate limit" errors are; auth, bad requests, quota and overflow are not).
//! Each row is `[fault, answer]`: a retried fault completes after two calls with one retry event; any other
//! stops after one call with no retry event.

use codeloop_core::StopReason;
use codeloop_testkit::{Fault, Reply, Script, Turn};
use serde_json::json;

use crate::checks::assert_consistent;
use crate::harness::Harness;

/// A status fault asking for a 1 ms wait, so a retried row costs no backoff.
fn status(code: u16) -> Fault {
    Fault::status(code).header("retry-after-ms", "1")
}

async fn row(name: &str, fault: Fault, retried: bool) -> Result<(), String> {
    let h = Harness::new(Script::new([Turn::from(fault), Turn::from(Reply::text("ok"))])).await;
    let run = h.prompt("hello").await;
    let (calls, retries) = (h.fake.request_count(), run.retries().len());
    let completed = run.outcome.stop == StopReason::Completed;
    assert_consistent(&h.history(), &h.bodies());
    let expected = if retried { (true, 2, 1) } else { (false, 1, 0) };
    if (completed, calls, retries) == expected {
        Ok(())
    } else {
        Err(format!(
            "{name}: completed {completed}, {calls} calls, {retries} retries (expected {expected:?}); stop {:?}",
            run.outcome.stop
        ))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retryable_failures_are_retried_and_the_others_are_not() {
    let json_200 = |error: serde_json::Value| Fault::status(200).body(json!({ "error": error }).to_string());
    let rows = vec![
        ("400 bad request", status(400), false),
        ("403 forbidden", status(403), false),
        ("404 model not found", status(404), false),
        ("408 request timeout", status(408), true),
        ("409 conflict", status(409), true),
        ("429 rate limited", status(429), true),
        ("500 server error", status(500), true),
        ("502 bad gateway", status(502), true),
        ("503 unavailable", status(503), true),
        ("504 gateway timeout", status(504), true),
        ("529 overloaded", status(529), true),
        (
            "200 with a JSON overloaded error",
            json_200(json!({"type": "overloaded_error", "message": "Overloaded"})),
            true,
        ),
        (
            "200 with a JSON quota error",
            json_200(json!({"code": "insufficient_quota", "message": "You exceeded your current quota"})),
            false,
        ),
        (
            "in-stream quota error",
            Fault::error_event(
                Reply::text("partial"),
                1,
                json!({"code": "insufficient_quota", "message": "You exceeded your current quota"}),
            ),
            false,
        ),
        (
            "in-stream rate limit error",
            Fault::error_event(
                Reply::text("partial"),
                1,
                json!({"type": "rate_limit_error", "message": "Rate limit reached, try again later"}),
            ),
            true,
        ),
    ];
    let results =
        futures::future::join_all(rows.into_iter().map(|(name, fault, retried)| row(name, fault, retried)))
            .await;
    let failures: Vec<String> = results.into_iter().filter_map(Result::err).collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[tokio::test]
async fn a_body_that_stays_silent_from_the_first_byte_hits_the_idle_timeout() {
    let h = Harness::with(
        Script::new([Turn::from(Fault::stall(Reply::text("never"), 0)), Turn::from(Reply::text("ok"))]),
        |config| crate::harness::fake_provider(config).idle_timeout_ms = Some(300),
    )
    .await;
    let run = h.prompt("hello").await;
    assert_eq!(run.outcome.stop, StopReason::Completed);
    assert_eq!(h.fake.request_count(), 2);
    assert_eq!(run.retry_attempts(), vec![(2, "stream stalled".to_owned())]);
}
