//! Command arity: how many leading words name "the command" for an `always` approval, so approving
//! `git status --short` approves `git status *` and not every `git` invocation (reference §8.3 bash).
//!
//! A prefix maps to the number of words it keeps; the longest listed prefix of a command decides, and an
//! unlisted command keeps its first word.

/// (prefix, arity). Multi-word prefixes refine their first word (`npm` keeps 2, `npm run` keeps 3).
const ARITY: &[(&str, usize)] = &[
    ("apt", 2),
    ("apt-get", 2),
    ("aws", 3),
    ("az", 3),
    ("brew", 2),
    ("bun", 2),
    ("bun run", 3),
    ("bun x", 3),
    ("bundle", 2),
    ("bundle exec", 3),
    ("bunx", 2),
    ("cargo", 2),
    ("cmake", 2),
    ("composer", 2),
    ("conda", 2),
    ("deno", 2),
    ("deno task", 3),
    ("dnf", 2),
    ("docker", 2),
    ("docker compose", 3),
    ("docker container", 3),
    ("docker image", 3),
    ("docker network", 3),
    ("docker volume", 3),
    ("dotnet", 2),
    ("gcloud", 3),
    ("gh", 3),
    ("git", 2),
    ("git remote", 3),
    ("git stash", 3),
    ("git submodule", 3),
    ("git worktree", 3),
    ("go", 2),
    ("go mod", 3),
    ("go work", 3),
    ("gradle", 2),
    ("helm", 2),
    ("just", 2),
    ("kubectl", 2),
    ("kubectl config", 3),
    ("kubectl rollout", 3),
    ("make", 2),
    ("mix", 2),
    ("mvn", 2),
    ("npm", 2),
    ("npm exec", 3),
    ("npm run", 3),
    ("npx", 2),
    ("pip", 2),
    ("pip3", 2),
    ("pnpm", 2),
    ("pnpm dlx", 3),
    ("pnpm exec", 3),
    ("pnpm run", 3),
    ("poetry", 2),
    ("poetry run", 3),
    ("python -m", 3),
    ("python3 -m", 3),
    ("rails", 2),
    ("rustup", 2),
    ("rustup target", 3),
    ("rustup toolchain", 3),
    ("swift", 2),
    ("systemctl", 2),
    ("terraform", 2),
    ("uv", 2),
    ("uv pip", 3),
    ("uv run", 3),
    ("yarn", 2),
    ("yarn run", 3),
    ("yum", 2),
];

/// The words that name the command (`["git", "status"]` for `git status --short`).
pub(crate) fn prefix(words: &[String]) -> &[String] {
    for len in (1..=words.len()).rev() {
        let candidate = words[..len].join(" ");
        if let Ok(idx) = ARITY.binary_search_by(|(p, _)| p.cmp(&candidate.as_str())) {
            let arity = ARITY[idx].1;
            return &words[..arity.min(words.len())];
        }
    }
    &words[..words.len().min(1)]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(command: &str) -> String {
        let words: Vec<String> = command.split_whitespace().map(String::from).collect();
        prefix(&words).join(" ")
    }

    #[test]
    fn table_is_sorted_for_binary_search() {
        assert!(ARITY.windows(2).all(|w| w[0].0 < w[1].0));
    }

    #[test]
    fn prefixes_follow_the_table() {
        assert_eq!(p("git status --short"), "git status");
        assert_eq!(p("npm run dev -- --port 3000"), "npm run dev");
        assert_eq!(p("npm install left-pad"), "npm install");
        assert_eq!(p("cargo test -p x"), "cargo test");
        assert_eq!(p("ls -la"), "ls");
        assert_eq!(p("python -m pytest -q"), "python -m pytest");
        assert_eq!(p("python script.py"), "python");
        assert_eq!(p("git"), "git");
        assert_eq!(p("docker compose up -d"), "docker compose up");
    }
}
