//! The web page in a real Chromium (DESIGN.md §5i), against a real server with the scripted provider:
//! a prompt streams its answer, permission prompts are answered, a slow tool is stopped, a reload in
//! the middle of a stream loses and doubles nothing, hostile markup stays text, and a 10 000-part
//! session paints fast, keeps few nodes and idles. Timings are printed, never asserted.

use std::time::Instant;

use codeloop_core::config::PermissionConfig;
use codeloop_core::permission::AskPolicy;
use codeloop_server::ServerOptions;
use codeloop_testkit::{Reply, Script, Turn};
use codeloop_types::{PermissionAction, PermissionRule};
use serde_json::{Value, json};

use crate::support::{Harness, Setup};
use crate::webdriver::Browser;

pub(super) const TOKEN: &str = "web-test-token-0123456789";

pub(super) async fn harness(script: Script, configure: impl FnOnce(&mut Setup)) -> Harness {
    Harness::start_with(script, |setup| {
        setup.options = ServerOptions::new(setup.options.directory.clone()).with_token(TOKEN);
        configure(setup);
    })
    .await
}

/// The page's address as `codeloop web` prints it.
pub(super) fn page(h: &Harness) -> String {
    format!("{}/#token={TOKEN}", h.base)
}

/// Text of the newest answer (the last `.answer` row), or "".
pub(super) const LAST_ANSWER: &str =
    "const a = [...document.querySelectorAll('#timeline .answer')].pop(); return a ? a.textContent : '';";

/// Waits for the page to have booted and opened its event stream.
pub(super) async fn booted(browser: &Browser) {
    browser.wait("the page to boot", "return document.documentElement.dataset.paints !== undefined && document.getElementById('conn').hidden").await;
}

pub(super) async fn send(browser: &Browser, text: &str) {
    browser.type_into("#input", &format!("{text}\u{E007}")).await;
}

pub(super) async fn idle(browser: &Browser) {
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
    // A phone-sized window: a placeholder that fits, and the status line in one row.
    let fit = browser
        .js(
            "const s = document.getElementById('status'); const b = s.querySelector('button'); \
             return [document.getElementById('input').placeholder, s.clientHeight <= 2 * b.offsetHeight]",
            json!([]),
        )
        .await;
    assert_eq!(fit, json!(["Message", true]), "{fit}");

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
            Turn::from(Reply::tool_call(
                "bash",
                json!({"command": "echo approved-by-click", "description": "Say something"}),
            )),
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
    // A finished bash card names the command it ran, not the model's description of it.
    let head = browser
        .js(
            "return document.querySelector('#timeline .card[data-tool=bash] .tool-input').textContent",
            json!([]),
        )
        .await;
    assert_eq!(head, json!("echo approved-by-click"));
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
pub(super) async fn watch_answer(browser: &Browser, answer: &str) -> usize {
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
