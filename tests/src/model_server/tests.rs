use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::net::TcpStream;

use super::anthropic::DEFERRED_TOOLS_INTRO;
use super::*;

/// One HTTP/1.1 exchange on an open connection: status, headers (names lowercased), body.
async fn exchange(
    connection: &mut BufReader<TcpStream>,
    path: &str,
    body: &Value,
) -> anyhow::Result<(u16, Vec<(String, String)>, String)> {
    let body = body.to_string();
    let request = format!(
        "POST {path} HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    connection.get_mut().write_all(request.as_bytes()).await?;
    let mut status_line = String::new();
    connection.read_line(&mut status_line).await?;
    let status = status_line.split(' ').nth(1).context("no status")?.parse()?;
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        connection.read_line(&mut line).await?;
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        let (name, value) = line.split_once(':').context("bad header")?;
        headers.push((name.to_ascii_lowercase(), value.trim().to_owned()));
    }
    let length: usize =
        headers.iter().find(|(name, _)| name == "content-length").context("no content-length")?.1.parse()?;
    let mut body = vec![0; length];
    connection.read_exact(&mut body).await?;
    Ok((status, headers, String::from_utf8(body)?))
}

/// `(event name, data)` pairs of an SSE body.
fn parse_events(body: &str) -> anyhow::Result<Vec<(String, Value)>> {
    body.split("\n\n")
        .filter(|chunk| !chunk.is_empty())
        .map(|chunk| {
            let (event, data) = chunk.split_once('\n').context("event without data")?;
            let name = event.strip_prefix("event: ").context("no event line")?;
            let data = data.strip_prefix("data: ").context("no data line")?;
            Ok((name.to_owned(), serde_json::from_str(data)?))
        })
        .collect()
}

#[tokio::test]
async fn serves_the_script_as_server_sent_events_on_one_kept_alive_connection() -> anyhow::Result<()> {
    let model = ScriptedModel::start(vec![
        Step::tool_use("Bash", json!({ "command": "echo hi > out.txt" })),
        Step::ToolUses(vec![
            ToolCall::new("Read", json!({ "file_path": "/tmp/a" })),
            ToolCall::new("Read", json!({ "file_path": "/tmp/b" })),
        ]),
        Step::text("all done"),
    ])
    .await?;
    let mut connection = BufReader::new(TcpStream::connect(model.addr()).await?);
    let tools = json!([{ "name": "Bash", "input_schema": {} }, { "name": "Read", "input_schema": {} }]);
    let user = |content: Value| {
        json!({ "model": "m", "stream": true, "tools": tools, "messages": [
            { "role": "user", "content": content }
        ]})
    };

    // A side request (no tools) does not take a step.
    let (status, _, body) =
        exchange(&mut connection, "/v1/messages", &json!({ "model": "m", "stream": true, "messages": [] })).await?;
    assert_eq!(status, 200);
    let events = parse_events(&body)?;
    assert_eq!(events[2].1["delta"], json!({ "type": "text_delta", "text": SIDE_ANSWER }));
    assert_eq!(model.remaining_steps(), 3);

    let (status, headers, body) = exchange(&mut connection, "/v1/messages", &user(json!("go"))).await?;
    assert_eq!(status, 200);
    assert!(headers.contains(&("content-type".to_owned(), "text/event-stream".to_owned())));
    let events = parse_events(&body)?;
    let names: Vec<&str> = events.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(
        names,
        [
            "message_start",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    for (name, data) in &events {
        assert_eq!(data["type"], json!(name), "the data's type repeats the event name");
    }
    assert_eq!(events[0].1["message"]["role"], "assistant");
    assert_eq!(events[0].1["message"]["model"], "m");
    let block = &events[1].1["content_block"];
    assert_eq!((&block["type"], &block["name"], &block["input"]), (&json!("tool_use"), &json!("Bash"), &json!({})));
    let first_id = block["id"].as_str().context("no id")?.to_owned();
    let delta = &events[2].1["delta"];
    assert_eq!(delta["type"], "input_json_delta");
    let input: Value = serde_json::from_str(delta["partial_json"].as_str().context("no partial_json")?)?;
    assert_eq!(input, json!({ "command": "echo hi > out.txt" }));
    assert_eq!(events[4].1["delta"]["stop_reason"], "tool_use");

    // Same connection: keep-alive works, and the second step has two tool calls.
    let result = json!([{ "type": "tool_result", "tool_use_id": first_id, "content": "" }]);
    let (status, _, body) = exchange(&mut connection, "/v1/messages", &user(result)).await?;
    assert_eq!(status, 200);
    let events = parse_events(&body)?;
    let starts: Vec<&Value> = events.iter().filter(|(name, _)| name == "content_block_start").map(|e| &e.1).collect();
    assert_eq!(starts.len(), 2);
    assert_eq!((&starts[0]["index"], &starts[1]["index"]), (&json!(0), &json!(1)));
    assert_ne!(starts[0]["content_block"]["id"], starts[1]["content_block"]["id"]);

    // Not streamed: one JSON message.
    let result = json!([
        { "type": "tool_result", "tool_use_id": "a", "content": [{ "type": "text", "text": "one" }, { "type": "text", "text": "two" }] },
        { "type": "tool_result", "tool_use_id": "b", "content": "denied", "is_error": true },
    ]);
    let mut body = user(result);
    body["stream"] = json!(false);
    let (status, _, body) = exchange(&mut connection, "/v1/messages", &body).await?;
    assert_eq!(status, 200);
    let message: Value = serde_json::from_str(&body)?;
    assert_eq!(message["content"], json!([{ "type": "text", "text": "all done" }]));
    assert_eq!(message["stop_reason"], "end_turn");

    // Exhausted: a final answer.
    let (_, _, body) = exchange(&mut connection, "/v1/messages", &user(json!("more"))).await?;
    let events = parse_events(&body)?;
    assert_eq!(events[2].1["delta"]["text"], SCRIPT_EXHAUSTED_ANSWER);
    assert_eq!(events[4].1["delta"]["stop_reason"], "end_turn");

    let (status, _, body) = exchange(&mut connection, "/v1/messages/count_tokens", &user(json!("x"))).await?;
    assert_eq!(status, 200);
    assert!(serde_json::from_str::<Value>(&body)?["input_tokens"].as_u64().is_some_and(|n| n > 0));

    let (status, _, body) = exchange(&mut connection, "/v1/other", &json!({})).await?;
    assert_eq!(status, 404);
    assert_eq!(serde_json::from_str::<Value>(&body)?["error"]["type"], "not_found_error");

    // ToolSearch's answer, and deferred tools named in the system prompt.
    let intro = format!("The following {DEFERRED_TOOLS_INTRO}. Load them first:\nCronList\nmcp__x__y\n\nMore.");
    let result = json!([{ "type": "tool_result", "tool_use_id": "c", "content": [
        { "type": "tool_reference", "tool_name": "mcp__x__y" }
    ]}]);
    let mut body = user(result);
    body["system"] = json!([{ "type": "text", "text": "Environment" }, { "type": "text", "text": intro }]);
    exchange(&mut connection, "/v1/messages", &body).await?;
    assert_eq!(model.deferred_tool_names(), ["CronList", "mcp__x__y"]);

    assert_eq!(model.requests().len(), 5);
    assert_eq!(model.all_requests().len(), 8);
    assert_eq!(model.tool_names(), ["Bash", "Read"]);
    assert_eq!(
        model.tool_results(),
        [
            ToolResult { tool_use_id: first_id, content: String::new(), is_error: false },
            ToolResult { tool_use_id: "a".to_owned(), content: "one\ntwo".to_owned(), is_error: false },
            ToolResult { tool_use_id: "b".to_owned(), content: "denied".to_owned(), is_error: true },
            ToolResult {
                tool_use_id: "c".to_owned(),
                content: "[tool_reference mcp__x__y]".to_owned(),
                is_error: false
            },
        ]
    );
    Ok(())
}

/// `data:` payloads of an SSE body, with their event names when there are.
fn data_lines(body: &str) -> Vec<Value> {
    body.lines().filter_map(|line| line.strip_prefix("data: ")).filter_map(|d| serde_json::from_str(d).ok()).collect()
}

#[tokio::test]
async fn serves_the_same_script_to_codex_cline_and_gemini_in_their_formats() -> anyhow::Result<()> {
    let model = ScriptedModel::start(vec![
        Step::tool_use("exec_command", json!({ "cmd": "ls" })),
        Step::tool_use("run_commands", json!({ "commands": ["ls"] })),
        Step::tool_use("run_shell_command", json!({ "command": "ls" })),
        Step::text("all done"),
    ])
    .await?;
    let mut connection = BufReader::new(TcpStream::connect(model.addr()).await?);
    let tools = json!([{ "type": "function", "name": "exec_command" }]);

    // Responses (Codex CLI): a function_call item whose arguments are the input as JSON text.
    let body = json!({ "model": "m", "stream": true, "tools": tools, "input": [
        { "type": "message", "role": "user", "content": [{ "type": "input_text", "text": "go" }] }
    ]});
    let (status, _, text) = exchange(&mut connection, "/v1/responses", &body).await?;
    assert_eq!(status, 200);
    let events = parse_events(&text)?;
    let names: Vec<&str> = events.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(
        names,
        ["response.created", "response.output_item.added", "response.output_item.done", "response.completed"]
    );
    let item = &events[2].1["item"];
    assert_eq!((&item["type"], &item["name"]), (&json!("function_call"), &json!("exec_command")));
    assert_eq!(
        serde_json::from_str::<Value>(item["arguments"].as_str().context("arguments")?)?,
        json!({ "cmd": "ls" })
    );
    assert_eq!(events[3].1["response"]["status"], "completed");
    let call_id = item["call_id"].as_str().context("call_id")?.to_owned();

    // Chat Completions (Cline, OpenCode), streamed: a tool_calls delta, then [DONE].
    let body = json!({ "model": "m", "stream": true, "tools": [{ "type": "function" }], "messages": [
        { "role": "user", "content": "go" },
    ]});
    let (status, _, text) = exchange(&mut connection, "/v1/chat/completions", &body).await?;
    assert_eq!(status, 200);
    assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
    let chunks = data_lines(&text);
    let call = &chunks[0]["choices"][0]["delta"]["tool_calls"][0];
    assert_eq!(call["function"]["name"], "run_commands");
    assert_eq!(chunks[1]["choices"][0]["finish_reason"], "tool_calls");

    // Gemini: a side call asking for JSON of a schema gets an instance of it, and takes no step.
    let schema = json!({ "type": "OBJECT", "properties": {
        "reasoning": { "type": "STRING" }, "next_speaker": { "type": "STRING", "enum": ["user", "model"] },
        "score": { "type": "INTEGER", "minimum": 1 } } });
    let body = json!({ "contents": [], "generationConfig": { "responseJsonSchema": schema } });
    let (status, _, text) = exchange(&mut connection, "/v1beta/models/g:generateContent", &body).await?;
    assert_eq!(status, 200);
    let answer: Value = serde_json::from_str(&text)?;
    let json_text = answer["candidates"][0]["content"]["parts"][0]["text"].as_str().context("text")?;
    assert_eq!(
        serde_json::from_str::<Value>(json_text)?,
        json!({ "reasoning": SIDE_ANSWER, "next_speaker": "user", "score": 1 })
    );
    let body = json!({ "tools": [{ "functionDeclarations": [{ "name": "run_shell_command" }] }], "contents": [
        { "role": "user", "parts": [{ "text": "go" }] }
    ]});
    let (status, _, text) = exchange(&mut connection, "/v1beta/models/g:streamGenerateContent?alt=sse", &body).await?;
    assert_eq!(status, 200);
    let chunks = data_lines(&text);
    assert_eq!(chunks[0]["candidates"][0]["content"]["parts"][0]["functionCall"]["args"], json!({ "command": "ls" }));

    // The results each sent back, each once however often the history repeats it.
    let results = json!({ "model": "m", "stream": true, "tools": tools, "input": [
        { "type": "function_call", "call_id": call_id, "name": "exec_command", "arguments": "{}" },
        { "type": "function_call_output", "call_id": call_id, "output": "listed" },
    ]});
    exchange(&mut connection, "/v1/responses", &results).await?;
    exchange(&mut connection, "/v1/responses", &results).await?;
    let chat = json!({ "model": "m", "stream": false, "tools": [{ "type": "function" }], "messages": [
        { "role": "user", "content": "go" },
        { "role": "tool", "tool_call_id": "c9", "content": [{ "type": "text", "text": "blocked" }] },
    ]});
    let (_, _, text) = exchange(&mut connection, "/v1/chat/completions", &chat).await?;
    assert_eq!(serde_json::from_str::<Value>(&text)?["choices"][0]["finish_reason"], "stop");
    let gemini = json!({ "tools": [{ "functionDeclarations": [{ "name": "x" }] }], "contents": [
        { "role": "user", "parts": [{ "functionResponse": { "name": "run_shell_command", "response": { "output": "ok" } } }] }
    ]});
    exchange(&mut connection, "/v1beta/models/g:streamGenerateContent", &gemini).await?;
    let results: Vec<(String, String)> = model.tool_results().into_iter().map(|r| (r.tool_use_id, r.content)).collect();
    assert_eq!(
        results,
        [
            (call_id, "listed".to_owned()),
            ("c9".to_owned(), "blocked".to_owned()),
            ("run_shell_command".to_owned(), r#"{"output":"ok"}"#.to_owned()),
        ]
    );
    Ok(())
}
