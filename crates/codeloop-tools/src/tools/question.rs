//! `question`: asks the person at the keyboard one or more questions with suggested answers (reference
//! §8.3 question) and returns their answers. Only offered where someone can answer (a terminal or a
//! connected client); a rejection stops the run like a rejected permission.

use async_trait::async_trait;
use codeloop_types::{Question, QuestionOption};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::schema::{decode, schema_for};
use crate::{Tool, ToolContext, ToolFailure, ToolOutput};

const DESCRIPTION: &str = "Ask the user questions when you need a decision or information only they have \
(preferences, ambiguous requirements, a choice between approaches). Offer options when you can; the user may also \
answer in their own words. Do not ask what you can find out yourself.";

#[derive(Deserialize, JsonSchema)]
struct Params {
    /// The questions, asked together.
    questions: Vec<Ask>,
}

#[derive(Deserialize, JsonSchema)]
struct Ask {
    /// The full question.
    question: String,
    /// A very short label (a few words).
    #[serde(default)]
    header: Option<String>,
    /// Suggested answers.
    #[serde(default)]
    options: Vec<Choice>,
    /// Allow several options.
    #[serde(default)]
    multiple: bool,
}

#[derive(Deserialize, JsonSchema)]
struct Choice {
    label: String,
    #[serde(default)]
    description: Option<String>,
}

pub struct QuestionTool {
    parameters: Value,
}

impl QuestionTool {
    pub fn new() -> Self {
        Self { parameters: schema_for::<Params>() }
    }
}

impl Default for QuestionTool {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait]
impl Tool for QuestionTool {
    fn name(&self) -> &str {
        "question"
    }

    fn effect(&self) -> crate::Effect {
        crate::Effect::ReadOnly
    }

    fn description(&self) -> &str {
        DESCRIPTION
    }

    fn parameters(&self) -> &Value {
        &self.parameters
    }

    async fn execute(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolFailure> {
        let params: Params = decode(self.name(), args)?;
        if params.questions.is_empty() {
            return Err(ToolFailure::Failed("Ask at least one question".into()));
        }
        let questions: Vec<Question> = params
            .questions
            .into_iter()
            .map(|q| Question {
                question: q.question,
                header: q.header,
                options: q
                    .options
                    .into_iter()
                    .map(|o| QuestionOption { label: o.label, description: o.description })
                    .collect(),
                multiple: q.multiple,
            })
            .collect();
        let asked = tokio::select! {
            answers = ctx.host.ask_questions(&ctx.call, questions.clone()) => answers,
            _ = ctx.cancel.cancelled() => return Err(ToolFailure::Cancelled),
        };
        let answers = asked?;
        let pairs: Vec<String> = questions
            .iter()
            .zip(answers.iter().map(|a| a.join(", ")).chain(std::iter::repeat(String::new())))
            .map(|(q, a)| {
                format!("\"{}\"=\"{}\"", q.question, if a.is_empty() { "Unanswered".into() } else { a })
            })
            .collect();
        Ok(ToolOutput {
            title: format!(
                "Asked {} question{}",
                questions.len(),
                if questions.len() == 1 { "" } else { "s" }
            ),
            output: format!(
                "User has answered your questions: {}. You can now continue with the user's answers in mind.",
                pairs.join(", ")
            ),
            metadata: json!({"answers": answers}),
            attachments: Vec::new(),
        })
    }
}
