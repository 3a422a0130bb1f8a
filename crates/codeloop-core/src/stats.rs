//! `codeloop stats` (DESIGN.md §5h): what the stored steps spent, added up by model, project or day.
//!
//! Owns: the grouping and the row shape (`input_tokens` counts every prompt token: uncached, cache read
//! and cache write; the hit rate is cache reads over it). Must not: read the store itself — the engine
//! hands it the steps.

use std::collections::{BTreeMap, BTreeSet};

use codeloop_store::StepUsage;
use serde::{Deserialize, Serialize};

/// What the rows are keyed by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StatsBy {
    /// `provider/model`.
    #[default]
    Model,
    /// The session's directory.
    Project,
    /// The UTC date of the step, `YYYY-MM-DD`.
    Day,
}

/// One row of `codeloop stats`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UsageRow {
    pub key: String,
    /// Sessions with at least one step in this row.
    pub sessions: u64,
    /// Every prompt token: uncached, cache read and cache write.
    pub input_tokens: u64,
    /// Output tokens, reasoning included (both are billed as output).
    pub output_tokens: u64,
    pub cache_read_tokens: u64,
    pub cache_write_tokens: u64,
    pub cost_usd: f64,
    /// `cache_read_tokens / input_tokens` (0 when nothing was sent).
    pub cache_hit_rate: f64,
}

#[derive(Default)]
struct Sum {
    sessions: BTreeSet<String>,
    input: u64,
    output: u64,
    cache_read: u64,
    cache_write: u64,
    cost: f64,
}

/// Adds up `steps` by `by`: days in date order, models and projects by cost (highest first).
pub fn aggregate(steps: &[StepUsage], by: StatsBy) -> Vec<UsageRow> {
    let mut sums: BTreeMap<String, Sum> = BTreeMap::new();
    for step in steps {
        let key = match by {
            StatsBy::Model => step.model.to_string(),
            StatsBy::Project => step.directory.clone(),
            StatsBy::Day => codeloop_types::date_of(step.created),
        };
        let sum = sums.entry(key).or_default();
        let tokens = &step.tokens;
        sum.sessions.insert(step.session_id.to_string());
        sum.input += tokens.input + tokens.cache.read + tokens.cache.write;
        sum.output += tokens.output + tokens.reasoning;
        sum.cache_read += tokens.cache.read;
        sum.cache_write += tokens.cache.write;
        sum.cost += step.cost;
    }
    let mut rows: Vec<UsageRow> = sums
        .into_iter()
        .map(|(key, sum)| UsageRow {
            key,
            sessions: sum.sessions.len() as u64,
            input_tokens: sum.input,
            output_tokens: sum.output,
            cache_read_tokens: sum.cache_read,
            cache_write_tokens: sum.cache_write,
            cost_usd: sum.cost,
            cache_hit_rate: hit_rate(sum.cache_read, sum.input),
        })
        .collect();
    if by != StatsBy::Day {
        rows.sort_by(|a, b| b.cost_usd.total_cmp(&a.cost_usd).then_with(|| a.key.cmp(&b.key)));
    }
    rows
}

/// Cache reads over every prompt token; 0 when nothing was sent.
pub fn hit_rate(cache_read: u64, input: u64) -> f64 {
    if input == 0 { 0.0 } else { cache_read as f64 / input as f64 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use codeloop_types::{CacheTokens, Tokens};

    fn step(session: &str, model: &str, day: i64, input: u64, read: u64, cost: f64) -> StepUsage {
        StepUsage {
            session_id: session.into(),
            directory: format!("/p/{session}"),
            model: model.parse().unwrap(),
            created: day * 86_400_000,
            tokens: Tokens { input, output: 10, cache: CacheTokens { read, write: 0 }, ..Default::default() },
            cost,
        }
    }

    #[test]
    fn rows_count_every_prompt_token_and_the_hit_rate_over_them() {
        let steps = [
            step("ses_a", "p/x", 0, 30, 70, 1.0),
            step("ses_a", "p/x", 1, 100, 0, 0.5),
            step("ses_b", "p/y", 1, 10, 0, 3.0),
        ];
        let rows = aggregate(&steps, StatsBy::Model);
        assert_eq!(rows.iter().map(|r| r.key.as_str()).collect::<Vec<_>>(), ["p/y", "p/x"]);
        let x = &rows[1];
        assert_eq!((x.sessions, x.input_tokens, x.output_tokens, x.cache_read_tokens), (1, 200, 20, 70));
        assert_eq!(x.cache_hit_rate, 0.35);
        let days = aggregate(&steps, StatsBy::Day);
        assert_eq!(
            days.iter().map(|r| (r.key.as_str(), r.sessions)).collect::<Vec<_>>(),
            [("1970-01-01", 1), ("1970-01-02", 2)]
        );
    }
}
