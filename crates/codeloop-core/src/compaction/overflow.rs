//! Overflow budget (DESIGN.md §4 "Overflow", reference §4): how many tokens a request may use before the
//! conversation must be compacted.

use codeloop_types::Tokens;

use crate::config::CompactionConfig;
use crate::models::ModelLimits;

/// Tokens kept free for the answer at most.
pub const COMPACTION_BUFFER: u64 = 20_000;
/// Output tokens requested at most.
pub const OUTPUT_TOKEN_MAX: u64 = 32_000;

pub fn max_output(limits: &ModelLimits) -> u64 {
    match limits.output {
        0 => OUTPUT_TOKEN_MAX,
        output => output.min(OUTPUT_TOKEN_MAX),
    }
}

/// Tokens a request may use: `input − reserved` when the model has an input limit, else
/// `context − max_output`. Zero when the model's context is unknown (0).
pub fn usable(limits: &ModelLimits, config: &CompactionConfig) -> u64 {
    if limits.context == 0 {
        return 0;
    }
    let max_output = max_output(limits);
    match limits.input {
        Some(input) => {
            let reserved = config.reserved.unwrap_or(COMPACTION_BUFFER.min(max_output));
            input.saturating_sub(reserved)
        }
        None => limits.context.saturating_sub(max_output),
    }
}

/// The threshold for automatic compaction, or `None` when it is off.
pub fn overflow_threshold(limits: &ModelLimits, config: &CompactionConfig) -> Option<u64> {
    if !config.auto || limits.context == 0 {
        return None;
    }
    Some(usable(limits, config))
}

/// True when the last step's size reached the usable budget.
pub fn is_overflow(tokens: &Tokens, limits: &ModelLimits, config: &CompactionConfig) -> bool {
    overflow_threshold(limits, config).is_some_and(|usable| tokens.count() >= usable)
}

/// The size of a step's request (input side only), for the circuit breaker.
pub fn request_size(tokens: &Tokens) -> u64 {
    tokens.input + tokens.cache.read + tokens.cache.write
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(context: u64, input: Option<u64>, output: u64) -> ModelLimits {
        ModelLimits { context, input, output }
    }

    #[test]
    fn usable_follows_the_design_formula() {
        let config = CompactionConfig::default();
        // No input limit: context − min(output, 32 000).
        assert_eq!(usable(&limits(200_000, None, 64_000), &config), 168_000);
        assert_eq!(usable(&limits(128_000, None, 16_384), &config), 111_616);
        // Input limit: input − min(20 000, max_output).
        assert_eq!(usable(&limits(400_000, Some(272_000), 128_000), &config), 252_000);
        assert_eq!(usable(&limits(400_000, Some(272_000), 8_000), &config), 264_000);
        let reserved = CompactionConfig { reserved: Some(50_000), ..Default::default() };
        assert_eq!(usable(&limits(400_000, Some(272_000), 128_000), &reserved), 222_000);
        assert_eq!(usable(&limits(0, None, 0), &config), 0);
    }

    #[test]
    fn auto_false_never_overflows() {
        let tokens = Tokens { input: 1_000_000, ..Default::default() };
        let off = CompactionConfig { auto: false, ..Default::default() };
        assert!(!is_overflow(&tokens, &limits(100_000, None, 4_000), &off));
        assert!(is_overflow(&tokens, &limits(100_000, None, 4_000), &CompactionConfig::default()));
    }
}
