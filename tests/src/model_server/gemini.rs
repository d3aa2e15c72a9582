//! Google's Gemini API as Gemini CLI speaks it: `POST /v1beta/models/MODEL:generateContent` (one JSON answer;
//! the CLI's routing and checks) and `…:streamGenerateContent?alt=sse` (the main loop). A tool call is a
//! `functionCall` part whose `args` are the step's input; a tool result comes back as a `functionResponse` part.

use super::*;

/// Which of the two calls a path is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Call {
    /// `:generateContent`.
    Once,
    /// `:streamGenerateContent`.
    Stream,
}

/// The call a path makes, for `/v1beta/models/M:…` (or `/v1/…`).
pub(super) fn route(path: &str) -> Option<Call> {
    let rest = path.strip_prefix("/v1beta/models/").or_else(|| path.strip_prefix("/v1/models/"))?;
    let (_, call) = rest.rsplit_once(':')?;
    match call {
        "generateContent" => Some(Call::Once),
        "streamGenerateContent" => Some(Call::Stream),
        _ => None,
    }
}

fn declares_functions(body: &Value) -> bool {
    body.get("tools").and_then(Value::as_array).into_iter().flatten().any(|tool| {
        tool.get("functionDeclarations").and_then(Value::as_array).is_some_and(|declared| !declared.is_empty())
    })
}

pub(super) fn generate(
    state: &Mutex<State>,
    method: &Method,
    path: &str,
    body: Value,
    body_len: usize,
    stream: bool,
) -> Response<Full<Bytes>> {
    let main_loop = declares_functions(&body);
    let model = path.rsplit_once('/').and_then(|(_, m)| m.split_once(':')).map_or("gemini", |(m, _)| m).to_owned();
    // Gemini CLI's side calls (routing, the next-speaker check) ask for JSON
    // of a schema: they get the least instance of it.
    let schema = body
        .pointer("/generationConfig/responseJsonSchema")
        .or_else(|| body.pointer("/generationConfig/responseSchema"))
        .cloned();
    let (reply, _) = lock(state).take(method, path, body, main_loop, "call_scripted");
    let parts: Vec<Value> = match reply {
        Reply::Text(_) if !main_loop && schema.is_some() => {
            vec![json!({ "text": instance(schema.as_ref().unwrap_or(&Value::Null)).to_string() })]
        }
        Reply::Text(text) => vec![json!({ "text": text })],
        Reply::Calls(calls) => calls
            .into_iter()
            .map(|(id, call)| json!({ "functionCall": { "id": id, "name": call.name, "args": call.input } }))
            .collect(),
    };
    let prompt = estimate_tokens(body_len);
    let candidates = estimate_tokens(parts.iter().map(|p| p.to_string().len()).sum());
    let answer = json!({
        "candidates": [{ "content": { "role": "model", "parts": parts }, "finishReason": "STOP", "index": 0 }],
        "usageMetadata": { "promptTokenCount": prompt, "candidatesTokenCount": candidates,
            "totalTokenCount": prompt + candidates },
        "modelVersion": model,
    });
    if !stream {
        return json_response(StatusCode::OK, &answer);
    }
    let mut response = Response::new(Full::new(Bytes::from(format!("data: {answer}\r\n\r\n"))));
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// The least instance of a JSON schema (Gemini's `Type` names in upper case
/// too): every property, a string's first `enum` value or a word, a number's
/// `minimum` or 1, `false`, an empty list.
fn instance(schema: &Value) -> Value {
    let kind = schema.get("type").and_then(Value::as_str).unwrap_or("object").to_ascii_lowercase();
    match kind.as_str() {
        "object" => Value::Object(
            schema
                .get("properties")
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
                .map(|(name, property)| (name.clone(), instance(property)))
                .collect(),
        ),
        "string" => schema.pointer("/enum/0").cloned().unwrap_or_else(|| json!(SIDE_ANSWER)),
        "integer" | "number" => schema.get("minimum").cloned().unwrap_or_else(|| json!(1)),
        "boolean" => json!(false),
        "array" => json!([]),
        _ => Value::Null,
    }
}

/// The `functionResponse` parts of a request's last content, when it is the user's.
pub(super) fn tool_results(body: &Value) -> Vec<ToolResult> {
    let Some(last) = body.get("contents").and_then(Value::as_array).and_then(|contents| contents.last()) else {
        return Vec::new();
    };
    last.get("parts")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|part| part.get("functionResponse"))
        .map(|response| ToolResult {
            tool_use_id: response
                .get("id")
                .or_else(|| response.get("name"))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            content: response.get("response").map(Value::to_string).unwrap_or_default(),
            is_error: false,
        })
        .collect()
}
