//! The web page in a real Chromium (DESIGN.md §5i), against a real server with the scripted provider:
//! a prompt streams its answer, permission prompts are answered, a slow tool is stopped, a reload in
//! the middle of a stream loses and doubles nothing, hostile markup stays text, and a 10 000-part
//! session paints fast, keeps few nodes and idles. Timings are printed, never asserted.

use std::time::Instant;

use codeloop_core::config::PermissionConfig;
use codeloop_core::permission::AskPolicy;
use codeloop_server::ServerOptions;
use codeloop_store::Write;
use codeloop_testkit::{Reply, Script, Turn};
use codeloop_types::{
    AssistantMessage, Finish, Message, MessageId, MessagePath, MessageTime, ModelRef, Part, PartKind,
    PartTime, PermissionAction, PermissionRule, SessionId, StepFinishPart, StepStartPart, TextPart, Tokens,
    ToolPart, ToolState, UserMessage, now_ms,
};
use serde_json::{Value, json};

use crate::support::{Harness, Setup};
use crate::webdriver::Browser;

const TOKEN: &str = "web-test-token-0123456789";

async fn harness(script: Script, configure: impl FnOnce(&mut Setup)) -> Harness {
    Harness::start_with(script, |setup| {
        setup.options = ServerOptions::new(setup.options.directory.clone()).with_token(TOKEN);
        configure(setup);
    })
    .await
}

/// The page's address as `codeloop web` prints it.
fn page(h: &Harness) -> String {
    format!("{}/#token={TOKEN}", h.base)
}

/// Text of the newest answer (the last `.answer` row), or "".
const LAST_ANSWER: &str =
    "const a = [...document.querySelectorAll('#timeline .answer')].pop(); return a ? a.textContent : '';";

/// Waits for the page to have booted and opened its event stream.
async fn booted(browser: &Browser) {
    browser.wait("the page to boot", "return document.documentElement.dataset.paints !== undefined && document.getElementById('conn').hidden").await;
}

async fn send(browser: &Browser, text: &str) {
    browser.type_into("#input", &format!("{text}\u{E007}")).await;
}

async fn idle(browser: &Browser) {
    browser.wait("the run to end", "return document.getElementById('state').textContent === 'idle'").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_sent_with_enter_streams_its_answer_on_a_narrow_window() {
    let answer = "Hello **world**, this answer arrives in many small pieces over the event stream.";
    let h = harness(Script::new([Reply::text(answer).with_text_chunks(24).with_chunk_delay_ms(50)]), |_| {})
        .await;
    let Some(browser) =
        Browser::start("a_prompt_sent_with_enter_streams_its_answer_on_a_narrow_window").await
    else {
        return;
    };
    browser.set_window(420, 800).await;
    browser.goto(&page(&h)).await;
    booted(&browser).await;
    let address =
        browser.js("return [location.href, sessionStorage.getItem('codeloop.token')]", json!([])).await;
    assert_eq!(address[0], json!(format!("{}/", h.base)), "the token left the address bar");
    assert_eq!(address[1], json!(TOKEN), "the token is in the tab's session storage");

    // Shift+Enter is a new line, Enter sends.
    browser.type_into("#input", "Say hello\u{E008}\u{E007}\u{E008}please\u{E007}").await;
    let user = browser
        .wait(
            "the user's message",
            "const u = document.querySelector('#timeline .user-text'); return u ? u.textContent : ''",
        )
        .await;
    assert_eq!(user, json!("Say hello\nplease"));

    // The answer grows while it streams, then is whole.
    let plain = "Hello world, this answer arrives in many small pieces over the event stream.";
    let mut partial = 0;
    let deadline = Instant::now() + crate::support::PATIENCE;
    loop {
        let text = browser.js(LAST_ANSWER, json!([])).await;
        // Until its closing `**` arrives, the bold word shows as typed.
        let text = text.as_str().unwrap_or_default().replace('*', "");
        assert!(plain.starts_with(&text), "shown text is a prefix of the answer: {text:?}");
        if text == plain {
            break;
        }
        if !text.is_empty() {
            partial += 1;
        }
        assert!(Instant::now() < deadline, "the answer did not arrive: {text:?}");
        tokio::time::sleep(std::time::Duration::from_millis(15)).await;
    }
    assert!(partial > 0, "the answer was seen while it streamed");
    let strong =
        browser.js("return document.querySelector('#timeline .answer strong')?.textContent", json!([])).await;
    assert_eq!(strong, json!("world"));
    idle(&browser).await;

    // The open session is in the address; the sessions list is behind the menu on a narrow window.
    let href = browser.js("return location.href", json!([])).await;
    let href = href.as_str().unwrap();
    assert!(href.starts_with(&format!("{}/#/session/ses_", h.base)) && !href.contains("token"), "{href}");
    let hidden =
        browser.js("return getComputedStyle(document.getElementById('sidebar')).visibility", json!([])).await;
    assert_eq!(hidden, json!("hidden"));
    browser.click("#menu").await;
    browser.wait("the sessions list", "return getComputedStyle(document.getElementById('sidebar')).visibility === 'visible' && document.querySelector('#sessions .session.current') !== null").await;
    assert_eq!(h.fake.requests().len(), 1);

    // A tab opened without the token asks for it, and then works.
    browser.new_tab().await;
    browser.goto(&format!("{}/", h.base)).await;
    browser.wait("the token form", "return !document.getElementById('login').hidden").await;
    browser.type_into("#token", &format!("{TOKEN}\u{E007}")).await;
    booted(&browser).await;
    browser
        .wait(
            "the sessions of the server",
            "return document.querySelectorAll('#sessions .session').length === 1",
        )
        .await;
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permission_prompts_are_answered_with_allow_once_and_with_reject() {
    let h = harness(
        Script::new([
            Turn::from(Reply::tool_call("bash", json!({"command": "echo approved-by-click"}))),
            Turn::from(Reply::text("It ran.")),
            Turn::from(Reply::tool_call("bash", json!({"command": "echo never-runs"}))),
        ]),
        |setup| {
            setup.ask_policy = AskPolicy::Wait;
            setup.config.permission =
                PermissionConfig(vec![PermissionRule::new("bash", "*", PermissionAction::Ask)]);
        },
    )
    .await;
    let Some(browser) =
        Browser::start("permission_prompts_are_answered_with_allow_once_and_with_reject").await
    else {
        return;
    };
    browser.goto(&page(&h)).await;
    booted(&browser).await;
    send(&browser, "run it").await;
    let labels = browser
        .wait("a permission prompt", "const p = document.querySelector('#asks .permission'); return p ? [...p.querySelectorAll('button')].map(b => b.textContent) : null")
        .await;
    assert_eq!(labels, json!(["Allow once", "Always", "Reject"]));
    let detail =
        browser.js("return document.querySelector('#asks .ask-detail').textContent", json!([])).await;
    assert_eq!(detail, json!("echo approved-by-click"));
    browser.click_button("Allow once").await;
    let output = browser
        .wait("the approved call's output", "const c = document.querySelector('#timeline .card[data-tool=bash][data-state=completed]'); return c ? c.textContent : ''")
        .await;
    assert!(output.as_str().unwrap().contains("approved-by-click"), "{output}");
    browser
        .wait("the answer after the call", "const a = [...document.querySelectorAll('#timeline .answer')].pop(); return a && a.textContent === 'It ran.'")
        .await;
    idle(&browser).await;
    assert!(browser.js("return document.getElementById('asks').hidden", json!([])).await.as_bool().unwrap());

    send(&browser, "again").await;
    browser.wait("the second prompt", "return document.querySelector('#asks .permission .ask-detail')?.textContent === 'echo never-runs'").await;
    browser.click_button("Reject").await;
    browser
        .wait(
            "the rejected call",
            "return document.querySelector('#timeline .card[data-tool=bash][data-state=error]') !== null",
        )
        .await;
    idle(&browser).await;
    assert!(browser.js("return document.getElementById('asks').hidden", json!([])).await.as_bool().unwrap());
    assert_eq!(h.fake.requests().len(), 3, "a rejection stops the run: no request after it");
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_and_esc_abort_a_slow_tool() {
    let h = harness(
        Script::new([
            Turn::from(Reply::tool_call("bash", json!({"command": "sleep 30"}))),
            Turn::from(Reply::tool_call("bash", json!({"command": "sleep 31"}))),
        ]),
        |_| {},
    )
    .await;
    let Some(browser) = Browser::start("stop_and_esc_abort_a_slow_tool").await else { return };
    browser.goto(&page(&h)).await;
    booted(&browser).await;
    let running =
        "return document.querySelector('#timeline .card[data-tool=bash][data-state=running]') !== null";
    let interrupted = |n: usize| {
        format!(
            "return document.querySelectorAll('#timeline .card[data-tool=bash][data-state=interrupted]').length === {n}"
        )
    };

    send(&browser, "sleep").await;
    browser.wait("the slow call to run", running).await;
    let started = Instant::now();
    browser.click_button("Stop").await;
    browser.wait("the call to be interrupted", &interrupted(1)).await;
    idle(&browser).await;
    let stopped = started.elapsed();

    send(&browser, "sleep more").await;
    browser.wait("the second slow call to run", running).await;
    browser.keys(&["\u{E00C}"]).await; // Escape
    browser.wait("the second call to be interrupted", &interrupted(2)).await;
    idle(&browser).await;
    let footer = browser
        .js(
            "return [...document.querySelectorAll('#timeline .footer')].map(f => f.textContent).join('|')",
            json!([]),
        )
        .await;
    assert_eq!(footer.as_str().unwrap().matches("interrupted").count(), 2, "{footer}");
    assert_eq!(h.fake.requests().len(), 2, "nothing ran after either abort");
    println!("web page: Stop ended a 30 s tool call in {:.0} ms", stopped.as_secs_f64() * 1000.0);
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_or_a_second_tab_in_the_middle_of_a_stream_loses_and_doubles_no_text() {
    let words: String = (1..=70).map(|i| format!("w{i:02} ")).collect();
    let answer = words.trim_end().to_owned();
    let h = harness(
        Script::new([Reply::text(answer.clone()).with_text_chunks(70).with_chunk_delay_ms(70)]),
        |_| {},
    )
    .await;
    let Some(browser) =
        Browser::start("a_reload_or_a_second_tab_in_the_middle_of_a_stream_loses_and_doubles_no_text").await
    else {
        return;
    };
    browser.goto(&page(&h)).await;
    booted(&browser).await;
    send(&browser, "count").await;
    browser.wait("a part of the answer", "const a = [...document.querySelectorAll('#timeline .answer')].pop(); return a && a.textContent.length > 40").await;
    browser.js("window.beforeReload = true", json!([])).await;
    browser.refresh().await;
    assert_eq!(
        browser.js("return window.beforeReload ?? null", json!([])).await,
        Value::Null,
        "the page was reloaded"
    );
    let after_reload = watch_answer(&browser, &answer).await;
    assert!(after_reload > 0, "the reload happened while the answer streamed");
    idle(&browser).await;

    // A tab that never saw the session opens it mid-stream (no saved position: the stored snapshot and
    // the live deltas are joined).
    let session = browser.js("return location.hash.split('/').pop()", json!([])).await;
    let session = session.as_str().unwrap().to_owned();
    h.fake.push(Reply::text(answer.clone()).with_text_chunks(70).with_chunk_delay_ms(70));
    let (status, _) = h
        .client
        .post(h.url(&format!("/session/{session}/prompt_async")))
        .bearer_auth(TOKEN)
        .json(&json!({"parts": [{"type": "text", "text": "again"}]}))
        .send()
        .await
        .map(|r| (r.status().as_u16(), ()))
        .unwrap();
    assert_eq!(status, 202);
    // Wait until the stream is under way, as far as the store shows.
    let deadline = Instant::now() + crate::support::PATIENCE;
    loop {
        let (_, page) = crate::support::read(
            h.client
                .get(h.url(&format!("/session/{session}/message?limit=1")))
                .bearer_auth(TOKEN)
                .send()
                .await
                .unwrap(),
        )
        .await;
        let text = page[0]["parts"]
            .as_array()
            .and_then(|parts| parts.iter().find(|p| p["type"] == "text"))
            .and_then(|p| p["text"].as_str())
            .unwrap_or("")
            .to_owned();
        if page[0]["info"]["role"] == "assistant" && text.len() > 40 {
            break;
        }
        assert!(Instant::now() < deadline, "the second answer did not start");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    browser.new_tab().await;
    browser.goto(&format!("{}/#token={TOKEN}&/session/{session}", h.base)).await;
    let joined = watch_answer(&browser, &answer).await;
    assert!(joined > 0, "the tab opened the session while the answer streamed");
    idle(&browser).await;
    browser.close().await;
}

/// Reads the newest answer until it is `answer`; every reading must be a prefix of it (nothing lost in
/// the middle, nothing twice). Returns how many readings were partial.
async fn watch_answer(browser: &Browser, answer: &str) -> usize {
    let mut partial = 0;
    let deadline = Instant::now() + crate::support::PATIENCE;
    loop {
        let text = browser.js(LAST_ANSWER, json!([])).await;
        let text = text.as_str().unwrap_or_default().to_owned();
        assert!(answer.starts_with(&text), "shown text is not a prefix of the answer: {text:?}");
        if text == answer {
            return partial;
        }
        if !text.is_empty() {
            partial += 1;
        }
        assert!(Instant::now() < deadline, "the answer did not complete: {text:?}");
        tokio::time::sleep(std::time::Duration::from_millis(15)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_markup_in_an_answer_and_in_tool_output_renders_as_text() {
    let hostile = "<script>window.pwned = 'script'</script> <img src=x onerror=\"window.pwned = 'img'\"> \
                   [click me](javascript:window.pwned='link') <iframe src=\"javascript:window.pwned='frame'\"></iframe> **still markdown**";
    let h = harness(
        Script::new([
            Turn::from(Reply::tool_call(
                "bash",
                json!({"command": "printf '%s' '<img src=y onerror=window.pwned=1><b>bold?</b>'"}),
            )),
            Turn::from(Reply::text(hostile)),
        ]),
        |_| {},
    )
    .await;
    let Some(browser) =
        Browser::start("hostile_markup_in_an_answer_and_in_tool_output_renders_as_text").await
    else {
        return;
    };
    browser.goto(&page(&h)).await;
    booted(&browser).await;
    send(&browser, "<img src=z onerror=\"window.pwned='prompt'\">").await;
    browser.wait("the answer", "const a = [...document.querySelectorAll('#timeline .answer')].pop(); return a && a.textContent.includes('still markdown')").await;
    idle(&browser).await;
    let seen = browser
        .js(
            "const t = document.getElementById('timeline');
             return {
               pwned: window.pwned ?? null,
               elements: t.querySelectorAll('script, img, iframe, object, embed, b').length,
               javascriptLinks: [...document.querySelectorAll('a')].filter(a => a.href.startsWith('javascript')).length,
               answer: [...t.querySelectorAll('.answer')].pop().textContent,
               strong: [...t.querySelectorAll('.answer strong')].map(s => s.textContent),
               output: t.querySelector('.card[data-tool=bash]').textContent,
               user: t.querySelector('.user-text').textContent,
               title: document.title,
             };",
            json!([]),
        )
        .await;
    assert_eq!(seen["pwned"], Value::Null, "no hostile code ran: {seen}");
    assert_eq!(seen["elements"], json!(0), "no hostile element was made: {seen}");
    assert_eq!(seen["javascriptLinks"], json!(0), "{seen}");
    let answer = seen["answer"].as_str().unwrap();
    assert!(answer.contains("<script>window.pwned = 'script'</script>"), "{answer}");
    assert!(answer.contains("<img src=x onerror=\"window.pwned = 'img'\">"), "{answer}");
    assert!(answer.contains("<iframe src="), "{answer}");
    assert_eq!(seen["strong"], json!(["still markdown"]));
    assert!(
        seen["output"].as_str().unwrap().contains("<img src=y onerror=window.pwned=1><b>bold?</b>"),
        "{seen}"
    );
    assert_eq!(seen["user"], json!("<img src=z onerror=\"window.pwned='prompt'\">"));
    // The page's own policy is what the server sent.
    let response = h.client.get(h.url("/")).send().await.unwrap();
    assert_eq!(response.headers()["content-security-policy"], codeloop_server::CONTENT_SECURITY_POLICY);
    browser.close().await;
}

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
async fn undo_hides_the_last_turn_and_puts_its_files_back_and_redo_brings_both_back() {
    let h = harness(
        Script::new([
            Turn::from(Reply::tool_call(
                "write",
                json!({"filePath": "notes.txt", "content": "written by the model\n"}),
            )),
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
    browser.click_button("Undo").await;
    browser.wait("the turn to be hidden", "return document.querySelector('#timeline .answer') === null && document.querySelector('#timeline .undone') !== null").await;
    assert!(!project.join("notes.txt").exists(), "the file the turn wrote is gone");
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
            "<pre class=\"code\"><code class=\"language-rust\">fn main() {}</code></pre><p>after</p>"
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
    let panel = panel.as_str().unwrap();
    assert!(
        panel.contains("This server has no jobs API.")
            && panel.contains("job_1")
            && panel.contains("exited (exit 0)"),
        "{panel}"
    );
    browser.close().await;
}
