//! Files only their owner can read: the data dir (0700) and the database with its `-wal`/`-shm`
//! companions (0600), whatever the umask. They hold every conversation, tool output and approval.
//!
//! Owns: creating those paths with owner-only modes and tightening the database files if they exist.
//! Must not: loosen anything, or change directories it did not create (a data dir the user made
//! keeps the mode they gave it).

use std::path::Path;

/// Creates `dir` (and missing parents) owner-only. An existing directory is left as it is.
pub(crate) fn create_dir(dir: &Path) -> std::io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder.create(dir)?;
    // The umask may have taken bits away from 0700 (say, 0277 leaves 0500); set exactly.
    set_mode(dir, 0o700)
}

/// Makes sure the database file exists and it and its companions are owner-only. SQLite creates the
/// `-wal` and `-shm` files with the database file's mode, so they follow once it is 0600.
pub(crate) fn prepare_db_file(db: &Path) -> std::io::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(false);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    drop(options.open(db)?);
    set_mode(db, 0o600)?;
    for suffix in ["-wal", "-shm"] {
        let mut companion = db.as_os_str().to_owned();
        companion.push(suffix);
        match set_mode(Path::new(&companion), 0o600) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            other => other?,
        }
    }
    Ok(())
}

#[cfg(unix)]
fn set_mode(path: &Path, mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let current = std::fs::metadata(path)?.permissions().mode() & 0o777;
    if current == mode {
        return Ok(());
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
}

#[cfg(not(unix))]
fn set_mode(_path: &Path, _mode: u32) -> std::io::Result<()> {
    // Windows files inherit the ACL of the user's profile folder, where the data dir lives.
    Ok(())
}
