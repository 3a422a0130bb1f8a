//! What a run and its tools need of the runs around them: starting a turn of another session (a task's
//! child) and stopping it. The coordinator implements it; nothing below the coordinator names the
//! coordinator, so a run gets this narrow handle instead of the whole thing.

use async_trait::async_trait;
use codeloop_types::SessionId;

use crate::error::RunError;
use crate::input::{Delivery, PromptInput};
use crate::outcome::RunOutcome;

#[async_trait]
pub trait Runs: Send + Sync {
    /// Sends `input` to `session` and waits for the outcome of the run it starts or joins.
    async fn prompt(
        &self,
        session: &SessionId,
        input: PromptInput,
        delivery: Delivery,
    ) -> Result<RunOutcome, RunError>;
    /// Stops the session's run and waits for its cleanup.
    async fn interrupt(&self, session: &SessionId);
}
