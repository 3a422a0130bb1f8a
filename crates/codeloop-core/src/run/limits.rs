//! The `[limits]` check (DESIGN.md §5h): before each model request (normal turns and summaries), the
//! spend so far is compared with the configured limits; a reached one stops the run.
//!
//! Owns: what one run has spent (cost, tokens, wall time). Must not: send, record or price anything —
//! the step-finish parts carry the cost, the run loop decides what a stop means.

use std::time::Instant;

use codeloop_types::{Limit, LimitReached, Tokens};

use crate::config::LimitsConfig;

/// What one run has spent so far.
#[derive(Debug)]
pub(super) struct Spend {
    started: Instant,
    cost: f64,
    tokens: u64,
}

impl Spend {
    pub fn new() -> Spend {
        Spend { started: Instant::now(), cost: 0.0, tokens: 0 }
    }

    /// Adds one step's usage (what its step-finish part recorded).
    pub fn add(&mut self, tokens: &Tokens, cost: f64) {
        self.cost += cost;
        self.tokens += run_tokens(tokens);
    }

    /// The first limit that has been reached, given the session's total cost (all runs, this one
    /// included). A limit is reached when the spend is at or past it.
    pub fn reached(&self, limits: &LimitsConfig, session_cost: f64) -> Option<LimitReached> {
        let minutes = self.started.elapsed().as_secs_f64() / 60.0;
        let checks = [
            (Limit::SessionMaxCostUsd, limits.session_max_cost_usd, session_cost),
            (Limit::RunMaxCostUsd, limits.run_max_cost_usd, self.cost),
            (Limit::RunMaxTokens, limits.run_max_tokens.map(|t| t as f64), self.tokens as f64),
            (Limit::RunMaxMinutes, limits.run_max_minutes, minutes),
        ];
        checks.into_iter().find_map(|(limit, value, used)| {
            let value = value?;
            (used >= value).then_some(LimitReached { limit, value, used })
        })
    }
}

/// The tokens one step counts against `run_max_tokens`: every prompt token (uncached, cache read and
/// cache write) plus output and reasoning.
fn run_tokens(tokens: &Tokens) -> u64 {
    tokens.input + tokens.cache.read + tokens.cache.write + tokens.output + tokens.reasoning
}

#[cfg(test)]
mod tests {
    use super::*;
    use codeloop_types::CacheTokens;

    #[test]
    fn a_limit_counts_once_the_spend_reaches_it() {
        let limits = LimitsConfig { run_max_tokens: Some(150), ..Default::default() };
        let mut spend = Spend::new();
        let step = Tokens {
            input: 50,
            output: 20,
            cache: CacheTokens { read: 20, write: 10 },
            ..Default::default()
        };
        spend.add(&step, 0.0);
        assert_eq!(spend.reached(&limits, 0.0), None);
        spend.add(&Tokens { input: 50, ..Default::default() }, 0.0);
        let reached = spend.reached(&limits, 0.0).unwrap();
        assert_eq!((reached.limit, reached.value, reached.used), (Limit::RunMaxTokens, 150.0, 150.0));
    }

    #[test]
    fn the_session_limit_counts_earlier_runs() {
        let limits = LimitsConfig {
            session_max_cost_usd: Some(1.0),
            run_max_cost_usd: Some(1.0),
            ..Default::default()
        };
        let reached = Spend::new().reached(&limits, 1.5).unwrap();
        assert_eq!(reached.limit, Limit::SessionMaxCostUsd);
        assert_eq!(Spend::new().reached(&LimitsConfig::default(), 1e9), None);
    }
}
