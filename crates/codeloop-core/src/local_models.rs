//! The models a local server has (DESIGN.md §5l presets `ollama`, `lmstudio`, `vllm`, `llamacpp`): its
//! OpenAI-style model list, with each model's context length where the server says it (vLLM's
//! `max_model_len`, llama.cpp's `meta.n_ctx_train`, LM Studio's `max_context_length`, Ollama's
//! `/api/show`). What `codeloop models` and `doctor` show.
//!
//! Must not: run at a run's start (nothing is fetched behind a person's back), or send a key anywhere
//! but the provider's own base URL.

use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

/// The local servers codeloop knows by name.
pub const LOCAL_PRESETS: [&str; 4] = ["ollama", "lmstudio", "vllm", "llamacpp"];

/// How long a local server has to answer.
const TIMEOUT: Duration = Duration::from_secs(3);

/// One model a server has.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ServedModel {
    pub id: String,
    /// Its context window, when the server says.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context: Option<u64>,
}

/// The models behind `base_url` (an OpenAI-style `…/v1`), `preset` choosing where the context length is
/// read. `Err` says why the server could not be asked.
pub async fn served_models(base_url: &str, preset: Option<&str>) -> Result<Vec<ServedModel>, String> {
    let client = reqwest::Client::builder().timeout(TIMEOUT).build().map_err(|e| e.to_string())?;
    let base = base_url.trim_end_matches('/');
    let list = get_json(&client, &format!("{base}/models")).await?;
    let mut models: Vec<ServedModel> = list
        .get("data")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .filter_map(|m| {
            let id = m.get("id")?.as_str()?.to_owned();
            Some(ServedModel { context: listed_context(m), id })
        })
        .collect();
    let origin = base.strip_suffix("/v1").unwrap_or(base);
    match preset {
        Some("lmstudio") => {
            // LM Studio's own API lists each model's context window.
            if let Ok(native) = get_json(&client, &format!("{origin}/api/v0/models")).await {
                for entry in native.get("data").and_then(Value::as_array).into_iter().flatten() {
                    let context = entry.get("max_context_length").and_then(Value::as_u64);
                    if let (Some(id), Some(context)) = (entry.get("id").and_then(Value::as_str), context)
                        && let Some(model) = models.iter_mut().find(|m| m.id == id)
                    {
                        model.context = Some(context);
                    }
                }
            }
        }
        Some("ollama") => {
            for model in models.iter_mut().filter(|m| m.context.is_none()) {
                let body = serde_json::json!({ "model": model.id });
                let shown = client.post(format!("{origin}/api/show")).json(&body).send().await;
                if let Ok(response) = shown
                    && let Ok(info) = response.json::<Value>().await
                {
                    model.context = ollama_context(&info);
                }
            }
        }
        _ => {}
    }
    models.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(models)
}

async fn get_json(client: &reqwest::Client, url: &str) -> Result<Value, String> {
    let response = client.get(url).send().await.map_err(|e| {
        if e.is_connect() {
            format!("nothing answers at {url} (is the server running?)")
        } else if e.is_timeout() {
            format!("{url} did not answer within {} s", TIMEOUT.as_secs())
        } else {
            format!("{url}: {e}")
        }
    })?;
    let status = response.status();
    if !status.is_success() {
        return Err(format!("{url} answered HTTP {status}"));
    }
    response.json().await.map_err(|e| format!("{url} did not answer with JSON: {e}"))
}

/// The context length an OpenAI-style list entry carries: vLLM's `max_model_len`, llama.cpp's
/// `meta.n_ctx_train`, or a plain `context_length`.
fn listed_context(entry: &Value) -> Option<u64> {
    entry
        .get("max_model_len")
        .or_else(|| entry.get("context_length"))
        .or_else(|| entry.pointer("/meta/n_ctx_train"))
        .and_then(Value::as_u64)
}

/// Ollama's `/api/show`: `model_info["<architecture>.context_length"]`.
fn ollama_context(info: &Value) -> Option<u64> {
    let model_info = info.get("model_info")?.as_object()?;
    model_info.iter().find(|(key, _)| key.ends_with(".context_length")).and_then(|(_, v)| v.as_u64())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn context_lengths_are_read_where_each_server_puts_them() {
        assert_eq!(listed_context(&json!({"id": "m", "max_model_len": 32768})), Some(32768));
        assert_eq!(listed_context(&json!({"id": "m", "meta": {"n_ctx_train": 131072}})), Some(131072));
        assert_eq!(listed_context(&json!({"id": "m"})), None);
        let show = json!({"model_info": {"general.architecture": "qwen2", "qwen2.context_length": 32768}});
        assert_eq!(ollama_context(&show), Some(32768));
    }
}
