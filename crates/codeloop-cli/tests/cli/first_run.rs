//! The first five minutes: a model without a config file, `doctor`, `config init`, completions.

use std::process::Output;

use codeloop_testkit::{FakeProvider, Reply, Script, Turn};

use super::{Env, text};

/// The binary with a fresh HOME, no config file and exactly `vars` added to a clean environment.
async fn fresh(env: &Env, args: &[&str], vars: &[(&str, &str)]) -> Output {
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let vars: Vec<(String, String)> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    let (data, home, project) =
        (env.data.path().to_owned(), env.home.path().to_owned(), env.project.path().to_owned());
    tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_codeloop"))
            .args(&args)
            .current_dir(project)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("CODELOOP_DATA_DIR", data)
            .env("HOME", home)
            .envs(vars)
            .output()
            .unwrap()
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_openai_key_and_base_url_are_enough_for_a_first_answer() {
    let env = Env::new();
    let fake = FakeProvider::start(Script::new([Turn::from(Reply::text("Hello there."))])).await.unwrap();
    let base_url = fake.base_url();
    let output =
        fresh(&env, &["run", "hi"], &[("OPENAI_API_KEY", "sk-test"), ("OPENAI_BASE_URL", &base_url)]).await;
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stderr}");
    assert_eq!(stdout.trim(), "Hello there.");
    assert!(stderr.contains("using openai/gpt-4.1 (found $OPENAI_API_KEY)"), "{stderr}");
    assert_eq!(fake.requests()[0].header("authorization"), Some("Bearer sk-test"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_names_a_missing_key_an_unreachable_url_and_an_untrusted_project() {
    let env = Env::new();
    // Nothing configured, no key: the model line fails and so does the exit code.
    let output = fresh(&env, &["doctor"], &[]).await;
    let (stdout, _) = text(&output);
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("✗ model: none"), "{stdout}");

    // A configured provider whose key is missing.
    let config = env.home.path().join(".config/codeloop/config.toml");
    std::fs::create_dir_all(config.parent().unwrap()).unwrap();
    std::fs::write(
        &config,
        "model = \"mine/m\"\n[provider.mine]\nbase_url = \"http://127.0.0.1:9/v1\"\napi_key_env = \"MINE_KEY\"\n",
    )
    .unwrap();
    let output = fresh(&env, &["doctor"], &[]).await;
    let (stdout, _) = text(&output);
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("✗ provider mine: $MINE_KEY is not set"), "{stdout}");
    // With the key, the URL is checked: nothing listens on port 9.
    let output = fresh(&env, &["doctor"], &[("MINE_KEY", "k-SECRETVALUE")]).await;
    let (stdout, _) = text(&output);
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("✓ provider mine: key found in $MINE_KEY"), "{stdout}");
    assert!(stdout.contains("is unreachable"), "{stdout}");
    assert!(!stdout.contains("SECRETVALUE"), "the key is never printed: {stdout}");

    // A store URL that nothing answers: named without its password, and no reason to stop a run.
    let url = "postgres://me:PGSECRET@127.0.0.1:1/db";
    let output = fresh(&env, &["doctor"], &[("MINE_KEY", "k"), ("CODELOOP_DATABASE_URL", url)]).await;
    let (stdout, _) = text(&output);
    assert!(stdout.contains("✗ store: PostgreSQL at postgres://me:***@127.0.0.1:1/db"), "{stdout}");
    assert!(!stdout.contains("PGSECRET"), "{stdout}");

    // A reachable provider and an untrusted project config: exit 0, the project named with the fix.
    let fake = FakeProvider::start(Script::new([Turn::from(Reply::text("x"))])).await.unwrap();
    std::fs::write(
        &config,
        format!(
            "model = \"mine/m\"\n[provider.mine]\nbase_url = \"{}\"\napi_key_env = \"MINE_KEY\"\n",
            fake.base_url()
        ),
    )
    .unwrap();
    std::fs::write(env.project.path().join("codeloop.toml"), "[mcp.x]\ncommand = [\"sh\"]\n").unwrap();
    let output = fresh(&env, &["doctor", "--json"], &[("MINE_KEY", "k")]).await;
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stdout}{stderr}");
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["ready"], true);
    let project =
        report["checks"].as_array().unwrap().iter().find(|c| c["name"] == "project config").unwrap();
    assert_eq!(project["ok"], false);
    assert!(project["fix"].as_str().unwrap().contains("codeloop trust"), "{project}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_init_writes_a_loadable_config_and_never_overwrites() {
    let env = Env::new();
    let output = fresh(&env, &["config", "init"], &[("OPENAI_API_KEY", "sk-SECRETVALUE")]).await;
    assert!(output.status.success(), "{}", text(&output).1);
    let path = env.home.path().join(".config/codeloop/config.toml");
    let written = std::fs::read_to_string(&path).unwrap();
    assert!(written.contains("model = \"openai/gpt-4.1\""), "{written}");
    assert!(written.contains("[permission]") && written.contains("external_directory"), "{written}");
    assert!(!written.contains("SECRETVALUE"), "no key in the file");
    // It loads: doctor reads it without a config error.
    let doctor = fresh(&env, &["doctor"], &[]).await;
    assert!(!text(&doctor).0.contains("✗ config"), "{}", text(&doctor).0);
    std::fs::write(&path, "# mine\n").unwrap();
    let again = fresh(&env, &["config", "init"], &[]).await;
    assert_eq!(again.status.code(), Some(1));
    assert!(text(&again).1.contains("already exists"), "{}", text(&again).1);
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "# mine\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completions_cover_every_subcommand() {
    let env = Env::new();
    for shell in ["bash", "zsh", "fish"] {
        let output = fresh(&env, &["completions", shell], &[]).await;
        let (stdout, _) = text(&output);
        assert!(output.status.success());
        for command in ["run", "session", "trust", "sandbox", "doctor"] {
            assert!(stdout.contains(command), "{shell} completions lack {command}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_says_which_session_directories_this_machine_cannot_see() {
    let env = Env::new();
    let fake =
        FakeProvider::start(Script::new([Turn::from(Reply::text("one")), Turn::from(Reply::text("two"))]))
            .await
            .unwrap();
    let base_url = fake.base_url();
    let vars = [("OPENAI_API_KEY", "sk-test"), ("OPENAI_BASE_URL", base_url.as_str())];
    let gone = tempfile::tempdir().unwrap();
    let gone_dir = gone.path().to_str().unwrap().to_owned();
    assert!(fresh(&env, &["run", "hi"], &vars).await.status.success());
    assert!(fresh(&env, &["run", "--dir", &gone_dir, "hi"], &vars).await.status.success());
    let doctor = |env| async move {
        let output = fresh(env, &["doctor", "--json"], &vars).await;
        let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
        report["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == "session directories")
            .cloned()
            .unwrap()
    };
    let check = doctor(&env).await;
    assert_eq!(check["ok"], true, "{check}");
    assert!(check["detail"].as_str().unwrap().contains("all 2 directories"), "{check}");

    drop(gone); // another machine's mount, say
    let check = doctor(&env).await;
    assert_eq!(check["ok"], false, "{check}");
    let detail = check["detail"].as_str().unwrap();
    assert!(detail.contains("1 of 2") && detail.contains(&gone_dir), "{detail}");
    assert!(check["fix"].as_str().unwrap().contains("leaves their runs"), "{check}");
}
