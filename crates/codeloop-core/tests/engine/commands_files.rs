//! Commands (DESIGN.md §5g) through the engine: Markdown files in the user's and the project's folders,
//! their templates, the built-ins, precedence, trust, and the one validation.

use std::path::Path;
use std::sync::Arc;

use codeloop_core::permission::AskPolicy;
use codeloop_core::{CommandSource, Delivery, Engine, EngineError, EngineOptions, SessionCommand};
use codeloop_testkit::{FakeProvider, Reply, Script, Turn};
use codeloop_types::{Message, PartKind, PermissionAction, PermissionRule, Session};
use tempfile::TempDir;

use crate::harness::config_for;

struct Setup {
    _data: TempDir,
    user: TempDir,
    project: TempDir,
    fake: FakeProvider,
    engine: Engine,
    session: Session,
}

fn write(dir: &Path, name: &str, text: &str) {
    let path = dir.join(name);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

async fn setup(trusted: bool, rules: Vec<PermissionRule>, files: impl FnOnce(&Path, &Path)) -> Setup {
    let data = tempfile::tempdir().unwrap();
    let user = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    files(user.path(), project.path());
    let fake = FakeProvider::start(Script::new([Turn::from(Reply::text("ok"))]).repeating()).await.unwrap();
    let mut config = config_for(&fake.base_url());
    config.permission.0.extend(rules);
    let mut options = EngineOptions::new(data.path(), config);
    options.ask_policy = AskPolicy::Deny;
    options.env = Arc::new(|_| None);
    options.skill_dirs = Some(Vec::new());
    options.command_dirs =
        Some(vec![user.path().join("codeloop/commands"), user.path().join(".claude/commands")]);
    options.project_trust = Some(Arc::new(move |_: &Path| trusted));
    let engine = Engine::open(options).unwrap();
    let session = engine.create_session(project.path(), None, None, None).await.unwrap();
    Setup { _data: data, user, project, fake, engine, session }
}

impl Setup {
    async fn run(&self, name: &str, arguments: &str) -> Result<(), EngineError> {
        let command = SessionCommand::RunCommand {
            session: self.session.id.clone(),
            name: name.into(),
            arguments: arguments.into(),
            delivery: Delivery::Queue,
            effort: None,
        };
        self.engine.validate(&command).await?;
        self.engine.submit(command).await.map(drop)
    }

    /// The text of the last user message sent to the model, and the command on that message.
    fn last_sent(&self) -> (String, Option<String>) {
        let history = self.engine.store().load_history(&self.session.id).unwrap();
        let user = history.iter().rev().find(|m| matches!(m.info, Message::User(_))).unwrap();
        let Message::User(info) = &user.info else { unreachable!() };
        let text = user
            .parts
            .iter()
            .filter_map(|p| match &p.kind {
                PartKind::Text(t) => Some(t.text.clone()),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("");
        (text, info.command.clone())
    }
}

#[tokio::test]
async fn arguments_fill_the_template_and_the_message_carries_the_command_name() {
    let s = setup(false, vec![], |user, _| {
        write(
            user,
            "codeloop/commands/fix.md",
            "---\ndescription: Fix an issue\n---\nFix issue $1 ($2). All: $ARGUMENTS\n",
        );
        write(user, "codeloop/commands/review.md", "Review the code.\n");
    })
    .await;
    s.run("fix", "123 'two words'").await.unwrap();
    assert_eq!(
        s.last_sent(),
        ("Fix issue 123 (two words). All: 123 'two words'\n".into(), Some("fix".into()))
    );
    let sent = s.fake.requests().last().unwrap().body["messages"].to_string();
    assert!(sent.contains("Fix issue 123 (two words)"), "the expanded text is what the model gets: {sent}");
    s.run("/review", "src/lib.rs carefully").await.unwrap();
    assert_eq!(s.last_sent().0, "Review the code.\n\nsrc/lib.rs carefully");
}

#[tokio::test]
async fn sub_folders_name_commands_and_the_project_wins_in_its_precedence_order() {
    let s = setup(false, vec![], |user, project| {
        write(user, "codeloop/commands/same.md", "user's");
        write(user, ".claude/commands/git/log.md", "---\nargument-hint: [n]\n---\nlog");
        write(project, ".opencode/command/same.md", "opencode's");
        write(project, ".claude/commands/same.md", "claude's");
        write(project, ".codeloop/commands/same.md", "codeloop's");
        write(project, ".opencode/command/only.md", "opencode only");
    })
    .await;
    s.run("same", "").await.unwrap();
    assert_eq!(s.last_sent().0, "codeloop's");
    s.run("only", "").await.unwrap();
    assert_eq!(s.last_sent().0, "opencode only");
    std::fs::remove_file(s.project.path().join(".codeloop/commands/same.md")).unwrap();
    s.run("same", "").await.unwrap();
    assert_eq!(s.last_sent().0, "claude's");
    let listed = s.engine.commands(s.project.path()).await;
    let log = listed.iter().find(|c| c.name == "git:log").unwrap();
    assert_eq!((log.argument_hint.as_deref(), log.source), (Some("[n]"), CommandSource::User));
    let same = listed.iter().find(|c| c.name == "same").unwrap();
    assert_eq!(same.source, CommandSource::Project);
    assert!(listed.iter().any(|c| c.name == "init" && c.source == CommandSource::Builtin));
    assert!(listed.iter().any(|c| c.name == "compact"));
}

#[tokio::test]
async fn files_inside_the_project_are_inlined_and_outside_ones_left_out() {
    let outside = tempfile::tempdir().unwrap();
    write(outside.path(), "secret.txt", "outside text");
    let escape = outside.path().join("secret.txt").display().to_string();
    let template = format!("Look at @src/a.rs, @{escape}, @$1 and @.env; mail me@x.org");
    let s = setup(false, vec![], |user, project| {
        write(project, "src/a.rs", "fn a() {}\n");
        write(project, ".env", "TOKEN=1\n");
        write(user, "codeloop/commands/look.md", &template);
    })
    .await;
    s.run("look", &escape).await.unwrap();
    let text = s.last_sent().0;
    assert!(text.contains("fn a() {}"), "{text}");
    assert!(!text.contains("outside text"), "{text}");
    assert!(text.contains(&format!("[@{escape} left out: it is outside the project]")), "{text}");
    // A path an argument names is never inlined: it stays as written.
    assert!(text.contains(&format!(", @{escape} and")), "{text}");
    assert!(!text.contains("TOKEN=1"), "a file the read rules ask about is not inlined: {text}");
    assert!(text.contains("me@x.org"), "{text}");
}

#[tokio::test]
async fn shell_parts_run_for_the_users_commands_but_not_an_untrusted_projects() {
    let s = setup(false, vec![], |user, project| {
        write(user, "codeloop/commands/mine.md", "Status: !`echo from-user $((1+1))`");
        write(project, ".codeloop/commands/theirs.md", "Status: !`echo from-project > ran.txt`");
    })
    .await;
    s.run("mine", "").await.unwrap();
    assert_eq!(s.last_sent().0, "Status: from-user 2");
    s.run("theirs", "").await.unwrap();
    assert_eq!(s.last_sent().0, "Status: [not run: the project is not trusted]");
    assert!(!s.project.path().join("ran.txt").exists(), "the untrusted project's command never ran");
}

#[tokio::test]
async fn a_trusted_projects_shell_parts_run_under_the_rules() {
    let deny = PermissionRule::new("bash", "rm *", PermissionAction::Deny);
    let s = setup(true, vec![deny], |_, project| {
        write(project, ".codeloop/commands/theirs.md", "A: !`echo trusted` B: !`rm -rf nothing`");
    })
    .await;
    s.run("theirs", "").await.unwrap();
    let text = s.last_sent().0;
    assert!(text.starts_with("A: trusted B: [not run: "), "{text}");
}

#[tokio::test]
async fn an_unknown_command_names_itself_and_the_available_ones_and_sends_nothing() {
    let s = setup(false, vec![], |user, _| write(user, "codeloop/commands/known.md", "x")).await;
    let error = s.run("nope", "a").await.unwrap_err().to_string();
    assert!(error.contains("nope") && error.contains("known") && error.contains("init"), "{error}");
    assert_eq!(s.fake.request_count(), 0);
    assert!(s.engine.store().load_history(&s.session.id).unwrap().is_empty());
}

#[tokio::test]
async fn front_matter_picks_the_agent_and_a_bad_model_is_refused_before_sending() {
    let s = setup(false, vec![], |user, _| {
        write(user, "codeloop/commands/plan.md", "---\nagent: plan\nmodel: fake/test\n---\nPlan it");
        write(user, "codeloop/commands/bad.md", "---\nmodel: nowhere/none\n---\nx");
    })
    .await;
    s.run("plan", "").await.unwrap();
    let history = s.engine.store().load_history(&s.session.id).unwrap();
    let Message::User(user) = &history[0].info else { panic!() };
    assert_eq!((user.agent.as_str(), user.model.to_string().as_str()), ("plan", "fake/test"));
    let error = s.run("bad", "").await.unwrap_err().to_string();
    assert!(error.contains("bad") && error.contains("nowhere"), "{error}");
    assert_eq!(s.fake.request_count(), 1);
}

#[tokio::test]
async fn a_subtask_command_runs_in_a_child_session_of_the_subagent() {
    let s = setup(false, vec![], |user, _| {
        write(user, "codeloop/commands/scan.md", "---\nsubtask: true\nagent: explore\n---\nScan $1");
    })
    .await;
    s.run("scan", "src").await.unwrap();
    let filter = codeloop_types::SessionFilter { parent: Some(s.session.id.clone()), ..Default::default() };
    let sessions = s.engine.store().list_sessions(&filter).unwrap();
    let child = sessions.iter().find(|c| c.parent_id.as_ref() == Some(&s.session.id)).unwrap();
    assert_eq!(child.agent, "explore");
    let history = s.engine.store().load_history(&child.id).unwrap();
    let Message::User(user) = &history[0].info else { panic!() };
    assert_eq!(user.command.as_deref(), Some("scan"));
}

#[tokio::test]
async fn init_asks_for_agents_md_and_compact_summarises() {
    let s = setup(false, vec![], |_, _| {}).await;
    s.run("init", "").await.unwrap();
    let (text, command) = s.last_sent();
    assert!(text.contains("AGENTS.md"), "{text}");
    assert_eq!(command.as_deref(), Some("init"));
    s.run("compact", "the parser").await.unwrap();
    let history = s.engine.store().load_history(&s.session.id).unwrap();
    let focus = history.iter().flat_map(|m| &m.parts).find_map(|p| match &p.kind {
        PartKind::Compaction(c) => c.focus.clone(),
        _ => None,
    });
    assert_eq!(focus.as_deref(), Some("the parser"));
    let _ = &s.user;
}
