//! The retry bounds (DESIGN.md §4 "Retry"): a maximum number of attempts, a total wait budget, a server
//! asking for more than the budget, and an abort cutting a wait.

use std::time::{Duration, Instant};

use codeloop_core::config::RetryConfig;
use codeloop_core::{Delivery, PromptInput, StopReason};
use codeloop_testkit::{Fault, Reply, Script, Turn};
use codeloop_types::{AssistantError, EventPayload, Message, SessionStatus};
use tokio::sync::broadcast::error::RecvError;

use crate::checks::assert_consistent;
use crate::harness::{Harness, drain};

/// A 500 that asks for a 1 ms wait, so the bound is reached quickly.
fn quick_500() -> Turn {
    Turn::from(Fault::status(500).header("retry-after-ms", "1"))
}

fn never_sent() -> Turn {
    Turn::from(Reply::text("this turn must never be served"))
}

#[tokio::test]
async fn a_provider_that_always_fails_is_called_exactly_max_attempts_times() {
    let mut turns: Vec<Turn> = (0..8).map(|_| quick_500()).collect();
    turns.push(never_sent());
    let h = Harness::new(Script::new(turns)).await;
    let run = h.prompt("hello").await;
    let StopReason::Error(AssistantError::Api { message, status, retryable, .. }) = &run.outcome.stop else {
        panic!("expected an API error: {:?}", run.outcome.stop)
    };
    assert_eq!((*status, *retryable), (Some(500), true));
    assert!(message.contains("gave up after 8 attempts"), "{message}");
    assert_eq!(h.fake.request_count(), 8, "the default bound is 8 attempts");
    let attempts: Vec<u32> = run.retries().iter().map(|r| r.attempt).collect();
    assert_eq!(attempts, (2..=8).collect::<Vec<_>>());
    assert!(run.retries().iter().all(|r| r.max_attempts == 8 && r.message == "HTTP 500"));
    assert_consistent(&h.history(), &h.bodies());
}

#[tokio::test]
async fn max_attempts_comes_from_config() {
    let h = Harness::with(Script::new([quick_500(), quick_500(), quick_500(), never_sent()]), |config| {
        config.retry = RetryConfig { max_attempts: 3, ..RetryConfig::default() };
    })
    .await;
    let run = h.prompt("hello").await;
    let StopReason::Error(error) = &run.outcome.stop else { panic!("{:?}", run.outcome.stop) };
    assert!(error.message().contains("gave up after 3 attempts"), "{error:?}");
    assert_eq!(h.fake.request_count(), 3);
    assert_eq!(run.retry_attempts().len(), 2);
    assert!(run.retries().iter().all(|r| r.max_attempts == 3));
}

#[tokio::test]
async fn retry_after_beyond_the_budget_gives_up_at_once_naming_the_wait() {
    let h = Harness::new(Script::new([Turn::from(Fault::rate_limited(3600)), never_sent()])).await;
    let run = h.prompt("hello").await;
    let StopReason::Error(error) = &run.outcome.stop else { panic!("{:?}", run.outcome.stop) };
    let message = error.message();
    assert!(message.contains("3600s") && message.contains("max_wait_secs"), "{message}");
    assert!(message.contains("600s"), "names the budget too: {message}");
    assert_eq!(h.fake.request_count(), 1);
    assert!(run.retries().is_empty(), "no wait is announced");
    assert!(run.elapsed < Duration::from_secs(2), "{:?}", run.elapsed);
    assert_consistent(&h.history(), &h.bodies());
}

#[tokio::test]
async fn the_wait_budget_counts_every_wait_of_the_call() {
    // 700 ms fits a 1 s budget once, not twice.
    let wait = || Turn::from(Fault::status(503).header("retry-after-ms", "700"));
    let h = Harness::with(Script::new([wait(), wait(), never_sent()]), |config| {
        config.retry = RetryConfig { max_attempts: 8, max_wait_secs: 1, ..RetryConfig::default() };
    })
    .await;
    let run = h.prompt("hello").await;
    let StopReason::Error(error) = &run.outcome.stop else { panic!("{:?}", run.outcome.stop) };
    assert_eq!(h.fake.request_count(), 2);
    assert_eq!(run.retry_attempts(), vec![(2, "HTTP 503".to_owned())]);
    assert!(error.message().contains("1s"), "{error:?}");
}

#[tokio::test]

async fn a_used_up_budget_is_not_blamed_on_a_short_wait() {
    let wait = || Turn::from(Fault::status(503).header("retry-after-ms", "700"));
    let h = Harness::with(Script::new([wait(), wait(), never_sent()]), |config| {
        config.retry = RetryConfig { max_attempts: 8, max_wait_secs: 1, ..RetryConfig::default() };
    })
    .await;
    let run = h.prompt("hello").await;
    let StopReason::Error(error) = &run.outcome.stop else { panic!("{:?}", run.outcome.stop) };
    let message = error.message();
    assert!(!message.contains("asked to wait 0s"), "the 0.7 s wait alone fits the budget: {message}");
    assert!(message.contains("used up"), "{message}");
}

#[tokio::test]
async fn an_abort_during_a_retry_wait_returns_promptly() {
    let h = Harness::new(Script::new([Turn::from(Fault::rate_limited(30)), never_sent()])).await;
    let mut events = h.engine.bus().subscribe();
    let recorder = h.engine.bus().subscribe();
    let engine = h.engine.clone();
    let session = h.session.id.clone();
    let run = tokio::spawn(async move {
        engine.prompt(&session, PromptInput::text("hello"), Delivery::Queue).await.unwrap()
    });
    // Wait for the retry announcement (driven by the bus, no sleeping).
    loop {
        match events.recv().await {
            Ok(event) => {
                if let EventPayload::SessionStatus { status: SessionStatus::Retry { attempt, .. }, .. } =
                    &event.payload
                {
                    assert_eq!(*attempt, 2);
                    break;
                }
            }
            Err(RecvError::Lagged(_)) => {}
            Err(e) => panic!("bus closed: {e}"),
        }
    }
    let started = Instant::now();
    h.engine.abort(&h.session.id).await;
    let outcome = run.await.unwrap();
    let elapsed = started.elapsed();
    assert!(elapsed < Duration::from_secs(1), "the 30 s wait was not cut: {elapsed:?}");
    assert_eq!(outcome.stop, StopReason::Interrupted);
    assert_eq!(h.fake.request_count(), 1);

    h.engine.flush().await.unwrap();
    let history = h.history();
    let Message::Assistant(last) = &history.last().unwrap().info else { panic!() };
    assert!(last.error.as_ref().is_some_and(AssistantError::is_aborted), "{:?}", last.error);
    assert!(last.time.completed.is_some());
    let idle = drain(recorder)
        .iter()
        .any(|e| matches!(&e.payload, EventPayload::SessionStatus { status: SessionStatus::Idle, .. }));
    assert!(idle, "the session goes back to idle");
    assert_consistent(&history, &h.bodies());
}

/// An HTTP date (`Sun, 06 Nov 1994 08:49:37 GMT`) `secs` seconds from now.
fn http_date_in(secs: u64) -> String {
    let at = std::time::SystemTime::now() + Duration::from_secs(secs);
    let epoch = at.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let (days, rest) = (epoch / 86_400, epoch % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let weekday = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"][(days % 7) as usize];
    let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
    format!(
        "{weekday}, {day:02} {} {year} {:02}:{:02}:{:02} GMT",
        months[(month - 1) as usize],
        rest / 3_600,
        rest % 3_600 / 60,
        rest % 60
    )
}

#[tokio::test]
async fn retry_after_as_an_http_date_is_honoured() {
    let fault = Fault::status(429).header("retry-after", http_date_in(3));
    let h = Harness::new(Script::new([Turn::from(fault), Turn::from(Reply::text("ok"))])).await;
    let run = h.prompt("hello").await;
    assert_eq!(run.outcome.stop, StopReason::Completed);
    assert_eq!(run.retry_attempts(), vec![(2, "rate limited".to_owned())]);
    // The date has one-second resolution: between 2 and 3 s from when it was written.
    let delay = run.only_delay_ms();
    assert!((1_500..=3_000).contains(&delay), "{delay}");
    assert!(run.elapsed >= Duration::from_millis(1_500), "and it did wait: {:?}", run.elapsed);
}

#[tokio::test]
async fn retry_after_as_an_http_date_beyond_the_budget_gives_up() {
    let fault = Fault::status(429).header("retry-after", http_date_in(3_600));
    let h = Harness::new(Script::new([Turn::from(fault), never_sent()])).await;
    let run = h.prompt("hello").await;
    let StopReason::Error(error) = &run.outcome.stop else { panic!("{:?}", run.outcome.stop) };
    assert!(error.message().contains("max_wait_secs"), "{error:?}");
    assert_eq!(h.fake.request_count(), 1);
}
