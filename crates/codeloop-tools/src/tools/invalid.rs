//! `invalid`: the target a repaired bad call is routed to. It only tells the model what was wrong.

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::schema::{decode, schema_for};
use crate::{Tool, ToolContext, ToolFailure, ToolOutput};

#[derive(Deserialize, JsonSchema)]
struct Params {
    tool: String,
    error: String,
}

/// Reports invalid arguments back to the model.
pub struct InvalidTool {
    parameters: Value,
}

impl InvalidTool {
    pub fn new() -> Self {
        Self { parameters: schema_for::<Params>() }
    }
}

impl Default for InvalidTool {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait]
impl Tool for InvalidTool {
    fn name(&self) -> &str {
        crate::INVALID_TOOL
    }

    fn description(&self) -> &str {
        "Do not use"
    }

    fn parameters(&self) -> &Value {
        &self.parameters
    }

    async fn execute(&self, args: Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolFailure> {
        let params: Params = decode(self.name(), args)?;
        Ok(ToolOutput {
            title: "Invalid Tool".to_string(),
            output: format!("The arguments provided to the tool are invalid: {}", params.error),
            metadata: json!({"tool": params.tool}),
            attachments: Vec::new(),
        })
    }
}
