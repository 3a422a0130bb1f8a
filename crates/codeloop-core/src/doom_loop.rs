//! Doom-loop guard (DESIGN.md §4, beyond OpenCode): watches every tool call of a run, across steps, and
//! reports the same call repeated 3 times in a row or a cycle of period 2–4 repeated 3 times.

use serde_json::Value;

/// Repetitions that count as a loop.
pub const DOOM_LOOP_THRESHOLD: usize = 3;
const MAX_PERIOD: usize = 4;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DoomLoop {
    /// The same tool with identical input, `DOOM_LOOP_THRESHOLD` times in a row.
    Repeat { tool: String, input: String },
    /// A sequence of `period` calls repeated `DOOM_LOOP_THRESHOLD` times.
    Cycle { period: usize, calls: Vec<(String, String)> },
}

impl DoomLoop {
    /// The tool the permission request is about (the last call).
    pub fn tool(&self) -> &str {
        match self {
            DoomLoop::Repeat { tool, .. } => tool,
            DoomLoop::Cycle { calls, .. } => calls.last().map(|(t, _)| t.as_str()).unwrap_or(""),
        }
    }

    pub fn describe(&self) -> String {
        match self {
            DoomLoop::Repeat { tool, input } => {
                format!(
                    "`{tool}` was called {DOOM_LOOP_THRESHOLD} times in a row with identical input {input}"
                )
            }
            DoomLoop::Cycle { period, calls } => {
                let cycle: Vec<String> = calls.iter().map(|(t, i)| format!("{t} {i}")).collect();
                format!(
                    "the same {period} calls repeated {DOOM_LOOP_THRESHOLD} times in a row: {}",
                    cycle.join(" → ")
                )
            }
        }
    }
}

#[derive(Debug, Default, Clone)]
pub struct DoomLoopGuard {
    calls: Vec<(String, String)>,
    /// Whether each call of `calls` succeeded (`None` while it runs, or when it was not run).
    outcomes: Vec<Option<bool>>,
}

impl DoomLoopGuard {
    /// Records a call and reports a loop it completes.
    pub fn record(&mut self, tool: &str, input: &Value) -> Option<DoomLoop> {
        self.calls.push((tool.to_owned(), input.to_string()));
        self.outcomes.push(None);
        // Only the last few calls can take part in a loop.
        let keep = MAX_PERIOD * DOOM_LOOP_THRESHOLD;
        if self.calls.len() > keep {
            let drop = self.calls.len() - keep;
            self.calls.drain(..drop);
            self.outcomes.drain(..drop);
        }
        self.detect()
    }

    /// Notes how a recorded call ended (its latest identical call still open).
    pub fn settled(&mut self, tool: &str, input: &Value, succeeded: bool) {
        let input = input.to_string();
        let open = self
            .calls
            .iter()
            .zip(&self.outcomes)
            .rposition(|((t, i), outcome)| t == tool && *i == input && outcome.is_none());
        if let Some(index) = open {
            self.outcomes[index] = Some(succeeded);
        }
    }

    /// True when the calls before the last one, identical to it, all succeeded: the model repeats work
    /// that is done, not a failing step. The last call is then counted as not succeeded, so one more
    /// repetition is a loop.
    pub fn repeats_success(&mut self) -> bool {
        let n = self.calls.len();
        if n < DOOM_LOOP_THRESHOLD {
            return false;
        }
        let earlier = &self.outcomes[n - DOOM_LOOP_THRESHOLD..n - 1];
        let done = earlier.iter().all(|o| *o == Some(true));
        if done {
            self.outcomes[n - 1] = Some(false);
        }
        done
    }

    /// Forgets history, e.g. after the user allowed the loop to go on.
    pub fn reset(&mut self) {
        self.calls.clear();
        self.outcomes.clear();
    }

    fn detect(&self) -> Option<DoomLoop> {
        let n = self.calls.len();
        for period in 1..=MAX_PERIOD {
            let span = period * DOOM_LOOP_THRESHOLD;
            if n < span {
                break;
            }
            let window = &self.calls[n - span..];
            let first = &window[..period];
            if window.chunks(period).all(|chunk| chunk == first) {
                if period == 1 {
                    let (tool, input) = first[0].clone();
                    return Some(DoomLoop::Repeat { tool, input });
                }
                // A cycle of identical calls is reported as a plain repeat at period 1 already.
                if first.iter().all(|c| c == &first[0]) {
                    continue;
                }
                return Some(DoomLoop::Cycle { period, calls: first.to_vec() });
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn three_identical_calls_trigger() {
        let mut guard = DoomLoopGuard::default();
        assert_eq!(guard.record("read", &json!({"filePath": "a"})), None);
        assert_eq!(guard.record("read", &json!({"filePath": "a"})), None);
        let found = guard.record("read", &json!({"filePath": "a"})).unwrap();
        assert_eq!(found, DoomLoop::Repeat { tool: "read".into(), input: r#"{"filePath":"a"}"#.into() });
    }

    #[test]
    fn a_repeat_of_calls_that_succeeded_is_told_apart_once() {
        let mut guard = DoomLoopGuard::default();
        let input = json!({"command": "cargo test"});
        for _ in 0..2 {
            assert_eq!(guard.record("bash", &input), None);
            guard.settled("bash", &input, true);
        }
        assert!(guard.record("bash", &input).is_some());
        assert!(guard.repeats_success(), "two successes before it: already done");
        assert!(guard.record("bash", &input).is_some());
        assert!(!guard.repeats_success(), "once told, one more repetition is a loop");
        let mut failing = DoomLoopGuard::default();
        for _ in 0..2 {
            failing.record("bash", &input);
            failing.settled("bash", &input, false);
        }
        assert!(failing.record("bash", &input).is_some());
        assert!(!failing.repeats_success());
    }

    #[test]
    fn different_inputs_do_not_trigger() {
        let mut guard = DoomLoopGuard::default();
        for i in 0..10 {
            assert_eq!(guard.record("read", &json!({"filePath": i})), None);
        }
    }

    #[test]
    fn abababab_cycle_triggers_on_the_sixth_call() {
        let mut guard = DoomLoopGuard::default();
        let a = json!({"filePath": "a"});
        let b = json!({"pattern": "b"});
        let calls = [("read", &a), ("grep", &b), ("read", &a), ("grep", &b), ("read", &a)];
        for (tool, input) in calls {
            assert_eq!(guard.record(tool, input), None);
        }
        let found = guard.record("grep", &b).unwrap();
        assert!(matches!(found, DoomLoop::Cycle { period: 2, .. }), "{found:?}");
        assert_eq!(found.tool(), "grep");
    }

    #[test]
    fn period_three_and_four_cycles_trigger() {
        for period in [3usize, 4] {
            let mut guard = DoomLoopGuard::default();
            let mut found = None;
            for i in 0..period * 3 {
                found = guard.record("bash", &json!({"command": format!("step {}", i % period)}));
            }
            assert!(matches!(found, Some(DoomLoop::Cycle { period: p, .. }) if p == period));
        }
    }
}
