//! More of the web page in a real Chromium: a 10 000-part session, a dropped event stream, questions and
//! queueing, undo and redo, the Markdown renderer, and event types the page only shows as lines.

use std::time::Instant;

use codeloop_core::permission::AskPolicy;
use codeloop_store::Write;
use codeloop_testkit::{Reply, Script, Turn};
use codeloop_types::{
    AssistantMessage, Finish, Message, MessageId, MessagePath, MessageTime, ModelRef, Part, PartKind,
    PartTime, SessionId, StepFinishPart, StepStartPart, TextPart, Tokens, ToolPart, ToolState, UserMessage,
    now_ms,
};
use serde_json::json;

use crate::browser::{TOKEN, booted, harness, idle, page, send, watch_answer};
use crate::support::Harness;
use crate::webdriver::Browser;

/// Turns of the long session: each a question (1 part) and an answer (9 parts).
const TURNS: usize = 1_000;

/// A session of 10 000 parts, written to the store directly.
fn long_session(h: &Harness, session: &SessionId) {
    let model = ModelRef::new("fake", "test");
    let output: String =
        (0..24).map(|i| format!("{i:>3}: src/module/file_{i}.rs | fn item_{i}() -> Result<()>\n")).collect();
    let mut writes = Vec::new();
    for turn in 0..TURNS {
        let now = now_ms();
        let question = UserMessage {
            id: MessageId::new(),
            session_id: session.clone(),
            time: MessageTime { created: now, completed: None },
            agent: "build".into(),
            model: model.clone(),
            system: None,
            format: None,
            command: None,
            effort: None,
            allowed_tools: Vec::new(),
        };
        let q = question.id.clone();
        writes.push(Write::Message(Message::User(question)));
        writes.push(Write::Part(Part::user_text(
            session.clone(),
            q.clone(),
            format!("question {turn}: what does module {turn} do?"),
        )));
        let mut answer = AssistantMessage::new(
            session.clone(),
            q,
            "build",
            model.clone(),
            MessagePath { cwd: "/w".into(), root: "/w".into() },
        );
        answer.finish = Some(Finish::Stop);
        answer.time.completed = Some(now + 1200);
        answer.tokens = Tokens { input: 1200, output: 300, ..Default::default() };
        let a = answer.id.clone();
        writes.push(Write::Message(Message::Assistant(answer)));
        let part = |kind| Write::Part(Part::new(session.clone(), a.clone(), kind));
        let text = |t: String| {
            PartKind::Text(TextPart {
                text: t,
                time: PartTime { start: now, end: Some(now) },
                ..Default::default()
            })
        };
        let tool = |command: String| {
            let mut state = ToolState::default();
            state.start(json!({"command": command}), now).unwrap();
            state.complete(output.clone(), command, json!({"exit": 0}), vec![], now + 5).unwrap();
            PartKind::Tool(ToolPart {
                call_id: format!("call_{}", MessageId::new()),
                tool: "bash".into(),
                state,
                metadata: None,
                ignored: false,
            })
        };
        let finish = PartKind::StepFinish(StepFinishPart {
            reason: Finish::ToolCalls,
            snapshot: None,
            tokens: Tokens::default(),
            cost: 0.0,
        });
        writes.push(part(PartKind::StepStart(StepStartPart { snapshot: None })));
        writes.push(part(text(format!("Looking at **module {turn}**: I will list its files first."))));
        writes.push(part(tool(format!("ls src/module_{turn}"))));
        writes.push(part(tool(format!("grep -n fn src/module_{turn}"))));
        writes.push(part(text(format!("Module {turn} has 24 functions; `item_0` is the entry point."))));
        writes.push(part(finish.clone()));
        writes.push(part(PartKind::StepStart(StepStartPart { snapshot: None })));
        let last = if turn + 1 == TURNS {
            "This is the newest answer of the long session.".to_owned()
        } else {
            format!("Done with module {turn}.")
        };
        writes.push(part(text(last)));
        writes.push(part(finish));
    }
    assert_eq!(writes.iter().filter(|w| matches!(w, Write::Part(_))).count(), 10 * TURNS);
    // Written as the store would be by an earlier run: through the store itself, beside the engine.
    let store = codeloop_store::SqliteStore::open(h.data_path()).unwrap();
    codeloop_store::Store::apply(&store, &writes).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ten_thousand_part_session_paints_its_newest_part_fast_keeps_few_nodes_and_idles() {
    let h = harness(Script::new(Vec::<Turn>::new()), |_| {}).await;
    let Some(browser) =
        Browser::start("a_ten_thousand_part_session_paints_its_newest_part_fast_keeps_few_nodes_and_idles")
            .await
    else {
        return;
    };
    let (status, session) = crate::support::read(
        h.client.post(h.url("/session")).bearer_auth(TOKEN).json(&json!({})).send().await.unwrap(),
    )
    .await;
    assert_eq!(status, 200);
    let session = SessionId::from(session["id"].as_str().unwrap());
    long_session(&h, &session);

    // The token first (as `codeloop web` opens it), then navigations to the session's address.
    browser.goto(&page(&h)).await;
    booted(&browser).await;
    let newest_visible = "const rows = [...document.querySelectorAll('#timeline .answer')]; const last = rows.pop(); if (!last || !last.textContent.includes('newest answer')) return false; const r = last.getBoundingClientRect(); const t = document.getElementById('timeline').getBoundingClientRect(); return r.bottom <= t.bottom + 1 && r.top >= t.top - 1";
    let mut figures = Vec::new();
    for _ in 0..3 {
        browser.goto("about:blank").await;
        let started = Instant::now();
        browser.goto(&format!("{}/#/session/{session}", h.base)).await;
        browser.wait("the newest part", newest_visible).await;
        let seen = started.elapsed().as_secs_f64() * 1000.0;
        let painted =
            browser.wait("the first-paint mark", "return document.documentElement.dataset.firstPaint").await;
        figures.push((painted.as_str().unwrap().parse::<f64>().unwrap(), seen));
        let steps = browser
            .js(
                "const n = performance.getEntriesByType('navigation')[0];
                 const page = performance.getEntriesByType('resource').find(r => r.name.includes('/message?'));
                 const files = performance.getEntriesByType('resource').filter(r => r.name.includes('/assets/'));
                 const loaded = Math.max(...files.map(r => r.responseEnd));
                 return `document ${n.responseEnd.toFixed(0)} ms, its ${files.length} files ${loaded.toFixed(0)} ms, scripts run ${n.domContentLoadedEventStart.toFixed(0)} ms, newest messages in ${page ? page.responseEnd.toFixed(0) : '?'} ms (asked at ${page ? page.startTime.toFixed(0) : '?'} ms); ${performance.getEntriesByType('mark').map(m => `${m.name.replace('codeloop:', '')} ${m.startTime.toFixed(0)}`).join(', ')}`",
                json!([]),
            )
            .await;
        println!("web page: 10 000-part session: {}", steps.as_str().unwrap_or_default());
    }
    for (i, (painted, seen)) in figures.iter().enumerate() {
        println!(
            "web page: 10 000-part session, load {}: newest part painted {painted:.0} ms after navigation (seen by the test after {seen:.0} ms)",
            i + 1
        );
    }
    let rows = browser
        .js("return document.querySelectorAll('#timeline .row').length", json!([]))
        .await
        .as_u64()
        .unwrap();
    assert!(rows < 200, "only rows near the viewport are in the document: {rows}");

    // Scroll to the start: older pages load as they come into view; the document stays small.
    let started = Instant::now();
    let deadline = Instant::now() + crate::support::PATIENCE;
    loop {
        let top = browser
            .js("const t = document.getElementById('timeline'); t.scrollTop = 0; return document.querySelector('#timeline .edge')?.textContent === 'Start of the session'", json!([]))
            .await;
        if top.as_bool().unwrap_or(false) {
            break;
        }
        assert!(Instant::now() < deadline, "the start of the session never came into view");
        tokio::time::sleep(std::time::Duration::from_millis(30)).await;
    }
    let first = browser.wait("the first question", "const u = document.querySelector('#timeline .user-text'); return u && u.textContent.startsWith('question 0:')").await;
    assert_eq!(first, json!(true));
    let rows = browser
        .js("return document.querySelectorAll('#timeline .row').length", json!([]))
        .await
        .as_u64()
        .unwrap();
    assert!(rows < 300, "after scrolling through every part the document still holds few rows: {rows}");
    println!(
        "web page: scrolled from the newest to the first of 10 000 parts in {:.0} ms ({rows} rows in the document)",
        started.elapsed().as_secs_f64() * 1000.0
    );

    // Idle: nothing is drawn and the browser barely runs.
    browser
        .wait(
            "the page to settle",
            "return new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r(true))))",
        )
        .await;
    let paints = browser.js("return document.documentElement.dataset.paints", json!([])).await;
    let cpu_before = browser.cpu_seconds();
    let idle_started = Instant::now();
    tokio::time::sleep(std::time::Duration::from_secs(3)).await; // the measured idle window, not a wait for anything
    let cpu_after = browser.cpu_seconds();
    let window = idle_started.elapsed().as_secs_f64();
    assert_eq!(
        browser.js("return document.documentElement.dataset.paints", json!([])).await,
        paints,
        "an idle page paints nothing"
    );
    let percent = |after: f64, before: f64| 100.0 * (after - before) / window;
    println!(
        "web page: idle for {window:.1} s: the tab {:.2} % of one core, every Chromium process {:.2} %",
        percent(cpu_after.1, cpu_before.1),
        percent(cpu_after.0, cpu_before.0)
    );
    println!("web page: {} bytes of embedded files", codeloop_server::page_size());
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_is_answered_and_a_message_typed_during_the_run_is_queued_for_the_chosen_agent() {
    let question = json!({"questions": [{"question": "Which colour?", "header": "Colour", "options": [{"label": "red"}, {"label": "blue"}]}]});
    let h = harness(
        Script::new([
            Turn::from(Reply::tool_call("question", question)),
            Turn::from(
                Reply::text("You chose blue, so blue it is: painting everything blue now.")
                    .with_text_chunks(30)
                    .with_chunk_delay_ms(80),
            ),
            Turn::from(Reply::text("Queued answer.")),
        ]),
        |setup| setup.ask_policy = AskPolicy::Wait,
    )
    .await;
    let Some(browser) = Browser::start(
        "a_question_is_answered_and_a_message_typed_during_the_run_is_queued_for_the_chosen_agent",
    )
    .await
    else {
        return;
    };
    browser.goto(&page(&h)).await;
    booted(&browser).await;
    browser
        .wait("the agent picker", "return document.querySelector('#agent option[value=plan]') !== null")
        .await;
    browser.click("#agent").await;
    browser.click("#agent option[value=plan]").await;
    send(&browser, "paint it").await;
    let legend = browser
        .wait("the question", "return document.querySelector('#asks .question legend')?.textContent")
        .await;
    assert_eq!(legend, json!("Colour: Which colour?"));
    browser.click("#asks input[value=blue]").await;
    browser.click_button("Answer").await;
    browser.wait("the answer to stream", "const a = [...document.querySelectorAll('#timeline .answer')].pop(); return a && a.textContent.startsWith('You chose')").await;
    send(&browser, "and then?").await;
    browser
        .wait("the queued note", "return document.getElementById('queued').textContent === '1 queued'")
        .await;
    browser.wait("the queued turn's answer", "const a = [...document.querySelectorAll('#timeline .answer')].pop(); return a && a.textContent === 'Queued answer.'").await;
    idle(&browser).await;
    let seen = browser
        .js(
            "return {
               users: [...document.querySelectorAll('#timeline .user-text')].map(u => u.textContent),
               card: document.querySelector('#timeline .card[data-tool=question]').dataset.state,
               metas: [...document.querySelectorAll('#timeline .footer .meta')].map(m => m.textContent),
               queued: document.getElementById('queued').textContent,
             }",
            json!([]),
        )
        .await;
    assert_eq!(seen["users"], json!(["paint it", "and then?"]), "{seen}");
    assert_eq!(seen["card"], json!("completed"), "{seen}");
    assert_eq!(seen["queued"], json!(""), "{seen}");
    let metas = seen["metas"].as_array().unwrap();
    assert!(!metas.is_empty() && metas.iter().all(|m| m.as_str().unwrap().contains(" · plan · ")), "{seen}");
    let requests = h.fake.requests();
    assert_eq!(requests.len(), 3);
    assert!(requests[1].body.to_string().contains("blue"), "the answer reached the model");
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_servers_form_is_filled_in_the_page_and_its_defaults_fill_the_rest() {
    let mcp = codeloop_testkit::McpTestServer::start(codeloop_testkit::McpServerOptions::new(
        codeloop_testkit::Revision::Sessions,
    ))
    .await
    .unwrap();
    let h = harness(
        Script::new([Turn::from(Reply::tool_call("web_ask", json!({}))), Turn::from(Reply::text("Got it."))]),
        |setup| {
            setup.ask_policy = AskPolicy::Wait;
            setup.config.mcp.insert("web".into(), codeloop_core::mcp::McpSettings::remote(mcp.url()));
            setup.config.permission =
                codeloop_core::config::PermissionConfig(vec![codeloop_types::PermissionRule::new(
                    "web_ask",
                    "*",
                    codeloop_types::PermissionAction::Allow,
                )]);
        },
    )
    .await;
    let Some(browser) =
        Browser::start("an_mcp_servers_form_is_filled_in_the_page_and_its_defaults_fill_the_rest").await
    else {
        return;
    };
    browser.goto(&page(&h)).await;
    booted(&browser).await;
    send(&browser, "ask me").await;
    let title = browser
        .wait("the form", "return document.querySelector('#asks .elicitation .ask-title')?.textContent")
        .await;
    assert_eq!(title, json!("MCP server web asks"));
    let placeholder =
        browser.js("return document.querySelector('#asks input[name=name]').placeholder", json!([])).await;
    assert_eq!(placeholder, json!("Ada"), "the default is shown");
    browser.click("#asks input[name=count]").await;
    browser
        .js(
            "const i = document.querySelector('#asks input[name=count]'); i.value = '4'; return true",
            json!([]),
        )
        .await;
    browser.click_button("Send").await;
    browser.wait("the answer", "const a = [...document.querySelectorAll('#timeline .answer')].pop(); return a && a.textContent === 'Got it.'").await;
    idle(&browser).await;
    let requests = h.fake.requests();
    assert!(
        requests[1].body.to_string().contains(r#"accept {\"count\":4,\"name\":\"Ada\"}"#),
        "{}",
        requests[1].body
    );
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slash_command_is_listed_completed_with_tab_and_run_as_a_command() {
    let h = harness(Script::new([Turn::from(Reply::text("Wrote AGENTS.md."))]), |_| {}).await;
    let Some(browser) =
        Browser::start("a_slash_command_is_listed_completed_with_tab_and_run_as_a_command").await
    else {
        return;
    };
    browser.goto(&page(&h)).await;
    booted(&browser).await;
    browser.type_into("#input", "/in").await;
    let listed = browser
        .wait(
            "the command list",
            "const l = document.getElementById('command-list'); return !l.hidden && l.textContent",
        )
        .await;
    assert!(listed.as_str().unwrap().contains("/init"), "{listed}");
    browser.keys(&["\u{E004}"]).await;
    let typed = browser.js("return document.getElementById('input').value", json!([])).await;
    assert_eq!(typed, json!("/init "), "Tab completed the name");
    browser.type_into("#input", "focus on the tests\u{E007}").await;
    browser.wait("the answer", "const a = [...document.querySelectorAll('#timeline .answer')].pop(); return a && a.textContent === 'Wrote AGENTS.md.'").await;
    idle(&browser).await;
    let sent = h.fake.requests()[0].body.to_string();
    assert!(sent.contains("Please analyze this codebase") && sent.contains("focus on the tests"), "{sent}");
    assert!(!sent.contains("/init focus"), "sent as the command, not as text: {sent}");
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_todo_list_shows_as_a_panel_with_each_items_state() {
    let todos = json!({"todos": [
        {"content": "Read the tests", "status": "completed", "priority": "high"},
        {"content": "Fix the parser", "status": "in_progress", "priority": "high"},
        {"content": "Run the suite", "status": "pending", "priority": "medium"},
    ]});
    let h = harness(
        Script::new([Turn::from(Reply::tool_call("todowrite", todos)), Turn::from(Reply::text("Planned."))]),
        |_| {},
    )
    .await;
    let Some(browser) = Browser::start("the_todo_list_shows_as_a_panel_with_each_items_state").await else {
        return;
    };
    browser.goto(&page(&h)).await;
    booted(&browser).await;
    send(&browser, "plan it").await;
    let shown = browser
        .wait(
            "the todo panel",
            "const t = document.getElementById('todos'); return t && !t.hidden ? [...t.querySelectorAll('li')].map(l => l.dataset.status + ':' + l.textContent) : null",
        )
        .await;
    assert_eq!(
        shown,
        json!(["completed:☑ Read the tests", "in_progress:◐ Fix the parser", "pending:☐ Run the suite"])
    );
    let title =
        browser.js("return document.querySelector('#todos .panel-title').textContent", json!([])).await;
    assert_eq!(title, json!("Todo 1/3"));
    idle(&browser).await;
    // Opened again (a reload), the list comes from the session.
    browser.refresh().await;
    booted(&browser).await;
    browser
        .wait("the todo panel after a reload", "const t = document.getElementById('todos'); return t && !t.hidden && t.querySelectorAll('li').length === 3")
        .await;
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_home_pane_names_the_sessions_working_now_and_opens_one() {
    // The run waits on a permission no one answers: it is working for as long as the test needs.
    let h = harness(
        Script::new([
            Turn::from(Reply::tool_call("bash", json!({"command": "echo later"}))),
            Turn::from(Reply::text("Done.")),
        ]),
        |setup| {
            setup.ask_policy = AskPolicy::Wait;
            setup.config.permission =
                codeloop_core::config::PermissionConfig(vec![codeloop_types::PermissionRule::new(
                    "bash",
                    "*",
                    codeloop_types::PermissionAction::Ask,
                )]);
        },
    )
    .await;
    let session = h.engine.create_session(h.project.path(), None, None, None).await.unwrap();
    let engine = h.engine.clone();
    let id = session.id.clone();
    let run = tokio::spawn(async move {
        let input = codeloop_core::PromptInput::text("go");
        engine
            .submit(codeloop_core::SessionCommand::Prompt {
                session: id,
                input,
                delivery: codeloop_core::Delivery::Queue,
            })
            .await
    });
    let Some(browser) = Browser::start("the_home_pane_names_the_sessions_working_now_and_opens_one").await
    else {
        return;
    };
    browser.goto(&page(&h)).await;
    booted(&browser).await;
    let working = browser
        .wait(
            "the working session on the home pane",
            "const b = document.querySelector('#home:not([hidden]) .home-working button'); return b ? b.dataset.session : ''",
        )
        .await;
    assert_eq!(working, json!(session.id.to_string()));
    browser.click("#home .home-working button").await;
    browser
        .wait(
            "the session to open",
            "return document.getElementById('home').hidden && location.hash.includes('/session/')",
        )
        .await;
    let _ = h.engine.submit(codeloop_core::SessionCommand::Abort { session: session.id.clone() }).await;
    let _ = run.await;
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_home_pane_lists_recent_sessions_of_every_project_with_where_they_live() {
    let h = harness(Script::new([Turn::from(Reply::text("ok"))]), |_| {}).await;
    let other = tempfile::tempdir().unwrap();
    let here = h.engine.create_session(h.project.path(), None, None, None).await.unwrap();
    let there = h.engine.create_session(other.path(), None, None, None).await.unwrap();
    let Some(browser) =
        Browser::start("the_home_pane_lists_recent_sessions_of_every_project_with_where_they_live").await
    else {
        return;
    };
    browser.goto(&page(&h)).await;
    booted(&browser).await;
    let listed = browser
        .wait(
            "the recent sessions on the home pane",
            "const rows = [...document.querySelectorAll('#home:not([hidden]) .home-recent li')]; return rows.length === 2 ? rows.map(r => [r.querySelector('button').dataset.session, r.textContent]) : null",
        )
        .await;
    let rows = listed.as_array().unwrap();
    let project = |dir: &std::path::Path| dir.file_name().unwrap().to_string_lossy().into_owned();
    // Newest first: the other project's session was made last.
    assert_eq!(rows[0][0], json!(there.id.to_string()));
    assert!(
        rows[0][1].as_str().unwrap().ends_with(&format!(" · {} · idle", project(other.path()))),
        "{rows:?}"
    );
    assert_eq!(rows[1][0], json!(here.id.to_string()));
    assert!(rows[1][1].as_str().unwrap().contains(&project(h.project.path())), "{rows:?}");
    browser.click("#home .home-recent button").await;
    browser
        .wait(
            "the session to open",
            "return document.getElementById('home').hidden && location.hash.includes('/session/')",
        )
        .await;
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attached_image_and_text_file_go_with_the_message_as_file_parts() {
    let h = harness(Script::new([Turn::from(Reply::text("A pixel and a note."))]), |_| {}).await;
    let files = tempfile::tempdir().unwrap();
    // A 1×1 PNG, and a text file.
    let png: &[u8] = &[
        0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 0x0d, 0x49, 0x48, 0x44, 0x52, 0, 0, 0, 1, 0,
        0, 0, 1, 8, 6, 0, 0, 0, 0x1f, 0x15, 0xc4, 0x89, 0, 0, 0, 0x0a, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9c,
        0x63, 0, 1, 0, 0, 5, 0, 1, 0x0d, 0x0a, 0x2d, 0xb4, 0, 0, 0, 0, 0x49, 0x45, 0x4e, 0x44, 0xae, 0x42,
        0x60, 0x82,
    ];
    std::fs::write(files.path().join("pixel.png"), png).unwrap();
    std::fs::write(files.path().join("notes.md"), "remember the milk\n").unwrap();
    let Some(browser) =
        Browser::start("an_attached_image_and_text_file_go_with_the_message_as_file_parts").await
    else {
        return;
    };
    browser.goto(&page(&h)).await;
    booted(&browser).await;
    let both =
        format!("{}\n{}", files.path().join("pixel.png").display(), files.path().join("notes.md").display());
    browser.type_into("#attach", &both).await;
    let chips = browser
        .wait(
            "the attachment chips",
            "const c = [...document.querySelectorAll('#attachments .chip')].map(c => c.dataset.file); return c.length === 2 ? c : null",
        )
        .await;
    assert_eq!(chips, json!(["pixel.png", "notes.md"]));
    send(&browser, "what are these?").await;
    browser.wait("the answer", "const a = [...document.querySelectorAll('#timeline .answer')].pop(); return a && a.textContent === 'A pixel and a note.'").await;
    let sent = h.fake.requests()[0].body.to_string();
    assert!(sent.contains("data:image/png;base64,iVBORw0KGgo"), "the image went as an image: {sent}");
    assert!(sent.contains("remember the milk"), "the text file's text went along: {sent}");
    let left = browser.js("return document.getElementById('attachments').hidden", json!([])).await;
    assert_eq!(left, json!(true), "sent attachments are cleared");
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undo_hides_the_last_turn_and_puts_its_files_back_and_redo_brings_both_back() {
    let h = harness(
        Script::new([
            Turn::from(Reply::tool_call(
                "write",
                json!({"filePath": "notes.txt", "content": "written by the model\n"}),
            )),
            // A command acts outside what a revert can put back: Undo must say so.
            Turn::from(Reply::tool_call("bash", json!({"command": "true", "description": "Tell the world"}))),
            Turn::from(Reply::text("Wrote notes.txt.")),
        ]),
        |setup| setup.config.snapshot = Some(true),
    )
    .await;
    let project = h.project.path().to_owned();
    let git = |args: &[&str]| {
        let status = std::process::Command::new("git")
            .args(["-c", "user.email=t@t", "-c", "user.name=t"])
            .args(args)
            .current_dir(&project)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .status()
            .unwrap();
        assert!(status.success());
    };
    std::fs::write(project.join("README"), "hi\n").unwrap();
    git(&["init", "-q"]);
    git(&["add", "."]);
    git(&["commit", "-qm", "init"]);
    let Some(browser) =
        Browser::start("undo_hides_the_last_turn_and_puts_its_files_back_and_redo_brings_both_back").await
    else {
        return;
    };
    browser.goto(&page(&h)).await;
    booted(&browser).await;
    send(&browser, "write notes").await;
    browser.wait("the answer", "return [...document.querySelectorAll('#timeline .answer')].pop()?.textContent === 'Wrote notes.txt.'").await;
    idle(&browser).await;
    assert!(project.join("notes.txt").exists());
    // Changed files are named within the project, not by their absolute path.
    let changed = browser
        .wait(
            "the files-changed line",
            "return [...document.querySelectorAll('#timeline .line')].map(l => l.textContent).find(t => t.startsWith('± files changed')) ?? null",
        )
        .await;
    assert_eq!(changed, json!("± files changed: notes.txt"));
    browser.click_button("Undo").await;
    browser.wait("the turn to be hidden", "return document.querySelector('#timeline .answer') === null && document.querySelector('#timeline .undone') !== null").await;
    assert!(!project.join("notes.txt").exists(), "the file the turn wrote is gone");
    let kept = browser
        .wait(
            "the not-undone notice",
            "return [...document.querySelectorAll('#timeline .notice')].map(l => l.textContent).find(t => t.includes('Not undone')) ?? null",
        )
        .await;
    assert!(
        kept.as_str()
            .is_some_and(|t| t.contains("1 call acted outside the project: bash: true. Check it yourself.")),
        "{kept}"
    );
    browser.click_button("Redo").await;
    browser.wait("the turn to be back", "return [...document.querySelectorAll('#timeline .answer')].pop()?.textContent === 'Wrote notes.txt.' && document.querySelector('#timeline .undone') === null").await;
    assert!(project.join("notes.txt").exists(), "redo puts the file back");
    browser.close().await;
}

/// A TCP forwarder between the browser and the server that can cut every open connection (a network
/// drop), and keeps what the browser sent, to see its requests.
struct Cutter {
    addr: std::net::SocketAddr,
    open: std::sync::Arc<std::sync::Mutex<Vec<tokio::task::AbortHandle>>>,
    sent: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
}

impl Cutter {
    async fn start(target: &str) -> Cutter {
        let target = target.trim_start_matches("http://").to_owned();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let open = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let sent = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (open2, sent2) = (open.clone(), sent.clone());
        tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                let target = target.clone();
                let sent = sent2.clone();
                let task = tokio::spawn(async move {
                    use tokio::io::{AsyncReadExt, AsyncWriteExt};
                    let Ok(outbound) = tokio::net::TcpStream::connect(&target).await else { return };
                    let (mut from_browser, mut to_browser) = inbound.into_split();
                    let (mut from_server, mut to_server) = outbound.into_split();
                    let up = async {
                        let mut buf = vec![0u8; 16 * 1024];
                        while let Ok(n) = from_browser.read(&mut buf).await {
                            if n == 0 || to_server.write_all(&buf[..n]).await.is_err() {
                                break;
                            }
                            sent.lock().unwrap().extend_from_slice(&buf[..n]);
                        }
                    };
                    let down = tokio::io::copy(&mut from_server, &mut to_browser);
                    tokio::select! { _ = up => {}, _ = down => {} }
                });
                open2.lock().unwrap().push(task.abort_handle());
            }
        });
        Cutter { addr, open, sent }
    }

    /// Closes every connection open now.
    fn cut(&self) {
        for task in self.open.lock().unwrap().drain(..) {
            task.abort();
        }
    }

    /// The requests the browser sent, lowercased.
    fn sent(&self) -> String {
        String::from_utf8_lossy(&self.sent.lock().unwrap()).to_lowercase()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_event_stream_resumes_with_last_event_id_and_loses_and_doubles_no_text() {
    let words: String = (1..=60).map(|i| format!("v{i:02} ")).collect();
    let answer = words.trim_end().to_owned();
    let h = harness(
        Script::new([Reply::text(answer.clone()).with_text_chunks(60).with_chunk_delay_ms(60)]),
        |_| {},
    )
    .await;
    let cutter = Cutter::start(&h.base).await;
    let Some(browser) =
        Browser::start("a_dropped_event_stream_resumes_with_last_event_id_and_loses_and_doubles_no_text")
            .await
    else {
        return;
    };
    browser.goto(&format!("http://{}/#token={TOKEN}", cutter.addr)).await;
    booted(&browser).await;
    send(&browser, "count again").await;
    browser.wait("a part of the answer", "const a = [...document.querySelectorAll('#timeline .answer')].pop(); return a && a.textContent.length > 30").await;
    let before = cutter.sent().matches("last-event-id:").count();
    cutter.cut();
    browser.wait("the page to see the drop", "return !document.getElementById('conn').hidden").await;
    let partial = watch_answer(&browser, &answer).await;
    assert!(partial > 0, "the stream came back while the answer streamed");
    assert!(cutter.sent().matches("last-event-id:").count() > before, "the page resumed with Last-Event-ID");
    // The token only ever travels as the bearer header (never in a query string or a path).
    let sent = cutter.sent();
    let token = TOKEN.to_lowercase();
    assert!(sent.matches(&token).count() > 0);
    assert_eq!(sent.matches(&token).count(), sent.matches(&format!("authorization: bearer {token}")).count());
    idle(&browser).await;
    browser.close().await;
}

/// Markdown as models write it, rendered by the page's own renderer in the browser, as a tree of tags.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_markdown_renderer_builds_elements_and_text_and_never_markup() {
    let h = harness(Script::new(Vec::<Turn>::new()), |_| {}).await;
    let Some(browser) =
        Browser::start("the_markdown_renderer_builds_elements_and_text_and_never_markup").await
    else {
        return;
    };
    browser.goto(&page(&h)).await;
    booted(&browser).await;
    let cases = json!([
        [
            "# Title\n\nSome *em*, **strong**, ~~gone~~ and `a <b>`.",
            "<h1>Title</h1><p>Some <em>em</em>, <strong>strong</strong>, <del>gone</del> and <code>a &lt;b&gt;</code>.</p>"
        ],
        [
            "```rust\nfn main() {}\n```\nafter",
            "<pre class=\"code\"><code class=\"language-rust\"><span class=\"tok-kw\">fn</span> main() {}</code></pre><p>after</p>"
        ],
        ["```\nstill streaming", "<pre class=\"code\"><code>still streaming</code></pre>"],
        ["- a\n  - b\n- c", "<ul><li>a<ul><li>b</li></ul></li><li>c</li></ul>"],
        ["1. one\n2. two", "<ol><li>one</li><li>two</li></ol>"],
        ["3. three\n4. four", "<ol start=\"3\"><li>three</li><li>four</li></ol>"],
        [
            "| a | b |\n|---|--:|\n| 1 | 2 |",
            "<div class=\"table\"><table><thead><tr><th>a</th><th class=\"align-right\">b</th></tr></thead><tbody><tr><td>1</td><td class=\"align-right\">2</td></tr></tbody></table></div>"
        ],
        [
            "[ok](https://example.com/a) [no](javascript:alert(1)) <https://x.example>",
            "<p><a href=\"https://example.com/a\">ok</a> <span class=\"unsafe-link\">no</span> <a href=\"https://x.example/\">https://x.example</a></p>"
        ],
        ["![alt](https://example.com/i.png)", "<p><a href=\"https://example.com/i.png\">🖼 alt</a></p>"],
        ["snake_case_name and 2 * 3 * 4", "<p>snake_case_name and 2 * 3 * 4</p>"],
        ["<b>hi</b> <script>x()</script>", "<p>&lt;b&gt;hi&lt;/b&gt; &lt;script&gt;x()&lt;/script&gt;</p>"],
        ["> quoted\n> more", "<blockquote><p>quoted\nmore</p></blockquote>"],
        ["line  \nbreak", "<p>line<br>break</p>"],
        ["---", "<hr>"],
        [
            "- [x] done\n- [ ] todo",
            "<ul><li><span class=\"task done\">☑ </span>done</li><li><span class=\"task\">☐ </span>todo</li></ul>"
        ],
    ]);
    let results = browser
        .post_async(
            "const [cases, done] = arguments;
             const esc = (s) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
             const tree = (node) => node.nodeType === 3 ? esc(node.textContent)
               : node.nodeType === 11 ? [...node.childNodes].map(tree).join('')
               : `<${node.localName}${['class', 'href', 'start'].filter(a => node.hasAttribute(a)).map(a => ` ${a}=\"${node.getAttribute(a)}\"`).join('')}>${[...node.childNodes].map(tree).join('')}${['br', 'hr'].includes(node.localName) ? '' : `</${node.localName}>`}`;
             const version = [...document.scripts].map(s => s.src).find(s => s.includes('/js/main.js')).replace('/js/main.js', '');
             import(`${version}/js/markdown.js`).then(m => done(cases.map(([text]) => tree(m.markdown(text)))), e => done(String(e)));",
            json!([cases]),
        )
        .await;
    for (case, got) in
        cases.as_array().unwrap().iter().zip(results.as_array().unwrap_or_else(|| panic!("{results}")))
    {
        assert_eq!(got, &case[1], "{}", case[0]);
    }
    browser.close().await;
}

/// Job, limit and hook events (being added by other issues) and event types the page does not know
/// become lines of the open session; the jobs panel works without a jobs API. The events are handed to
/// the page's own event handler, as its stream would (this server does not publish them yet).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_limit_hook_and_unknown_events_become_lines_of_the_session() {
    let h = harness(Script::new(Vec::<Turn>::new()), |_| {}).await;
    let Some(browser) = Browser::start("job_limit_hook_and_unknown_events_become_lines_of_the_session").await
    else {
        return;
    };
    let (_, session) = crate::support::read(
        h.client.post(h.url("/session")).bearer_auth(TOKEN).json(&json!({})).send().await.unwrap(),
    )
    .await;
    let session = session["id"].as_str().unwrap().to_owned();
    browser.goto(&format!("{}/#token={TOKEN}&/session/{session}", h.base)).await;
    booted(&browser).await;
    browser
        .wait(
            "the session",
            "return document.querySelector('#timeline .edge')?.textContent === 'Start of the session'",
        )
        .await;
    let events = json!([
        {"id": 1_000_001, "type": "job.started", "properties": {"job_id": "job_1", "session_id": session, "command": "npm run dev"}},
        {"id": 1_000_002, "type": "job.exited", "properties": {"job_id": "job_1", "exit_code": 0, "state": "exited"}},
        {"id": 1_000_003, "type": "session.limit", "properties": {"session_id": session, "limit": "run_max_cost_usd", "value": 1.0, "used": 1.25}},
        {"id": 1_000_004, "type": "hook.ran", "properties": {"event": "PreToolUse", "source": "user", "command": "./guard.sh", "duration_ms": 12, "exit_code": 2, "decision": "block"}},
        {"id": 1_000_005, "type": "session.cache", "properties": {"session_id": session, "reason": "model changed"}},
        {"id": 1_000_006, "type": "session.cache", "properties": {"session_id": session, "reason": "model changed"}},
        {"id": 1_000_007, "type": "job.started", "properties": {"job_id": "job_2", "session_id": "ses_another", "command": "not ours"}},
    ]);
    let lines = browser
        .post_async(
            "const [events, done] = arguments;
             const version = [...document.scripts].map(s => s.src).find(s => s.includes('/js/main.js')).replace('/js/main.js', '');
             import(`${version}/js/events.js`).then(m => {
               for (const event of events) m.onEvent(event);
               requestAnimationFrame(() => requestAnimationFrame(() => done([...document.querySelectorAll('#timeline .notice')].map(n => n.textContent))));
             }, e => done(String(e)));",
            json!([events]),
        )
        .await;
    assert_eq!(
        lines,
        json!([
            "⚙ job job_1 started: npm run dev",
            "⚙ job job_1 exited (exit 0)",
            "⛔ limit run_max_cost_usd reached: 1.25 of 1",
            "⚓ hook PreToolUse (user): ./guard.sh → block (exit 2, 12 ms)",
            format!("session.cache: {{\"reason\":\"model changed\",\"session_id\":\"{session}\"}} (×2)"),
        ])
    );
    browser.click_button("Jobs").await;
    let panel = browser.wait("the jobs panel", "const p = document.getElementById('jobs'); return !p.hidden && p.querySelector('.dim') ? p.textContent : ''").await;
    // The server's jobs API answers for the session: these events named no job it runs.
    let panel = panel.as_str().unwrap();
    assert!(panel.contains("No background jobs in this session."), "{panel}");
    browser.close().await;
}

#[tokio::test]
async fn the_jobs_panel_lists_a_running_job_from_the_api_and_its_kill_button_ends_it() {
    let h = harness(
        Script::new([
            Turn::from(Reply::tool_call(
                "bash",
                json!({"command": "exec sleep 60", "run_in_background": true}),
            )),
            Turn::from(Reply::text("started")),
        ]),
        |_| {},
    )
    .await;
    let Some(browser) =
        Browser::start("the_jobs_panel_lists_a_running_job_from_the_api_and_its_kill_button_ends_it").await
    else {
        return;
    };
    let (_, session) = crate::support::read(
        h.client.post(h.url("/session")).bearer_auth(TOKEN).json(&json!({})).send().await.unwrap(),
    )
    .await;
    let session = session["id"].as_str().unwrap().to_owned();
    let prompt = json!({"parts": [{"type": "text", "text": "start it"}]});
    let sent = h.client.post(h.url(&format!("/session/{session}/prompt"))).bearer_auth(TOKEN).json(&prompt);
    assert!(sent.send().await.unwrap().status().is_success());
    browser.goto(&format!("{}/#token={TOKEN}&/session/{session}", h.base)).await;
    booted(&browser).await;
    browser
        .wait("the answer", "return document.getElementById('timeline').textContent.includes('started')")
        .await;
    browser.click_button("Jobs").await;
    let row = browser
        .wait("the job's row", "const r = document.querySelector('#jobs li[data-job]'); return r && r.textContent.includes('running') ? r.textContent : ''")
        .await;
    let row = row.as_str().unwrap();
    assert!(row.contains("job_") && row.contains("exec sleep 60"), "{row}");
    browser.click("#jobs li[data-job] button").await;
    let row = browser
        .wait("the job killed", "const r = document.querySelector('#jobs li[data-job]'); return r && r.textContent.includes('killed') ? r.textContent : ''")
        .await;
    assert!(row.as_str().unwrap().contains("killed"), "{row}");
    assert_eq!(h.engine.running_jobs(&session.as_str().into()).len(), 0);
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_effort_picker_is_sent_with_the_next_prompt() {
    let h = harness(Script::new([Turn::from(Reply::text("Thought hard."))]), |setup| {
        let fake = setup.config.provider.get_mut("fake").unwrap();
        fake.models.entry("test".into()).or_default().reasoning = Some(true);
    })
    .await;
    let Some(browser) = Browser::start("the_effort_picker_is_sent_with_the_next_prompt").await else {
        return;
    };
    browser.goto(&page(&h)).await;
    booted(&browser).await;
    browser.click("#effort").await;
    browser.click("#effort option[value=high]").await;
    send(&browser, "think").await;
    browser.wait("the answer", "const a = [...document.querySelectorAll('#timeline .answer')].pop(); return a && a.textContent === 'Thought hard.'").await;
    assert_eq!(h.fake.requests()[0].body["reasoning_effort"], json!("high"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn code_blocks_read_output_and_diffs_are_coloured_by_language_as_text() {
    let h = harness(
        Script::new([
            Turn::from(Reply::tool_call("read", json!({"filePath": "app.py"}))),
            Turn::from(Reply::tool_call(
                "edit",
                json!({"filePath": "app.py", "oldString": "return 1", "newString": "return \"<b>two</b>\""}),
            )),
            Turn::from(Reply::text("Done:\n\n```rust\nfn main() { let n = 42; } // ok\n```\n")),
        ]),
        |_| {},
    )
    .await;
    std::fs::write(h.project.path().join("app.py"), "def main():\n    return 1\n").unwrap();
    let Some(browser) =
        Browser::start("code_blocks_read_output_and_diffs_are_coloured_by_language_as_text").await
    else {
        return;
    };
    browser.goto(&page(&h)).await;
    booted(&browser).await;
    send(&browser, "change it").await;
    browser.wait("the answer", "return document.querySelector('#timeline pre.code') !== null").await;
    idle(&browser).await;
    let tokens = |selector: &str| {
        format!(
            "return [...document.querySelectorAll('{selector}')].map(e => e.className + ':' + e.textContent)"
        )
    };
    let code = browser.wait("the code block's tokens", &tokens("#timeline pre.code span")).await;
    assert_eq!(code, json!(["tok-kw:fn", "tok-kw:let", "tok-num:42", "tok-com:// ok"]));
    let read = browser.wait("the read output's tokens", &tokens(".card[data-tool=read] pre span")).await;
    assert_eq!(read, json!(["tok-kw:def", "tok-kw:return", "tok-num:1"]));
    let diff = browser.wait("the diff's tokens", &tokens(".card[data-tool=edit] .diff .add span")).await;
    assert_eq!(diff, json!(["tok-kw:return", "tok-str:\"<b>two</b>\""]), "the model's text stays text");
    let bold = browser
        .wait("no markup from the text", "return document.querySelectorAll('#timeline b').length === 0")
        .await;
    assert_eq!(bold, json!(true));
    browser.close().await;
}
