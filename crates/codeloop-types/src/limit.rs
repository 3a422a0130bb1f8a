//! Spending limits and prompt-cache notes (DESIGN.md §5h): which limit a run reached, and why codeloop
//! itself changed the prompt's prefix. Plain data shared by the run loop, its events and every client.

use serde::{Deserialize, Serialize};

/// A `[limits]` key. Serialised as the key itself, e.g. `run_max_cost_usd`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Limit {
    /// The session's cost over all its runs, in USD.
    SessionMaxCostUsd,
    /// One run's cost, in USD (also `codeloop run --max-cost`).
    RunMaxCostUsd,
    /// One run's tokens: every prompt token (cached included) plus output and reasoning.
    RunMaxTokens,
    /// One run's wall time, in minutes.
    RunMaxMinutes,
}

impl Limit {
    /// The config key, as the event and messages name it.
    pub fn key(self) -> &'static str {
        match self {
            Limit::SessionMaxCostUsd => "session_max_cost_usd",
            Limit::RunMaxCostUsd => "run_max_cost_usd",
            Limit::RunMaxTokens => "run_max_tokens",
            Limit::RunMaxMinutes => "run_max_minutes",
        }
    }

    fn unit(self) -> &'static str {
        match self {
            Limit::SessionMaxCostUsd | Limit::RunMaxCostUsd => "USD",
            Limit::RunMaxTokens => "tokens",
            Limit::RunMaxMinutes => "minutes",
        }
    }
}

/// A limit a run reached: `value` is the limit, `used` what had been spent when it was checked.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LimitReached {
    pub limit: Limit,
    pub value: f64,
    pub used: f64,
}

impl std::fmt::Display for LimitReached {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (key, unit) = (self.limit.key(), self.limit.unit());
        let scope = match self.limit {
            Limit::SessionMaxCostUsd => "the session",
            _ => "this run",
        };
        let hint = match self.limit {
            Limit::RunMaxCostUsd => {
                format!("raise [limits] {key} in your config (or `codeloop run --max-cost`)")
            }
            _ => format!("raise [limits] {key} in your config"),
        };
        write!(
            f,
            "Stopped: limit {key} reached ({scope} used {} of {} {unit}); nothing more was sent to the model. To go on, {hint} and continue the session.",
            format_amount(self.used),
            format_amount(self.value),
        )
    }
}

/// An amount with as many decimals as it needs (costs are often fractions of a cent).
fn format_amount(value: f64) -> String {
    if value.fract() == 0.0 && value.abs() < 1e15 {
        format!("{value:.0}")
    } else if value.abs() >= 1.0 {
        format!("{value:.2}")
    } else {
        format!("{value:.4}")
    }
}

/// Why codeloop itself changed the prompt's prefix, so a prompt-cache miss that follows is explained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CacheReason {
    /// A summary replaced the history before it.
    Compaction,
    /// Old tool outputs were cleared from the model's view.
    Prune,
    /// The session moved to another model.
    Model,
    /// The session moved to another agent.
    Agent,
    /// The tools offered changed (an MCP server came or went, a last step without tools).
    Tools,
    /// The system prompt changed (edited AGENTS.md or instructions).
    Instructions,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_serialise_as_their_config_keys() {
        for limit in
            [Limit::SessionMaxCostUsd, Limit::RunMaxCostUsd, Limit::RunMaxTokens, Limit::RunMaxMinutes]
        {
            assert_eq!(serde_json::to_value(limit).unwrap(), serde_json::json!(limit.key()));
        }
    }

    #[test]
    fn the_message_names_the_limit_and_what_to_do() {
        let reached = LimitReached { limit: Limit::RunMaxCostUsd, value: 0.01, used: 0.0125 };
        let text = reached.to_string();
        assert!(text.contains("run_max_cost_usd"), "{text}");
        assert!(text.contains("0.0125 of 0.0100 USD"), "{text}");
        assert!(text.contains("--max-cost"), "{text}");
    }
}
