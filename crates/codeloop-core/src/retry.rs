//! Retry policy (DESIGN.md §4 "Retry"): which failures get another attempt and how long to wait.
//! Bounded by attempts and a total wait budget, unlike OpenCode's endless retries.

use std::time::Duration;

use codeloop_provider::ProviderError;

use crate::config::RetryConfig;

const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// What to do after a failed attempt.
#[derive(Debug, Clone, PartialEq)]
pub enum RetryDecision {
    /// Wait this long, then make attempt `attempt` (1-based, counting the first call).
    Wait { delay: Duration, attempt: u32 },
    /// Give up: the error is not retryable, or a bound was reached (`reason` says which).
    GiveUp { reason: Option<String> },
}

#[derive(Debug, Clone)]
pub struct RetryPolicy {
    config: RetryConfig,
    attempts: u32,
    waited: Duration,
}

impl RetryPolicy {
    pub fn new(config: RetryConfig) -> Self {
        Self { config, attempts: 1, waited: Duration::ZERO }
    }

    pub fn max_attempts(&self) -> u32 {
        self.config.max_attempts.max(1)
    }

    /// Decides after attempt number `self.attempts` failed with `error`.
    pub fn next(&mut self, error: &ProviderError) -> RetryDecision {
        if !error.retryable() {
            return RetryDecision::GiveUp { reason: None };
        }
        if self.attempts >= self.max_attempts() {
            return RetryDecision::GiveUp {
                reason: Some(format!("gave up after {} attempts", self.attempts)),
            };
        }
        let budget = Duration::from_secs(self.config.max_wait_secs);
        let delay = delay_for(self.attempts, error, Duration::from_millis(self.config.base_delay_ms));
        if self.waited + delay > budget {
            let reason = match error.retry_after() {
                Some(asked) if asked > budget => format!(
                    "the provider asked to wait {}, more than the retry budget of {}s ([retry] max_wait_secs)",
                    seconds(asked),
                    budget.as_secs()
                ),
                _ => format!(
                    "retry budget of {}s used up after {} of waiting",
                    budget.as_secs(),
                    seconds(self.waited)
                ),
            };
            return RetryDecision::GiveUp { reason: Some(reason) };
        }
        self.waited += delay;
        self.attempts += 1;
        RetryDecision::Wait { delay, attempt: self.attempts }
    }
}

fn seconds(duration: Duration) -> String {
    if duration.subsec_millis() == 0 {
        format!("{}s", duration.as_secs())
    } else {
        format!("{:.1}s", duration.as_secs_f64())
    }
}

/// `retry-after-ms` / `retry-after` when the server sent them, else `initial` (2 s by default) × 2^(n−1)
/// capped at 30 s, plus up to 10 % jitter so many clients do not retry in lockstep.
pub fn delay_for(failed_attempt: u32, error: &ProviderError, initial: Duration) -> Duration {
    if let Some(asked) = error.retry_after() {
        return asked;
    }
    let exponent = failed_attempt.saturating_sub(1).min(16);
    let base = initial.saturating_mul(1 << exponent).min(MAX_BACKOFF);
    let jitter = base.mul_f64(fastrand::f64() * 0.1);
    base + jitter
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server_error() -> ProviderError {
        ProviderError::Api {
            status: Some(500),
            message: "boom".into(),
            body: None,
            retryable: true,
            retry_after: None,
        }
    }

    #[test]
    fn backoff_doubles_and_caps() {
        let d = |n| delay_for(n, &server_error(), Duration::from_secs(2));
        assert!(d(1) >= Duration::from_secs(2) && d(1) < Duration::from_millis(2201));
        assert!(d(2) >= Duration::from_secs(4) && d(2) < Duration::from_millis(4401));
        assert!(d(10) >= Duration::from_secs(30) && d(10) <= Duration::from_secs(33));
    }

    #[test]
    fn retry_after_is_honoured() {
        let e = ProviderError::Api {
            status: Some(429),
            message: "slow down".into(),
            body: None,
            retryable: true,
            retry_after: Some(Duration::from_millis(1500)),
        };
        assert_eq!(delay_for(3, &e, Duration::from_secs(2)), Duration::from_millis(1500));
    }

    #[test]
    fn attempts_are_bounded() {
        let mut policy =
            RetryPolicy::new(RetryConfig { max_attempts: 3, max_wait_secs: 600, ..RetryConfig::default() });
        assert!(matches!(policy.next(&server_error()), RetryDecision::Wait { attempt: 2, .. }));
        assert!(matches!(policy.next(&server_error()), RetryDecision::Wait { attempt: 3, .. }));
        assert!(matches!(policy.next(&server_error()), RetryDecision::GiveUp { reason: Some(_) }));
    }

    #[test]
    fn a_wait_beyond_the_budget_gives_up_with_a_reason() {
        let mut policy =
            RetryPolicy::new(RetryConfig { max_attempts: 8, max_wait_secs: 60, ..RetryConfig::default() });
        let e = ProviderError::Api {
            status: Some(429),
            message: "slow down".into(),
            body: None,
            retryable: true,
            retry_after: Some(Duration::from_secs(3600)),
        };
        let RetryDecision::GiveUp { reason: Some(reason) } = policy.next(&e) else {
            panic!("expected give up")
        };
        assert!(reason.contains("3600s"), "{reason}");
    }

    #[test]
    fn non_retryable_errors_give_up_at_once() {
        let mut policy = RetryPolicy::new(RetryConfig::default());
        let auth = ProviderError::Auth { provider: "p".into(), message: "bad key".into(), env: None };
        assert_eq!(policy.next(&auth), RetryDecision::GiveUp { reason: None });
    }
}
