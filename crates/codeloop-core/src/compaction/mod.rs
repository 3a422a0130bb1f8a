//! Context management (DESIGN.md §4 "Overflow", "Prune", "Summary"): deciding, selecting and applying
//! prune and summary compaction.
//!
//! Must not: delete history. Pruned outputs stay in the store; summarised messages stay too and are only
//! hidden from the model by the projection.

mod carried;
mod overflow;
mod prune;
mod requests;
mod summary;

pub use carried::{
    RestoreCheck, RestoredFiles, carried_budget, carried_user_words, drop_model_work_state, files_in_view,
    fit_carried, fit_outputs, restored_files, summary_failure, user_words_block, work_state,
};
pub use overflow::{
    COMPACTION_BUFFER, OUTPUT_TOKEN_MAX, is_overflow, max_output, overflow_threshold, request_size, usable,
};
pub use prune::{PRUNE_MINIMUM, PRUNE_PROTECT, estimate_tokens, prune_candidates};
pub use requests::new_compaction_request;
pub(crate) use requests::user_info;
pub(crate) use summary::chat_chars;
pub use summary::{
    CONTINUE_TEXT, OVERFLOW_MEDIA_NOTE, SUMMARY_SYSTEM_PROMPT, SUMMARY_TOOL_OUTPUT_CHARS, WorkRecord,
    select_tail, summary_prompt, summary_text, tail_budget,
};
