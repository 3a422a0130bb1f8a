//! A cheap record of the protected paths, for where user namespaces are unavailable and the read-only binds
//! cannot be made: the caller takes one before and after a tool call and restores or reports what changed.
//! It only reads metadata (size, mtime, mode, inode, kind), never contents, and must stay cheap on a large
//! repository, so git's content-addressed object store is not walked (a change that matters shows up in
//! refs, config, hooks or the index).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// Directory names not walked under a `.git` dir: content-addressed and often huge.
const SKIPPED_IN_GIT: [&str; 2] = ["objects", "lfs"];

/// At most this many entries are recorded per protected path, so a pathological tree cannot stall a call;
/// an entry past the cap is summarised by the count.
const MAX_ENTRIES: usize = 20_000;

/// What a set of paths looked like; compare two with [`Fingerprint::changed`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Fingerprint {
    entries: BTreeMap<PathBuf, Entry>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Entry {
    Missing,
    Present {
        kind: Kind,
        len: u64,
        modified: Option<SystemTime>,
        mode: u32,
        inode: u64,
    },
    /// The walk stopped at [`MAX_ENTRIES`]; the number of entries seen below this path.
    Truncated(usize),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    File,
    Dir,
    Symlink,
    Other,
}

/// Records `paths` and, for directories, everything below them (symlinks are recorded, not followed).
pub fn fingerprint(paths: &[PathBuf]) -> Fingerprint {
    let mut print = Fingerprint::default();
    for path in paths {
        let mut budget = MAX_ENTRIES;
        let in_git = path.file_name().is_some_and(|n| n == ".git");
        print.walk(path, in_git, &mut budget);
        if budget == 0 {
            print.entries.insert(path.join("…"), Entry::Truncated(MAX_ENTRIES));
        }
    }
    print
}

impl Fingerprint {
    /// Paths that were added, removed or changed between `self` (before) and `after`.
    pub fn changed(&self, after: &Fingerprint) -> Vec<PathBuf> {
        let mut out: Vec<PathBuf> = self
            .entries
            .iter()
            .filter(|(path, entry)| after.entries.get(*path) != Some(entry))
            .map(|(path, _)| path.clone())
            .collect();
        out.extend(after.entries.keys().filter(|path| !self.entries.contains_key(*path)).cloned());
        out.sort();
        out
    }

    fn walk(&mut self, path: &Path, in_git: bool, budget: &mut usize) {
        if *budget == 0 {
            return;
        }
        *budget -= 1;
        let entry = entry(path);
        let is_dir = matches!(entry, Entry::Present { kind: Kind::Dir, .. });
        self.entries.insert(path.to_owned(), entry);
        if !is_dir {
            return;
        }
        let Ok(children) = std::fs::read_dir(path) else {
            return;
        };
        let mut children: Vec<PathBuf> = children.filter_map(|c| c.ok().map(|c| c.path())).collect();
        children.sort();
        for child in children {
            let skipped = in_git && child.file_name().is_some_and(|n| SKIPPED_IN_GIT.iter().any(|s| n == *s));
            if !skipped {
                self.walk(&child, in_git, budget);
            }
        }
    }
}

fn entry(path: &Path) -> Entry {
    use std::os::unix::fs::MetadataExt;

    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return Entry::Missing;
    };
    let kind = if meta.is_dir() {
        Kind::Dir
    } else if meta.is_file() {
        Kind::File
    } else if meta.is_symlink() {
        Kind::Symlink
    } else {
        Kind::Other
    };
    Entry::Present {
        kind,
        len: meta.len(),
        modified: meta.modified().ok(),
        mode: meta.mode(),
        inode: meta.ino(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn reports_created_changed_and_removed_paths_but_not_git_objects() {
        let dir = tempfile::TempDir::new().unwrap();
        let git = dir.path().join(".git");
        std::fs::create_dir_all(git.join("objects/ab")).unwrap();
        std::fs::write(git.join("config"), "a").unwrap();
        std::fs::write(git.join("HEAD"), "ref").unwrap();
        let toml = dir.path().join("codeloop.toml");
        let paths = vec![git.clone(), toml.clone()];
        let before = fingerprint(&paths);
        assert_eq!(before.changed(&fingerprint(&paths)), Vec::<PathBuf>::new());

        std::fs::write(git.join("config"), "ab").unwrap();
        std::fs::remove_file(git.join("HEAD")).unwrap();
        std::fs::write(git.join("objects/ab/cd"), "blob").unwrap();
        std::fs::write(&toml, "created").unwrap();
        let changed = before.changed(&fingerprint(&paths));
        assert!(changed.contains(&git.join("config")), "{changed:?}");
        assert!(changed.contains(&git.join("HEAD")), "{changed:?}");
        assert!(changed.contains(&toml), "{changed:?}");
        assert!(!changed.iter().any(|p| p.starts_with(git.join("objects"))), "{changed:?}");
    }
}
