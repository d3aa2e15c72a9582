//! OpenAI's wire formats: the Responses API (`POST /v1/responses`, streamed), as Codex CLI speaks it, and Chat
//! Completions (`POST /v1/chat/completions`, streamed or not), as Cline and OpenCode speak it through an
//! OpenAI-compatible provider. A tool call is a `function_call` item (a `custom_tool_call` whose `input` is the
//! step's `input` text, for a tool offered as `custom`) or a `tool_calls` entry whose `arguments`
//! are the step's input as JSON text.

use super::*;

/// `GET /v1/models`: the one model the script plays.
pub(super) fn models() -> Value {
    json!({ "object": "list", "data": [{ "id": "scripted", "object": "model", "created": 0, "owned_by": "warden-tests" }] })
}

fn model(body: &Value) -> String {
    body.get("model").and_then(Value::as_str).unwrap_or("scripted").to_owned()
}

fn sse(body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// The Responses API, streamed: `response.created`, per output item `response.output_item.added` and
/// `response.output_item.done`, then `response.completed` with the items and the usage.
pub(super) fn responses(
    state: &Mutex<State>,
    method: &Method,
    path: &str,
    body: Value,
    body_len: usize,
) -> Response<Full<Bytes>> {
    let main_loop = offers_tools(&body);
    let model = model(&body);
    // Tools offered as `custom` (Codex's apply_patch: free text, not JSON)
    // are called with a `custom_tool_call` whose `input` is the step's
    // `input` text.
    let custom: Vec<String> = body
        .get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|tool| tool.get("type").and_then(Value::as_str) == Some("custom"))
        .filter_map(|tool| tool.get("name").and_then(Value::as_str).map(str::to_owned))
        .collect();
    let (reply, id) = lock(state).take(method, path, body, main_loop, "call_scripted");
    let items: Vec<Value> = match reply {
        Reply::Text(text) => vec![json!({
            "type": "message", "id": format!("msg_scripted_{id}"), "role": "assistant", "status": "completed",
            "content": [{ "type": "output_text", "text": text, "annotations": [] }],
        })],
        Reply::Calls(calls) => calls
            .into_iter()
            .map(|(call_id, call)| {
                if custom.contains(&call.name) {
                    let input = call.input.get("input").and_then(Value::as_str).unwrap_or_default();
                    return json!({
                        "type": "custom_tool_call", "id": format!("ctc_{call_id}"), "call_id": call_id,
                        "name": call.name, "input": input, "status": "completed",
                    });
                }
                json!({
                    "type": "function_call", "id": format!("fc_{call_id}"), "call_id": call_id, "name": call.name,
                    "arguments": call.input.to_string(), "status": "completed",
                })
            })
            .collect(),
    };
    let input_tokens = estimate_tokens(body_len);
    let output_tokens = estimate_tokens(items.iter().map(|i| i.to_string().len()).sum());
    let response = |status: &str, output: &[Value]| {
        json!({
            "id": format!("resp_scripted_{id}"), "object": "response", "created_at": 0, "status": status,
            "model": model, "output": output,
            "usage": {
                "input_tokens": input_tokens, "input_tokens_details": { "cached_tokens": 0 },
                "output_tokens": output_tokens, "output_tokens_details": { "reasoning_tokens": 0 },
                "total_tokens": input_tokens + output_tokens,
            },
        })
    };
    let mut out = String::new();
    let mut sequence = 0u64;
    let mut event = |out: &mut String, name: &str, mut data: Value| {
        if let Some(object) = data.as_object_mut() {
            object.insert("type".into(), name.into());
            object.insert("sequence_number".into(), sequence.into());
        }
        sequence += 1;
        anthropic::push_event(out, name, &data);
    };
    event(&mut out, "response.created", json!({ "response": response("in_progress", &[]) }));
    for (index, item) in items.iter().enumerate() {
        event(&mut out, "response.output_item.added", json!({ "output_index": index, "item": item }));
        event(&mut out, "response.output_item.done", json!({ "output_index": index, "item": item }));
    }
    event(&mut out, "response.completed", json!({ "response": response("completed", &items) }));
    sse(out)
}

/// A tool output as text: a string as is, content parts their texts joined by newlines.
fn output_text(output: Option<&Value>) -> String {
    match output {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(parts)) => {
            parts.iter().filter_map(|part| part.get("text").and_then(Value::as_str)).collect::<Vec<_>>().join("\n")
        }
        Some(other) => other.to_string(),
        None => String::new(),
    }
}

/// The `function_call_output` items at the end of a Responses request's `input` (after the last item that is
/// neither a call nor an output).
pub(super) fn responses_tool_results(body: &Value) -> Vec<ToolResult> {
    let kind = |item: &Value| item.get("type").and_then(Value::as_str).map(str::to_owned).unwrap_or_default();
    trailing_results(
        body.get("input"),
        |item| {
            matches!(
                kind(item).as_str(),
                "function_call" | "function_call_output" | "custom_tool_call" | "custom_tool_call_output" | "reasoning"
            )
        },
        |item| matches!(kind(item).as_str(), "function_call_output" | "custom_tool_call_output"),
        ("call_id", "output"),
    )
}

/// The results among the entries at the end of `list` that `in_tail` accepts, in order: those that `is_result`,
/// with their id and output read from the `fields` named.
fn trailing_results(
    list: Option<&Value>,
    in_tail: impl Fn(&Value) -> bool,
    is_result: impl Fn(&Value) -> bool,
    (id, output): (&str, &str),
) -> Vec<ToolResult> {
    let list = list.and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    let mut results: Vec<ToolResult> = list
        .iter()
        .rev()
        .take_while(|entry| in_tail(entry))
        .filter(|entry| is_result(entry))
        .map(|entry| ToolResult {
            tool_use_id: entry.get(id).and_then(Value::as_str).unwrap_or_default().to_owned(),
            content: output_text(entry.get(output)),
            is_error: false,
        })
        .collect();
    results.reverse();
    results
}

/// Chat Completions, streamed (`chat.completion.chunk` events, then `[DONE]`) or as one `chat.completion`.
pub(super) fn chat(
    state: &Mutex<State>,
    method: &Method,
    path: &str,
    body: Value,
    body_len: usize,
) -> Response<Full<Bytes>> {
    let main_loop = offers_tools(&body);
    let stream = body.get("stream").and_then(Value::as_bool).unwrap_or(false);
    let model = model(&body);
    let (reply, id) = lock(state).take(method, path, body, main_loop, "call_scripted");
    let (content, tool_calls, finish) = match reply {
        Reply::Text(text) => (Value::String(text), Vec::new(), "stop"),
        Reply::Calls(calls) => (
            Value::Null,
            calls
                .into_iter()
                .enumerate()
                .map(|(index, (call_id, call))| {
                    json!({ "index": index, "id": call_id, "type": "function",
                        "function": { "name": call.name, "arguments": call.input.to_string() } })
                })
                .collect(),
            "tool_calls",
        ),
    };
    let prompt_tokens = estimate_tokens(body_len);
    let completion_tokens =
        estimate_tokens(content.to_string().len() + Value::from(tool_calls.clone()).to_string().len());
    let usage = json!({ "prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens });
    let id = format!("chatcmpl-scripted-{id}");
    if !stream {
        let message = with_calls(json!({ "role": "assistant", "content": content }), tool_calls);
        return json_response(
            StatusCode::OK,
            &json!({ "id": id, "object": "chat.completion", "created": 0, "model": model,
                "choices": [{ "index": 0, "message": message, "finish_reason": finish }], "usage": usage }),
        );
    }
    let chunk = |delta: Value, finish: Value, usage: Value| {
        let mut chunk = json!({ "id": id, "object": "chat.completion.chunk", "created": 0, "model": model,
            "choices": [{ "index": 0, "delta": delta, "finish_reason": finish }] });
        if let (false, Some(object)) = (usage.is_null(), chunk.as_object_mut()) {
            object.insert("usage".into(), usage);
        }
        format!("data: {chunk}\n\n")
    };
    let delta = with_calls(json!({ "role": "assistant", "content": content }), tool_calls);
    let mut out = chunk(delta, Value::Null, Value::Null);
    out.push_str(&chunk(json!({}), finish.into(), usage));
    out.push_str("data: [DONE]\n\n");
    sse(out)
}

/// `message` with its `tool_calls`, when there are.
fn with_calls(mut message: Value, tool_calls: Vec<Value>) -> Value {
    if let (false, Some(object)) = (tool_calls.is_empty(), message.as_object_mut()) {
        object.insert("tool_calls".into(), tool_calls.into());
    }
    message
}

/// The `tool` messages at the end of a Chat Completions request's `messages`.
pub(super) fn chat_tool_results(body: &Value) -> Vec<ToolResult> {
    let tool = |message: &Value| message.get("role").and_then(Value::as_str) == Some("tool");
    trailing_results(body.get("messages"), tool, tool, ("tool_call_id", "content"))
}
