//! The Anthropic Messages API (`POST /v1/messages`), as Claude Code speaks it: streamed or not, tool calls as
//! `tool_use` blocks, tool results as `tool_result` blocks of the next user message.

use super::*;

/// One model turn: its content blocks (complete, as a non-streaming answer has them) and how it ends.
struct Turn {
    message_id: String,
    model: String,
    blocks: Vec<Value>,
    stop_reason: &'static str,
    input_tokens: u64,
    output_tokens: u64,
}

pub(super) fn messages(
    state: &Mutex<State>,
    method: &Method,
    path: &str,
    body: Value,
    body_len: usize,
) -> Response<Full<Bytes>> {
    let main_loop = offers_tools(&body);
    let stream = body.get("stream").and_then(Value::as_bool).unwrap_or(false);
    let model = body.get("model").and_then(Value::as_str).unwrap_or("claude-scripted").to_owned();
    let (reply, id) = lock(state).take(method, path, body, main_loop, "toolu_scripted");
    let message_id = format!("msg_scripted_{id}");
    let turn = match reply {
        Reply::Text(text) => {
            Turn::new(message_id, model, vec![json!({ "type": "text", "text": text })], "end_turn", body_len)
        }
        Reply::Calls(calls) => {
            let blocks = calls
                .into_iter()
                .map(|(id, call)| json!({ "type": "tool_use", "id": id, "name": call.name, "input": call.input }))
                .collect();
            Turn::new(message_id, model, blocks, "tool_use", body_len)
        }
    };
    turn_response(stream, turn)
}

impl Turn {
    fn new(message_id: String, model: String, blocks: Vec<Value>, stop_reason: &'static str, body_len: usize) -> Self {
        let output_len: usize = blocks.iter().map(|block| block.to_string().len()).sum();
        Turn {
            message_id,
            model,
            blocks,
            stop_reason,
            input_tokens: estimate_tokens(body_len),
            output_tokens: estimate_tokens(output_len),
        }
    }

    fn message(&self) -> Value {
        json!({
            "id": self.message_id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": self.blocks,
            "stop_reason": self.stop_reason,
            "stop_sequence": null,
            "usage": { "input_tokens": self.input_tokens, "output_tokens": self.output_tokens },
        })
    }

    /// The server-sent events of a streamed answer: `message_start`, per block `content_block_start` (tool
    /// input `{}`, text empty), one `content_block_delta` with the whole input or text, `content_block_stop`,
    /// then `message_delta` with the stop reason and `message_stop`.
    fn events(&self) -> String {
        let mut out = String::new();
        let start = json!({
            "id": self.message_id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": null,
            "stop_sequence": null,
            "usage": { "input_tokens": self.input_tokens, "output_tokens": 1 },
        });
        push_event(&mut out, "message_start", &json!({ "type": "message_start", "message": start }));
        for (index, block) in self.blocks.iter().enumerate() {
            let (empty, delta) = if block.get("type").and_then(Value::as_str) == Some("tool_use") {
                let input = block.get("input").cloned().unwrap_or_else(|| json!({}));
                let mut empty = block.clone();
                if let Some(object) = empty.as_object_mut() {
                    object.insert("input".to_owned(), json!({}));
                }
                (empty, json!({ "type": "input_json_delta", "partial_json": input.to_string() }))
            } else {
                let text = block.get("text").cloned().unwrap_or_else(|| json!(""));
                (json!({ "type": "text", "text": "" }), json!({ "type": "text_delta", "text": text }))
            };
            push_event(
                &mut out,
                "content_block_start",
                &json!({ "type": "content_block_start", "index": index, "content_block": empty }),
            );
            push_event(
                &mut out,
                "content_block_delta",
                &json!({ "type": "content_block_delta", "index": index, "delta": delta }),
            );
            push_event(&mut out, "content_block_stop", &json!({ "type": "content_block_stop", "index": index }));
        }
        push_event(
            &mut out,
            "message_delta",
            &json!({
                "type": "message_delta",
                "delta": { "stop_reason": self.stop_reason, "stop_sequence": null },
                "usage": { "output_tokens": self.output_tokens },
            }),
        );
        push_event(&mut out, "message_stop", &json!({ "type": "message_stop" }));
        out
    }
}

pub(super) fn push_event(out: &mut String, name: &str, data: &Value) {
    out.push_str("event: ");
    out.push_str(name);
    out.push_str("\ndata: ");
    out.push_str(&data.to_string());
    out.push_str("\n\n");
}

fn turn_response(stream: bool, turn: Turn) -> Response<Full<Bytes>> {
    if !stream {
        return json_response(StatusCode::OK, &turn.message());
    }
    // The whole stream in one body with a content length: the script is known up front, and SSE clients
    // parse events, not chunk boundaries.
    let mut response = Response::new(Full::new(Bytes::from(turn.events())));
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// The Messages API's error shape: `{"type":"error","error":{"type":..,"message":..}}`.
pub(super) fn error_response(status: StatusCode, kind: &str, message: &str) -> Response<Full<Bytes>> {
    json_response(status, &json!({ "type": "error", "error": { "type": kind, "message": message } }))
}

pub(super) fn last_message_tool_results(body: &Value) -> Vec<ToolResult> {
    let Some(last) = body.get("messages").and_then(Value::as_array).and_then(|messages| messages.last()) else {
        return Vec::new();
    };
    if last.get("role").and_then(Value::as_str) != Some("user") {
        return Vec::new();
    }
    last.get("content")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|block| block.get("type").and_then(Value::as_str) == Some("tool_result"))
        .map(|block| ToolResult {
            tool_use_id: block.get("tool_use_id").and_then(Value::as_str).unwrap_or_default().to_owned(),
            content: content_text(block.get("content")),
            is_error: block.get("is_error").and_then(Value::as_bool).unwrap_or(false),
        })
        .collect()
}

/// A `tool_result` content as text: a string as is, a list of blocks one line each, joined by newlines: a text
/// block as its text, a `tool_reference` (what ToolSearch answers) as `[tool_reference NAME]`, any other block as
/// `[TYPE]`.
fn content_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(blocks)) => blocks.iter().map(block_text).collect::<Vec<_>>().join("\n"),
        _ => String::new(),
    }
}

fn block_text(block: &Value) -> String {
    let kind = block.get("type").and_then(Value::as_str).unwrap_or("unknown");
    match (kind, block.get("text").and_then(Value::as_str)) {
        ("text", Some(text)) => text.to_owned(),
        ("tool_reference", _) => {
            format!("[tool_reference {}]", block.get("tool_name").and_then(Value::as_str).unwrap_or_default())
        }
        _ => format!("[{kind}]"),
    }
}

/// The words that introduce the names of deferred tools (Claude Code 2.1.328), in the system prompt or a
/// message; the names follow on the next lines, one a line, up to an empty line.
pub(super) const DEFERRED_TOOLS_INTRO: &str = "deferred tools are now available via ToolSearch";

/// Every text of a request: the system prompt and the text blocks of its messages.
pub(super) fn request_texts(body: &Value) -> Vec<&str> {
    fn push<'a>(texts: &mut Vec<&'a str>, content: Option<&'a Value>) {
        match content {
            Some(Value::String(text)) => texts.push(text.as_str()),
            Some(Value::Array(blocks)) => {
                texts.extend(blocks.iter().filter_map(|block| block.get("text").and_then(Value::as_str)));
            }
            _ => {}
        }
    }
    let mut texts = Vec::new();
    push(&mut texts, body.get("system"));
    for message in body.get("messages").and_then(Value::as_array).into_iter().flatten() {
        push(&mut texts, message.get("content"));
    }
    texts
}

pub(super) fn deferred_names(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find(DEFERRED_TOOLS_INTRO) {
        let after = rest.get(at + DEFERRED_TOOLS_INTRO.len()..).unwrap_or_default();
        // The introduction ends its line; the names start on the next.
        let Some((_, list)) = after.split_once('\n') else {
            break;
        };
        names.extend(list.lines().take_while(|line| !line.trim().is_empty()).map(|line| line.trim().to_owned()));
        rest = after;
    }
    names
}
